"""What every download of one ``fetch_all`` shares: the items, the error, the client it needs,
serialised progress, and the cancel flag that Ctrl-C sets."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ContextManager, Iterator, Mapping, Protocol

from wheelhouse.errors import WhError
from wheelhouse.progress import Reporter
from wheelhouse.redact import redact

__all__ = ["FetchItem", "FetchError", "Client", "Session", "Cancelled", "DiskFull", "CHUNK", "batches", "body_batches",
           "write_blocks"]

CHUNK = 1 << 20  # 1 MiB reads: large buffers keep a fast link saturated with few syscalls
# A TLS socket hands out one record (<= 16 KiB) per read: writing, hashing and counting each one
# was ~100k Python iterations and 200k syscalls per 1.5 GB. Received blocks are gathered into one
# vectored write of up to BATCH bytes, or what arrived within BATCH_SECONDS on a slow link (a
# process killed at any moment loses at most that: the bytes received and not yet written).
BATCH = 1 << 20
BATCH_SECONDS = 0.05


def batches(chunks: Iterator[bytes], limit: int | None = None) -> Iterator[tuple[list[bytes], int]]:
    """Group a response's blocks into (blocks, their total bytes) of about BATCH bytes, stopping
    after ``limit`` bytes (the excess cut off). A body that breaks off first hands out what it had
    received, then raises: those bytes are written and kept for the resume."""
    pending: list[bytes] = []
    n, total, since = 0, 0, time.monotonic()
    it = iter(chunks)
    while limit is None or total < limit:
        try:
            block = next(it)
        except StopIteration:
            break
        except BaseException:
            if pending:
                yield pending, n
            raise
        if limit is not None and total + len(block) > limit:
            block = block[: limit - total]
        pending.append(block)
        n += len(block)
        total += len(block)
        now = time.monotonic()
        if n >= BATCH or now - since >= BATCH_SECONDS:
            yield pending, n
            pending, n, since = [], 0, now
    if pending:
        yield pending, n
    if limit is not None and total >= limit:
        # Read the body's end: a response read to its end leaves its connection in the keep-alive
        # pool for the next request (a range ends exactly at its limit). Anything more is excess,
        # and an error now costs only the connection: every byte wanted has arrived.
        try:
            next(it, None)
        except Exception:  # noqa: BLE001
            pass


def body_batches(resp, limit: int | None = None) -> Iterator[tuple[list, int]]:
    """A response's body as ``batches`` hands it out. From a socket the client reads it straight
    into one reused buffer (``batches_into``: no ``bytes`` object per TLS record); each batch is
    then a view of that buffer, valid until the next one is asked for: write and hash it first."""
    into = getattr(resp, "batches_into", None)
    if into is None:  # file:// and other sources: blocks as they come
        yield from batches(resp.iter_chunks(CHUNK), limit)
        return
    for view in into(bytearray(BATCH), limit, BATCH_SECONDS):
        yield [view], len(view)


def write_blocks(fd: int, blocks: list[bytes], offset: int | None = None) -> None:
    """Write every byte of ``blocks`` with one vectored write (at ``offset``, else at the end)."""
    while blocks:
        n = os.pwritev(fd, blocks, offset) if offset is not None else os.writev(fd, blocks)
        if offset is not None:
            offset += n
        while blocks and n >= len(blocks[0]):  # drop what was written; a short write resumes mid-block
            n -= len(blocks[0])
            blocks = blocks[1:]
        if n:
            blocks = [memoryview(blocks[0])[n:], *blocks[1:]]


@dataclass(frozen=True)
class FetchItem:
    """One file to fetch: where from, its final name, and the sha256 it must have."""

    url: str
    filename: str
    sha256: str | None  # None: the source publishes no hash; it is computed and recorded, not checked
    size: int | None = None


class FetchError(WhError):
    """A download failed after its retries (or could not start at all)."""

    code = "fetch-failed"

    def __init__(self, url: str, reason: str, *, hint: str | None = None):
        super().__init__(
            f"could not download {redact(url)}: {reason}",
            hint=hint or "check the index URL and the network, then re-run; finished downloads are kept in the cache",
        )
        self.url = url
        self.reason = reason


class Cancelled(Exception):
    """The run was interrupted (Ctrl-C): stop, keep what is on disk."""


class DiskFull(Exception):
    """A write hit ENOSPC; ``path`` is where, ``removed`` the unfinished files given up."""

    def __init__(self, path: Path, removed: list[str], job=None):
        super().__init__(str(path))
        self.path = path
        self.removed = removed
        self.job = job  # a ranged download to discard once its writers stopped


class Client(Protocol):
    """What fetch needs from an HTTP client (wheelhouse.index.http.HttpClient): a streamed GET
    that understands ``Range`` and raises HttpError (with ``status``) on failure."""

    def stream(self, url: str, headers: Mapping[str, str] | None = None) -> ContextManager: ...


@dataclass
class Session:
    """One fetch_all run: cache, client, retry policy, progress and the cancel flag."""

    cache: Path
    client: Client
    reporter: Reporter
    task: str
    retries: int = 4
    backoff: float = 0.5
    cancel: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def advance(self, n: int) -> None:
        with self._lock:
            self.reporter.advance(self.task, n)

    def note(self, message: str) -> None:
        with self._lock:
            self.reporter.note(message)

    def check(self) -> None:
        if self.cancel.is_set():
            raise Cancelled()

    def pause(self, attempt: int) -> None:
        """Back off before retry ``attempt`` (1-based); returns at once when cancelled."""
        if self.cancel.wait(self.backoff * (2 ** (attempt - 1))):
            raise Cancelled()
