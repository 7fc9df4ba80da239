"""Files two installed distributions both list in their RECORD: removing one keeps them for the other.

opencv-python and opencv-contrib-python both ship ``cv2/``: the one installed second writes the same paths over
the first, and both RECORDs name them. An uninstall removes every file its RECORD lists, so dropping the broken
one took the other's working ``cv2`` with it (and the re-check then blamed the one left); an upgrade of one to a
version without ``cv2/`` did the same. ``wh drop`` and ``wh install`` (replacing a version) ask here, before they
remove anything, which of the distribution's files another installed distribution lists too; those stay.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Sequence

from packaging.utils import canonicalize_name

from wheelhouse.recordfile import read_installed_record
from .installed import same_path

__all__ = ["SharedFile", "shared_files", "shared_with_others", "describe_kept"]


@dataclass(frozen=True)
class SharedFile:
    """A file of the distribution being dropped that other installed distributions list too."""

    path: str  # as the dropped distribution's RECORD writes it (relative to its site folder)
    listed_by: tuple[str, ...]  # "name version" of each other installed distribution whose RECORD lists it

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "listed_by": list(self.listed_by)}


def _where(site: str, rel: str, folders: dict[str, str]) -> str:
    """The file a RECORD row names (relative to ``site``, or absolute), one spelling for every name of its folder
    (``lib64`` a link to ``lib``): :func:`~wheelhouse.install.installed.same_path`, its folders' real paths memoized
    in ``folders`` for the pass."""
    return same_path(os.path.join(site, rel), folders)


def _dist_infos(site_dirs: Sequence[str]) -> list[Path]:
    seen, out = set(), []
    for site in site_dirs:
        real = os.path.realpath(site)
        if real in seen:
            continue
        seen.add(real)
        try:
            entries = sorted(os.listdir(real))
        except OSError:
            continue
        out += [Path(real) / e for e in entries if e.endswith(".dist-info")]
    return out


def _name_version(info: Path) -> tuple[str, str]:
    name, _, version = info.name[: -len(".dist-info")].partition("-")
    return name, version


def shared_files(info: Path, site_dirs: Sequence[str]) -> tuple[SharedFile, ...]:
    """The files ``info``'s RECORD lists that the RECORD of another installed distribution (any ``.dist-info`` in
    ``site_dirs`` of another name) lists too, in RECORD order. Another copy of the same name is not another owner:
    the uninstall removes every copy."""
    return shared_with_others([info], site_dirs, {_name_version(info)[0]})[info]


def shared_with_others(infos: Sequence[Path], site_dirs: Sequence[str],
                       leaving: Collection[str]) -> dict[Path, tuple[SharedFile, ...]]:
    """:func:`shared_files` of each of ``infos``, every other RECORD read once. ``leaving``: the names of the
    distributions whose installed copies go in the same transaction (an install replacing several at once):
    a file only they list is removed with them (the new versions write what they ship again)."""
    mine: dict[Path, dict[str, str]] = {}
    folders: dict[str, str] = {}  # one realpath per folder, not per file (a 40k-file namespace: 11.6 s)
    for info in infos:
        rows = mine.setdefault(info, {})
        own = os.path.join(os.path.realpath(info), "")
        for rel, _, _ in read_installed_record(info).rows:  # an absolute row too: it may name another's file
            where = _where(str(info.parent), rel, folders)
            if not where.startswith(own):
                rows.setdefault(where, rel)
    wanted = {where for rows in mine.values() for where in rows}
    if not wanted:
        return {info: () for info in infos}
    gone = {canonicalize_name(n) for n in leaving}
    owners: dict[str, list[str]] = {}
    for other in _dist_infos(site_dirs):
        name, version = _name_version(other)
        if canonicalize_name(name) in gone:
            continue
        for rel, _, _ in read_installed_record(other).rows:
            where = _where(str(other.parent), rel, folders)
            if where in wanted and f"{name} {version}" not in owners.get(where, ()):
                owners.setdefault(where, []).append(f"{name} {version}")
    return {info: tuple(SharedFile(rel, tuple(owners[where])) for where, rel in rows.items() if where in owners)
            for info, rows in mine.items()}


def describe_kept(kept: Sequence[SharedFile], shown: int = 3) -> str:
    """One line for people: which files a drop leaves in place, and for whom (byte code counted, not named)."""
    named = [k for k in kept if "__pycache__/" not in k.path]
    owners = list(dict.fromkeys(o for k in kept for o in k.listed_by))
    paths = ", ".join(k.path for k in named[:shown]) + (f" and {len(named) - shown} more" if len(named) > shown else "")
    cached = len(kept) - len(named)
    if cached:
        paths = f"{paths} (and {cached} byte-code file(s))" if named else f"{cached} byte-code file(s)"
    return f"kept {paths}: {', '.join(owners)} {'lists' if len(owners) == 1 else 'list'} them too"
