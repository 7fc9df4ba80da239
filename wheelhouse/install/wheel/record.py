"""A wheel's RECORD, and the archive paths a wheel may name.

RECORD (the wheel spec's ``<name>.dist-info/RECORD``, a CSV of path, ``algo=digest``,
size) is what every extracted byte is checked against. Only sha256 is trusted.
Archive paths are checked before anything is written: no absolute paths, no ``..``,
no drive letters or backslashes, and no destination outside its scheme folder.
"""

from __future__ import annotations

import csv
import io
import os
import re
from pathlib import Path
from typing import Iterable

from wheelhouse.digest import record_digest
from wheelhouse.errors import WhError
from wheelhouse.recordfile import RecordMismatch, read_record  # the one RECORD reader and its error (stage's too)

__all__ = [
    "UnpackError",
    "UnsafeWheelPath",
    "RecordMismatch",
    "record_digest",
    "read_record",
    "parse_record",
    "render_record",
    "check_archive_path",
    "check_archive_paths",
    "check_inside",
]


class UnpackError(WhError):
    code = "bad-wheel"


class UnsafeWheelPath(UnpackError):
    code = "unsafe-wheel-path"


def parse_record(wheel: Path, text: str) -> dict[str, tuple[str | None, int | None]]:
    """``{archive path: (sha256 or None, size or None)}`` from a RECORD's text."""
    return {path: (digest, size) for path, digest, size in read_record(text)}


def render_record(rows: Iterable[tuple[str, str, str]], base: str, record: str) -> bytes:
    """The RECORD of what was really installed: ``rows`` of (absolute path, digest, size), paths
    relative to ``base``, and the RECORD itself last without a hash."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    prefix = os.path.join(os.path.normpath(base), "")

    def rel(path: str) -> str:  # os.path.relpath for each of ~10k rows is slow; most are below base
        return path[len(prefix):] if path.startswith(prefix) else os.path.relpath(path, base)

    for dest, digest, size in rows:
        writer.writerow((rel(dest), digest, size))
    writer.writerow((rel(record), "", ""))
    return buf.getvalue().encode()


# Absolute, a backslash, a drive letter, a NUL, or a '..' segment (one search per name: planning checks ~14k).
_UNSAFE = re.compile(r"^/|\\|^[A-Za-z]:|\x00|(?:^|/)\.\.(?:/|\Z)")


def check_archive_path(wheel: Path, name: str) -> None:
    """Raise UnsafeWheelPath for an archive path that is absolute or climbs out with ``..``."""
    if _UNSAFE.search(name):
        raise UnsafeWheelPath(
            f"{wheel.name} contains an unsafe path {name!r} (absolute or with '..')",
            hint="this wheel would write outside the environment; rebuild it or remove it from the wheelhouse and re-run `wh stage`",
        )


def check_archive_paths(wheel: Path, names: list[str]) -> None:
    """``check_archive_path`` for every name: one scan of the whole listing when nothing in it could be
    unsafe (no '/' after a newline or first, no backslash, colon, NUL or '..'), else name by name."""
    files = [n for n in names if not n.endswith("/")]  # (a folder entry twice writes nothing)
    if len(set(files)) != len(files):
        # Two entries of one name: which one lands depends on the reader, and RECORD vouches for one only.
        seen: set[str] = set()
        twice = next(n for n in files if n in seen or seen.add(n))
        raise UnpackError(f"{wheel.name}: {twice} is in the archive twice (a malformed or hostile wheel)",
                          hint="remove this wheel from the wheelhouse and re-run `wh stage`")
    blob = "\n".join(names)
    if ("\\" in blob or ":" in blob or "\x00" in blob or ".." in blob or blob.startswith("/") or "\n/" in blob):
        for n in names:
            check_archive_path(wheel, n)


def check_inside(wheel: Path, name: str, dest: str, base_dir: str) -> None:
    """Raise UnsafeWheelPath when ``dest`` (where ``name`` would go) is not below ``base_dir``."""
    if os.path.commonpath([dest, os.path.normpath(base_dir)]) != os.path.normpath(base_dir):
        raise UnsafeWheelPath(f"{wheel.name}: {name} would be written outside {base_dir}",
                              hint="remove this wheel from the wheelhouse and re-run `wh stage`")
