"""Helper processes for a cold resolve's index work: page fetches and parses, METADATA reads.

Why: in one process, the resolver and its prefetch threads share one GIL. On a cold vllm resolve
(199 pages, ~70 MB of JSON, ~200 METADATA reads) the resolver's thread used 0.46 s of CPU and
spent 2.2-2.4 s of its 2.9 s waiting for pages and metadata that the prefetch threads were
fetching and parsing, CPU-bound behind the GIL (the run was as fast pinned to one core). One
helper moved that bottleneck into the helper (its requests ended 2.46 s in); two share it:
2.46-2.86 s against 3.14-3.30 s in alternating runs (docs/benchmarks.md, "Cold resolve").

What goes there, and what comes back:

- only work that would make a request: a page fresh in the cache, metadata in the cache or in
  a local file are read here as before (a warm or offline run never starts a helper);
- a page: a helper fetches it (revalidating what it has, like this process would), parses it
  for the target and stores it, pre-parsed, in the shared page cache (``http.cache``: entries
  are written whole under a temp name and renamed; each is checked when read). This process
  then reads it from the cache as a warm run does, so what the resolver sees is always what
  the cache code checked. "Not on this index" (404) comes back as such. Where the cache could
  not keep the page (a full disk, a read-only folder), the helper sends the parsed files
  themselves: reading the cache here would have missed and asked the index a second time;
- metadata: a helper returns the METADATA bytes (a PEP 658 file checked against its sha256,
  or the member read by ranges); this process parses, checks and caches them as before;
- a ``WhError`` a helper met (HTTP 5xx after retries, a bad page, a sha256 that differs) is
  raised here unchanged (class, message, hint); anything else (a helper could not start,
  died, or hit an unexpected error) and the work is done here, as without helpers. A helper
  is a speed-up, never a different answer.

When: from the ``AFTER``-th page or metadata that needs a request (``WH_INDEX_PROCESS``:
``auto``, the default, on a machine with two or more CPUs; ``always``: from the first, waiting
for the helpers to start; ``0``: never), so a small resolve does not pay two process starts
(~0.15 s of CPU each, overlapped). The helpers start in the background; until one answers,
requests are made here.

Their life: each is this process's child, reading requests on its stdin (credentials too:
never on a command line or in an environment). When that closes (the resolution ended, or
this process died, even by SIGKILL) it cuts its requests in flight (their cache writes finish
or remove their temp file) and exits. It ignores SIGINT: Ctrl-C is this process's to handle,
and closing the pipe ends the helper. It says it is alive every ``_BEAT`` seconds: one silent
for ``_SILENT`` seconds while requests wait on it (SIGSTOPped, wedged) is killed, and what
waited on it is done here. Without that, a request waited on a stopped helper for ever (its
own deadlines are the helper's, and a stopped process never reaches them), and a write to a
full pipe blocked every later request with it.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from wheelhouse.childproc import (READ_ERRORS, close_input, cpus, end, flatten, frame, mode, read_frame, rebuild, spawn,
                                  write_frame)
from wheelhouse.errors import WhError
from wheelhouse.faults import check_helper_spec

__all__ = ["Offload", "OffloadClosed", "ENV", "AFTER"]

ENV = "WH_INDEX_PROCESS"
AFTER = 8  # requests made here before the helper starts (auto)
HELPERS = 2  # helper processes at most (and at most one per CPU): measured, 3 was no faster than 2
_THREADS = 16  # request threads in each helper
_START_WAIT = 30.0  # seconds a request waits for a helper to start, where it waits (``always``)
_BEAT = 1.0  # a helper says it is alive this often, busy or idle
_EXIT_WAIT = 5.0  # seconds a helper told to end has to exit before it is killed
_SILENT = 15.0  # a helper silent this long while requests wait on it is hung (stopped, wedged): ended, work done here
class OffloadClosed(Exception):
    """The run ended while a prefetch waited on the helper (a guess nobody needs any more)."""


class Offload:
    """This side of the helpers: ``page`` and ``metadata`` answer, or return None (do it here)."""

    def __init__(self, client, *, page_ttl: float, after: int = AFTER, helpers: int = 1, wait: bool = False):
        self.client = client
        self.page_ttl = page_ttl
        self.after = after
        self.wait = wait  # until a helper is up (or failed to start), requests wait for it instead of going here
        # Entries a helper stored from now on were confirmed by this run (the margin: file
        # times come from the kernel's coarse clock, which may lag time.time() by a tick).
        self.confirmed_after = time.time() - 1.0
        self.sent = 0  # requests answered by a helper (for stats and tests)
        self._lock = threading.Lock()
        self._misses = 0
        self._closed = False
        self._started = False
        self._helpers = [_Helper(self, i) for i in range(helpers)]
        self._keeps: dict[int, tuple[int, Any]] = {}  # id(keep) -> (its number, keep: held so the id stays its own)

    @classmethod
    def for_run(cls, source, reader) -> "Offload | None":
        """Helpers for this resolution, or None where they cannot help or are turned off."""
        from .http import HttpClient
        from .metadata import MetadataReader
        from . import PackageSource

        setting = mode(ENV)
        client = source.client
        if setting is None or not sys.executable or type(client) is not HttpClient or client.offline:
            return None
        check_helper_spec()  # (a test's typo fails here, not as silently redone requests)
        if client.cache_dir is None or type(source) is not PackageSource or type(reader) is not MetadataReader:
            return None
        n_cpus = cpus()
        if reader.client is not client or (setting == "auto" and n_cpus < 2):
            return None
        always = setting == "always"
        return cls(client, page_ttl=source.page_ttl, after=0 if always else AFTER,
                   helpers=max(1, min(HELPERS, n_cpus)), wait=always)

    @property
    def started(self) -> int:
        """Helper processes started (for stats and tests)."""
        return sum(h.spawned for h in self._helpers)

    # --- the two kinds of work ----------------------------------------------------------
    def page(self, index: str, name: str, keep) -> bool | list | None:
        """Fetch, parse and store ``name``'s page of ``index`` in a helper: True when stored
        (read it from the cache, ``confirmed_after``), False when the index does not have the
        project, the files (Distfiles) when the cache could not keep the page, None when not
        done there (do it here)."""
        return self._call("page", index, name, keep=keep)

    def metadata(self, distfile) -> tuple[bytes, dict[str, int]] | None:
        """The METADATA bytes of ``distfile`` read by a helper, and the reads it took (the
        reader's ``stats``: "pep658", "range", "download"); None when not done there."""
        return self._call("meta", distfile)

    def close(self) -> None:
        """End the helpers (stdin closed: each cuts what it has in flight and exits) and fail
        whatever still waits on them with OffloadClosed."""
        with self._lock:
            self._closed = True
        deadline = time.monotonic() + _EXIT_WAIT  # one wait for all: each was told at the same time
        for h in self._helpers:
            h.tell_to_end()
        for h in self._helpers:
            h.close(deadline)

    # --- internals ----------------------------------------------------------------------
    def _call(self, kind: str, *args, keep=None):
        with self._lock:
            if self._closed:
                raise OffloadClosed("the resolution has ended")
            self._misses += 1
            if not self._started and self._misses > self.after:
                self._started = True
                for h in self._helpers:
                    threading.Thread(target=h.start, name=f"wh-index-process-{h.number}", daemon=True).start()
            ready = [h for h in self._helpers if h.state == "ready"]
            starting = [h for h in self._helpers if h.state in ("idle", "starting")]
        if not ready and self.wait and starting:
            for h in starting:
                h.up.wait(_START_WAIT)
            with self._lock:
                ready = [h for h in self._helpers if h.state == "ready"]
        with self._lock:
            if not ready:
                return None
            helper = min(ready, key=lambda h: len(h.pending))  # the least busy
            if kind == "page":
                known = self._keeps.get(id(keep))
                if known is None:
                    known = self._keeps[id(keep)] = (len(self._keeps), keep)
                args = (*args, known)
        return helper.call(kind, args)

    def _answered(self, helper: "_Helper", requests: int) -> None:
        with self._lock:
            self.sent += 1
            # the helpers' round trips count as this client's (stats, tests)
            self.client.requests += max(0, requests - helper.requests_seen)
            helper.requests_seen = max(helper.requests_seen, requests)


class _Helper:
    """One helper process and the requests waiting on it."""

    def __init__(self, owner: Offload, number: int):
        self.owner, self.number = owner, number
        self.state = "idle"  # idle -> starting -> ready -> dead | closed
        self.up = threading.Event()  # set once it is ready, or will never be
        self.spawned = 0
        self.pending: dict[int, Future] = {}
        self.requests_seen = 0
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._wlock = threading.Lock()
        self._next = 0
        self._keeps_sent: set[int] = set()
        self.heard = time.monotonic()  # when it last said anything (an answer or a beat)
        self.began = 0.0  # when it was spawned

    def start(self) -> None:
        owner = self.owner
        cfg = {
            "cache_dir": str(owner.client.cache_dir),
            "retries": owner.client.retries,
            "backoff": owner.client.backoff,
            "timeout": owner.client.timeout,
            "refresh": owner.client.refresh,
            "page_ttl": owner.page_ttl,
            "credentials": owner.client.credentials.snapshot(),
            "threads": _THREADS,
            "beat": _BEAT,
            "confirmed_after": owner.confirmed_after,
        }
        with self._lock:
            if self.state != "idle":
                return
            self.state = "starting"
        try:
            proc, config = spawn(__name__, cfg)
            self.spawned += 1
        except OSError:
            with self._lock:
                if self.state == "starting":
                    self.state = "dead"
            self.up.set()
            return
        # Known at once (close() ends it, even before it is ready) and watched from now: a helper
        # stopped before its "ready" would block this read, and every ``always`` request on up.wait.
        with self._lock:
            self._proc = proc
            self.began = time.monotonic()
        threading.Thread(target=self._watch, name=f"wh-index-watch-{self.number}", daemon=True).start()
        try:
            proc.stdin.write(config)
            proc.stdin.flush()
            ready = read_frame(proc.stdout)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            ready = None
        with self._lock:
            if ready == ("ready",) and self.state == "starting":
                self.state = "ready"
                self.heard = time.monotonic()
                proc = None
            elif self.state == "starting":
                self.state = "dead"
        self.up.set()
        if proc is not None:  # it did not come up, or the run ended meanwhile
            end(proc)
            proc.stdout.close()
            return
        self._read_replies()

    def _watch(self) -> None:
        """Kill the helper if it is not up within ``_START_WAIT`` or falls silent while requests
        wait on it: its pipe then closes, the reader fails what waits with "redo" (done here)
        and a write blocked on a full pipe fails too. A helper that is only slow (a stalling
        index) still beats."""
        proc = self._proc
        while True:
            time.sleep(min(_BEAT, _SILENT / 4, _START_WAIT / 4))
            with self._lock:
                if self.state not in ("starting", "ready"):
                    return
                now = time.monotonic()
                if self.state == "starting":
                    hung = now - self.began > _START_WAIT
                else:
                    hung = bool(self.pending) and now - self.heard > _SILENT
            if hung:
                try:
                    proc.kill()  # SIGKILL ends a stopped process too
                except OSError:
                    pass
                return

    def call(self, kind: str, args: tuple):
        keep_no = keep = None
        if kind == "page":
            index, name, (keep_no, keep) = args
            args = (index, name, keep_no)
        # Under the write lock from numbering to writing: a page's keep goes out before any page
        # that uses it. Pickled before anything is registered: a request that cannot be pickled
        # (a filter that is a local function raises AttributeError, not PicklingError) is done
        # here, and its keep is not taken as sent.
        with self._wlock:
            with self._lock:
                if self.state != "ready":
                    return None
                rid = self._next
                self._next += 1
                send_keep = kind == "page" and keep_no not in self._keeps_sent
                proc = self._proc
            try:
                data = b"".join(frame(f) for f in ([("keep", keep_no, keep)] if send_keep else []) + [(kind, rid, *args)])
            except Exception:  # noqa: BLE001  (anything pickle raises)
                return None
            fut: Future = Future()
            with self._lock:
                if self.state != "ready":
                    return None
                self.pending[rid] = fut
                if send_keep:
                    self._keeps_sent.add(keep_no)
            try:
                proc.stdin.write(data)
                proc.stdin.flush()
            except (OSError, ValueError):
                self._died()
                return None
        status, value = fut.result()
        if status == "ok":
            return value
        if status == "err":
            raise value
        return None  # "redo": do it here

    def tell_to_end(self) -> None:
        """Close its stdin (it then cuts its requests and exits), without waiting for it."""
        with self._lock:
            self.state = "closed"
            proc = self._proc
        self.up.set()
        if proc is not None:
            close_input(proc)  # (from a thread: a request blocked on its full pipe holds the stream's lock)

    def close(self, deadline: float | None = None) -> None:
        """End it (SIGKILL if it has not exited by ``deadline``) and fail what waits on it."""
        self.tell_to_end()
        with self._lock:
            proc = self._proc
        if proc is not None:
            end(proc, deadline)
        self._fail_pending(OffloadClosed("the resolution has ended"))

    def _read_replies(self) -> None:
        proc = self._proc
        while True:
            try:
                msg = read_frame(proc.stdout)
            except READ_ERRORS:
                msg = None
            if msg is None:
                self._died()
                proc.stdout.close()
                return
            self.heard = time.monotonic()
            rid, status, value, requests = msg
            if status == "beat":
                continue
            if status == "err":
                value = rebuild(value)
                if value is None:
                    status = "redo"
            with self._lock:
                fut = self.pending.pop(rid, None)
            if status != "redo":
                self.owner._answered(self, requests)
            if fut is not None:
                fut.set_result((status, value))

    def _died(self) -> None:
        with self._lock:
            if self.state in ("ready", "starting"):
                self.state = "dead"
            proc = self._proc
        self._fail_pending(None)
        if proc is not None:
            end(proc)

    def _fail_pending(self, exc: BaseException | None) -> None:
        with self._lock:
            pending, self.pending = self.pending, {}
        for fut in pending.values():
            fut.set_result(("redo", None) if exc is None else ("err", exc))


# --- the helper's side --------------------------------------------------------------------------
def _kept(client, index: str, name: str, confirmed_after: float) -> bool:
    """Whether the parent will find this page in the cache as stored since ``confirmed_after``
    (its ``get_cached(confirmed_after=...)``): not where the write failed (a full disk, a
    read-only folder), or only an older entry is there."""
    import urllib.parse

    from . import SIMPLE_ACCEPT
    from .http.cache import is_fresh

    url = urllib.parse.urljoin(index, name + "/")
    age = max(0.0, time.time() - confirmed_after)  # fresh within this age == stored since confirmed_after
    return is_fresh(client.cache_dir, url, {"Accept": SIMPLE_ACCEPT}, max_age=age)


def serve(cfg: dict) -> None:
    """The helper's main loop (started by ``Offload._start``): requests on stdin, answers on stdout."""
    import signal

    from wheelhouse.faults import checkpoint, for_helper
    from . import PackageSource
    from .http import HttpClient
    from .metadata import MetadataReader

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for_helper()
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but frames on the pipe
    client = HttpClient(cache_dir=Path(cfg["cache_dir"]), retries=cfg["retries"], backoff=cfg["backoff"],
                        timeout=cfg["timeout"], refresh=cfg["refresh"])
    client.credentials.restore(cfg["credentials"])
    source = PackageSource((), (), client=client, page_ttl=cfg["page_ttl"])
    keeps: dict[int, Any] = {}
    out_lock = threading.Lock()

    def answer(rid: int, status: str, value) -> None:
        with out_lock:
            write_frame(out, (rid, status, value, client.requests))

    def work(kind: str, rid: int, *args) -> None:
        try:
            checkpoint("index.helper-request")
            if kind == "page":
                index, name, keep_no = args
                found = source._index_files(index, name, keeps[keep_no])
                if found is not None and not _kept(client, index, name, cfg["confirmed_after"]):
                    answer(rid, "ok", found)  # the cache could not keep it: the files as they are
                else:
                    answer(rid, "ok", found is not None)
            else:
                reader = MetadataReader(client)  # one per read: its stats are this read's
                answer(rid, "ok", (reader.fetch(args[0]), reader.stats))
        except WhError as exc:
            try:
                answer(rid, "err", flatten(exc))
            except (pickle.PicklingError, TypeError, AttributeError):
                answer(rid, "redo", None)
        except Exception:
            answer(rid, "redo", None)

    def beat() -> None:
        while True:
            time.sleep(cfg["beat"])
            try:
                answer(-1, "beat", None)
            except (OSError, ValueError):
                return

    pool = ThreadPoolExecutor(max_workers=cfg["threads"], thread_name_prefix="wh-index")
    with out_lock:
        write_frame(out, ("ready",))
    threading.Thread(target=beat, name="wh-index-beat", daemon=True).start()
    try:
        while True:
            msg = read_frame(inp)
            if msg is None:
                break
            if msg[0] == "keep":
                keeps[msg[1]] = msg[2]
            else:
                pool.submit(work, *msg)
    finally:
        client.abort()  # the run is over: requests in flight fail at once
        pool.shutdown(wait=True, cancel_futures=True)
        os._exit(0)
