"""The one writer of a wheelhouse's index files: ``pylock.toml``, ``simple/`` and ``wh.json``.

``wh stage`` (into a fresh tree) and ``wh build`` (in place) both finish by
calling ``write_index_files``: the lock, the static PEP 503 index over exactly
the lock's wheels, and the provenance are always written together, so pip
reading ``simple/`` and wh reading ``pylock.toml`` see the same wheels.

Ownership: ``wh.json["owned"]`` lists the paths (relative, posix) that wh wrote.
A folder listed there is wh's whole (``wheels/``); anything not listed, nor
under a listed folder (a user's ``NOTES.md``, ``logs/notes.txt``, a Kaggle
``dataset-metadata.json``), is the user's and is never replaced or removed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Iterable, Mapping

from wheelhouse.faults import checkpoint
from wheelhouse.target import TargetProfile

from .files import Lock, WH_JSON, PYLOCK, write_pylock, write_wh_json
from .simple_index import IndexEntry, write_simple_index

__all__ = [
    "WHEELS",
    "SIMPLE",
    "PATCHES",
    "LOGS",
    "STANDARD_LAYOUT",
    "environment_marker",
    "requires_python_for",
    "owned_paths",
    "is_owned",
    "with_owned",
    "write_index_files",
]

WHEELS = "wheels"
SIMPLE = "simple"
PATCHES = "patches"
LOGS = "logs"
# What a wheelhouse written before wh.json listed its paths holds of wh's own: everything else in it
# (NOTES.md, logs/, dataset-metadata.json, a user's sources) was never wh's to remove.
STANDARD_LAYOUT = (WH_JSON, PYLOCK, WHEELS, SIMPLE, "bootstrap", PATCHES, "capture_target.py", "manifest.toml")


def environment_marker(target: TargetProfile) -> str:
    """PEP 751 ``environments`` entry: the target's python, implementation, OS and machine."""
    m = target.markers
    keys = ("python_version", "implementation_name", "sys_platform", "platform_machine")
    return " and ".join(f'{k} == "{m[k]}"' for k in keys if m.get(k))


def requires_python_for(target: TargetProfile) -> str:
    return f"=={target.python_version}.*"


def owned_paths(meta: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The paths wh wrote in a wheelhouse, from its wh.json (the standard layout for older ones)."""
    if not meta:
        return ()
    owned = meta.get("owned")
    if isinstance(owned, list) and all(isinstance(p, str) for p in owned):
        return tuple(owned)
    return STANDARD_LAYOUT


def is_owned(rel: str, owned: Iterable[str]) -> bool:
    """Whether ``rel`` (posix, relative to the wheelhouse) is one of ``owned`` or lies under one."""
    return any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in owned)


def with_owned(meta: Mapping[str, Any], paths: Iterable[str]) -> dict[str, Any]:
    """``meta`` whose owned list also covers ``paths`` (a path under an owned folder adds nothing)."""
    owned = list(owned_paths(meta))
    for p in paths:
        if not is_owned(p, owned):
            owned.append(p)
    return {**meta, "owned": sorted(set(owned) | {WH_JSON, PYLOCK, SIMPLE})}


def write_index_files(root: Path, lock: Lock, meta: Mapping[str, Any]) -> None:
    """Write ``pylock.toml``, ``simple/`` (rebuilt from the lock: no stale page survives) and
    ``wh.json`` (last: its presence says the other two are complete)."""
    root = Path(root)
    write_pylock(root, lock)
    checkpoint("lock.index.pylock-written")
    simple = root / SIMPLE
    if simple.is_dir():
        fresh = root / f".{SIMPLE}.wh-tmp"
        shutil.rmtree(fresh, ignore_errors=True)
        _write_simple(fresh, lock)
        shutil.rmtree(simple)
        fresh.rename(simple)
    else:
        _write_simple(simple, lock)
    checkpoint("lock.index.simple-written")
    write_wh_json(root, with_owned(meta, ()))


def _write_simple(folder: Path, lock: Lock) -> None:
    # Only wheels that live in wheels/ are listed: the pages link ../../wheels/<file>.
    entries = [IndexEntry(f.name, f.filename, f.sha256, f.requires_python) for f in lock.files
               if f.path == f"{WHEELS}/{f.filename}"]
    write_simple_index(folder, entries)
