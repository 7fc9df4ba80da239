"""Fetch: parallel, resumable, verified downloads into a content-addressed cache.

A file reaches its final name only after its sha256 matched, and a file taken from the cache
is hashed again before it is placed (wheelhouse.fetch.cache): a damaged entry is deleted and
downloaded again, never placed. The wheelhouse file is a hardlink to its cache entry, so each
downloaded byte is written once (why that is safe: wheelhouse.fetch.cache); across filesystems,
or where links are refused, it is a copy (a reflink where the filesystem shares blocks).

Downloads resume: one stream per file (wheelhouse.fetch.stream), or parallel byte ranges for
big files written in place into one file with a per-range progress record
(wheelhouse.fetch.ranges; at the end an idle connection takes over half of the range with the
most bytes left, so one lagging connection does not set the run's last seconds); received bytes are written within ~50 ms (wheelhouse.fetch.session's
batches), so a killed run keeps all but the last moment's. Two processes wanting one file take turns on an fcntl lock per cache entry.
A full disk is one clear error (no-space) with the unfinished files removed; Ctrl-C stops the
transfers at once (the client's sockets are shut) and keeps what is on disk.
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Sequence

from wheelhouse.cachedir import default_cache_dir
from wheelhouse.faults import checkpoint
from wheelhouse.progress import NullReporter, Reporter

from .cache import (
    HashMismatch,
    cache_in_use,
    NoSpace,
    cached_path,
    copy_private,
    copy_verified,
    entries_folder,
    is_no_space,
    link_entry,
    partial_path,
    place,
)
from .ranges import (SEGMENT_MIN, KeptBytesUnverified, NoRanges, Segmented, fetch_range, finish_segmented, plan_segments,
                     split_range)
from .session import Cancelled, Client, DiskFull, FetchItem, Session
from .spans import split_minimum
from .stream import download

__all__ = ["fetch_all"]


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
    on_file: Callable[[Path], None] | None = None,
) -> list[Path]:
    """Fetch every item into ``dest`` (under its filename), verified, in parallel; paths in item order.

    Files already in the cache are not downloaded again, but hashed again as they are placed
    in ``dest``. A file in ``dest`` is a hardlink to its cache entry where the two share a
    filesystem (else a copy): read-only, and never written in place by wh. An item without a
    sha256 is downloaded and filed under the hash of what arrived (``sha256_of(path)`` tells
    the caller). On the first failure the other downloads
    are allowed to finish into the cache (so a re-run does not repeat them) and the error is
    raised; ``dest`` gets only verified files. Files of at least two ``segment_size`` (default
    SEGMENT_MIN) are fetched as parallel byte ranges when ``jobs`` > 1. ``on_file(path)`` is told of
    each file as soon as it is placed in ``dest``, verified, while the others still arrive (stage checks
    each wheel's RECORD then); it must return at once.
    """
    from wheelhouse.index.http import HttpClient

    dest = Path(dest)
    cache = Path(cache) if cache else default_cache_dir()
    s = Session(cache, client or HttpClient(retries=retries, backoff=backoff), reporter or NullReporter(), task,
                retries=retries, backoff=backoff)
    unique = list({_key(it): it for it in items}.values())  # one download per distinct file
    _remove_stale_sidecars(cache)
    entries_folder(cache)
    # Not a `with` block: on Ctrl-C the pool must not be waited for (its threads end on their own
    # once the client's sockets are shut and the cancel flag is seen).
    pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="wh-fetch")
    # Each download is placed in ``dest`` as soon as it is filed, while the others still arrive
    # (a pool of its own: queued behind the downloads, a copy where no link can be made would wait
    # for the last one).
    placer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="wh-place")
    copies: dict[str, Future] = {}
    by_key = {_key(it): it for it in unique}

    def downloaded(key: str, path: Path) -> None:
        it = by_key[key]
        copies[key] = placer.submit(_place_checked, path, dest / it.filename, it, s, True)
        if on_file is not None:
            copies[key].add_done_callback(lambda f: f.cancelled() or f.exception() or on_file(f.result()))

    segment = max(SEGMENT_MIN if segment_size is None else segment_size, 1)
    in_use = cache_in_use(cache)  # `wh cache prune` keeps every wheel while this runs
    in_use.__enter__()
    try:
        placed = _reuse_cached(unique, dest, s, pool)
        for path in placed.values() if on_file is not None else ():
            on_file(path)
        todo = [it for it in unique if _key(it) not in placed]
        if todo:  # (no empty progress bar where everything came from the cache)
            # No total where a size is unknown: its bytes count too, and the bar ended past the sum of the others.
            known = all(it.size is not None for it in todo)
            s.reporter.start(s.task, total=(sum(it.size or 0 for it in todo) or None) if known else None, unit="B")
            try:
                _download_all(todo, s, pool, jobs, segment, downloaded)
            finally:
                s.reporter.finish(s.task, "")
        placed.update({key: _result(fut) for key, fut in copies.items()})
    except BaseException as exc:
        s.cancel.set()
        abort = getattr(s.client, "abort", None)
        if isinstance(exc, (KeyboardInterrupt, Cancelled)) and abort is not None:
            abort()  # blocked reads fail now, instead of the pool waiting out the transfers
        pool.shutdown(wait=False, cancel_futures=True)
        # The placer is the only writer into ``dest``: a placement still running when the caller removes
        # ``dest`` would leave a file behind there (a link and a rename: short). Downloads go on into the cache.
        placer.shutdown(wait=True, cancel_futures=True)
        if isinstance(exc, DiskFull):
            raise _no_space(exc, unique, dest, cache) from exc
        raise
    finally:
        in_use.__exit__(None, None, None)
    pool.shutdown(wait=True)
    placer.shutdown(wait=True)
    return [placed[_key(it)] for it in items]


def _result(fut: Future):
    """A future's result; waiting in short steps so Ctrl-C reaches the main thread at once."""
    while True:
        done, _ = wait([fut], timeout=0.5)
        if done:
            return fut.result()


def _reuse_cached(unique: list[FetchItem], dest: Path, s: Session, pool) -> dict[str, Path]:
    """Place every cached item in ``dest``, hashed again (in parallel); a damaged entry is
    deleted and left for download. Returns key -> placed path of those reused."""
    hits = [it for it in unique if it.sha256 and cached_path(s.cache, it.sha256).is_file()]
    futures = {pool.submit(_copy_from_cache, it, dest, s): it for it in hits}
    placed = {}
    for fut, it in futures.items():
        path = _result(fut)
        if path is not None:
            placed[_key(it)] = path
    if placed:
        s.note(f"{len(placed)} of {len(unique)} files taken from the cache ({s.cache}), each verified")
    return placed


def _copy_from_cache(item: FetchItem, dest: Path, s: Session) -> Path | None:
    entry = cached_path(s.cache, item.sha256 or "")
    try:
        # Hash then link: reading the entry once (often from the page cache) and writing nothing,
        # where a verified copy reads, hashes and writes every byte (docs/benchmarks.md, Fetch).
        if link_entry(entry, dest / item.filename, item.sha256, item.size, cancelled=s.cancel.is_set) is None:
            copy_verified(entry, dest / item.filename, item.sha256, item.size, cancelled=s.cancel.is_set)
    except HashMismatch as exc:
        entry.unlink(missing_ok=True)
        s.note(f"{item.filename}: the cache copy is damaged ({exc.actual[:12]}..., expected "
               f"{(item.sha256 or '')[:12]}...); removed it, downloading again")
        return None
    except OSError as exc:
        if is_no_space(exc):
            raise DiskFull(dest, []) from exc
        raise
    return dest / item.filename


def _download_all(todo: list[FetchItem], s: Session, pool, jobs: int, segment: int,
                  downloaded: Callable[[str, Path], None]) -> dict[str, Path]:
    """Download ``todo`` into the cache; key -> cache path, each also handed to ``downloaded`` the
    moment it is filed. Big files as ranges when jobs > 1."""
    # With one connection too where an earlier run left recorded ranges (it had more connections, or
    # the file was in the other process's share): resumed, not downloaded again and left on disk.
    big = [it for it in todo if it.sha256 and it.size and it.size >= 2 * segment
           and (jobs > 1 or _ranges_kept(s.cache, it.sha256))]
    split: list[Segmented] = []
    submitted: list[Future] = []  # every task, those _collect adds included
    pieces = _pieces(big, len(todo) - len(big), jobs, segment)
    try:
        for it in big:
            job = plan_segments(it, s.cache, -(-(it.size or 0) // pieces[id(it)]))
            if job is not None:  # None: another process holds it; the one-stream path waits for it
                split.append(job)
                s.advance(job.on_disk())  # bytes kept from an earlier run count as done
        in_split = {id(j.item) for j in split}
        work: list[tuple[int, object, tuple]] = []  # (bytes to fetch, function, arguments)
        for job in split:
            if job.remaining == 0:  # every range was already on disk: only join and verify
                work.append((0, finish_segmented, (job, s)))
                continue  # (decided before any range task runs: the last of those joins)
            for i, ((a, b), have) in enumerate(zip(job.segments, job.have)):
                if have < b - a:
                    work.append((b - a - have, fetch_range, (job, i, s)))
        work += [(it.size or 0, _when_free, (it, s, -(-(it.size or 0) // pieces[id(it)]))) if id(it) in pieces
                 else (it.size or 0, download, (it, s)) for it in todo if id(it) not in in_split]
        work.sort(key=lambda w: -w[0])  # biggest first: the longest transfers start at once

        def steal() -> tuple[Segmented, int] | None:
            # An idle connection takes half of the range with the most left (ranges.split_range), in
            # pieces of at least spans.split_minimum.
            return split_range(split, split_minimum(segment))

        tasks = [(n, pool.submit(fn, *args), args[0]) for n, fn, args in work]
        submitted.extend(fut for _, fut, _ in tasks)
        return _collect(tasks, s, pool, downloaded, steal if split else None, jobs, submitted)
    finally:
        running = [fut for fut in submitted if not fut.done()]
        if running:
            # Ctrl-C: writers stop at their next block, or at once with their sockets cut. Waited for a moment so
            # that their unfinished files give back what they reserved (Segmented.release) before wh exits.
            s.cancel.set()
            abort = getattr(s.client, "abort", None)
            if abort is not None:
                abort()
            running = list(wait(running, timeout=_RELEASE_WAIT).not_done)
        if running:
            # Ctrl-C: the main thread leaves while range writers may still be mid-write. Their files and locks
            # go only once they have stopped (at their next block, or at once as their sockets are shut): a
            # descriptor closed under a writer could be reused by the next file this process opens.
            threading.Thread(target=_release_after, args=(running, split), name="wh-fetch-release",
                             daemon=True).start()
        else:
            for job in split:
                job.release()


_RELEASE_WAIT = 3.0  # seconds


def _release_after(running: list[Future], jobs: list[Segmented]) -> None:
    wait(running)
    for job in jobs:
        job.release()


def _ranges_kept(cache: Path, sha256: str) -> bool:
    part = partial_path(cache, sha256)
    return part.with_name(part.name + ".json").is_file()


def _when_free(item: FetchItem, s: Session, segment: int) -> Path | None:
    """A big file another process holds (``plan_segments`` gave None): wait until it is free, then take
    its cache entry, or, where that process stopped (killed, interrupted), resume its recorded ranges
    here, one after the other. The one-stream path (``download``) would start again from byte 0 and
    leave the ranges' files, each as big as the file, in the cache for good."""
    entry = cached_path(s.cache, item.sha256 or "")
    noted = False
    while True:
        if entry.exists():
            s.advance(item.size or 0)  # (on the bar as this run's: its total counted it)
            return entry  # (the other one's; verified when copied out)
        job = plan_segments(item, s.cache, segment)
        if job is not None:
            break
        if not noted:
            s.note(f"{item.filename}: another wh is downloading it; waiting")
            noted = True
        if s.cancel.wait(0.1):
            raise Cancelled()
    try:
        if entry.exists():  # filed just before its lock was freed
            job.discard()
            s.advance(item.size or 0)
            return entry
        s.advance(job.on_disk())
        if job.remaining == 0:
            return finish_segmented(job, s)
        path = None
        for i, ((a, b), have) in enumerate(zip(job.segments, job.have)):
            if have < b - a:
                path = fetch_range(job, i, s)
        return path
    except NoRanges as why:
        _give_up_ranges(job, why, s)
        return download(item, s, job.on_disk())
    except DiskFull as exc:
        if exc.job is job:  # its files go while its lock is still held (this thread is its only writer)
            job.discard()
            exc.job = None
        raise
    finally:
        job.release()


def _give_up_ranges(job: Segmented, why: NoRanges, s: Session) -> None:
    """Remove a ranged download's files and let go of its entry (the one-stream download that follows
    takes the entry's lock itself), saying why."""
    job.discard()
    job.release()
    s.note(f"{job.item.filename}: " + (
        "the bytes kept from an earlier run did not verify; downloading it again from the start"
        if isinstance(why, KeptBytesUnverified) else "the server ignores Range requests; one stream instead"))


def _pieces(big: list[FetchItem], others: int, jobs: int, segment: int) -> dict[int, int]:
    """How many ranges each big file starts as (id(item) -> count): one each, then one more for each
    connection that would have nothing to do, to the file with the biggest ranges, none under ``segment``.

    A range is hashed from memory as it arrives only where it extends the file's hashed prefix; the
    bytes of every later range are read back from the page cache once the ranges before them are in.
    Cutting every big file into ``jobs`` ranges read back 7/8 of the bytes: ranges only to keep each
    connection busy, and the tail balanced by ``split_range`` as connections finish."""
    pieces = {id(it): 1 for it in big}
    free = jobs - len(big) - others
    while free > 0:
        fits = [it for it in big if (it.size or 0) // (pieces[id(it)] + 1) >= segment]
        if not fits:
            break
        most = max(fits, key=lambda it: (it.size or 0) / pieces[id(it)])
        pieces[id(most)] += 1
        free -= 1
    return pieces


def _collect(tasks, s: Session, pool, downloaded: Callable[[str, Path], None],
             steal: Callable[[], tuple[Segmented, int] | None] | None = None, jobs: int = 1,
             submitted: list[Future] | None = None) -> dict[str, Path]:
    """Wait for every task; ranges refused by the server fall back to one stream. While fewer than
    ``jobs`` tasks are left, ``steal`` splits a running range for each idle connection. The first
    failure (a hash mismatch before others) is raised once everything else has finished."""
    got: dict[str, Path] = {}
    failures: list[BaseException] = []
    fallback: dict[Segmented, NoRanges] = {}
    pending = {fut: what for _, fut, what in tasks}
    while pending:
        done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
        for fut in done:
            what = pending.pop(fut)
            item = what.item if isinstance(what, Segmented) else what
            exc = fut.exception()
            if isinstance(exc, NoRanges):
                fallback.setdefault(what, exc)
            elif isinstance(exc, DiskFull):
                _stop(s, pending)  # every writer stopped before the files that filled the disk go
                if exc.job is not None:
                    exc.job.discard()
                raise exc
            elif isinstance(exc, Cancelled):  # stopped because another task hit a full disk: find that one
                failures.append(exc)
            elif exc is not None:
                failures.append(exc)
            elif fut.result() is not None:
                got[_key(item)] = fut.result()
                if not failures:  # after a failure nothing more goes to dest: the run is failing
                    downloaded(_key(item), fut.result())
        if not pending and fallback:
            for job, why in fallback.items():
                _give_up_ranges(job, why, s)
                fut = pool.submit(download, job.item, s, job.on_disk())  # (its ranges' bytes are on the bar)
                pending[fut] = job.item
                if submitted is not None:
                    submitted.append(fut)
            fallback = {}
        while steal is not None and pending and len(pending) < jobs and not failures and not s.cancel.is_set():
            try:
                cut = steal()  # (writes the new split of the file's ranges)
            except OSError as exc:
                if not is_no_space(exc):
                    raise
                _stop(s, pending)  # a full disk is one no-space error here too, once every writer stopped
                raise DiskFull(s.cache / "partial", []) from exc
            if cut is None:
                break
            fut = pool.submit(fetch_range, cut[0], cut[1], s)
            pending[fut] = cut[0]
            if submitted is not None:
                submitted.append(fut)
    if failures:
        # Hash mismatches matter more than a flaky link; a cancelled task explains nothing.
        failures.sort(key=lambda e: (isinstance(e, Cancelled), not isinstance(e, HashMismatch)))
        raise failures[0]
    return got


def _stop(s: Session, pending) -> None:
    """Cancel the run and wait for the tasks still running (they stop at their next block, or
    at once where the client can cut their sockets)."""
    s.cancel.set()
    abort = getattr(s.client, "abort", None)
    if abort is not None:
        abort()
    wait(list(pending))


def _place_checked(src: Path, dst: Path, item: FetchItem, s: Session, fresh: bool = False) -> Path:
    """Place a cache entry in ``dest``: hashed again when it came from an earlier run; a download
    this run just verified and filed is linked (else copied by the kernel), not hashed twice."""
    checkpoint("fetch.place")
    try:
        if item.sha256 and fresh:
            if link_entry(src, dst, size=item.size) is not None:
                return dst
            return copy_private(src, dst, item.size, cancelled=s.cancel.is_set)
        if item.sha256:
            copy_verified(src, dst, item.sha256, item.size, cancelled=s.cancel.is_set)
            return dst
        return place(src, dst)
    except OSError as exc:
        if is_no_space(exc):
            raise DiskFull(dst, []) from exc
        raise


def _no_space(exc: DiskFull, unique: list[FetchItem], dest: Path, cache: Path) -> NoSpace:
    """How much this run still had to write (downloads not yet in the cache, plus the copies
    into ``dest`` where it is on another filesystem: links take no space), for the message."""
    needed = 0
    copies = not _same_filesystem(cache, dest)
    for it in unique:
        if not it.size:
            continue
        if not (it.sha256 and cached_path(cache, it.sha256).is_file()):
            needed += it.size
        if copies and not (dest / it.filename).is_file():
            needed += it.size
    return NoSpace(exc.path, needed, exc.removed)


def _same_filesystem(a: Path, b: Path) -> bool:
    def device(p: Path) -> int:
        while not p.exists() and p != p.parent:
            p = p.parent
        return p.stat().st_dev

    try:
        return device(Path(a).absolute()) == device(Path(b).absolute())
    except OSError:
        return False


def _remove_stale_sidecars(cache: Path) -> None:
    """Temp files of a ranged download's old per-thread checkpoints (``.part.json.<thread id>``)."""
    folder = cache / "partial"
    if folder.is_dir():
        for stale in folder.glob("*.part.json.*"):
            if stale.suffix.lstrip(".").isdigit():
                stale.unlink(missing_ok=True)


def _key(item: FetchItem) -> str:
    return item.sha256 or "url:" + item.url

