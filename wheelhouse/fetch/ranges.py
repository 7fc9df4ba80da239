"""Large files as several ``Range`` requests in parallel, each range in its own partial file.

One TCP stream rarely fills a fast link, and a closure's time is set by its biggest wheel
(torch, cublas: 400-900 MB). A file of at least two segments is split into byte ranges; range
``i`` is appended to ``<key>.part.<i>``, unbuffered, as its bytes arrive, so the size of that file
IS how far the range got: a process killed at any moment keeps every byte received, and the next
run asks each range for the rest (nothing is checkpointed, so nothing lags). ``<key>.part.json``
records only the split, written once. When every range is complete they are joined into one file
while it is hashed (one pass), verified, and filed in the cache; then the range files go.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from wheelhouse.atomic import write_atomic
from wheelhouse.faults import checkpoint
from wheelhouse.index.http import HttpError

from .cache import HashMismatch, private, commit_part, is_no_space, partial_path
from .session import CHUNK, DiskFull, FetchError, FetchItem, Session

__all__ = ["Segmented", "NoRanges", "plan_segments", "fetch_range", "finish_segmented", "SEGMENT_MIN"]

SEGMENT_MIN = 32 << 20


class NoRanges(Exception):
    """The server answered a Range request with the whole file: fall back to one stream."""


@dataclass
class Segmented:
    """A segmented download in progress; ``have[i]``: bytes of range ``i`` on disk."""

    item: FetchItem
    part: Path  # <key>.part: the joined file, before it gets its cache name
    segments: list[tuple[int, int]]
    have: list[int]
    lock_fd: int
    no_ranges: bool = False
    remaining: int = 0
    guard: threading.Lock = field(default_factory=threading.Lock)

    @property
    def layout(self) -> Path:
        return self.part.with_name(self.part.name + ".json")

    def range_file(self, i: int) -> Path:
        return self.part.with_name(f"{self.part.name}.{i}")

    def on_disk(self) -> int:
        return sum(self.have)

    def discard(self) -> None:
        """Remove every file of this download (a hash mismatch, or the server ignores ranges)."""
        for path in self.part.parent.glob(self.part.name + ".*"):  # range files, the layout
            path.unlink(missing_ok=True)
        self.part.unlink(missing_ok=True)

    def release(self) -> None:
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1


def _try_lock(cache: Path, key: str) -> int:
    folder = Path(cache) / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return -1
    return fd


def plan_segments(item: FetchItem, cache: Path, segment: int) -> Segmented | None:
    """The ranges of ``item`` and how far each got (from the range files' sizes); None when
    another process holds the entry (the caller then waits for it through the one-stream path)."""
    assert item.sha256 and item.size
    fd = _try_lock(cache, item.sha256)
    if fd < 0:
        return None
    part = partial_path(cache, item.sha256)
    part.parent.mkdir(parents=True, exist_ok=True)
    job = Segmented(item, part, [], [], fd)
    try:
        job.segments = _load_layout(job) or _new_layout(job, segment)
        job.have = [_range_have(job, i) for i in range(len(job.segments))]
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
    return job


def _load_layout(job: Segmented) -> list[tuple[int, int]] | None:
    try:
        data = json.loads(job.layout.read_text())
        if data["size"] == job.item.size:
            return [(int(a), int(b)) for a, b in data["segments"]]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _new_layout(job: Segmented, segment: int) -> list[tuple[int, int]]:
    size = job.item.size or 0
    segments = [(a, min(size, a + segment)) for a in range(0, size, segment)]
    for stale in job.part.parent.glob(job.part.name + ".*"):  # range files of another split
        if stale != job.layout:
            stale.unlink(missing_ok=True)
    # A single-stream partial from an earlier run is a valid prefix: it becomes the ranges' start.
    prefix = job.part.stat().st_size if job.part.exists() else 0
    if 0 < prefix < size:
        with open(job.part, "rb") as src:
            for i, (a, b) in enumerate(segments):
                if a >= prefix:
                    break
                src.seek(a)
                with open(job.range_file(i), "wb", opener=private) as out:
                    out.write(src.read(min(b, prefix) - a))
    job.part.unlink(missing_ok=True)
    write_atomic(job.layout, json.dumps({"size": size, "segments": segments}), mode=0o600)
    return segments


def _range_have(job: Segmented, i: int) -> int:
    a, b = job.segments[i]
    path = job.range_file(i)
    try:
        have = path.stat().st_size
    except FileNotFoundError:
        return 0
    if have > b - a:  # more than the range: the excess cannot be right
        os.truncate(path, b - a)
        have = b - a
    return have


def fetch_range(job: Segmented, idx: int, s: Session) -> Path | None:
    """Fetch one byte range; the worker that completes the last range joins and verifies."""
    try:
        _fetch_range(job, idx, s)
    except OSError as exc:
        if is_no_space(exc):
            s.cancel.set()  # the other ranges stop at their next block; then the files go (fetch_all)
            raise DiskFull(job.range_file(idx), [job.part.name + ".*"], job) from exc
        raise FetchError(job.item.url, f"writing {job.range_file(idx)}: {exc}",
                         hint="check the cache folder (--cache-dir) and re-run") from exc
    with job.guard:
        job.remaining -= 1
        last = job.remaining == 0
    return finish_segmented(job, s) if last else None


def _fetch_range(job: Segmented, idx: int, s: Session) -> None:
    a, b = job.segments[idx]
    attempt = 0
    while job.have[idx] < b - a:
        s.check()
        if job.no_ranges:
            raise NoRanges()
        start = a + job.have[idx]
        try:
            with s.client.stream(job.item.url, {"Range": f"bytes={start}-{b - 1}", "Accept-Encoding": "identity"}) as resp:
                if resp.status != 206:
                    job.no_ranges = True
                    raise NoRanges()
                with open(job.range_file(idx), "ab", buffering=0, opener=private) as fh:  # one write(2) per block
                    for block in resp.iter_chunks(CHUNK):
                        s.check()
                        block = block[: (b - a) - job.have[idx]]
                        checkpoint("fetch.write")
                        fh.write(block)
                        job.have[idx] += len(block)
                        s.advance(len(block))
                        if job.have[idx] >= b - a:
                            break
        except HttpError as exc:
            s.check()
            if exc.status not in (None, 200, 206) and not exc.received:
                raise FetchError(job.item.url, f"HTTP {exc.status} {exc.reason}", hint=exc.hint) from exc
            attempt += 1
            if attempt > s.retries:
                raise FetchError(job.item.url, f"{exc.reason} (after {s.retries} retries; the partial file is kept for the next run)") from exc
            s.note(f"retrying {job.item.filename} bytes {a + job.have[idx]}-{b - 1}: {exc.reason}")
            s.pause(attempt)


def finish_segmented(job: Segmented, s: Session) -> Path:
    """Join the ranges into ``<key>.part`` while hashing them, verify, and file it in the cache."""
    h = hashlib.sha256()
    try:
        with open(job.part, "wb", opener=private) as out:
            for i in range(len(job.segments)):
                with open(job.range_file(i), "rb") as src:
                    while True:
                        s.check()
                        block = src.read(CHUNK)
                        if not block:
                            break
                        checkpoint("fetch.join")
                        out.write(block)
                        h.update(block)
    except OSError as exc:
        job.part.unlink(missing_ok=True)  # the ranges stay: the join is redone next time
        if is_no_space(exc):
            raise DiskFull(job.part, [job.part.name]) from exc
        raise
    except BaseException:
        job.part.unlink(missing_ok=True)
        raise
    actual = h.hexdigest()
    if actual != job.item.sha256:
        job.discard()
        raise HashMismatch(job.item.url, job.item.sha256 or "", actual)
    final = commit_part(s.cache, job.part, actual)
    job.discard()
    return final
