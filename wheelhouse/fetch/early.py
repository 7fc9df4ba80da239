"""Early downloads: the stack's wheels start downloading while the resolver is still at work.

Why: a stage reads index pages and metadata first and downloads only once the resolution is done.
On the 71-wheel serving set that was ~1.1 s of index work, then ~1.5-2 s of downloads, one after
the other. The resolver's walk ahead (``wheelhouse.resolve.provider``) knows each requirement's
likely pick as soon as its index page is read: on that set the 581 MB cuBLAS wheel ~0.5 s before the
resolution ends, and every guess was the final pin (also on the NVIDIA set and the vllm closure).

How: each likely pick with a published sha256 is offered here (``offer``); from ``MIN_BYTES``
offered (``always``: the first), two download helpers start (``wheelhouse.fetch.procs``, open:
more files may follow) and each offer goes to the one with fewer bytes left, so the resolver's
process keeps its GIL for the search. ``fetch_all(..., early=)`` takes them over (``take``): what
they filed is placed as downloaded this run (verified as it arrived, not hashed again), what they
are still downloading is waited for, and what was never offered is split between them.

A guess is a speed-up, never a different answer:
- nothing is placed that the resolution did not pin, and every file is verified as any download is;
- a guess the resolution dropped while it was still downloading stops both helpers (what they had
  not filed is downloaded by the ordinary path, resuming their recorded bytes) and its unfinished
  bytes are removed from the cache (a finished one stays there, verified, as any cached file);
- an early error (a 404, a hash mismatch) is raised only where the file was pinned: the ordinary
  fetch would have met the same one;
- a stage that fails or stops before its downloads (``close``) stops the helpers and removes their
  unfinished bytes; Ctrl-C keeps them, as it does for any download, for the next run to resume.

``WH_EARLY_FETCH``: ``auto`` (default: ``MIN_CPUS`` CPUs, two jobs, helper processes allowed by
``WH_FETCH_PROCESS``), ``always`` (from the first offer, any machine), ``0`` (never).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Callable, Sequence

from wheelhouse.childproc import cpus, mode
from wheelhouse.faults import check_helper_spec

from . import procs
from .cache import cached_path, partial_path, remove_part_files, try_entry_lock
from .session import FetchItem, Session

__all__ = ["Early", "ENV", "MIN_BYTES"]

ENV = "WH_EARLY_FETCH"
MIN_BYTES = 64 << 20  # auto: offered bytes worth starting two processes for, during the resolution
# auto: the CPUs it needs (as the second download process). Measured (docs/benchmarks.md, Early downloads):
# a made-up index 40 ms away, 0.76x the stage without it on 2 CPUs and 0.79x on 16 (10 ms: 0.91x); the
# real index from this 2-core host, ~5 ms away, where the resolve itself keeps ~1.5 CPUs busy: 1.00-1.07x.
MIN_CPUS = 2


class Early:
    """Downloads offered during a resolution, into ``cache``, by two open helpers (see the module)."""

    def __init__(self, cache: Path, client, jobs: int, reporter, *, setting: str = "auto",
                 segment: int | None = None, have: set[str] = frozenset()):
        from . import SEGMENT_MIN, _key

        self.cache, self.jobs, self.setting = Path(cache), jobs, setting
        self.have = have  # sha256 of files at hand elsewhere (the previous wheelhouse): never offered
        self.segment = max(SEGMENT_MIN if segment is None else segment, 1)
        self.key = _key
        self.held = _Held(reporter)
        self.s = Session(self.cache, client, self.held, "download")
        self.helpers: list[procs.Helper] = []
        self.offered: dict[str, FetchItem] = {}
        self._pending: list[FetchItem] = []
        self._lock = threading.Lock()
        self._closed = False
        self.taken = False

    @classmethod
    def for_stage(cls, cache: Path, client, jobs: int, reporter, have: set[str] = frozenset()) -> "Early | None":
        """An ``Early`` for a stage that will download, or None where it would not help or is turned off
        (one job or one CPU, no helper processes, offline, a client a helper cannot copy)."""
        from wheelhouse.index.http import HttpClient

        setting = mode(ENV)
        if setting is None or mode(procs.ENV) is None or jobs < 2 or not sys.executable:
            return None
        if type(client) is not HttpClient or client.offline:
            return None
        if setting == "auto" and cpus() < MIN_CPUS:
            return None
        check_helper_spec()
        return cls(cache, client, jobs, reporter, setting=setting, have=have)

    # --- during the resolution --------------------------------------------------------------
    def offer(self, url: str, filename: str, sha256: str | None, size: int | None) -> None:
        """A likely pick's wheel (from the resolver's threads): downloaded now, if worth it."""
        if not (sha256 and size and url.startswith(("https://", "http://"))):
            return  # (what has no published hash, or is a local file: the ordinary fetch)
        if sha256 in self.have or cached_path(self.cache, sha256).is_file():
            return  # (at hand: the ordinary fetch takes it from there)
        item = FetchItem(url, filename, sha256, size)
        key = self.key(item)
        with self._lock:
            if self._closed or key in self.offered:
                return
            self.offered[key] = item
            if self.helpers:
                min(self.helpers, key=lambda h: h.outstanding()).add([item])
                return
            self._pending.append(item)
            if self.setting == "auto" and sum(it.size or 0 for it in self._pending) < MIN_BYTES:
                return
            self._start()

    def _start(self) -> None:
        shares = procs.split(self._pending, [0, 0])
        self._pending = []
        for share, jobs in zip(shares, (self.jobs // 2, self.jobs - self.jobs // 2)):
            helper = procs.Helper(self.s, share, max(1, jobs), self.segment, lambda key, path: None, self.key,
                                  open=True)
            helper.start()
            self.helpers.append(helper)

    # --- at the fetch -------------------------------------------------------------------------
    def take(self, items: Sequence[FetchItem], s: Session,
             downloaded: Callable[[str, Path], None]) -> tuple[dict[str, Path], list[procs.Helper]]:
        """Hand over to the fetch of ``items``: (key -> cache path of those already filed, the helpers
        still at work, which now report on ``s`` and hand each file they file to ``downloaded``; none
        where a dropped guess stopped them). Counted bytes are carried over to ``s``'s progress."""
        with self._lock:
            self._closed = True
            self._pending = []
        self.taken = True
        needed = {self.key(it) for it in items}
        if not self.helpers:
            return {}, []
        filed: dict[str, Path] = {}
        dropped = [it for key, it in self.offered.items() if key not in needed]
        if any(not any(key in h.filed for h in self.helpers) for key in map(self.key, dropped)):
            procs.stop_all(self.helpers)  # a guess the resolution dropped is still downloading
            for h in self.helpers:
                filed.update(h.filed)
            self._discard(dropped, filed)
            self.s.note(f"{len(dropped)} early download(s) not in the resolution: stopped")
            return {k: p for k, p in filed.items() if k in needed}, []
        for h in self.helpers:
            filed.update(h.adopt(s, downloaded))
        # (nothing reports to it now: both helpers report on ``s``.) The dropped guesses, all filed here,
        # are not this fetch's bytes: counted, they took the bar past its total.
        gone = sum(it.size or 0 for it in dropped)
        mine = sum(it.size or 0 for it in items if self.key(it) in self.offered)
        s.advance(min(max(0, self.held.take() - gone), mine))
        return {k: p for k, p in filed.items() if k in needed}, self.helpers

    def close(self, keep: bool = False) -> None:
        """The stage is over: helpers not taken over are stopped, and their unfinished files removed
        from the cache unless ``keep`` (Ctrl-C: resumed by the next run)."""
        with self._lock:
            self._closed = True
            if self.taken or not self.helpers:
                return
            self.taken = True  # (once: a second call finds nothing to do)
        procs.stop_all(self.helpers)
        if not keep:
            filed: dict[str, Path] = {}
            for h in self.helpers:
                filed.update(h.filed)
            self._discard(list(self.offered.values()), filed)

    def _discard(self, items: Sequence[FetchItem], filed: dict[str, Path]) -> None:
        for it in items:
            if self.key(it) not in filed and it.sha256:
                remove_partial(self.cache, it.sha256)


def remove_partial(cache: Path, key: str) -> bool:
    """Remove the unfinished download ``key`` from the cache, unless another process holds its entry
    (then it is that one's). True where nothing of it is left."""
    try:
        fd = try_entry_lock(cache, key)
    except OSError:
        return False
    if fd < 0:
        return False
    try:
        remove_part_files(partial_path(cache, key))
        return True
    finally:
        os.close(fd)


class _Held:
    """The early helpers' reporter until the fetch takes them over: bytes counted (shown once the
    download bar starts), notes passed on at once."""

    def __init__(self, inner):
        self.inner = inner
        self.count = 0
        self._lock = threading.Lock()

    def start(self, task: str, total: float | None = None, unit: str = "") -> None:
        pass

    def finish(self, task: str, message: str = "") -> None:
        pass

    def advance(self, task: str, amount: float = 1) -> None:
        with self._lock:
            self.count += int(amount)

    def note(self, message: str) -> None:
        self.inner.note(message)

    def take(self) -> int:
        with self._lock:
            n, self.count = self.count, 0
            return n
