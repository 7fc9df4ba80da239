"""Fetch: parallel, resumable, verified downloads into a content-addressed cache.

A file reaches its final name only after its sha256 matched. The cache keeps
finished files under ``<cache>/sha256/ab/abcdef...`` (so a second run, or a
second wheelhouse, downloads nothing) and unfinished ones under
``<cache>/partial/<sha256>.part`` (so an interrupted download continues with an
HTTP Range request instead of starting over). The hash is computed while the
bytes stream to disk, in one pass; a resumed download hashes only the bytes it
already had. Wheels reach the wheelhouse as hardlinks of the cache when the two
share a filesystem, else as copies. The cache itself is wheelhouse.fetch_cache;
this module is the downloader that fills it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager, Mapping, Protocol, Sequence

from wheelhouse.errors import WhError
from .cache import (
    HashMismatch,
    add_to_cache,
    cache_hit,
    cached_path,
    commit_part,
    default_cache_dir,
    partial_path,
    place,
    sha256_of,
    update_hash,
)
from wheelhouse.index.http import HttpClient, HttpError
from wheelhouse.progress import NullReporter, Reporter

__all__ = [
    "FetchItem",
    "FetchError",
    "HashMismatch",
    "Client",
    "default_cache_dir",
    "cached_path",
    "add_to_cache",
    "sha256_of",
    "fetch_all",
    "place",
]

_CHUNK = 1 << 20  # 1 MiB reads: large buffers keep a fast link saturated with few syscalls


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
            f"could not download {url}: {reason}",
            hint=hint or "check the index URL and the network, then re-run; finished downloads are kept in the cache",
        )
        self.url = url
        self.reason = reason


class Client(Protocol):
    """What fetch needs from an HTTP client (wheelhouse.http.HttpClient): a streamed GET
    that understands ``Range`` and raises HttpError (with ``status``) on failure."""

    def stream(self, url: str, headers: Mapping[str, str] | None = None) -> ContextManager: ...


class _Progress:
    """Serialises reporter calls from the worker threads."""

    def __init__(self, reporter: Reporter, task: str):
        self._reporter = reporter
        self._task = task
        self._lock = threading.Lock()

    def advance(self, n: int) -> None:
        with self._lock:
            self._reporter.advance(self._task, n)

    def note(self, message: str) -> None:
        with self._lock:
            self._reporter.note(message)


def _download(item: FetchItem, cache: Path, client: Client, progress: _Progress,
              retries: int, backoff: float) -> Path:
    """Download one item into the cache, resuming a partial file; return the cache path."""
    if item.sha256:
        final = cached_path(cache, item.sha256)
        if final.exists():
            return final
    part = partial_path(cache, item.sha256 or "url-" + hashlib.sha256(item.url.encode()).hexdigest())
    part.parent.mkdir(parents=True, exist_ok=True)
    fresh_restarts = 0
    attempt = 0
    while True:
        have = part.stat().st_size if part.exists() else 0
        if item.size is not None and have >= item.size:
            # Complete or overlong leftovers from a crash between write and rename: verify from zero.
            part.unlink()
            have = 0
        try:
            resumed, actual, total = _stream(item, part, have, client, progress)
        except HttpError as exc:
            if exc.status == 416 and have:
                part.unlink(missing_ok=True)  # the partial no longer fits the file: start over
                continue
            if exc.status is not None and exc.status != 200 and exc.status != 206 and not exc.received:
                part.unlink(missing_ok=True)
                raise FetchError(item.url, exc.reason if exc.status is None else f"HTTP {exc.status} {exc.reason}",
                                 hint=exc.hint) from exc
            attempt += 1
            if attempt > retries:
                raise FetchError(item.url, f"{exc.reason} (after {retries} retries; the partial file is kept for the next run)") from exc
            kept = part.stat().st_size if part.exists() else 0
            progress.note(f"retrying {item.filename}: {exc.reason}; resuming from byte {kept}")
            time.sleep(backoff * (2 ** (attempt - 1)))
            continue
        except OSError as exc:  # the local disk: not worth retrying
            raise FetchError(item.url, f"writing {part}: {exc}", hint="free disk space in the cache (--cache-dir) and re-run") from exc
        if item.size is not None and total < item.size:
            attempt += 1  # the body ended early without an error: resume
            if attempt > retries:
                raise FetchError(item.url, f"got {total} of {item.size} bytes after {retries} retries")
            continue
        if item.sha256 and actual != item.sha256:
            part.unlink(missing_ok=True)
            if resumed and fresh_restarts == 0:
                # The bytes kept from an earlier attempt may be what is wrong: try once from zero.
                fresh_restarts += 1
                progress.note(f"{item.filename}: resumed file did not verify; downloading it again from the start")
                continue
            raise HashMismatch(item.url, item.sha256, actual)
        return commit_part(cache, part, actual)


def _stream(item: FetchItem, part: Path, have: int, client: Client,
            progress: _Progress) -> tuple[bool, str, int]:
    """Append the rest of the file to ``part``; return (resumed, sha256 of the whole, size)."""
    h = hashlib.sha256()
    headers = {"Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    with client.stream(item.url, headers) as resp:
        resumed = have > 0 and resp.status == 206
        if resumed:
            update_hash(h, part)  # hash what is already on disk; the rest is hashed as it streams
            progress.advance(have)
            mode = "ab"
        else:
            mode = "wb"  # a 200 answer to a Range request carries the whole file: start clean
            have = 0
        total = have
        with open(part, mode) as out:
            for block in resp.iter_chunks(_CHUNK):
                out.write(block)
                h.update(block)
                total += len(block)
                progress.advance(len(block))
                if item.size is not None and total > item.size:
                    break  # more bytes than promised: it cannot verify
    return resumed, h.hexdigest(), total


# --- large files: several Range requests in parallel ------------------------------------------------
# One TCP stream rarely fills a fast link, and a closure's time is set by its biggest wheel
# (torch, cublas: 400-900 MB). Files of at least two segments are fetched as byte ranges
# written in place into the preallocated .part file; a sidecar (.part.json) records how far
# each range got, so an interrupted run resumes every range where it stopped. The sha256 is
# computed in one read of the finished file, before it gets its name.
SEGMENT_MIN = 32 << 20


class _NoRanges(Exception):
    """The server answered a Range request with the whole file: fall back to one stream."""


class _Segmented:
    """Per-file state of a segmented download, shared by the workers fetching its ranges."""

    def __init__(self, item: FetchItem, cache: Path, segment: int):
        self.item = item
        self.part = partial_path(cache, item.sha256 or "")
        self.sidecar = self.part.with_name(self.part.name + ".json")
        self.lock = threading.Lock()
        self.no_ranges = False
        self.part.parent.mkdir(parents=True, exist_ok=True)
        size = item.size or 0
        self.segments = self._load(size)
        if self.segments is None:
            have = self.part.stat().st_size if self.part.exists() else 0
            if have >= size:
                have = 0  # a whole-but-unverified leftover: start over
            # A single-stream partial from an earlier run is a valid prefix: keep it.
            self.segments = []
            for start in range(0, size, segment):
                end = min(size, start + segment)
                self.segments.append([start, end, min(end, max(start, have))])
            with open(self.part, "r+b" if self.part.exists() else "wb") as fh:
                fh.truncate(size)
            self.save()
        self.remaining = sum(1 for s in self.segments if s[2] < s[1])

    def _load(self, size: int):
        try:
            data = json.loads(self.sidecar.read_text())
            if data["size"] == size and self.part.stat().st_size == size:
                return [list(x) for x in data["segments"]]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def save(self) -> None:
        with self.lock:
            body = json.dumps({"size": self.item.size, "segments": self.segments})
        tmp = self.sidecar.with_name(self.sidecar.name + f".{threading.get_ident()}")
        tmp.write_text(body)
        os.replace(tmp, self.sidecar)

    def discard(self) -> None:
        self.part.unlink(missing_ok=True)
        self.sidecar.unlink(missing_ok=True)


def _fetch_range(job: _Segmented, idx: int, cache: Path, client: Client, progress: _Progress,
                 retries: int, backoff: float) -> Path | None:
    """Fetch one byte range of a segmented file; the worker that finishes the last range verifies it."""
    seg = job.segments[idx]
    attempt = 0
    while seg[2] < seg[1]:
        if job.no_ranges:
            raise _NoRanges()
        try:
            headers = {"Range": f"bytes={seg[2]}-{seg[1] - 1}", "Accept-Encoding": "identity"}
            with client.stream(job.item.url, headers) as resp:
                if resp.status != 206:
                    job.no_ranges = True
                    raise _NoRanges()
                with open(job.part, "r+b") as fh:
                    fh.seek(seg[2])
                    n = 0
                    for block in resp.iter_chunks(_CHUNK):
                        block = block[: seg[1] - seg[2]]
                        fh.write(block)
                        seg[2] += len(block)
                        progress.advance(len(block))
                        n += 1
                        if n % 16 == 0:
                            fh.flush()
                            job.save()
                        if seg[2] >= seg[1]:
                            break
        except HttpError as exc:
            if exc.status not in (None, 200, 206) and not exc.received:
                raise FetchError(job.item.url, f"HTTP {exc.status} {exc.reason}", hint=exc.hint) from exc
            attempt += 1
            if attempt > retries:
                job.save()
                raise FetchError(job.item.url, f"{exc.reason} (after {retries} retries; the partial file is kept for the next run)") from exc
            progress.note(f"retrying {job.item.filename} bytes {seg[2]}-{seg[1] - 1}: {exc.reason}")
            time.sleep(backoff * (2 ** (attempt - 1)))
        except OSError as exc:
            job.save()
            raise FetchError(job.item.url, f"writing {job.part}: {exc}", hint="free disk space in the cache (--cache-dir) and re-run") from exc
    job.save()
    with job.lock:
        job.remaining -= 1
        last = job.remaining == 0
    return _finish_segmented(job, cache) if last else None


def _finish_segmented(job: _Segmented, cache: Path) -> Path:
    actual = sha256_of(job.part)
    if actual != job.item.sha256:
        job.discard()
        raise HashMismatch(job.item.url, job.item.sha256 or "", actual)
    final = commit_part(cache, job.part, actual)
    job.sidecar.unlink(missing_ok=True)
    return final


def fetch_all(
    items: Sequence[FetchItem],
    dest: Path,
    cache: Path | None = None,
    jobs: int = 8,
    client: Client | None = None,
    reporter: Reporter | None = None,
    *,
    retries: int = 4,
    backoff: float = 0.5,
    task: str = "download",
    segment_size: int | None = None,
) -> list[Path]:
    """Fetch every item into ``dest`` (under its filename), verified, in parallel; paths in item order.

    Files already in the cache are not downloaded again. An item without a
    sha256 is downloaded and filed under the hash of what arrived (the caller
    records it; ``sha256_of(path)`` or the path's cache name tells it). On the first failure
    the other downloads are allowed to finish into the cache (so a re-run does
    not repeat them) and the error is raised; ``dest`` gets only verified files.
    Files of at least two ``segment_size`` (default SEGMENT_MIN) are fetched as
    parallel byte ranges when ``jobs`` > 1.
    """
    dest = Path(dest)
    cache = Path(cache) if cache else default_cache_dir()
    reporter = reporter or NullReporter()
    client = client or HttpClient(retries=retries, backoff=backoff)
    # One download per distinct file, however many times it is asked for (stack and bootstrap share some).
    unique = list({_key(it): it for it in items}.values())
    todo = [it for it in unique if not cache_hit(cache, it.sha256, it.size)]
    hits = len(unique) - len(todo)
    if hits:
        reporter.note(f"{hits} of {len(unique)} files already in the cache ({cache})")
    total = sum(it.size or 0 for it in todo)
    reporter.start(task, total=total or None, unit="B")
    progress = _Progress(reporter, task)
    failures: list[BaseException] = []
    got: dict[str, Path] = {}
    segment = max(SEGMENT_MIN if segment_size is None else segment_size, 1)
    try:
        whole = [it for it in todo if not (jobs > 1 and it.sha256 and it.size and it.size >= 2 * segment)]
        split = [_Segmented(it, cache, max(segment, -(-it.size // jobs))) for it in todo if it not in whole]
        for job in split:  # bytes kept from an earlier run count as done
            progress.advance(sum(s[2] - s[0] for s in job.segments))
        tasks = [(s[1] - s[2], "range", job, i) for job in split for i, s in enumerate(job.segments) if s[2] < s[1]]
        tasks += [(it.size or 0, "file", it, None) for it in whole]
        tasks.sort(key=lambda t: -t[0])  # biggest first: the longest transfers start at once
        finished = [job for job in split if job.remaining == 0]
        if tasks or finished:
            with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(tasks) or 1)), thread_name_prefix="wh-fetch") as pool:
                futures = {}
                for _, kind, what, idx in tasks:
                    if kind == "range":
                        fut = pool.submit(_fetch_range, what, idx, cache, client, progress, retries, backoff)
                    else:
                        fut = pool.submit(_download, what, cache, client, progress, retries, backoff)
                    futures[fut] = what
                for job in finished:  # every range was already on disk: only verify
                    futures[pool.submit(_finish_segmented, job, cache)] = job
                fallback: list[FetchItem] = []
                for fut in as_completed(futures):
                    what = futures[fut]
                    exc = fut.exception()
                    item = what.item if isinstance(what, _Segmented) else what
                    if isinstance(exc, _NoRanges):
                        if item not in fallback:
                            fallback.append(item)
                    elif exc is not None:
                        failures.append(exc)
                    elif fut.result() is not None:
                        got[_key(item)] = fut.result()
                for item in fallback:
                    next(j for j in split if j.item is item).discard()
                    progress.note(f"{item.filename}: the server ignores Range requests; one stream instead")
                fb = {pool.submit(_download, it, cache, client, progress, retries, backoff): it for it in fallback}
                for fut in as_completed(fb):
                    exc = fut.exception()
                    if exc is not None:
                        failures.append(exc)
                    else:
                        got[_key(fb[fut])] = fut.result()
    finally:
        reporter.finish(task, "")
    if failures:
        # Hash mismatches first: they matter more than a flaky connection.
        failures.sort(key=lambda e: not isinstance(e, HashMismatch))
        raise failures[0]
    dest.mkdir(parents=True, exist_ok=True)
    return [place(got.get(_key(it)) or cached_path(cache, it.sha256), dest / it.filename) for it in items]


def _key(item: FetchItem) -> str:
    return item.sha256 or "url:" + item.url
