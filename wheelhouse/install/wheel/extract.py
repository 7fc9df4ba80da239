"""Parallel extraction of planned wheel files, each hashed as it is written.

All wheels' files are extracted by one pool of threads (zlib, hashlib and file
writes release the GIL); every file is hashed while it is written and compared
with its RECORD sha256 and size. The first failure stops the other threads at
their next file; the caller rolls back.
"""

from __future__ import annotations

import hashlib
import os
import threading
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from wheelhouse.faults import checkpoint
from .launchers import shebang
from wheelhouse.progress import Reporter
from .plan import PlannedFile, WheelPlan
from .record import RecordMismatch, UnpackError, record_digest

__all__ = ["create_new", "extract_plans"]

_READ = 4 << 20


def create_new(dest: str, mode: int) -> int:
    """A descriptor on a new file at ``dest`` (an existing one is unlinked first, never overwritten)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(dest, flags, mode)
    except FileExistsError:
        # Never write into an existing inode: a running process may have it mapped.
        os.unlink(dest)
        return os.open(dest, flags, mode)


class _Archives:
    """One read-only descriptor per wheel, shared by all threads (``os.pread`` has no file position)."""

    def __init__(self) -> None:
        self._fds: dict[Path, int] = {}
        self._lock = threading.Lock()

    def fd(self, path: Path) -> int:
        with self._lock:
            fd = self._fds.get(path)
            if fd is None:
                fd = self._fds[path] = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            return fd

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


def _raw_chunks(fd: int, pos: int, left: int):
    """``left`` bytes of the archive from ``pos``, in reads of at most ``_READ``."""
    while left > 0:
        chunk = os.pread(fd, min(left, _READ), pos)
        if not chunk:
            break
        pos += len(chunk)
        left -= len(chunk)
        yield chunk


def _member_chunks(fd: int, wheel: Path, m: PlannedFile):
    """The member's uncompressed bytes, in pieces. Raw inflate over pread: no per-read Python
    buffering (ZipExtFile's is ~1.6x slower), and no CRC -- the RECORD sha256 checks every byte."""
    header = os.pread(fd, 30, m.offset)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise UnpackError(f"{wheel.name}: bad local header for {m.name}", hint="the wheel is damaged; re-stage it")
    name_len, extra_len = int.from_bytes(header[26:28], "little"), int.from_bytes(header[28:30], "little")
    pos = m.offset + 30 + name_len + extra_len
    if m.compress_type == zipfile.ZIP_STORED:
        yield from _raw_chunks(fd, pos, m.compress_size)
        return
    if m.compress_type == zipfile.ZIP_DEFLATED:
        # Bounded output per call: 4 MiB of a zip bomb must not inflate to gigabytes in memory at once.
        inflater = zlib.decompressobj(-15)
        for chunk in _raw_chunks(fd, pos, m.compress_size):
            while chunk:
                out = inflater.decompress(chunk, _READ)
                if out:
                    yield out
                chunk = inflater.unconsumed_tail
        tail = inflater.flush()
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
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _too_big(plan: WheelPlan, m: PlannedFile) -> RecordMismatch:
    return RecordMismatch(f"{plan.wheel.name}: {m.name} inflates beyond its declared {m.size} bytes",
                          hint="the wheel is damaged or a zip bomb; remove it from the wheelhouse and re-run `wh stage`")


class _Counter:
    def __init__(self) -> None:
        self.n = 0
        self._lock = threading.Lock()

    def bump(self) -> int:
        with self._lock:
            self.n += 1
            return self.n


def _extract(plan: WheelPlan, members: list[PlannedFile], python: str, archives: _Archives, reporter: Reporter,
             task: str, failed: threading.Event, on_written: Callable[[str], None] | None = None,
             counter: _Counter | None = None) -> None:
    src = archives.fd(plan.wheel)
    for m in members:
        if failed.is_set():
            return
        mode = 0o755 if (m.mode & 0o111 or m.script) else 0o644
        h = hashlib.sha256()
        size = 0
        if m.script:
            data = bytearray()
            for chunk in _member_chunks(src, plan.wheel, m):
                data += chunk
                if len(data) > m.size:
                    raise _too_big(plan, m)
            data = bytes(data)
            h.update(data)
            size = len(data)
            if data.startswith(b"#!python"):
                data = shebang(python) + (data.split(b"\n", 1)[1] if b"\n" in data else b"")
            chunks = [data]
        else:
            chunks = _member_chunks(src, plan.wheel, m)
        out = create_new(m.dest, mode)
        try:
            for chunk in chunks:
                if not m.script:
                    h.update(chunk)
                    size += len(chunk)
                    if size > m.size:  # enforced while streaming: a bomb never fills the disk
                        raise _too_big(plan, m)
                _write_all(out, chunk)
        finally:
            os.close(out)
        if size != m.size or record_digest(h.digest()) != m.digest:
            raise RecordMismatch(f"{plan.wheel.name}: {m.name} does not match its RECORD hash",
                                 hint="the wheel was altered after it was built; re-stage it with `wh stage`")
        reporter.advance(task, max(size, 1))
        if counter is not None:
            checkpoint(f"install.file.{counter.bump()}")
        if on_written is not None and m.dest.endswith(".py"):
            on_written(m.dest)


def _chunks(plans: list[WheelPlan], target_bytes: int) -> list[tuple[WheelPlan, list[PlannedFile]]]:
    out = []
    for plan in plans:
        todo = [m for m in plan.members if m.write]
        todo.sort(key=lambda m: -m.size)
        batch: list[PlannedFile] = []
        acc = 0
        for m in todo:
            batch.append(m)
            acc += m.size
            if acc >= target_bytes or len(batch) >= 400:
                out.append((plan, batch))
                batch, acc = [], 0
        if batch:
            out.append((plan, batch))
    # Biggest first so one huge wheel does not finish last on one thread.
    out.sort(key=lambda pb: -sum(m.size for m in pb[1]))
    return out


def extract_plans(plans: list[WheelPlan], python: str, *, jobs: int, total: int, reporter: Reporter, task: str,
                  on_written: Callable[[str], None] | None = None) -> None:
    """Write every planned file of ``plans`` (``write`` set) with ``jobs`` threads; raise the first error.

    The caller's transaction journaled every destination before this runs (a partial file is
    rolled back like a whole one).
    """
    archives = _Archives()
    counter = _Counter()
    failed = threading.Event()
    work = _chunks(plans, target_bytes=max(8 << 20, total // (jobs * 4)))

    def run(item):
        plan, members = item
        try:
            _extract(plan, members, python, archives, reporter, task, failed, on_written, counter)
        except BaseException:
            failed.set()
            raise

    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(run, item) for item in work]
            errors = [f.exception() for f in futures]
    finally:
        archives.close()
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
