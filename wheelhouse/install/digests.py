"""What each installed file holds, by its sha256, without hashing what has not changed since it was hashed.

``wh doctor``'s ``stack:files`` check compares every file a RECORD lists with the sha256 RECORD
records, and ``wh doctor compare`` compares those real digests across nodes. Hashing a serving stack
(~100k files, several GB) on every run would cost most of the doctor's budget, so a cache remembers,
per file, its identity (device, inode, size, mtime_ns, ctime_ns: ``wheelhouse.fileidentity.FileIdentity``) and
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
import signal
import stat
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from wheelhouse.atomic import write_atomic
from wheelhouse.cachedir import default_cache_dir
from wheelhouse.digest import record_digest, update_hash_from
from wheelhouse.fileidentity import FileIdentity, file_identity
from .wheel.record import read_record

__all__ = ["SCHEMA", "FileDigests", "FileState", "Hashed", "cache_path", "hash_files", "patched_files",
           "record_installed"]

SCHEMA = "wh-digests/2"
_SCHEMA_1 = "wh-digests/1"  # entries as lists [dev, ino, size, mtime_ns, ctime_ns, digest]: read, rewritten as 2
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
        self._sites: dict[str, dict[str, str]] = {}  # site -> {RECORD path: _entry(identity, digest)}
        self._dirty: set[str] = set()
        self._memo: dict[tuple[str, str], FileState] = {}  # (site, RECORD path) -> state, this run
        self._seen: dict[str, set[str]] = {}  # site -> RECORD paths looked up this run (the others are pruned)

    def _entries(self, site: str) -> dict[str, str]:
        with self._lock:
            entries = self._sites.get(site)
            if entries is not None:
                return entries
        loaded: dict[str, str] = {}
        old = False
        for path in dict.fromkeys([Path(site) / ".wh" / _NAME, _user_path(site, self._environ)]):
            got = _load(path, site)
            old = old or (bool(got) and _OLD in got)
            loaded.update(got)
        loaded.pop(_OLD, None)
        with self._lock:
            if old:
                self._dirty.add(site)  # written again in the current schema
            return self._sites.setdefault(site, loaded)

    def state(self, site: str, rel: str) -> FileState:
        """The digest and size of the file ``rel`` (a RECORD path) under ``site``; None when it is not a file."""
        known = self._memo.get((site, rel), _UNKNOWN)  # asked before this run (stack:files, then the inventory)
        if known is not _UNKNOWN:
            return known
        return self.states([(site, rel)])[0]

    def states(self, items: Sequence[tuple[str, str]]) -> list[FileState]:
        """:meth:`state` of each ``(site, RECORD path)``, many at once.

        An unchanged tree costs one ``os.stat`` per file and a comparison with the cached identity: the
        stats run on ``jobs`` threads (the system call releases the GIL), the rest is one loop without a
        function call per file. What must be hashed is read by worker processes when there is enough of it
        (:func:`hash_files`: one Python process per job, so hashing scales with cores, not with the GIL),
        else here."""
        items = list(items)
        memo = self._memo
        out: list[FileState | object] = [memo.get(key, _UNKNOWN) for key in items]
        todo = [i for i, known in enumerate(out) if known is _UNKNOWN]
        if not todo:
            return out  # type: ignore[return-value]
        abs_of = {s: os.path.abspath(s) for s in {items[i][0] for i in todo}}  # one spelling per folder: one cache
        sites = [abs_of[items[i][0]] for i in todo]
        rels = [items[i][1] for i in todo]
        fulls = [os.path.normpath(os.path.join(site, rel)) if _odd(rel) else site + "/" + rel
                 for site, rel in zip(sites, rels)]
        stats = _stat_all(fulls, self.jobs)
        by_site: dict[str, dict[str, str]] = {s: self._entries(s) for s in abs_of.values()}
        misses: list[tuple[int, str, str, str, os.stat_result]] = []
        with self._lock:
            for site in by_site:
                self._seen.setdefault(site, set()).update(rel for s, rel in zip(sites, rels) if s == site)
            empty: dict[str, str] = {}
            for i, site, rel, full, st in zip(todo, sites, rels, fulls, stats):
                if st is None:
                    out[i] = None
                    continue
                cached = (empty if self.thorough else by_site[site]).get(rel)
                key = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:"  # _entry's identity part
                if type(cached) is str and cached.startswith(key) and len(cached) > len(key):
                    out[i] = (cached[len(key):], st.st_size)
                else:
                    misses.append((i, site, rel, full, st))
        if misses:
            hashed = hash_files([m[3] for m in misses], self.jobs, sizes=[m[4].st_size for m in misses])
            with self._lock:
                for (i, site, rel, _, st), got in zip(misses, hashed):
                    if got is None:
                        out[i] = None
                        continue
                    digest, before, after = got
                    self.hashed += 1
                    self.hashed_bytes += before[2]
                    if before == after:  # not written to while it was read: the digest is the file's
                        by_site[site][rel] = _entry(before, digest)
                        self._dirty.add(site)
                    out[i] = (digest, before[2])
        with self._lock:
            memo.update((items[i], out[i]) for i in todo)  # type: ignore[misc]
        return out  # type: ignore[return-value]

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


_OLD = "\x00old"  # marks entries read from a wh-digests/1 cache (no RECORD path holds a NUL)


def _entry(ident: FileIdentity, digest: str) -> str:
    """A cache entry: one string (``dev:ino:size:mtime_ns:ctime_ns:digest``), so 50k of them load in
    one ``json.loads`` several times faster than as lists of numbers."""
    return "%d:%d:%d:%d:%d:" % ident + digest


def _load(path: Path, site: str) -> dict[str, str]:
    """The cached entries of ``site`` (``rel: _entry(...)``). An entry's shape is checked where it is used (one
    of another shape is a miss: the file is hashed), not here: a pass over 50k entries at load would cost
    more than the stats of the files."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not (isinstance(data, dict) and data.get("site") == site and isinstance(data.get("files"), dict)):
        return {}
    if data.get("schema") == SCHEMA:
        return data["files"]
    if data.get("schema") == _SCHEMA_1:
        return {_OLD: "", **{rel: _entry(tuple(e[:5]), e[5]) for rel, e in data["files"].items()  # type: ignore[arg-type]
                             if isinstance(e, list) and len(e) == 6 and all(type(x) is int for x in e[:5])
                             and isinstance(e[5], str)}}
    return {}


def _store(path: Path, site: str, entries: Mapping[str, str]) -> None:
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
    patch changed, and a file linked to another name (the link cache's: its bytes were not read), get no entry
    (the doctor hashes them). Best-effort: returns how many were written."""
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
        entries.pop(_OLD, None)
        for rel, digest in rows.items():
            full = os.path.normpath(os.path.join(site, rel))
            if digest is None or full in patched:
                entries.pop(rel, None)
                continue
            try:
                st = os.stat(full)
            except OSError:
                continue
            if st.st_nlink > 1:
                # a link to a file of the link cache (--link-cache) or another venv: the install did not read
                # its bytes, which an edit through another name may have changed; the doctor hashes it
                entries.pop(rel, None)
                continue
            ident: FileIdentity = file_identity(st)
            entries[rel] = _entry(ident, digest)
            written += 1
        try:
            _store(cache_path(site, environ), site, entries)
        except OSError:
            pass  # a cache: the doctor's first run hashes instead
    return written


def _odd(rel: str) -> bool:
    """Whether ``site + "/" + rel`` might not be normalized (``..``, ``.``, ``//``, absolute): then it is
    normalized as :meth:`FileDigests.state` does. A few plain names (``.hidden``) are caught too: harmless."""
    return rel.startswith(("/", ".")) or rel.endswith("/") or "//" in rel or "/." in rel


_INTERRUPTED = (-signal.SIGINT, -signal.SIGTERM)  # a worker ended by these was interrupted, not broken
_STAT_THREADS = 8  # more threads than this only queue on the GIL between the system calls


def _stat_chunk(paths: Sequence[str]) -> list[os.stat_result | None]:
    out: list[os.stat_result | None] = []
    isreg = stat.S_ISREG
    for p in paths:
        try:
            st: os.stat_result | None = os.stat(p)
        except (OSError, ValueError):  # ValueError: a NUL in the path
            st = None
        else:
            if not isreg(st.st_mode):
                st = None
        out.append(st)
    return out


def _stat_all(paths: Sequence[str], jobs: int) -> list[os.stat_result | None]:
    """``os.stat`` of each path (None: not a regular file), on up to ``jobs`` threads."""
    threads = min(jobs, _STAT_THREADS)
    if threads == 1 or len(paths) < 2048:
        return _stat_chunk(paths)
    step = -(-len(paths) // (threads * 4))
    with ThreadPoolExecutor(max_workers=threads) as pool:
        parts = pool.map(_stat_chunk, [paths[i:i + step] for i in range(0, len(paths), step)])
        return [st for part in parts for st in part]


# One file hashed: (digest, identity when opened, identity after the read), or None: not a readable regular file.
Hashed = tuple[str, FileIdentity, FileIdentity] | None

# The hash worker: standard library only, run with -I -S by the interpreter running wh. It reads batches
# ("<length>\n" then NUL-separated paths) on stdin and answers one line per path: the digest (RECORD's
# encoding) and the identities before and after the read, or "-". O_NONBLOCK: a FIFO put in a file's place
# is not waited on.
_WORKER = r"""
import base64, hashlib, os, stat, sys
try:
    os.nice(10)  # the doctor's import probes come first: hashing takes what CPU they leave
except OSError:
    pass
inp, out = sys.stdin.buffer, sys.stdout.buffer
buf = bytearray(1 << 20)
view = memoryview(buf)
flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
def ident(st):
    return "%d %d %d %d %d" % (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
while True:
    head = inp.readline()
    if not head:
        break
    lines = []
    for p in inp.read(int(head)).split(b"\0"):
        try:
            fd = os.open(p, flags)
            with open(fd, "rb", buffering=0) as f:
                before = os.fstat(fd)
                if not stat.S_ISREG(before.st_mode):
                    raise OSError
                h = hashlib.sha256()
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    h.update(view[:n])
            after = os.stat(p)
        except (OSError, ValueError):
            lines.append("-")
            continue
        lines.append(base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode() + " " + ident(before) + " "
                     + ident(after))
    out.write(("\n".join(lines) + "\n").encode())
    out.flush()
"""
_MAX_WORKERS = 4  # on the 16-core box 16 workers read no faster (the disk bounds a cold 7.2 GB: ~0.9 GB/s) and
# doubled the import probes' time (torch 5 -> 16 s): a first run of 26 s became 40 s
_PROCESS_BYTES = 64 << 20  # less than this to hash: threads here (a worker process costs ~30 ms to start)
_BATCH_BYTES = 8 << 20  # what one batch to a worker holds (or _BATCH_FILES files): small enough to balance
_BATCH_FILES = 512


def _hash_here(path: str) -> Hashed:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with open(fd, "rb", buffering=0) as fh:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                return None
            h = hashlib.sha256()
            update_hash_from(h, fh)
        after = os.stat(path)
    except (OSError, ValueError):
        return None
    return record_digest(h.digest()), file_identity(before), file_identity(after)


def _parse(line: str) -> Hashed:
    parts = line.split()
    if len(parts) != 11:
        return None
    try:
        n = [int(x) for x in parts[1:]]
    except ValueError:
        return None
    return parts[0], (n[0], n[1], n[2], n[3], n[4]), (n[5], n[6], n[7], n[8], n[9])


def hash_files(paths: Sequence[str], jobs: int, sizes: Sequence[int] | None = None) -> list[Hashed]:
    """The sha256 of each file (:data:`Hashed`), hashed by up to ``jobs`` at once.

    Enough bytes go to worker processes of the interpreter running wh (one per job, at most 4, at a lower
    priority than the import probes): hashing a 7 GB tree is then bound by the disk, not by this process's
    GIL (the per-file open/stat/read calls of 50k files would serialize on it). Biggest files first, handed out in small batches from one queue:
    a worker that got the big ones does not finish last. A worker that cannot start or dies leaves its
    files to be hashed here; one ended by SIGINT or SIGTERM (Ctrl-C reaches the whole process group) stops
    the hashing: :class:`KeyboardInterrupt`."""
    sizes = list(sizes) if sizes is not None else [0] * len(paths)
    out: list[Hashed] = [None] * len(paths)
    order = sorted(range(len(paths)), key=lambda i: -sizes[i])
    total = sum(sizes)
    workers = min(jobs, _MAX_WORKERS, max(1, total // (_BATCH_BYTES * 2)), len(paths))
    if workers <= 1 or total < _PROCESS_BYTES:
        threads = min(jobs, len(paths)) or 1
        if threads == 1:
            return [_hash_here(p) for p in paths]
        with ThreadPoolExecutor(max_workers=threads) as pool:
            for i, got in zip(order, pool.map(lambda i: _hash_here(paths[i]), order)):
                out[i] = got
        return out
    lock = threading.Lock()
    cursor = [0]

    def batch() -> list[int]:
        with lock:
            start = end = cursor[0]
            size = 0
            while end < len(order) and end - start < _BATCH_FILES and (end == start or size < _BATCH_BYTES):
                size += sizes[order[end]]
                end += 1
            cursor[0] = end
        return order[start:end]

    interrupted = threading.Event()

    def work() -> None:
        try:
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WORKER], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        except OSError:
            proc = None
        started = proc
        try:
            while True:
                mine = batch()
                if not mine:
                    break
                got: list[Hashed] | None = None
                if proc is not None and proc.poll() is None:
                    try:
                        payload = b"\0".join(os.fsencode(paths[i]) for i in mine)
                        proc.stdin.write(b"%d\n" % len(payload) + payload)  # type: ignore[union-attr]
                        proc.stdin.flush()  # type: ignore[union-attr]
                        lines = [proc.stdout.readline() for _ in mine]  # type: ignore[union-attr]
                        # A line without its newline: the worker died mid-batch; nothing it said is a verdict.
                        got = ([_parse(x.decode("ascii", "replace")) for x in lines]
                               if all(x.endswith(b"\n") for x in lines) else None)
                    except (OSError, ValueError):
                        got = None
                if got is None:
                    if started is not None and started.poll() in _INTERRUPTED:
                        interrupted.set()  # Ctrl-C reached the worker too: stop, do not hash the rest here
                    if interrupted.is_set():
                        break
                    proc = None
                    got = [_hash_here(paths[i]) for i in mine]
                for i, g in zip(mine, got):
                    out[i] = g
        finally:
            if started is not None:
                for pipe in (started.stdin, started.stdout):
                    try:
                        pipe.close()  # type: ignore[union-attr]
                    except OSError:
                        pass
                if proc is None:
                    started.kill()  # it died or answered garbage: make sure
                started.wait()

    threads = [threading.Thread(target=work, name="wh-hash", daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if interrupted.is_set():
        raise KeyboardInterrupt("a hash worker was interrupted")
    return out
