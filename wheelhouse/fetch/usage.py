"""What wh's cache holds, by kind, and what may go: ``wh cache info|prune|clean``.

Sizes are what the disk gives up (allocated blocks, not file lengths): a ranged download's body is
preallocated, and a hole-punched one (``ranges.trim_preallocation``) holds only what arrived.

What ``prune`` removes, and how it decides (docs/cache.md):

- a wheel (``sha256/``) whose inode has one link: no wheelhouse (nor venv) on this filesystem shares
  it. A wheelhouse placed on another filesystem has a copy of its own and never needs the entry. None
  while a fetch runs (``cache_in_use``: its entries have one link until placed).
- an unfinished download (``partial/``) whose entry lock no process holds: no running ``wh stage``
  is writing it (the lock is the one ``entry_lock`` takes for the whole download).
- a link-cache entry (``unpacked/``) none of whose files is linked from a venv any more.
- temp files (``.<name>.<random>.tmp``) older than an hour: a killed writer's.

Index pages and metadata are kept by ``prune`` (small, and what ``--offline`` runs on); ``clean``
removes every kind, or the ones named. Entries another process holds are skipped, and counted.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Literal

from .cache import try_cache_idle, try_entry_lock

__all__ = ["KINDS", "Kind", "KindUsage", "Removed", "cache_usage", "prune_cache", "clean_cache"]

Kind = Literal["pages", "metadata", "wheels", "partials", "link-cache", "builds", "other"]
# (kind, folders under the cache): the order ``wh cache info`` lists them in.
KINDS: tuple[tuple[Kind, tuple[str, ...]], ...] = (
    ("wheels", ("sha256",)),
    ("partials", ("partial",)),
    ("pages", ("http",)),
    ("metadata", ("metadata",)),
    ("link-cache", ("unpacked",)),
    ("builds", ("builds", "mirrors", "self")),
    ("other", ("kernels", "digests", "locks", "resolutions", "answers", "jit-scratch")),
)
_TEMP_AGE = 3600.0
_ANSWER_AGE = 7 * 86400.0  # a recorded dry run (wheelhouse.cli._recorded) not written for a week: pruned


@dataclass(frozen=True)
class KindUsage:
    """One kind's files and disk use; ``shared``: bytes whose inode a wheelhouse or venv also links
    (removing the entry frees none of them)."""

    kind: Kind
    folders: tuple[str, ...]
    files: int
    bytes: int
    shared: int = 0

    def to_json(self) -> dict:
        return {"kind": self.kind, "folders": list(self.folders), "files": self.files, "bytes": self.bytes,
                "shared_bytes": self.shared}


@dataclass
class Removed:
    """What a prune or clean removed (per kind: files, bytes freed) and what it left because a running
    wh holds it."""

    files: dict[str, int]
    freed: dict[str, int]
    busy: dict[str, int]

    @classmethod
    def empty(cls) -> "Removed":
        return cls({}, {}, {})

    def add(self, kind: str, files: int, freed: int) -> None:
        self.files[kind] = self.files.get(kind, 0) + files
        self.freed[kind] = self.freed.get(kind, 0) + freed

    def in_use(self, kind: str) -> None:
        self.busy[kind] = self.busy.get(kind, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.freed.values())

    def to_json(self) -> dict:
        return {"removed": {k: {"files": n, "bytes": self.freed.get(k, 0)} for k, n in sorted(self.files.items())},
                "in_use": dict(sorted(self.busy.items())), "freed_bytes": self.total}


def _disk(st: os.stat_result) -> int:
    return st.st_blocks * 512


def _files(folder: Path) -> Iterator[tuple[Path, os.stat_result]]:
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            try:
                yield path, path.lstat()
            except FileNotFoundError:
                continue


def cache_usage(cache: Path) -> list[KindUsage]:
    """Every kind's files and disk use (a kind with nothing is listed with zeros)."""
    cache = Path(cache)
    known = {f for _, folders in KINDS for f in folders}
    out = []
    for kind, folders in KINDS:
        files = size = shared = 0
        paths = [cache / f for f in folders]
        if kind == "other":  # loose files at the top (pip-stated-default.json) and folders of a newer wh
            paths += [p for p in cache.iterdir() if p.name not in known] if cache.is_dir() else []
        for top in paths:
            entries = [(top, top.lstat())] if top.is_file() else _files(top) if top.is_dir() else []
            for _path, st in entries:
                files += 1
                size += _disk(st)
                shared += _disk(st) if st.st_nlink > 1 else 0
        out.append(KindUsage(kind, tuple(folders), files, size, shared))
    return out


def prune_cache(cache: Path, *, now: float | None = None) -> Removed:
    """Remove what no wheelhouse, venv or running wh needs (the module's rules)."""
    cache = Path(cache)
    done = Removed.empty()
    now = time.time() if now is None else now
    _prune_wheels(cache, done, unlinked_only=True)
    _prune_partials(cache, done)
    _prune_link_cache(cache, done, unused_only=True)
    for folder in ("sha256", "partial", "http", "metadata", "unpacked"):
        for path, st in _files(cache / folder):
            if path.name.startswith(".") and path.name.endswith(".tmp") and now - st.st_mtime > _TEMP_AGE:
                path.unlink(missing_ok=True)
                done.add("temp", 1, _disk(st))
    for path, st in _files(cache / "answers"):  # each costs one full run to write again
        if now - st.st_mtime > _ANSWER_AGE:
            path.unlink(missing_ok=True)
            done.add("other", 1, _disk(st))
    return done


def clean_cache(cache: Path, kinds: Iterable[str] = ()) -> Removed:
    """Remove every entry of ``kinds`` (all kinds when none is named); downloads in progress stay."""
    cache = Path(cache)
    wanted = set(kinds) or {k for k, _ in KINDS}
    done = Removed.empty()
    for kind, folders in KINDS:
        if kind not in wanted:
            continue
        if kind == "wheels":
            _prune_wheels(cache, done, unlinked_only=False)
        elif kind == "partials":
            _prune_partials(cache, done)
        elif kind == "link-cache":
            _prune_link_cache(cache, done, unused_only=False)
        else:
            for folder in folders:
                if kind == "other" and folder == "locks":
                    continue  # a lock file unlinked under a waiter would let two runs hold one entry
                _remove_tree(cache / folder, kind, done)
            if kind == "other":
                for stray in ("pip-stated-default.json",):
                    _remove_tree(cache / stray, kind, done)
    return done


def _remove_tree(path: Path, kind: str, done: Removed) -> None:
    if path.is_file() or path.is_symlink():
        st = path.lstat()
        path.unlink(missing_ok=True)
        done.add(kind, 1, _disk(st) if st.st_nlink == 1 else 0)
        return
    if not path.is_dir():
        return
    files = freed = 0
    for _p, st in _files(path):
        files += 1
        freed += _disk(st) if st.st_nlink == 1 else 0
    shutil.rmtree(path, ignore_errors=True)
    done.add(kind, files, freed)


def _prune_wheels(cache: Path, done: Removed, *, unlinked_only: bool) -> None:
    """A running fetch holds the cache shared (``cache_in_use``): an entry it took or filed has one link
    until placed, so while any runs, no wheel goes."""
    idle = try_cache_idle(cache) if (cache / "sha256").is_dir() else -1
    if idle < 0:
        if (cache / "sha256").is_dir():
            done.in_use("wheels")
        return
    try:
        _remove_wheels(cache, done, unlinked_only)
    finally:
        os.close(idle)


def _remove_wheels(cache: Path, done: Removed, unlinked_only: bool) -> None:
    for path, st in list(_files(cache / "sha256")):
        if path.name.startswith("."):
            continue  # a temp name: the temp rule's (prune) or a writer's in flight
        if unlinked_only and st.st_nlink > 1:
            continue
        fd = try_entry_lock(cache, path.name)
        if fd < 0:
            done.in_use("wheels")
            continue
        try:
            path.unlink(missing_ok=True)
            done.add("wheels", 1, _disk(st) if st.st_nlink == 1 else 0)
        finally:
            os.close(fd)


def _prune_partials(cache: Path, done: Removed) -> None:
    """Every unfinished download no process is writing: its body, record and layout go together."""
    folder = cache / "partial"
    if not folder.is_dir():
        return
    by_key: dict[str, list[Path]] = {}
    for path in folder.iterdir():
        if ".part" in path.name and not path.name.startswith("."):
            by_key.setdefault(path.name.split(".part")[0], []).append(path)
    for key, paths in sorted(by_key.items()):
        fd = try_entry_lock(cache, key)
        if fd < 0:
            done.in_use("partials")
            continue
        try:
            for path in paths:
                try:
                    st = path.lstat()
                except FileNotFoundError:
                    continue
                path.unlink(missing_ok=True)
                done.add("partials", 1, _disk(st))
        finally:
            os.close(fd)


def _prune_link_cache(cache: Path, done: Removed, *, unused_only: bool) -> None:
    """``unpacked/ab/<sha256>/``: an entry goes when no venv links any of its files (or always)."""
    root = cache / "unpacked"
    if not root.is_dir():
        return
    for shard in sorted(p for p in root.iterdir() if p.is_dir()):
        for entry in sorted(p for p in shard.iterdir() if p.is_dir()):
            stats = [st for _p, st in _files(entry)]
            if unused_only and any(st.st_nlink > 1 for st in stats):
                continue
            shutil.rmtree(entry, ignore_errors=True)
            done.add("link-cache", len(stats), sum(_disk(st) for st in stats if st.st_nlink == 1))
