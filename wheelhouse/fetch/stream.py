"""One file, one stream: download into ``<cache>/partial/<key>.part``, resuming with ``Range``.

The ``.part`` file's size is the truth about what was received: received blocks are written with
one unbuffered ``writev`` per ~1 MiB or 50 ms (``body_batches``), so a process killed at any point keeps
all it had but those last milliseconds, and the next run asks for the rest. The hash is computed while the bytes stream to disk; a resumed
download hashes only the bytes it already had. The cache entry is held with ``entry_lock`` for
the whole download: a second process wanting the same file waits, then reuses the first's.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from wheelhouse.faults import checkpoint
from wheelhouse.index.http import HttpError

from .cache import HashMismatch, private, cached_path, commit_part, entry_lock, is_no_space, partial_path, update_hash
from .session import DiskFull, FetchError, FetchItem, Session, body_batches, write_blocks

__all__ = ["download", "entry_key"]


def entry_key(item: FetchItem) -> str:
    """The cache-entry name of an item: its sha256, else one derived from its URL."""
    return item.sha256 or "url-" + hashlib.sha256(item.url.encode()).hexdigest()


def download(item: FetchItem, s: Session, counted: int = 0) -> Path:
    """Download one item into the cache, resuming a partial file; return the cache path. ``counted``: bytes of
    it this run has on the bar already (its ranges, given up on: the one stream counts only beyond them)."""
    with entry_lock(s.cache, entry_key(item), cancelled=s.cancel.is_set,
                    on_wait=lambda: s.note(f"{item.filename}: another wh is downloading it; waiting")):
        if item.sha256 and cached_path(s.cache, item.sha256).exists():
            s.advance(max(0, (item.size or 0) - counted))  # (on the bar as this run's: its total counted it)
            return cached_path(s.cache, item.sha256)  # (the other one's; verified when copied out)
        part = partial_path(s.cache, entry_key(item))
        part.parent.mkdir(parents=True, exist_ok=True)
        try:
            return _download_locked(item, part, s, counted)
        except OSError as exc:
            if is_no_space(exc):
                part.unlink(missing_ok=True)  # the partial that filled the disk goes
                raise DiskFull(part, [part.name]) from exc
            raise FetchError(item.url, f"writing {part}: {exc}", hint="check the cache folder (--cache-dir) and re-run") from exc


def _download_locked(item: FetchItem, part: Path, s: Session, already: int = 0) -> Path:
    fresh_restarts = 0
    attempt = 0
    counted = [already]  # bytes of the file this run has on the bar: a retry's resume or restart counts only beyond
    while True:
        s.check()
        have = part.stat().st_size if part.exists() else 0
        if item.size is not None and have >= item.size:
            # Complete or overlong leftovers from a crash between write and rename: verify from zero.
            part.unlink()
            have = 0
        try:
            resumed, actual, total = _stream(item, part, have, s, counted)
        except HttpError as exc:
            s.check()
            if exc.status == 416 and have:
                part.unlink(missing_ok=True)  # the partial no longer fits the file: start over
                continue
            if exc.status is not None and exc.status not in (200, 206) and not exc.received:
                part.unlink(missing_ok=True)
                raise FetchError(item.url, f"HTTP {exc.status} {exc.reason}", hint=exc.hint) from exc
            attempt += 1
            if attempt > s.retries:
                raise FetchError(item.url, f"{exc.reason} (after {s.retries} retries; the partial file is kept for the next run)") from exc
            kept = part.stat().st_size if part.exists() else 0
            s.note(f"retrying {item.filename}: {exc.reason}; resuming from byte {kept}")
            s.pause(attempt)
            continue
        if item.size is not None and total < item.size:
            attempt += 1  # the body ended early without an error: resume
            if attempt > s.retries:
                raise FetchError(item.url, f"got {total} of {item.size} bytes after {s.retries} retries")
            continue
        if item.sha256 and actual != item.sha256:
            part.unlink(missing_ok=True)
            if resumed and fresh_restarts == 0:
                # The bytes kept from an earlier attempt may be what is wrong: try once from zero.
                fresh_restarts += 1
                s.note(f"{item.filename}: resumed file did not verify; downloading it again from the start")
                continue
            raise HashMismatch(item.url, item.sha256, actual)
        return commit_part(s.cache, part, actual)


def _stream(item: FetchItem, part: Path, have: int, s: Session, counted: list[int]) -> tuple[bool, str, int]:
    """Append the rest of the file to ``part``; return (resumed, sha256 of the whole, size). ``counted[0]``:
    the bytes of it already on the bar (a retry's resumed or restarted bytes are not counted twice)."""

    def count(upto: int) -> None:
        if upto > counted[0]:
            s.advance(upto - counted[0])
            counted[0] = upto

    h = hashlib.sha256()
    headers = {"Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    with s.client.stream(item.url, headers) as resp:
        resumed = have > 0 and resp.status == 206
        if resumed:
            update_hash(h, part)  # hash what is already on disk; the rest is hashed as it streams
            count(have)
            mode = "ab"
        else:
            mode = "wb"  # a 200 answer to a Range request carries the whole file: start clean
            have = 0
        total = have
        # Unbuffered: each batch of blocks is one writev(2), on disk (in the page cache) when it returns.
        # With a known size, one byte more than promised is read: enough to fail, never more.
        limit = None if item.size is None else item.size - total + 1
        with open(part, mode, buffering=0, opener=private) as out:
            for blocks, n in body_batches(resp, limit):
                checkpoint("fetch.write")
                write_blocks(out.fileno(), blocks)
                for block in blocks:
                    h.update(block)
                total += n
                count(total)
                s.check()
    return resumed, h.hexdigest(), total
