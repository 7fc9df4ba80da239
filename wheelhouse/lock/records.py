"""Every wheel put in a wheelhouse tells the truth in its RECORD, checked as it lands.

The lock's sha256 pins a wheel's bytes, not that its RECORD describes them: a wheel whose
RECORD gives a file a false sha256 installs that false row, and the installed RECORD
("a RECORD of what was really installed", docs/install.md) then lies to pip, to
``wh doctor`` and to every later check. ``wh install`` could hash every member again (~2.7 s
of CPU on the 2 GB set, docs/benchmarks.md); instead the wheel is checked once, where it
enters a wheelhouse, and the fact travels with it:

- every member is listed in RECORD with a sha256 and a size, and both are its own (inflated
  and hashed here); RECORD itself and its signatures (``RECORD.jws``, ``RECORD.p7s``: the
  wheel spec leaves them out) excepted;
- every RECORD row names a member; no name is in the archive twice.

A wheel that fails is refused with one line naming it and the file (``RecordMismatch``).
``wh.json["record_checked"]`` lists the sha256 of every wheel checked so; ``wh install`` keeps
its fast path (members checked by CRC-32, RECORD rows copied) for those alone, and hashes the
members of any other wheel against RECORD as it extracts them.

``RecordChecks`` runs the checks on a pool of threads while the downloads go on (inflate and
sha256 release the GIL); a big wheel is cut into several tasks so it does not finish last alone.
"""

from __future__ import annotations

import hashlib
import os
import threading
import zipfile
import zlib
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from wheelhouse.digest import record_digest
from wheelhouse.faults import checkpoint
from wheelhouse.inflate import Inflater, choose
from wheelhouse.recordfile import RECORD_CHECKED, RecordMismatch, read_record
from wheelhouse.zipdirectory import BadMember, LOCAL_HEADER_SIZE, Member, inflate_member, local_data_start, read_directory

__all__ = ["RECORD_CHECKED", "RecordMismatch", "check_record", "RecordChecks"]

_READ = 1 << 20  # compressed bytes per read
_OUT = 1 << 20  # the most one inflate call produces (a bomb never holds more in memory)
_TASK = 64 << 20  # uncompressed bytes per task: a 1 GB wheel is checked by every thread of the pool
_SIGNATURES = ("/RECORD", "/RECORD.jws", "/RECORD.p7s")


def _lies(wheel: Path, what: str) -> RecordMismatch:
    return RecordMismatch(f"{wheel.name}: {what}; the wheel's RECORD does not describe its files, refused",
                          hint="the wheel was altered after it was built: stage another version of it, exclude it "
                               "(--exclude NAME), or have its publisher rebuild it")


def _record_name(wheel: Path, names: Iterable[str]) -> str:
    """The archive path of the wheel's RECORD: its one ``.dist-info``'s, or the one its filename names."""
    found = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    if len(found) > 1:
        try:
            name, version, _, _ = parse_wheel_filename(wheel.name)
        except (InvalidWheelFilename, ValueError):
            name, version = None, None
        found = [n for n in found if canonicalize_name(n.split("-", 1)[0]) == name
                 and n[:-len(".dist-info/RECORD")].split("-", 1)[-1] == str(version)]
    if len(found) != 1:
        raise _lies(wheel, "no .dist-info/RECORD of its own")
    return found[0]


def _rows(wheel: Path, record_text: str, names: list[str]) -> dict[str, tuple[str, int]]:
    """RECORD's rows of files, each with a sha256 and a size; every file listed, every row a file."""
    files = [n for n in names if not n.endswith("/")]
    if len(set(files)) != len(files):  # which copy lands depends on the reader; RECORD vouches for one
        seen: set[str] = set()
        raise _lies(wheel, f"{next(n for n in files if n in seen or seen.add(n))} is in the archive twice")
    rows: dict[str, tuple[str, int]] = {}
    listed = set(files)
    for path, digest, size in read_record(record_text):
        if path.endswith(_SIGNATURES) and path.count("/") == 1:
            continue  # RECORD has no hash of itself (nor of its signatures)
        if path not in listed:
            raise _lies(wheel, f"RECORD lists {path}, which the wheel does not hold")
        if digest is None or size is None:
            raise _lies(wheel, f"{path} has no sha256 and size in RECORD")
        rows[path] = (digest, size)
    for n in files:
        if n not in rows and not (n.endswith(_SIGNATURES) and n.count("/") == 1):
            raise _lies(wheel, f"{n} is not listed in RECORD")
    return rows


def _record_text(wheel: Path, fd: int, m: Member) -> str:
    start = local_data_start(os.pread(fd, LOCAL_HEADER_SIZE, m[5]))
    if start is None:
        raise _lies(wheel, f"bad local header for {m[0]}")
    try:
        return inflate_member(os.pread(fd, m[2], m[5] + start), m).decode("utf-8", "replace")
    except (BadMember, LookupError) as exc:
        raise _lies(wheel, f"its RECORD cannot be read ({exc})") from exc


class _Stopped(Exception):
    """The stage failed elsewhere: checks not begun are not run."""


class _Wheel:
    """One wheel under check: a descriptor shared by its tasks, closed by the last one."""

    def __init__(self, wheel: Path, fd: int, tasks: int):
        self.wheel, self.fd, self.left = wheel, fd, tasks
        self.lock = threading.Lock()

    def task_done(self) -> None:
        with self.lock:
            self.left -= 1
            if self.left == 0:
                os.close(self.fd)


def _inflated(w: _Wheel, m: Member, start: int, limit: int, inflater: Inflater) -> Iterator[bytes]:
    """The member's bytes in pieces of at most ``_OUT``; RecordMismatch past ``limit`` (a bomb never fills
    memory) or where the deflate data is damaged."""
    name, _, csize, method, _, offset, _ = m
    d = inflater.decompressobj() if method == zipfile.ZIP_DEFLATED else None
    pos, left, got = offset + start, csize, 0
    try:
        while left > 0:
            piece = os.pread(w.fd, min(left, _READ), pos)
            if not piece:
                return
            pos += len(piece)
            left -= len(piece)
            while piece:
                out = d.decompress(piece, _OUT) if d is not None else piece
                piece = d.unconsumed_tail if d is not None else b""
                got += len(out)
                if got > limit:
                    raise _lies(w.wheel, f"{name} inflates beyond the {limit} bytes RECORD gives it")
                yield out
        if d is not None:
            yield d.flush()
    except inflater.errors as exc:
        raise _lies(w.wheel, f"{name} is not valid deflate data ({exc})") from exc


def _check_plain(w: _Wheel, members: Sequence[Member], rows: dict[str, tuple[str, int]], inflater: Inflater) -> None:
    """Each member inflated and hashed, compared with its RECORD row (sha256 and size) and its CRC-32."""
    for m in members:
        name, usize, _, method, crc, offset, _ = m
        digest, size = rows[name]
        if usize != size:
            raise _lies(w.wheel, f"{name} is {usize} bytes, RECORD says {size}")
        start = local_data_start(os.pread(w.fd, LOCAL_HEADER_SIZE, offset))
        if start is None or method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise _lies(w.wheel, f"{name} cannot be read (bad local header or compression method {method})")
        h, got, c = hashlib.sha256(), 0, 0
        for piece in _inflated(w, m, start, size, inflater):
            h.update(piece)
            c = inflater.crc32(piece, c)  # a fraction of the sha256's cost: a damaged archive is caught here
            got += len(piece)
        if got != size or c != crc:
            raise _lies(w.wheel, f"{name} does not match its size or CRC-32 in the archive")
        if record_digest(h.digest()) != digest:
            raise _lies(w.wheel, f"{name} does not match its RECORD sha256")


def _check_by_zipfile(wheel: Path, fd: int) -> None:
    """The whole check through ``zipfile`` (an archive ``zipdirectory`` leaves to it: zip64, a prefix)."""
    try:
        with open(os.dup(fd), "rb") as fh, zipfile.ZipFile(fh) as zf:
            infos = [i for i in zf.infolist() if not i.filename.endswith("/")]
            record = _record_name(wheel, [i.filename for i in infos])
            rows = _rows(wheel, zf.read(record).decode("utf-8", "replace"), [i.filename for i in infos])
            for i in infos:
                if i.filename not in rows:
                    continue
                digest, size = rows[i.filename]
                if i.file_size != size:
                    raise _lies(wheel, f"{i.filename} is {i.file_size} bytes, RECORD says {size}")
                h = hashlib.sha256()
                with zf.open(i) as src:  # zipfile checks the CRC-32 at the end
                    while chunk := src.read(_OUT):
                        h.update(chunk)
                if record_digest(h.digest()) != digest:
                    raise _lies(wheel, f"{i.filename} does not match its RECORD sha256")
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError, EOFError, KeyError) as exc:
        raise _lies(wheel, f"not a readable zip archive ({exc})") from exc


def _tasks(members: Sequence[Member]) -> list[list[Member]]:
    """The members cut into tasks of about ``_TASK`` uncompressed bytes, biggest first."""
    out: list[list[Member]] = []
    batch: list[Member] = []
    acc = 0
    for m in sorted(members, key=lambda m: -m[1]):
        batch.append(m)
        acc += m[1]
        if acc >= _TASK:
            out.append(batch)
            batch, acc = [], 0
    if batch:
        out.append(batch)
    return out


def check_record(wheel: Path) -> None:
    """Refuse ``wheel`` (RecordMismatch) unless its RECORD describes every file it holds, exactly."""
    checks = RecordChecks(jobs=1)
    try:
        checks.submit(Path(wheel))
        checks.wait()
    finally:
        checks.close()


class RecordChecks:
    """Wheels checked on a pool of ``jobs`` threads as they are submitted (while the downloads go on);
    ``wait()`` returns when every one passed and raises the first failure (by wheel name) otherwise."""

    def __init__(self, jobs: int | None = None):
        self._pool = ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 2),
                                        thread_name_prefix="wh-record")
        self._futures: list[tuple[str, Future]] = []
        self._unread: dict[int, int] = {}  # descriptors opened by submit, not yet taken by a task
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._submitted: set[tuple[int, int]] = set()  # (device, inode) of each file handed to a check
        self._inflater = choose()  # ISA-L or zlib-ng with the `fast` extra: the check is mostly inflation

    def submit(self, wheel: Path) -> None:
        """Check ``wheel``. It is opened now: the caller may remove or rename that name at once (the stage's
        scratch folder goes as soon as the downloads are placed)."""
        wheel = Path(wheel)
        checkpoint("records.check")  # (tests: a check begun here where none should be)
        fd = os.open(wheel, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        st = os.fstat(fd)
        with self._lock:
            self._unread[fd] = fd
            self._submitted.add((st.st_dev, st.st_ino))
        self._add(wheel, self._pool.submit(self._plan, wheel, fd))

    def ensure(self, wheels: Iterable[Path]) -> None:
        """Submit those of ``wheels`` whose file was not submitted yet (by its inode: a download is checked
        under its scratch name, which is linked to its place in the wheelhouse); a callback that failed, a
        copy made instead of a link, a file placed another way are checked now."""
        for w in wheels:
            st = os.stat(w)
            if (st.st_dev, st.st_ino) not in self._submitted:
                self.submit(Path(w))

    def _add(self, wheel: Path, fut: Future) -> None:
        with self._lock:
            self._futures.append((wheel.name, fut))

    def _plan(self, wheel: Path, fd: int) -> None:
        """Read the listing and RECORD (the cheap checks), then hand the members to the pool in tasks."""
        with self._lock:
            self._unread.pop(fd, None)
        try:
            if self._stop.is_set():
                raise _Stopped
            members = read_directory(fd)
            if members is None:
                _check_by_zipfile(wheel, fd)
                tasks = []
            else:
                by_name = {m[0]: m for m in members}
                rows = _rows(wheel, _record_text(wheel, fd, by_name[_record_name(wheel, by_name)]),
                             [m[0] for m in members])
                tasks = _tasks([m for m in members if m[0] in rows])
        except BaseException:
            os.close(fd)
            raise
        if not tasks:
            os.close(fd)
            return
        w = _Wheel(wheel, fd, len(tasks))
        for batch in tasks:
            self._add(wheel, self._pool.submit(self._run, w, batch, rows))

    def _run(self, w: _Wheel, batch: list[Member], rows: dict[str, tuple[str, int]]) -> None:
        try:
            if not self._stop.is_set():
                _check_plain(w, batch, rows, self._inflater)
        finally:
            w.task_done()

    def wait(self) -> None:
        """Block until every submitted wheel is checked; raise the first failure (by wheel name)."""
        i = 0
        failed: list[tuple[str, BaseException]] = []
        while True:
            with self._lock:
                if i >= len(self._futures):
                    break
                batch = self._futures[i:]
            wait([f for _, f in batch])
            failed += [(name, f.exception()) for name, f in batch
                       if not f.cancelled() and f.exception() is not None]
            i += len(batch)
        if failed:
            raise min(failed, key=lambda x: x[0])[1]

    def close(self) -> None:
        """Stop the checks not begun (a stage that failed elsewhere) and let the running ones end."""
        self._stop.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for fd in self._unread.values():
                os.close(fd)
            self._unread.clear()
