"""What each installed file holds, by its sha256, without hashing what has not changed since it was hashed.

``wh doctor``'s ``stack:files`` check compares every file a RECORD lists with the sha256 RECORD
records, and ``wh doctor compare`` compares those real digests across nodes. Hashing a serving stack
(~100k files, several GB) on every run would cost most of the doctor's budget, so a cache remembers,
per file, its identity (device, inode, size, mtime_ns, ctime_ns: ``wheel.archive.FileIdentity``) and
its digest. A file whose identity is unchanged holds the bytes it held: any write, truncation, rename
over it, ``touch`` or ``chmod`` changes the ctime, which no user-level tool can set back.

The cache of a site folder is ``<site>/.wh/digests.json`` where wh installed (its ``.wh/`` is there and
writable), else a file under wh's user cache folder (a foreign site folder gets no ``.wh/`` from the
doctor). ``wh install`` writes the entries of what it just installed, with the digest RECORD records
(the lock's sha256 pinned the wheel, each member was checked by CRC-32 or its RECORD sha256 while it was
written; files a patch changed afterwards are left out); the doctor adds what it hashed. ``thorough``
ignores the entries and hashes everything again (and refreshes them).

Standard library only; nothing here can open a socket.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from wheelhouse.atomic import write_atomic
from wheelhouse.cachedir import default_cache_dir
from wheelhouse.digest import record_digest, update_hash
from .wheel.archive import FileIdentity, file_identity
from .wheel.record import read_record

__all__ = ["SCHEMA", "FileDigests", "FileState", "cache_path", "patched_files", "record_installed"]

SCHEMA = "wh-digests/1"
_NAME = "digests.json"


def cache_path(site: str | os.PathLike, environ: Mapping[str, str] | None = None, name: str = _NAME) -> Path:
    """Where the digest cache of ``site`` is written: in its ``.wh/`` when that is there and writable.

    ``name``: another cache of the same site kept beside it (the doctor's ``verdicts.json``)."""
    site = os.path.abspath(os.fspath(site))
    own = Path(site) / ".wh"
    if own.is_dir() and os.access(own, os.W_OK | os.X_OK):
        return own / name
    return _user_path(site, environ, name.split(".", 1)[0])


def _user_path(site: str, environ: Mapping[str, str] | None = None, kind: str = "digests") -> Path:
    env = os.environ if environ is None else environ
    root = Path(env["WH_CACHE_DIR"]).expanduser() if env.get("WH_CACHE_DIR") else default_cache_dir()
    return root / kind / f"{hashlib.sha256(site.encode('utf-8', 'surrogateescape')).hexdigest()[:24]}.json"


_UNKNOWN = object()

# A file's state: its digest (RECORD's urlsafe base64, unpadded) and size, or None when it is not there.
FileState = tuple[str, int] | None


class FileDigests:
    """The digests of files under site folders, cached by file identity; thread-safe; saved once per run."""

    def __init__(self, thorough: bool = False, environ: Mapping[str, str] | None = None, jobs: int = 1) -> None:
        self.thorough = thorough
        self.jobs = max(1, jobs)
        self.hashed = 0  # files read and hashed this run (an unchanged tree: 0)
        self.hashed_bytes = 0
        self._environ = environ
        self._lock = threading.Lock()
        self._sites: dict[str, dict[str, list]] = {}  # site -> {RECORD path: [*identity, digest]}
        self._dirty: set[str] = set()
        self._memo: dict[tuple[str, str], FileState] = {}  # (site, RECORD path) -> state, this run
        self._seen: dict[str, set[str]] = {}  # site -> RECORD paths looked up this run (the others are pruned)

    def _entries(self, site: str) -> dict[str, list]:
        with self._lock:
            entries = self._sites.get(site)
            if entries is not None:
                return entries
        loaded: dict[str, list] = {}
        for path in dict.fromkeys([Path(site) / ".wh" / _NAME, _user_path(site, self._environ)]):
            loaded.update(_load(path, site))
        with self._lock:
            return self._sites.setdefault(site, loaded)

    def state(self, site: str, rel: str) -> FileState:
        """The digest and size of the file ``rel`` (a RECORD path) under ``site``; None when it is not a file."""
        key = (site, rel)
        known = self._memo.get(key, _UNKNOWN)  # asked before this run (stack:files, then the inventory)
        if known is not _UNKNOWN:
            return known
        site = os.path.abspath(site)  # one spelling per folder: one cache
        full = os.path.normpath(os.path.join(site, rel))
        with self._lock:
            self._seen.setdefault(site, set()).add(rel)
        state = self._state(site, rel, full)
        with self._lock:
            self._memo[key] = state
        return state

    def _state(self, site: str, rel: str, full: str) -> FileState:
        try:
            st = os.stat(full)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        ident = file_identity(st)
        entries = self._entries(site)
        cached = entries.get(rel)
        if not self.thorough and cached is not None and tuple(cached[:5]) == ident:
            return cached[5], st.st_size
        h = hashlib.sha256()
        try:
            update_hash(h, Path(full))
            after = os.stat(full)
        except OSError:
            return None
        digest = record_digest(h.digest())
        with self._lock:
            self.hashed += 1
            self.hashed_bytes += st.st_size
            if file_identity(after) == ident:  # not written to while it was read: the digest is the file's
                entries[rel] = [*ident, digest]
                self._dirty.add(site)
        return digest, st.st_size

    def states(self, items: Sequence[tuple[str, str]]) -> list[FileState]:
        """:meth:`state` of each ``(site, RECORD path)``, by ``jobs`` threads (hashlib and reads release the GIL).

        In chunks, not one task per file: a future per file would cost more than a cached file's stat."""
        items = list(items)
        if self.jobs == 1 or len(items) < 64:
            return [self.state(site, rel) for site, rel in items]
        chunks = [items[i::self.jobs * 4] for i in range(self.jobs * 4)]  # strided: big files spread out
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            done = list(pool.map(lambda chunk: [self.state(site, rel) for site, rel in chunk], chunks))
        out: list[FileState] = [None] * len(items)
        for i, states in enumerate(done):
            out[i::self.jobs * 4] = states
        return out

    def save(self) -> list[str]:
        """Write the caches that changed (best-effort: a cache that cannot be written is a slower next run).

        Returns a note per cache that could not be written."""
        notes = []
        for site in sorted(self._dirty):
            seen = self._seen.get(site, set())
            # Only what this run looked up is kept: entries of files uninstalled or replaced since go.
            entries = {rel: e for rel, e in self._sites[site].items() if rel in seen}
            try:
                _store(cache_path(site, self._environ), site, entries)
            except OSError as exc:
                notes.append(f"digest cache of {site} not written: {exc.strerror or exc}")
        self._dirty.clear()
        return notes


def _load(path: Path, site: str) -> dict[str, list]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not (isinstance(data, dict) and data.get("schema") == SCHEMA and data.get("site") == site
            and isinstance(data.get("files"), dict)):
        return {}
    return {rel: e for rel, e in data["files"].items()
            if isinstance(e, list) and len(e) == 6 and all(type(x) is int for x in e[:5]) and isinstance(e[5], str)}


def _store(path: Path, site: str, entries: Mapping[str, list]) -> None:
    body = {"schema": SCHEMA, "site": site, "files": dict(entries)}
    write_atomic(path, json.dumps(body, separators=(",", ":")) + "\n")


def patched_files(site: str | os.PathLike) -> dict[str, tuple[str, str]]:
    """Files ``wh patch`` changed under ``site``: absolute path -> (patch name, sha256 hex after the patch)."""
    out: dict[str, tuple[str, str]] = {}
    root = Path(site) / ".wh" / "patches"
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return out
    for name in names:
        try:
            data = json.loads((root / name / "record.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("file"), str) and isinstance(data.get("after_sha256"), str):
            out[os.path.normpath(data["file"])] = (name, data["after_sha256"])
    return out


def record_installed(dist_infos: Iterable[str | os.PathLike], environ: Mapping[str, str] | None = None) -> int:
    """Write the cache entries of what an install just wrote: each listed file, by RECORD's digest.

    Called after the install's commit. A path two RECORDs list with different digests, and a file a
    patch changed, get no entry (the doctor hashes them). Best-effort: returns how many were written."""
    by_site: dict[str, dict[str, str | None]] = {}
    for info in map(os.fspath, dist_infos):
        site = os.path.dirname(os.path.abspath(info))
        try:
            text = Path(info, "RECORD").read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            continue
        rows = by_site.setdefault(site, {})
        for rel, digest, _ in read_record(text):
            if digest is None or rel.endswith((".pyc", ".pyo")):
                continue
            rows[rel] = digest if rows.get(rel, digest) == digest else None
    written = 0
    for site, rows in by_site.items():
        patched = patched_files(site)
        entries = _load(cache_path(site, environ), site)
        for rel, digest in rows.items():
            full = os.path.normpath(os.path.join(site, rel))
            if digest is None or full in patched:
                entries.pop(rel, None)
                continue
            try:
                ident: FileIdentity = file_identity(os.stat(full))
            except OSError:
                continue
            entries[rel] = [*ident, digest]
            written += 1
        try:
            _store(cache_path(site, environ), site, entries)
        except OSError:
            pass  # a cache: the doctor's first run hashes instead
    return written
