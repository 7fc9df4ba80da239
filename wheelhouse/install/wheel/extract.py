"""Parallel extraction of planned wheel files, each checked as it is written, and the wheels' own sha256.

All wheels' files are extracted by one pool of threads (inflation, hashing and file
writes release the GIL), biggest work first. Each member is checked while it is written:

- a wheel whose sha256 the caller expects (the lock's) is hashed whole by a task of the
  same pool, beside its extraction, so the check that used to run alone before unpacking
  (one thread on the 581 MB cuBLAS wheel while the other core waited) is spread over the
  pool; each of its members is checked against the CRC-32 of the wheel's central directory,
  which that sha256 covers. The CRC catches a re-read that differs from what was hashed
  and an inflater fault, at a fraction of a sha256 pass over every extracted byte.
- the lock's hash pins the wheel's bytes, not that its RECORD tells the truth about them,
  and the installed RECORD copies its rows: so each member is also hashed and compared with
  its RECORD sha256 unless the wheel is ``record_checked`` (its wheelhouse's stage checked
  every member against RECORD: wheelhouse.lock.records). A wheel whose RECORD lies is
  refused, never installed with that row.
- a wheel with no expected sha256 has every member hashed and compared with its RECORD
  sha256 (the only check of its bytes there is).

With the extraction cache (``linkcache``), a member of a wheel that has a cache entry is
hardlinked from it and the link checked against the entry's manifest instead; one that fails
the check is extracted as above, and so is the rest of its wheel.

Sizes are enforced while streaming (a bomb never fills the disk). The first extraction
failure stops the other extraction tasks at their next file; the wheel-hash tasks always
finish, so that every wheel whose sha256 is wrong can be named. The caller rolls back.
"""

from __future__ import annotations

import hashlib
import os
import threading
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Collection, Mapping

from wheelhouse.faults import checkpoint
from wheelhouse.progress import Reporter
from wheelhouse.inflate import Inflater, choose
from .launchers import shebang
from wheelhouse.fileidentity import FileIdentity, file_identity
from .linkcache import Linking, linkable
from .plan import PlannedFile, WheelPlan
from .record import RecordMismatch, UnpackError, record_digest

__all__ = ["create_new", "extract_plans", "Extraction"]


# Reads of the archive (stored and deflated members, whole wheels for their sha256) go into one buffer
# per member or wheel, reused: a fresh 4 MiB bytes object per read was page faults and a copy from
# memory; 256 KiB stays in the core's cache between the kernel's copy and the hash or inflater reading it.
_READ = 256 << 10
_IN = _READ  # a member this small (with its local header) is read in one pread
# Compressed bytes handed to one inflate call (one read): ~460 KiB out at the CUDA libraries' ~1.8:1.
# What a call leaves unconsumed when its output is full comes back as a copy (``unconsumed_tail``).
_FEED = 256 << 10
# The most one inflate call may produce. Each piece is inflated, CRC-checked and written by three calls
# that each give up and take back the GIL: pieces 4x smaller (64 KiB in, 256 KiB out) cost 1-2 s of wall
# time on the 2 GB set on 2 busy cores (a thread preempted holding the GIL stalls the others); 16 MiB
# pieces made the CRC and the kernel's copy into the page cache read from memory (~3 s more system
# CPU). A bomb never holds more than this in memory per call.
_OUT = 1 << 20
_SLACK = 512  # local-header extra field bytes read along with a small member (more: a second read)
_FILE_COST = 32 << 10  # a file's creation costs about as much as inflating and writing 32 KiB
_LINK_COST = 8 << 10  # a checked hardlink: a link and an lstat


def create_new(dest: str, mode: int) -> int:
    """A descriptor on a new file at ``dest`` (an existing one is unlinked first, never overwritten)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(16):  # two wheels of one install writing one path (a console script both declare) race here
        try:
            return os.open(dest, flags, mode)
        except FileExistsError:
            # Never write into an existing inode: a running process may have it mapped.
            try:
                os.unlink(dest)
            except FileNotFoundError:
                pass  # the other writer unlinked it first
    return os.open(dest, flags, mode)


class _Archives:
    """One read-only descriptor per wheel, shared by all threads (``os.pread`` has no file position).

    ``pinned``: the identity of the file whose sha256 the caller checked, per wheel; another file found
    at the path (replaced since, or written to) is refused, not extracted."""

    def __init__(self, pinned: Mapping[Path, FileIdentity] | None = None) -> None:
        self._fds: dict[Path, int] = {}
        self._lock = threading.Lock()
        self._pinned = dict(pinned or {})

    def fd(self, path: Path) -> int:
        with self._lock:
            fd = self._fds.get(path)
            if fd is None:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                want = self._pinned.get(path)
                if want is not None and file_identity(os.fstat(fd)) != want:
                    os.close(fd)
                    raise UnpackError(f"{path.name} changed after its sha256 was checked (replaced or written to "
                                      "while wh ran); nothing was installed",
                                      hint="make the wheelhouse read-only to others (or copy it), then re-run "
                                           "`wh install`")
                self._fds[path] = fd
            return fd

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


def _raw_chunks(fd: int, pos: int, left: int, size: int = _READ):
    """``left`` bytes of the archive from ``pos``, in reads of at most ``size`` into one buffer: each
    piece is a view of it, valid until the next piece is asked for (hashed, inflated or written by then)."""
    if left <= 0:
        return
    buf = memoryview(bytearray(min(left, size)))
    while left > 0:
        n = os.preadv(fd, [buf[:min(left, size)]], pos)
        if n <= 0:
            break
        pos += n
        left -= n
        yield buf[:n]


def _damaged(wheel: Path, what: str) -> UnpackError:
    return UnpackError(f"{wheel.name}: {what}", hint="the wheel is damaged; copy the wheelhouse again or re-stage it")


def _member_data(fd: int, wheel: Path, m: PlannedFile):
    """Where the member's stored bytes start, and (a small member) those bytes, read with its local header."""
    name_len = len(m.name.encode("utf-8"))
    small = m.compress_size + name_len + _SLACK <= _IN
    head = os.pread(fd, 30 + name_len + _SLACK + m.compress_size if small else 30, m.offset)
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        raise _damaged(wheel, f"bad local header for {m.name}")
    start = 30 + int.from_bytes(head[26:28], "little") + int.from_bytes(head[28:30], "little")
    if small and start + m.compress_size <= len(head):
        return m.offset + start, head[start:start + m.compress_size]
    return m.offset + start, None


def _member_chunks(fd: int, wheel: Path, m: PlannedFile, inflater: Inflater):
    """The member's uncompressed bytes, in pieces: raw inflate over pread (no per-read Python buffering;
    the caller checks every byte against the CRC or the RECORD sha256)."""
    pos, body = _member_data(fd, wheel, m)
    raw = [body] if body is not None else _raw_chunks(fd, pos, m.compress_size)
    if m.compress_type == zipfile.ZIP_STORED:
        yield from raw
        return
    if m.compress_type == zipfile.ZIP_DEFLATED:
        d = inflater.decompressobj()
        try:
            for chunk in raw:
                view = memoryview(chunk)
                for at in range(0, len(view), _FEED):
                    piece = view[at:at + _FEED]
                    while piece:
                        out = d.decompress(piece, _OUT)
                        if out:
                            yield out
                        piece = d.unconsumed_tail
            tail = d.flush()
        except inflater.errors as exc:
            raise _damaged(wheel, f"{m.name} is not valid deflate data ({exc})") from exc
        if tail:
            yield tail
        return
    with zipfile.ZipFile(wheel) as zf, zf.open(m.name) as src:  # bzip2/lzma: rare, let zipfile do it
        while True:
            chunk = src.read(_READ)
            if not chunk:
                return
            yield chunk


def _write_all(fd: int, data: bytes) -> None:
    n = os.write(fd, data)  # a regular file takes it all in one call, short of an error
    if n == len(data):
        return
    view = memoryview(data)[n:]
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _too_big(plan: WheelPlan, m: PlannedFile) -> RecordMismatch:
    return RecordMismatch(f"{plan.wheel.name}: {m.name} inflates beyond its declared {m.size} bytes",
                          hint="the wheel is damaged or a zip bomb; remove it from the wheelhouse and re-run `wh stage`")


class _Check:
    """What each written byte of one member is compared with: its CRC-32 (the wheel's sha256 is checked
    as a whole), its RECORD sha256 (nothing vouches for the wheel, or for its RECORD), or both."""

    __slots__ = ("crc", "h", "_crc32")

    def __init__(self, by_crc: bool, by_record: bool, inflater: Inflater):
        self._crc32 = inflater.crc_module.crc32  # called once per piece: no wrapper in between
        self.crc = 0 if by_crc else None
        self.h = hashlib.sha256() if by_record else None

    def update(self, data) -> None:
        if self.crc is not None:
            self.crc = self._crc32(data, self.crc)
        if self.h is not None:
            self.h.update(data)

    def mismatch(self, m: PlannedFile, size: int) -> str | None:
        """Which check the written bytes fail ("its CRC-32", "its RECORD hash"), or None."""
        if self.crc is not None and (self.crc != m.crc or size != m.size):
            return "its CRC-32"
        if self.h is not None and (record_digest(self.h.digest()) != m.digest or size != m.size):
            return "its RECORD hash"
        return None


class _Counter:
    def __init__(self) -> None:
        self.n = 0
        self._lock = threading.Lock()

    def bump(self) -> int:
        with self._lock:
            self.n += 1
            return self.n


class Extraction:
    """One batch's shared state: descriptors, the stop signal, the inflater, folders made so far."""

    def __init__(self, python: str, reporter: Reporter, task: str, inflater: Inflater,
                 on_written: Callable[[str], None] | None, hashed: set[Path], linking: Linking | None = None,
                 pinned: Mapping[Path, FileIdentity] | None = None, record_checked: Collection[Path] = ()):
        self.python, self.reporter, self.task, self.inflater = python, reporter, task, inflater
        self.on_written = on_written
        self.linking = linking
        self.pending: dict[int, int] = {}  # id(plan) -> its extraction tasks not finished yet
        self._pending_lock = threading.Lock()
        self.hashed = hashed  # wheels whose whole sha256 is checked: members by CRC
        self.record_checked = frozenset(record_checked)  # of those, whose RECORD the stage checked: CRC alone
        self.archives = _Archives(pinned)
        self.failed = threading.Event()
        self.counter = _Counter()
        self._made: set[str] = set()  # folders made so far (a race only repeats a harmless makedirs)

    def make_dirs(self, plan: WheelPlan) -> None:
        """The plan's folders, made by whichever worker reaches the wheel first (wheels in parallel, not
        every folder of the batch one at a time before the first byte)."""
        with plan.lock:
            if plan.dirs_made:
                return
            for d in sorted({os.path.dirname(m.dest) for m in plan.members if m.write}):
                if d not in self._made:
                    os.makedirs(d, exist_ok=True)
                    self._made.add(d)
            plan.dirs_made = True

    def extract(self, plan: WheelPlan, members: list[PlannedFile]) -> None:
        self.make_dirs(plan)
        src = self.archives.fd(plan.wheel)
        by_crc = plan.wheel in self.hashed
        by_record = not by_crc or plan.wheel not in self.record_checked
        for m in members:
            if self.failed.is_set():
                return
            if self.linking is not None and self._link(plan, m):
                continue
            self._one(plan, m, src, _Check(by_crc, by_record, self.inflater))
        if self.linking is not None and self._last_task_of(plan) and not self.failed.is_set():
            self.linking.stage(plan)  # overlaps the other wheels' extraction (the long tail of a big one)

    def _last_task_of(self, plan: WheelPlan) -> bool:
        with self._pending_lock:
            left = self.pending[id(plan)] = self.pending[id(plan)] - 1
        return left == 0

    def _link(self, plan: WheelPlan, m: PlannedFile) -> bool:
        """Hardlink ``m`` from the wheel's cache entry, checked; False: extract it."""
        entry = self.linking.entry_for(plan.wheel)
        if entry is None or not linkable(m.name, plan.dist_info, m.script):
            return False
        st = self.linking.try_link(plan.wheel, entry, m.name, m.dest, _mode(m), m.size)
        if st is None:
            return False
        self.linking.stats[m.dest] = st
        self.reporter.advance(self.task, max(m.size, 1))
        checkpoint(f"install.link.{self.counter.bump()}")
        if self.on_written is not None and m.dest.endswith(".py"):
            self.on_written(m.dest)
        return True

    def _one(self, plan: WheelPlan, m: PlannedFile, src: int, check: _Check) -> None:
        mode = _mode(m)
        size = 0
        if m.script:
            data = bytearray()
            for chunk in _member_chunks(src, plan.wheel, m, self.inflater):
                data += chunk
                if len(data) > m.size:
                    raise _too_big(plan, m)
            data = bytes(data)
            check.update(data)
            size = len(data)
            if data.startswith(b"#!python"):
                data = shebang(self.python) + (data.split(b"\n", 1)[1] if b"\n" in data else b"")
            chunks = [data]
        else:
            chunks = _member_chunks(src, plan.wheel, m, self.inflater)
        out = create_new(m.dest, mode)
        try:
            for chunk in chunks:
                if not m.script:
                    check.update(chunk)
                    size += len(chunk)
                    if size > m.size:  # enforced while streaming: a bomb never fills the disk
                        raise _too_big(plan, m)
                _write_all(out, chunk)
            st = os.fstat(out) if self.linking is not None else None  # after the last write: its final mtime
        except OSError as exc:
            if exc.filename is None:  # os.write names no file: a full disk would read "could not write a file"
                raise OSError(exc.errno, exc.strerror, m.dest) from exc
            raise
        finally:
            os.close(out)
        what = check.mismatch(m, size)
        if what is not None:
            raise RecordMismatch(f"{plan.wheel.name}: {m.name} does not match {what}",
                                 hint="the wheel was altered after it was built; re-stage it with `wh stage`")
        if st is not None:
            self.linking.stats[m.dest] = st
        self.reporter.advance(self.task, max(size, 1))
        checkpoint(f"install.file.{self.counter.bump()}")
        if self.on_written is not None and m.dest.endswith(".py"):
            self.on_written(m.dest)

    def sha256(self, wheel: Path) -> str:
        """The whole wheel's sha256, read through the descriptor extraction uses."""
        checkpoint("install.wheel-sha256")
        fd = self.archives.fd(wheel)
        before = os.fstat(fd)
        h = hashlib.sha256()
        for chunk in _raw_chunks(fd, 0, before.st_size):
            h.update(chunk)
        if self.linking is not None:  # the entry remembers which file had this sha256
            identity = file_identity(before)
            self.linking.hashed_file(wheel, identity if file_identity(os.fstat(fd)) == identity else None)
        return h.hexdigest()


def _mode(m: PlannedFile) -> int:
    return 0o755 if (m.mode & 0o111 or m.script) else 0o644


def _cost(m: PlannedFile, linked: bool) -> int:
    return _LINK_COST if linked else m.size + _FILE_COST


def _chunks(plans: list[WheelPlan], target_bytes: int,
            linked: Collection[Path] = ()) -> list[tuple[int, WheelPlan, list[PlannedFile]]]:
    """Each wheel's members to write, in tasks of about ``target_bytes`` of work, with each task's cost."""
    out = []
    for plan in plans:
        todo = [m for m in plan.members if m.write]
        todo.sort(key=lambda m: -m.size)
        to_link = plan.wheel in linked
        batch: list[PlannedFile] = []
        acc = cost = 0
        for m in todo:
            batch.append(m)
            acc += _LINK_COST if to_link else m.size  # extraction tasks are cut by bytes, as before the cache
            cost += _cost(m, to_link)
            if acc >= target_bytes or len(batch) >= 400:
                out.append((cost, plan, batch))
                batch, acc, cost = [], 0, 0
        if batch:
            out.append((cost, plan, batch))
    return out


def extract_plans(plans: list[WheelPlan], python: str, *, jobs: int, total: int, reporter: Reporter, task: str,
                  on_written: Callable[[str], None] | None = None, expected: Mapping[Path, str] | None = None,
                  verified: Collection[Path] | Mapping[Path, FileIdentity | None] = (),
                  inflater: Inflater | None = None, linking: Linking | None = None,
                  record_checked: Collection[Path] = ()) -> list[tuple[str, str, str]]:
    """Write every planned file of ``plans`` (``write`` set) with ``jobs`` threads.

    ``expected`` maps wheels to the sha256 (hex) they must have; each is hashed by a task of the
    same pool. ``verified``: wheels whose sha256 the caller already checked (a mapping: with the identity
    of the file it hashed, ``file_identity``, which extraction must find at the path). The members of both
    are checked by CRC-32, and by their RECORD sha256 too unless the wheel is in ``record_checked``; the
    others' by their RECORD sha256. ``linking``: the extraction cache's
    entries for some wheels (their files are linked from there, checked) and where the stat of every
    file written is kept for adding entries afterwards. Returns ``(wheel, expected, actual)`` for every wheel whose sha256 differs (the
    caller raises that first: it names the cause), else raises the first extraction error. The
    caller's transaction journaled every destination before this runs (a partial file is rolled
    back like a whole one).
    """
    expected = dict(expected or {})
    pinned = {Path(w): i for w, i in verified.items() if i is not None} if isinstance(verified, Mapping) else {}
    run = Extraction(python, reporter, task, inflater or choose(), on_written,
                     set(expected) | {Path(w) for w in verified}, linking, pinned, record_checked)
    work: list[tuple[int, str, object]] = []
    linked = set(linking.manifests) if linking is not None else set()
    for cost, plan, members in _chunks(plans, max(8 << 20, total // (jobs * 4)), linked):
        work.append((cost, "extract", (plan, members)))
        run.pending[id(plan)] = run.pending.get(id(plan), 0) + 1
    for wheel in expected:
        # sha256 with SHA-NI runs ~4x faster than inflate+write of the same bytes: weigh it so.
        work.append((os.path.getsize(wheel) // 4, "sha256", wheel))
    work.sort(key=lambda w: -w[0])  # biggest first, so one huge member does not finish last on one thread

    def do(kind: str, arg):
        if kind == "sha256":
            return run.sha256(arg)  # never stopped early: every wrong wheel gets named
        try:
            run.extract(*arg)
        except BaseException:
            run.failed.set()
            raise

    errors: list[BaseException] = []
    actual: dict[Path, str] = {}
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [(kind, arg, pool.submit(do, kind, arg)) for _, kind, arg in work]
            for kind, arg, f in futures:
                exc = f.exception()
                if exc is not None:
                    errors.append(exc)
                elif kind == "sha256":
                    actual[arg] = f.result()
    finally:
        run.archives.close()
    bad = [(str(w), sha, actual[w]) for w, sha in expected.items() if w in actual and actual[w] != sha]
    if bad:
        return bad
    if errors:
        raise errors[0]
    return []
