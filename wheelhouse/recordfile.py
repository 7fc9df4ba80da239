"""A wheel's RECORD rows (the wheel spec's ``<name>.dist-info/RECORD``: a CSV of path, ``algo=digest``, size),
and a wheelhouse's record of the wheels whose RECORD was checked against their files.

The one RECORD reader: ``wh stage`` checks a wheel's RECORD against its members with it, ``wh
install`` plans from it and ``wh doctor`` reads an installed distribution's RECORD once per run through
``read_installed_record`` (every check, the inventory, drop and repair share that parse); and the one error for a RECORD
that does not describe its wheel's files (``RecordMismatch``), which stage's check and install's extraction both
raise. Standard library only (the install path imports it: nothing here can open a socket).
"""

from __future__ import annotations

import csv
import functools
import io
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from wheelhouse.errors import WhError

__all__ = ["RECORD_CHECKED", "RecordMismatch", "read_record", "record_checked", "InstalledRecord",
           "read_installed_record", "SYSTEM_INSTALLERS", "system_installed", "build_digest"]

# wh.json: the sha256 (hex) of every wheel whose RECORD ``wh stage``/``wh build`` checked against its files
# (wheelhouse.lock.records); ``wh install`` copies RECORD rows unchecked for those alone.
RECORD_CHECKED = "record_checked"


class RecordMismatch(WhError):
    """A wheel's RECORD does not describe its own files (stage refuses the wheel; install stops before it
    commits anything). Not an ``install``'s ``UnpackError``: install's handlers catch both."""

    code = "record-mismatch"


def read_record(text: str) -> list[tuple[str, str | None, int | None]]:
    """``(path, sha256 or None, size or None)`` for each row of a RECORD's text (the one RECORD reader).

    Only sha256 is trusted; a row with another algorithm reads as having no hash.
    """
    out: list[tuple[str, str | None, int | None]] = []
    if '"' in text or "\r" in text or "\x00" in text:
        rows = csv.reader(io.StringIO(text))
    else:  # no quoting, no CR, no NUL: csv would split each line at every comma, as this does (faster)
        rows = (line.split(",") for line in text.split("\n"))
    for row in rows:
        if not row or not row[0]:
            continue
        digest = None
        if len(row) > 1 and row[1]:
            algo, _, value = row[1].partition("=")
            digest = value if algo == "sha256" else None
        size_text = row[2].strip() if len(row) > 2 else ""
        size = int(size_text) if size_text.isascii() and size_text.isdigit() else None  # not '²', not '\x1c6'
        out.append((row[0], digest, size))
    return out


@dataclass(frozen=True)
class InstalledRecord:
    """An installed distribution's RECORD, read and parsed once: its rows (``read_record``'s), paths relative to
    the folder that holds the ``.dist-info``. No RECORD, or one that cannot be read: no rows, ``error`` says why."""

    dist_info: str
    rows: tuple[tuple[str, str | None, int | None], ...] = ()
    error: str | None = None

    @functools.cached_property
    def hashed(self) -> tuple[tuple[str, str, int | None], ...]:
        """The rows with a sha256, the byte-code cache aside (``__pycache__/``: the interpreter rewrites it): the
        files RECORD vouches for. A ``.pyc`` outside it is a sourceless module, the code itself: nothing rewrites it."""
        return tuple(r for r in self.rows if r[1] and "__pycache__/" not in r[0].replace("\\", "/"))


def build_digest(rows, *, wheel: bool = False) -> str | None:
    """What tells one build of a release from another: the sha256 (hex) of the sorted ``path,sha256`` rows of the
    files a wheel installs into the site folder unchanged, from an installed RECORD (``wheel`` false: paths relative
    to the site folder) or a wheel's own (``wheel``: ``X.data/purelib/`` and ``X.data/platlib/`` rows at the path
    they install to). Each installer writes the ``.dist-info`` folder, the byte code and the other ``.data`` files
    (scripts, headers: outside the site folder) its own way, so those are left out; the same wheel installed by wh,
    pip or uv gives the same digest, another build of the same version (other bytes in any module) another. None
    when no row has a sha256 (a RECORD without hashes: nothing to tell builds apart by)."""
    import hashlib

    kept = []
    for path, digest, _ in rows:
        path = path.replace("\\", "/")
        if not digest or path.startswith(("/", "../")) or "__pycache__/" in path:
            continue
        top, _, rest = path.partition("/")
        if wheel and top.endswith(".data"):
            kind, _, path = rest.partition("/")
            if kind not in ("purelib", "platlib") or not path:
                continue
            top = path.partition("/")[0]
        if top.endswith(".dist-info") or top.endswith(".data"):
            continue
        kept.append(f"{path},{digest}")
    return hashlib.sha256("\n".join(sorted(kept)).encode("utf-8", "surrogateescape")).hexdigest() if kept else None


# Package managers that own the files they install and may change them after RECORD was written (conda's prefix
# replacement, a distribution's own patches, RPM's removal of RECORD): their files are not judged by RECORD. Every
# other installer (pip, uv, pixi's "uv-pixi", flit, installer, ...) writes the bytes RECORD records.
SYSTEM_INSTALLERS = frozenset({"conda", "mamba", "micromamba", "rpm", "dnf", "yum", "debian", "dpkg", "apt", "pacman",
                               "spack", "nix", "brew", "homebrew", "portage", "apk", "pkgsrc", "msys2"})


def system_installed(installer: str) -> bool:
    """Whether ``installer`` (a dist-info's INSTALLER, stripped and lower-cased) names a system package manager."""
    return installer in SYSTEM_INSTALLERS or installer.startswith("conda")


def read_installed_record(dist_info: str | os.PathLike[str] | None) -> InstalledRecord:
    """The RECORD of the ``.dist-info`` folder ``dist_info`` (decoded with surrogateescape: a path that is not
    UTF-8 still names its file)."""
    info = str(dist_info or "")
    if not info:
        return InstalledRecord(info, error="no .dist-info folder")
    try:
        if not stat.S_ISREG(os.stat(os.path.join(info, "RECORD")).st_mode):  # a pipe would block the read
            return InstalledRecord(info, error="RECORD is not a file (a folder, pipe, socket or device in its place)")
        text = Path(info, "RECORD").read_text(encoding="utf-8", errors="surrogateescape")
        return InstalledRecord(info, tuple(read_record(text)))
    except (OSError, csv.Error) as e:
        return InstalledRecord(info, error=f"{type(e).__name__}: {e}")


def record_checked(meta: Mapping[str, Any]) -> frozenset[str]:
    """The sha256 of the wheels a wheelhouse's wh.json (``meta``) records as RECORD-checked; none when the
    field is absent (a wheelhouse staged before the check) or not a list of strings (not the one wh wrote)."""
    value = meta.get(RECORD_CHECKED)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return frozenset()
    return frozenset(value)
