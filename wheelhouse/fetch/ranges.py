"""Large files as several ``Range`` requests in parallel, written in place into one file.

One TCP stream rarely fills a fast link, and a closure's time is set by its biggest wheel
(torch, cublas: 400-900 MB). A file of at least two segments is split into byte ranges, all
written with ``pwrite`` at their own offsets into ONE preallocated file, ``<key>.part.body``: there
is no join pass (on a 1.2 GB set the join was one more read and write of every byte).

How far each range got is recorded in ``<key>.part.have``: one little-endian u64 per range,
rewritten (8 bytes, one ``pwrite``) after each block's own ``pwrite`` returned, so the record never
claims a byte the process had not written: a process killed at any moment keeps every byte it
recorded, and the next run asks each range for the rest. ``<key>.part.json`` records the split,
written last when a download starts, so a layout on disk means body and record are there.

A connection that lags is not waited for: when a connection is idle and nothing is queued, the
unfinished range with the most bytes left is split (``split_range``), its second half handed to the
idle connection and the running transfer cut at the new end. Per-connection speed varies several
fold on a shared link (one 53 MB range at 13 MB/s beside others at 33 MB/s), and without the split
the slowest range's tail was the run's last seconds (a traced 2.24 s tail became 0.31 s). A split is
recorded (layout version 3, the new range appended) before its range is asked for; a layout is read in
offset order, not list order.

The sha256 is computed while the bytes arrive, in file order: a block that extends the hashed
prefix is hashed from memory; once a range completes, the bytes its successor already wrote are
read back (page cache) and hashed by the thread that is free. When the last range lands the digest
is ready, checked, and the body renamed into the cache; nothing is named before it verified.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from wheelhouse.atomic import write_atomic
from wheelhouse.faults import checkpoint
from wheelhouse.index.http import HttpError

from .cache import HashMismatch, commit_part, is_no_space, partial_path, remove_part_files, try_entry_lock
from .session import DiskFull, FetchError, FetchItem, Session, body_batches, write_blocks
from .spans import Spans, cut_blocks

__all__ = ["Segmented", "NoRanges", "KeptBytesUnverified", "plan_segments", "fetch_range", "finish_segmented",
           "bytes_kept", "split_range", "trim_preallocation", "SEGMENT_MIN"]

SEGMENT_MIN = 32 << 20
# 1: one file per range, joined at the end (those leftovers are thrown away); 2: ranges in offset order;
# 3: a range was split, the new one appended (a wh that reads only 2 starts such a download again).
_LAYOUT_VERSION = 2
_LAYOUT_SPLIT = 3
_U64 = struct.Struct("<Q")
_READ_BACK = 8 << 20  # catching up the hash: reads of the page cache, few and large


class NoRanges(Exception):
    """The server answered a Range request with the whole file: fall back to one stream."""


class KeptBytesUnverified(NoRanges):
    """The file did not verify and part of it was kept from an earlier run (a power cut can leave
    a record ahead of its bytes): it is downloaded again from the start, once, as one stream."""


@dataclass(eq=False)  # identity: a download in progress is one thing
class Segmented:
    """A segmented download in progress: its ranges (``spans``; ``have[i]``: bytes of range ``i``
    written and recorded), its files, and the running hash."""

    item: FetchItem
    part: Path  # <key>.part: the names of this download's files derive from it
    lock_fd: int
    spans: Spans = field(default_factory=Spans)
    no_ranges: bool = False
    remaining: int = 0
    resumed: bool = False  # some bytes came from an earlier run
    body_fd: int = -1
    record_fd: int = -1
    # The running hash of bytes [0, hashed); ``hashing``: one thread is reading back the file.
    sha: "hashlib._Hash" = field(default_factory=hashlib.sha256)
    hashed: int = 0
    hashing: bool = False
    guard: threading.Condition = field(default_factory=threading.Condition)

    @property
    def segments(self) -> list[tuple[int, int]]:
        return self.spans.segments

    @property
    def have(self) -> list[int]:
        return self.spans.have

    @property
    def layout(self) -> Path:
        return self.part.with_name(self.part.name + ".json")

    @property
    def body(self) -> Path:
        return self.part.with_name(self.part.name + ".body")

    @property
    def record(self) -> Path:
        return self.part.with_name(self.part.name + ".have")

    def on_disk(self) -> int:
        return sum(self.have)

    def discard(self) -> None:
        """Remove every file of this download (a hash mismatch, or the server ignores ranges)."""
        self._close_files()
        remove_part_files(self.part)

    def release(self) -> None:
        """Let go of the entry. A download that did not finish (Ctrl-C, a failure) first gives back the
        blocks it reserved and never wrote (``trim_preallocation``): what was received is kept."""
        if self.lock_fd >= 0 and self.body.exists():
            trim_preallocation(self)
        self._close_files()
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1

    def _close_files(self) -> None:
        for name in ("body_fd", "record_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


def plan_segments(item: FetchItem, cache: Path, segment: int) -> Segmented | None:
    """The ranges of ``item`` and how far each got (from the progress record); None when
    another process holds the entry (the caller then waits for it through the one-stream path)."""
    assert item.sha256 and item.size
    fd = try_entry_lock(cache, item.sha256)
    if fd < 0:
        return None
    part = partial_path(cache, item.sha256)
    part.parent.mkdir(parents=True, exist_ok=True)
    job = Segmented(item, part, fd)
    try:
        loaded = _load_layout(job)
        if loaded is None:
            _new_layout(job, segment)
        job.body_fd = os.open(job.body, os.O_RDWR)
        job.record_fd = os.open(job.record, os.O_RDWR)
    except OSError as exc:
        job.release()
        if is_no_space(exc):
            job.discard()
            raise DiskFull(part, [part.name + ".*"]) from exc
        raise
    except BaseException:
        job.release()
        raise
    job.remaining = sum(1 for (a, b), h in zip(job.segments, job.have) if h < b - a)
    job.resumed = job.on_disk() > 0
    return job


def _load_layout(job: Segmented) -> bool | None:
    """Take the split and progress of an earlier run; None when there is none that fits."""
    try:
        data = json.loads(job.layout.read_text())
        if data.get("v") not in (_LAYOUT_VERSION, _LAYOUT_SPLIT) or data["size"] != job.item.size:
            return None
        segments = [(int(a), int(b)) for a, b in data["segments"]]
        if not _covers(segments, job.item.size or 0):
            return None
        raw = job.record.read_bytes()
        if len(raw) != _U64.size * len(segments) or job.body.stat().st_size != job.item.size:
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    have = [_U64.unpack_from(raw, _U64.size * i)[0] for i in range(len(segments))]
    # A record past its range cannot be right: that range starts again.
    job.spans = Spans.of(segments, [h if h <= b - a else 0 for h, (a, b) in zip(have, segments)])
    return True


def _covers(segments: list[tuple[int, int]], size: int) -> bool:
    """Whether the ranges, in offset order, cover [0, size) with no gap and no overlap (a range a split
    took whole, its request cut before a byte came, is empty)."""
    pos = 0
    for a, b in sorted(segments):
        if a != pos or b < a:
            return False
        pos = b
    return pos == size


def _new_layout(job: Segmented, segment: int) -> None:
    size = job.item.size or 0
    segments = [(a, min(size, a + segment)) for a in range(0, size, segment)]
    for stale in job.part.parent.glob(job.part.name + ".*"):  # files of another split or version
        stale.unlink(missing_ok=True)
    # A single-stream partial from an earlier run is a valid prefix: it becomes the body, in place.
    prefix = job.part.stat().st_size if job.part.exists() else 0
    if 0 < prefix < size:
        os.replace(job.part, job.body)
    else:
        prefix = 0
        job.part.unlink(missing_ok=True)
    fd = os.open(job.body, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, size)  # (a prefix keeps its bytes; the rest reads as zeros until written)
        # Reserve the blocks now: a disk too small fails here, before a byte is downloaded.
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
    job.spans = Spans.of(segments, [max(0, min(b, prefix) - a) for a, b in segments])
    write_atomic(job.record, b"".join(_U64.pack(h) for h in job.have), mode=0o600)
    write_atomic(job.layout, json.dumps({"v": _LAYOUT_VERSION, "size": size, "segments": job.segments}), mode=0o600)


# linux/falloc.h: free the blocks of a byte range, the file keeping its length (they read as zeros).
_PUNCH_HOLE, _KEEP_SIZE = 0x02, 0x01


def _punch_hole(fd: int, offset: int, length: int) -> bool:
    """Give the blocks of [offset, offset + length) back to the filesystem; False where it cannot."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        call = libc.fallocate
    except (OSError, AttributeError):
        return False
    call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    return call(fd, _PUNCH_HOLE | _KEEP_SIZE, offset, length) == 0


def trim_preallocation(job: Segmented) -> int:
    """An unfinished download keeps the bytes it received, not the blocks ``_new_layout`` reserved for the
    rest (issue 32: Ctrl-C after 6 s left 2.7 GB of reservations). Each range's unwritten stretch is
    punched out of the body; where the filesystem cannot punch holes, the body is cut to its received
    prefix from byte 0 and kept as a one-stream partial (what ``_new_layout`` resumes from). Only once
    every writer has stopped. Returns the bytes kept."""
    try:
        with job.guard:
            segments = list(job.segments)
        raw = job.record.read_bytes()  # what the next run will trust: the record on disk
        have = [_U64.unpack_from(raw, _U64.size * i)[0] if len(raw) >= _U64.size * (i + 1) else 0
                for i in range(len(segments))]
        spans = [((a, b), min(h, b - a)) for (a, b), h in zip(segments, have)]
        if not any(h for _, h in spans):  # nothing arrived: nothing to keep
            job.discard()
            return 0
        fd = job.body_fd if job.body_fd >= 0 else os.open(job.body, os.O_RDWR)
        try:
            if all(_punch_hole(fd, a + h, b - a - h) for (a, b), h in spans if h < b - a):
                return sum(h for _, h in spans)
            prefix = 0
            for (a, b), h in sorted(spans):
                if a != prefix:
                    break
                prefix = a + h
                if h < b - a:
                    break
            os.ftruncate(fd, prefix)
        finally:
            if fd != job.body_fd:
                os.close(fd)
        job._close_files()
        for path in (job.layout, job.record):
            path.unlink(missing_ok=True)
        if prefix:
            os.replace(job.body, job.part)
        else:
            job.body.unlink(missing_ok=True)
        return prefix
    except OSError:
        return 0  # (the files stay as they were: resumed, or removed by `wh cache prune`)


def bytes_kept(cache: Path, key: str) -> int:
    """How many bytes of the download ``key`` an earlier run left on disk (recorded ranges, or
    the one-stream partial's size): what the next run does not ask for again."""
    part = partial_path(cache, key)
    record = part.with_name(part.name + ".have")
    try:
        raw = record.read_bytes()
        return sum(_U64.unpack_from(raw, i)[0] for i in range(0, len(raw) - len(raw) % 8, 8))
    except FileNotFoundError:
        pass
    try:
        return part.stat().st_size
    except FileNotFoundError:
        return 0


def fetch_range(job: Segmented, idx: int, s: Session) -> Path | None:
    """Fetch one byte range; the worker that completes the last range verifies and files it."""
    try:
        _fetch_range(job, idx, s)
    except OSError as exc:
        if is_no_space(exc):
            s.cancel.set()  # the other ranges stop at their next block; then the files go (fetch_all)
            raise DiskFull(job.body, [job.part.name + ".*"], job) from exc
        raise FetchError(job.item.url, f"writing {job.body}: {exc}",
                         hint="check the cache folder (--cache-dir) and re-run") from exc
    with job.guard:
        job.remaining -= 1
        last = job.remaining == 0
    return finish_segmented(job, s) if last else None


def _fetch_range(job: Segmented, idx: int, s: Session) -> None:
    attempt = 0
    while True:
        with job.guard:  # (a split may move this range's end while it runs)
            a, b = job.segments[idx]
            start = a + job.have[idx]
        if start >= b:
            return
        s.check()
        if job.no_ranges:
            raise NoRanges()
        try:
            with s.client.stream(job.item.url, {"Range": f"bytes={start}-{b - 1}", "Accept-Encoding": "identity"}) as resp:
                if resp.status != 206:
                    job.no_ranges = True
                    raise NoRanges()
                for blocks, n in body_batches(resp, b - start):
                    kept = _write_blocks(job, idx, blocks, n)
                    s.advance(kept)
                    if kept < n:
                        break  # cut at a split: the rest is another range's (this connection is closed)
                    s.check()
        except HttpError as exc:
            s.check()
            if exc.status not in (None, 200, 206) and not exc.received:
                raise FetchError(job.item.url, f"HTTP {exc.status} {exc.reason}", hint=exc.hint) from exc
            attempt += 1
            if attempt > s.retries:
                raise FetchError(job.item.url, f"{exc.reason} (after {s.retries} retries; the partial file is kept for the next run)") from exc
            s.note(f"retrying {job.item.filename} bytes {start}-{b - 1}: {exc.reason}")
            s.pause(attempt)


def _write_blocks(job: Segmented, idx: int, blocks: list, n: int) -> int:
    """Write ``blocks`` at their offset (cut at the range's end, which a split may have moved), then
    record them, then hash them if they extend the prefix. Returns the bytes kept."""
    with job.guard:
        offset, kept = job.spans.claim(idx, n)  # a split now cuts beyond this block
    if kept < n:
        blocks, n = cut_blocks(blocks, kept), kept
    if n:
        checkpoint("fetch.write")
        write_blocks(job.body_fd, blocks, offset)
    with job.guard:
        done = job.spans.wrote(idx, n)
    # Only after the data's pwrite returned: the record never runs ahead of the bytes.
    os.pwrite(job.record_fd, _U64.pack(done), _U64.size * idx)
    checkpoint("fetch.range.recorded")
    _hash_prefix(job, offset, blocks)
    return n


def split_range(jobs: Sequence[Segmented], minimum: int) -> tuple[Segmented, int] | None:
    """Split an unfinished range (of any of ``jobs``) for an idle connection: the range with the most
    bytes left is cut in half, the running transfer stops at the new end and the rest becomes a new range
    (recorded before anyone asks for it). Returns (job, the new range's index); None where no range has
    ``2 * minimum`` bytes left (every new request risks the index's slow answer: pieces no smaller)."""
    best: tuple[Segmented, int, int] | None = None
    for job in jobs:
        for i, left in _ranges_left(job):
            if best is None or left > best[2]:
                best = (job, i, left)
    if best is None or best[2] < 2 * max(minimum, 1):
        return None
    job, i, _ = best
    with job.guard:  # (re-read under the lock: its writer moved on while the plan was made)
        if job.no_ranges or job.body_fd < 0:
            return None
        new = job.spans.split(i)
        if new is None:
            return None
        job.remaining += 1
        segments = list(job.segments)
    # The record grows by one (zero) entry, then the layout names the split: a process killed between
    # the two leaves a record that fits no layout, and that download starts again (never a wrong byte).
    # Neither write failing stops the split (it is already in memory, and the range's writer follows):
    # the record then fits no layout either, and a killed run starts this file again.
    try:
        os.pwrite(job.record_fd, _U64.pack(0), _U64.size * new)
        _write_layout(job, segments, _LAYOUT_SPLIT)
    except OSError:
        pass
    checkpoint("fetch.range.split")  # killed here: the split is on disk, its new range not yet asked for
    return job, new


def _ranges_left(job: Segmented) -> list[tuple[int, int]]:
    """(index, bytes left) of the ranges a split may cut; none for a download that cannot be split now
    (the server ignores ranges, or its files are closed)."""
    with job.guard:
        if job.no_ranges or job.body_fd < 0 or job.record_fd < 0:
            return []
        return job.spans.open_ranges()


def _write_layout(job: Segmented, segments: list[tuple[int, int]], version: int) -> None:
    """Replace the layout (temp name, then rename; not synced: a layout lost to a power cut, or
    empty, fits no record, and that download starts again)."""
    # (``<key>.part.json.<pid>``: a leftover of a killed run goes with the download's files, or with
    # fetch_all's sweep of stale sidecars.)
    tmp = job.layout.with_name(f"{job.layout.name}.{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "w") as fh:
            fh.write(json.dumps({"v": version, "size": job.item.size, "segments": segments}))
        os.replace(tmp, job.layout)
    finally:
        tmp.unlink(missing_ok=True)


def _hash_prefix(job: Segmented, offset: int = -1, blocks: list[bytes] = ()) -> None:
    """Extend the running hash: ``blocks`` (just written at ``offset``) from memory when they are next
    in file order, then whatever complete prefix is already on disk, read back from the file.
    One thread at a time reads back; a writer that finds one at work leaves its bytes to it."""
    with job.guard:
        if not job.hashing and offset == job.hashed:
            for block in blocks:
                job.sha.update(block)
                job.hashed += len(block)
        if job.hashing or job.spans.prefix_end() <= job.hashed:
            return
        job.hashing = True
    buf = memoryview(bytearray(_READ_BACK))  # one buffer per catch-up, not a new object per read
    try:
        while True:
            with job.guard:
                end, pos = job.spans.prefix_end(), job.hashed
                if end <= pos:
                    return
            while pos < end:
                got = os.preadv(job.body_fd, [buf[: min(_READ_BACK, end - pos)]], pos)
                if not got:
                    raise OSError(f"{job.body}: ends at byte {pos}, expected {job.item.size}")
                job.sha.update(buf[:got])
                pos += got
                with job.guard:
                    job.hashed = pos
    finally:
        with job.guard:
            job.hashing = False
            job.guard.notify_all()


def finish_segmented(job: Segmented, s: Session) -> Path:
    """Complete the hash (it ran along with the download), verify, and file the body in the cache."""
    size = job.item.size or 0
    try:
        while True:
            s.check()
            _hash_prefix(job)
            with job.guard:
                if job.hashed >= size:
                    break
                if job.hashing:  # another thread is reading back the last stretch
                    job.guard.wait(0.2)
    except OSError as exc:
        raise FetchError(job.item.url, f"reading back {job.body}: {exc}",
                         hint="check the cache folder (--cache-dir) and re-run") from exc
    actual = job.sha.hexdigest()
    if actual != job.item.sha256:
        job.discard()
        if job.resumed:
            raise KeptBytesUnverified()
        raise HashMismatch(job.item.url, job.item.sha256 or "", actual)
    job._close_files()  # the entry's lock stays held until the body has its cache name
    final = commit_part(s.cache, job.body, actual)
    job.discard()
    return final
