"""A second download process: half of a big fetch's bytes downloaded where another GIL is free.

Why: 8 download threads in one process take the GIL back after every TLS record they read
(<= 16 KiB: ~95,000 times per 1.5 GB). On 2 cores that is ~75,000 context switches per 1.5 GB,
three quarters of them waits on the GIL, and the run is CPU-bound at ~1.1x the plain-HTTP floor
(curl, which uses one thread and 45 switches). Two processes of 4 connections each, alternating
with one process of 8 on the same 7 NVIDIA wheels (1.54 GB): 2.4-2.9 s against 2.9-3.5 s
(docs/benchmarks.md, Fetch).

What goes there: the files still to download are split in two shares of about equal bytes (``split``:
the biggest first, each to the lighter share, then moves and swaps while they narrow the gap; the
helper's share 1/32 lighter, as it starts later); the helper downloads one share with half the
connections, this process the other, and once this one's is done its connections take over ranges of
the helper's files (wheelhouse.fetch.lend: "lend", "lent" and "returned" frames). The helper runs the same code (``_download_all``: ranges, the
split of a lagging range, resume, the entry locks) into the same cache, so what is crash-safe here
is crash-safe there, and two wh processes still take turns on one file. It sends its progress, its
notes and each file it has verified and filed; this process places those in ``dest`` as its own.

A helper is a speed-up, never a different answer: its ``WhError`` (a hash mismatch, an HTTP error
after the retries) is raised here unchanged; a full disk there is the same ``no-space`` error; if it
could not start, died or fell silent (``_SILENT`` s without its heartbeat: stopped, wedged), this
process downloads what the helper had not filed, resuming from the bytes the helper recorded.

Its life: it ignores SIGINT (Ctrl-C is this process's to handle) and stops when its stdin closes:
at the end, on a failure here, or when this process dies, even by SIGKILL. Stopping cuts its
sockets at once and keeps what is on disk, as Ctrl-C does here.

``WH_FETCH_PROCESS``: ``auto`` (default: at least ``MIN_BYTES`` to download, two CPUs, two jobs),
``always`` (any fetch of two files or more, for tests), ``0`` (never).
"""

from __future__ import annotations

import bisect
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

from wheelhouse.childproc import close_input, cpus, end, flatten, frame, mode, read_frame, rebuild, spawn
from wheelhouse.errors import WhError
from wheelhouse.faults import check_helper_spec, checkpoint

from .cache import cached_path
from .session import Cancelled, DiskFull, FetchItem, Session

__all__ = ["Helper", "ENV", "MIN_BYTES", "shares", "split", "stop_all"]

ENV = "WH_FETCH_PROCESS"
MIN_BYTES = 256 << 20  # auto: a share worth a process start (~0.1 s of CPU, overlapped)
_BEAT = 1.0  # the helper says it is alive this often
_SILENT = 15.0  # a helper silent this long is hung (stopped, wedged): killed, its share done here
_START_WAIT = 30.0  # a helper not up by then is killed, its share done here
_EXIT_WAIT = 5.0  # a helper told to stop has this long to exit before SIGKILL
_HEAD_START = 64 << 20  # the most bytes this process's share has more than the helper's (``shares``)
_ADVANCE_EVERY = 0.1  # the helper's progress is sent in sums, this often


def shares(todo: Sequence[FetchItem], s: Session, jobs: int) -> tuple[list[FetchItem], list[FetchItem]] | None:
    """(this process's share, the helper's) of ``todo``; None where a helper would not help or is
    turned off (one job, one CPU, a small fetch, a client a helper cannot copy)."""
    from wheelhouse.index.http import HttpClient

    setting = mode(ENV)
    if setting is None or not sys.executable or jobs < 2 or len(todo) < 2:
        return None
    check_helper_spec()  # (a test's typo fails here, not as a silently redone share)
    if type(s.client) is not HttpClient or s.client.offline:  # (a test's fake client, or offline: not copied)
        return None
    if setting == "auto" and (cpus() < 2 or sum(it.size or 0 for it in todo) < MIN_BYTES):
        return None
    # The helper starts ~0.15 s after this process's downloads (a process, its imports): its share is
    # that much lighter, about 1/32 of the bytes on 2 cores (docs/benchmarks.md, Fetch).
    mine, theirs = split(todo, [0, min(_HEAD_START, sum(it.size or 0 for it in todo) // 32)])
    return (mine, theirs) if theirs and mine else None


def split(items: Sequence[FetchItem], loads: Sequence[int]) -> list[list[FetchItem]]:
    """``items`` in one share per entry of ``loads`` (the bytes each already has), the shares' totals as
    even as whole files allow: the biggest first, each to the share with the fewest bytes, then single
    moves and swaps between the fullest and the emptiest share while they narrow the gap.

    The greedy pass alone left a 54 MB gap on the 7 NVIDIA wheels (706 MB here, 760 MB in the helper,
    which also starts ~0.17 s later); one swap makes it 752 / 714 MB (docs/benchmarks.md, Fetch)."""
    loads = list(loads)
    out: list[list[FetchItem]] = [[] for _ in loads]
    for it in sorted(items, key=lambda it: -(it.size or 0)):
        i = loads.index(min(loads))
        out[i].append(it)
        loads[i] += it.size or 0
    for _ in range(4 * len(items)):
        hi, lo = loads.index(max(loads)), loads.index(min(loads))
        if not _narrow(out[hi], out[lo], loads, hi, lo):
            break
    for share in out:
        share.sort(key=lambda it: -(it.size or 0))
    return out


def _narrow(hi: list[FetchItem], lo: list[FetchItem], loads: list[int], h: int, l: int) -> bool:
    """Move one file from ``hi`` to ``lo``, or swap one of each, the change that brings their totals
    closest together; False when none narrows the gap. For each file of ``hi`` only the two files of
    ``lo`` nearest the ideal size are looked at (a bisection): every pair was 6 million steps for 5,000
    files, a second each time this ran."""
    gap = loads[h] - loads[l]
    first: dict[int, tuple[int, FetchItem | None]] = {0: (-1, None)}  # size -> (position, first such file of lo)
    for i, y in enumerate(lo):
        first.setdefault(y.size or 0, (i, y))
    sizes = sorted(first)
    best: tuple[int, int, FetchItem, FetchItem | None] | None = None  # (|gap - 2 * moved|, position, hi's, lo's)
    for x in hi:
        xs = x.size or 0
        k = bisect.bisect_left(sizes, xs - gap / 2)
        for ys in sizes[max(0, k - 1):k + 1]:
            d = xs - ys
            if not 0 < d < gap:
                continue
            pos, y = first[ys]
            score = abs(gap - 2 * d)
            if best is None or score < best[0] or (score == best[0] and best[2] is x and pos < best[1]):
                best = (score, pos, x, y)
    if best is None:
        return False
    _, _, x, y = best
    hi.remove(x)
    lo.append(x)
    moved = x.size or 0
    if y is not None:
        lo.remove(y)
        hi.append(y)
        moved -= y.size or 0
    loads[h] -= moved
    loads[l] += moved
    return True


class Helper:
    """The helper process downloading ``items`` into ``s.cache``; ``on_filed(key, path)`` for each
    file it verified and filed (called from this class's reader thread).

    ``open``: more items may follow (``add``) until ``seal``; the helper ends once sealed and done
    (the early downloads, wheelhouse.fetch.early). Else it ends when ``items`` are done."""

    def __init__(self, s: Session, items: list[FetchItem], jobs: int, segment: int,
                 on_filed: Callable[[str, Path], None], key: Callable[[FetchItem], str], *, open: bool = False):
        self.s, self.items, self.jobs, self.segment = s, list(items), jobs, segment
        self.on_filed, self.key = on_filed, key
        self.open = open
        self.filed: dict[str, Path] = {}
        self._keys = {key(it): it for it in self.items}
        self._started = False
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()  # frames for its stdin, after the config
        self.advanced = 0  # bytes its progress counted (kept bytes of a resumed file included)
        self.outcome: tuple | None = None  # ("ok",) | ("err", WhError) | ("nospace", DiskFull) | ("redo",)
        self.done = threading.Event()
        # Ranges it lends this process (wheelhouse.fetch.lend): asked for, answered, counted on the bar here.
        self.asking = False
        self.refused = 0.0  # when it last had nothing to lend
        self._lent: list[tuple[str, int, int, int]] = []
        self.on_lent: Callable[[], None] | None = None
        self._lent_counted: dict[str, int] = {}
        self.proc: subprocess.Popen | None = None
        self._heard = time.monotonic()
        self._lock = threading.Lock()

    def start(self) -> None:
        client = self.s.client
        with self._lock:
            self._started = True
            items = [(it.url, it.filename, it.sha256, it.size) for it in self.items]
        cfg = {
            "items": items,
            "cache": str(self.s.cache),
            "jobs": self.jobs,
            "segment": self.segment,
            "task": self.s.task,
            "retries": self.s.retries,
            "backoff": self.s.backoff,
            "timeout": client.timeout,
            "client_retries": client.retries,
            "client_backoff": client.backoff,
            "credentials": client.credentials.snapshot(),
            "beat": _BEAT,
            "open": self.open,
        }
        try:
            self.proc, config = spawn(__name__, cfg)
        except OSError:
            self._finish(("redo",))
            return
        threading.Thread(target=self._write, args=(config,), name="wh-fetch-process-in", daemon=True).start()
        threading.Thread(target=self._read, name="wh-fetch-process", daemon=True).start()
        threading.Thread(target=self._watch, name="wh-fetch-process-watch", daemon=True).start()

    def add(self, items: Sequence[FetchItem]) -> None:
        """More files for an open helper (downloaded beside those it has, in one batch)."""
        items = [it for it in items if self.key(it) not in self._keys]
        if not items:
            return
        with self._lock:
            self.items.extend(items)
            self._keys.update((self.key(it), it) for it in items)
            if not self._started:
                return  # (they go with the config)
        self._outbox.put(("add", [(it.url, it.filename, it.sha256, it.size) for it in items]))

    def seal(self) -> None:
        """No more files: an open helper ends once those it has are done."""
        if self.open:
            self.open = False
            self._outbox.put(("done",))

    # --- ranges it lends (wheelhouse.fetch.lend) ----------------------------------------------------
    def ask_lend(self, n: int) -> None:
        """Ask it for up to ``n`` ranges of its files; the answer arrives in ``take_lent``."""
        with self._lock:
            self.asking = True
        self._outbox.put(("lend", n))

    def take_lent(self) -> list[tuple[str, int, int, int]]:
        """The ranges it lent since the last call: (key, index, start, end); none once it has ended."""
        with self._lock:
            out, self._lent = self._lent, []
        return [] if self.done.is_set() else out

    def give_back(self, key: str, idx: int, written: int) -> None:
        self._outbox.put(("returned", key, idx, written))

    def count_lent(self, key: str, n: int) -> None:
        with self._lock:
            self._lent_counted[key] = self._lent_counted.get(key, 0) + n

    def item_for(self, key: str) -> FetchItem | None:
        with self._lock:
            return self._keys.get(key)

    def has(self, item: FetchItem) -> bool:
        return self.key(item) in self._keys

    def outstanding(self) -> int:
        """Bytes of its files not filed yet."""
        with self._lock:
            return sum(it.size or 0 for it in self.items if self.key(it) not in self.filed)

    def adopt(self, s: Session, on_filed: Callable[[str, Path], None]) -> dict[str, Path]:
        """From now on report on ``s`` and hand filed files to ``on_filed``; returns those filed before."""
        with self._lock:
            self.s, self.on_filed = s, on_filed
            return dict(self.filed)

    def stop(self, deadline: float | None = None) -> None:
        """Tell it to stop now (it cuts its sockets and exits) and wait for it (SIGKILL after
        ``_EXIT_WAIT``, or at ``deadline``); what it wrote stays on disk for the next run."""
        self.open = False
        self._outbox.put(None)  # (the stdin writer ends)
        if self.proc is not None:
            end(self.proc, deadline=deadline, grace=_EXIT_WAIT)
        self.done.wait(_EXIT_WAIT)

    def wait(self, stop: Callable[[], bool] = lambda: False) -> tuple:
        """Its outcome, once it has ended (in short waits: Ctrl-C reaches the caller at once)."""
        while not self.done.wait(0.25):
            if stop():
                self.stop()
        assert self.outcome is not None
        if self.proc is not None:
            end(self.proc, grace=_EXIT_WAIT)
        return self.outcome

    def unfinished(self) -> list[FetchItem]:
        """Its items it did not file (to be downloaded here)."""
        with self._lock:
            return [it for it in self.items if self.key(it) not in self.filed]

    def counted_unfiled(self) -> int:
        """Bytes its progress counted for files it did not file: on disk, recorded, and counted
        again as kept bytes when they are resumed here (``Credit``); with those this process counted
        for ranges of those files it lent (downloaded again, or kept in its record: counted again too)."""
        with self._lock:
            filed = sum(it.size or 0 for it in self.items if self.key(it) in self.filed)
            lent = sum(n for key, n in self._lent_counted.items() if key not in self.filed)
        return max(0, self.advanced - filed) + lent

    # --- internals ----------------------------------------------------------------------
    def _finish(self, outcome: tuple) -> None:
        with self._lock:
            if self.outcome is None:
                self.outcome = outcome
        self.done.set()
        self._outbox.put(None)  # (the stdin writer ends)
        on_lent = self.on_lent
        if on_lent is not None:
            on_lent()  # (a borrower waiting on it looks again)

    def _write(self, config: bytes) -> None:
        """The config, then each frame put in the outbox (an ``add``, the ``seal``, a lend's ask and
        return), in order, until it is stopped or has ended."""
        proc = self.proc
        assert proc is not None
        try:
            proc.stdin.write(config)
            proc.stdin.flush()
            while (msg := self._outbox.get()) is not None:
                proc.stdin.write(frame(msg))
                proc.stdin.flush()
        except (OSError, ValueError):
            return  # (it died, or was stopped: the reader sees its end)

    def _read(self) -> None:
        proc = self.proc
        assert proc is not None
        while True:
            try:
                msg = read_frame(proc.stdout)
                if msg is None:
                    break
                self._heard = time.monotonic()
                self._handle(msg)
            except Exception:  # noqa: BLE001  (not frames: a C library writing to fd 1 there, a frame of
                # another shape. Nothing more it says can be trusted: it is ended and its share redone here.)
                try:
                    proc.kill()
                except OSError:
                    pass
                break
        proc.stdout.close()
        self._finish(("redo",))  # it ended without saying how: whatever it did not file is done here

    def _handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "advance":
            n = int(msg[1])
            with self._lock:
                self.advanced += n
                s = self.s
            s.advance(n)
        elif kind == "note":
            self.s.note(str(msg[1]))
        elif kind == "filed":
            key, path = msg[1], Path(msg[2])
            with self._lock:
                it = self._keys[key]  # (KeyError: not one of its files)
            if path != (cached_path(self.s.cache, it.sha256) if it.sha256 else
                        cached_path(self.s.cache, path.name)):  # placed unhashed: it must be the entry
                raise ValueError(f"the helper filed {key} as {path}")
            with self._lock:  # (with the callback read: ``adopt`` gets each file once, here or there)
                self.filed[key] = path
                on_filed = self.on_filed
            on_filed(key, path)
        elif kind == "lent":
            ranges = [(str(k), int(i), int(a), int(b)) for k, i, a, b in msg[1]]
            with self._lock:
                for k, i, a, b in ranges:
                    it = self._keys[k]  # (KeyError: not one of its files)
                    if not 0 <= a < b <= (it.size or 0):
                        raise ValueError(f"the helper lent bytes {a}-{b} of {k}")
                self._lent.extend(ranges)
                self.asking = False
                self.refused = time.monotonic() if not ranges else 0.0
                on_lent = self.on_lent
            if on_lent is not None:
                on_lent()
        elif kind == "end":
            status, value = msg[1], msg[2]
            if status == "err":
                exc = rebuild(value)
                self._finish(("err", exc) if exc is not None else ("redo",))
            elif status == "nospace":
                self._finish(("nospace", DiskFull(Path(value[0]), list(value[1]))))
                # This share's writers stop too (its Cancelled becomes this DiskFull in
                # _download_shared), as one process's do when one of them fills the disk.
                self.s.cancel.set()
                abort = getattr(self.s.client, "abort", None)
                if abort is not None:
                    abort()
            elif status in ("ok", "cancelled", "redo"):
                self._finish((status,))
            else:
                raise ValueError(f"the helper ended as {status!r}")
        elif kind != "beat":
            raise ValueError(f"a frame of kind {kind!r}")

    def _watch(self) -> None:
        began = time.monotonic()
        ready = False
        while not self.done.wait(min(_BEAT, _SILENT / 4)):
            now = time.monotonic()
            ready = ready or self._heard > began
            if (not ready and now - began > _START_WAIT) or (ready and now - self._heard > _SILENT):
                try:
                    self.proc.kill()  # its pipe closes: the reader finishes it as "redo"
                except OSError:
                    pass
                return


def stop_all(helpers: Sequence[Helper]) -> None:
    """Stop ``helpers`` together: each told at once, all waited for within one ``_EXIT_WAIT`` (one by
    one, two wedged helpers, SIGSTOPped say, held the run for two)."""
    for h in helpers:
        h.open = False
        if h.proc is not None:
            close_input(h.proc)  # (it stops as its stdin ends)
    deadline = time.monotonic() + _EXIT_WAIT
    for h in helpers:
        h.stop(deadline)


class Credit:
    """A reporter that swallows the first ``credit`` bytes of progress: the bytes a stopped helper
    counted are counted again when this process resumes its files (the bar would pass 100%)."""

    def __init__(self, inner, credit: int):
        self.inner, self.credit = inner, credit

    def start(self, task: str, total: float | None = None, unit: str = "") -> None:
        self.inner.start(task, total, unit)

    def finish(self, task: str, message: str = "") -> None:
        self.inner.finish(task, message)

    def note(self, message: str) -> None:
        self.inner.note(message)

    def advance(self, task: str, amount: float = 1) -> None:
        taken = min(self.credit, amount)
        self.credit -= taken
        if amount - taken:
            self.inner.advance(task, amount - taken)


class _Forward:
    """The helper's reporter: progress summed and sent every ``_ADVANCE_EVERY`` s, notes at once."""

    def __init__(self, send: Callable[[tuple], None]):
        self.send = send
        self.sum = 0
        self.since = time.monotonic()
        self.lock = threading.Lock()

    def start(self, task: str, total: float | None = None, unit: str = "") -> None:
        pass

    def finish(self, task: str, message: str = "") -> None:
        self.flush()

    def advance(self, task: str, amount: float = 1) -> None:
        with self.lock:
            self.sum += amount
            if time.monotonic() - self.since < _ADVANCE_EVERY:
                return
        self.flush()

    def flush(self) -> None:
        with self.lock:
            n, self.sum, self.since = self.sum, 0, time.monotonic()
        if n:
            self.send(("advance", n))

    def note(self, message: str) -> None:
        self.send(("note", message))


def serve(cfg: dict) -> None:
    """The helper's side (``Helper.start``): download the share into the cache, say what was filed."""
    import signal
    from concurrent.futures import ThreadPoolExecutor

    from wheelhouse.faults import for_helper
    from wheelhouse.index.http import HttpClient

    from . import _download_all
    from .lend import Lender
    from .spans import split_minimum

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for_helper()
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but frames on the pipe
    out_lock = threading.Lock()

    def send(msg: tuple) -> None:
        data = frame(msg)
        with out_lock:
            out.write(data)
            out.flush()

    client = HttpClient(retries=cfg["client_retries"], backoff=cfg["client_backoff"], timeout=cfg["timeout"])
    client.credentials.restore(cfg["credentials"])
    reporter = _Forward(send)
    s = Session(Path(cfg["cache"]), client, reporter, cfg["task"], retries=cfg["retries"], backoff=cfg["backoff"])

    pool = ThreadPoolExecutor(max_workers=cfg["jobs"], thread_name_prefix="wh-fetch")
    # Its ranges may be lent to wh's process once that one's connections are free (wheelhouse.fetch.lend);
    # pieces as small as its own connections take (_download_all's steal).
    s.lender = Lender(s, pool.submit, split_minimum(cfg["segment"]))
    sealed = threading.Event()  # no more batches (a closed helper: at once)
    batches: list[threading.Thread] = []
    ends: list[tuple] = []  # each batch's end: ("ok",) | ("err", WhError) | ("nospace", DiskFull) | ...
    lock = threading.Lock()

    def filed(key: str, path: Path) -> None:
        # Its progress first: a helper killed right after saying "filed" would else take the file's last
        # bytes (summed, not yet sent) with it, and the bar end short of its total (the file is not redone).
        reporter.flush()
        send(("filed", key, str(path)))
        checkpoint("fetch.helper.filed")

    def batch(items: list[FetchItem]) -> None:
        result: tuple = ("redo",)
        try:
            _download_all(items, s, pool, cfg["jobs"], cfg["segment"], filed)
            result = ("ok",)
        except DiskFull as exc:
            result = ("nospace", exc)
            s.cancel.set()  # the other batches stop too: one no-space error
            client.abort()
        except WhError as exc:
            result = ("err", exc)
        except Cancelled:
            result = ("cancelled",)
        except BaseException:  # noqa: BLE001  (anything else: the parent does this share itself)
            result = ("redo",)
        finally:
            with lock:
                ends.append(result)

    def begin(items: list[FetchItem], first: bool = False) -> None:
        t = threading.Thread(target=batch, args=(items,), name="wh-fetch-batch", daemon=True)
        with lock:  # (none after the end has taken its list of batches to wait for)
            if sealed.is_set() and not first:
                return
            batches.append(t)
            t.start()

    def listen() -> None:  # stdin closed (stop, or the parent died): cut the sockets, keep what is on disk
        try:
            while (msg := read_frame(inp)) is not None:
                if msg[0] == "add":
                    begin([FetchItem(*t) for t in msg[1]])
                elif msg[0] == "done":
                    sealed.set()
                elif msg[0] == "lend":
                    send(("lent", s.lender.lend(int(msg[1]))))
                elif msg[0] == "returned":
                    s.lender.returned(str(msg[1]), int(msg[2]), int(msg[3]))
        except BaseException:  # noqa: BLE001  (READ_ERRORS, a broken pipe, anything else: without this thread
            pass  # nothing lent comes back, and a helper that still beats would wait on it for ever: it stops)
        s.cancel.set()
        client.abort()
        s.lender.close_all()  # (wh's process is gone or stopping: nothing lent comes back)
        sealed.set()

    def beat() -> None:
        while True:
            time.sleep(cfg["beat"])
            try:
                send(("beat",))
            except (OSError, ValueError):
                return

    outcome: tuple | None = ("end", "redo", None)
    try:
        send(("beat",))  # up
        if not cfg.get("open"):
            sealed.set()
        if cfg["items"]:
            begin([FetchItem(*t) for t in cfg["items"]], first=True)
        threading.Thread(target=listen, name="wh-fetch-listen", daemon=True).start()
        threading.Thread(target=beat, name="wh-fetch-beat", daemon=True).start()
        sealed.wait()
        outcome = None
    except BaseException:  # noqa: BLE001  (the pipe to wh broke: it died)
        s.cancel.set()
        client.abort()
        sealed.set()
    finally:
        with lock:  # (sealed: no batch starts after this)
            started = list(batches)
        for t in started:  # every writer stopped before the process ends: no file is left half-written
            t.join()
        if outcome is None:
            outcome = _outcome(ends)
        try:
            reporter.flush()
            send(outcome)
        except (OSError, ValueError):
            pass
        pool.shutdown(wait=False, cancel_futures=True)
        os._exit(0)


def _outcome(ends: list[tuple]) -> tuple:
    """The helper's end frame from its batches' ends: a full disk first, then an error (a hash
    mismatch before others), then a batch that must be redone, then a cancelled one."""
    from .cache import HashMismatch

    for e in ends:
        if e[0] == "nospace":
            return ("end", "nospace", (str(e[1].path), list(e[1].removed)))
    errors = sorted((e[1] for e in ends if e[0] == "err"), key=lambda exc: not isinstance(exc, HashMismatch))
    if errors:
        try:
            frame(flatten(errors[0]))
            return ("end", "err", flatten(errors[0]))
        except Exception:  # noqa: BLE001  (anything pickle raises: done by the parent instead)
            return ("end", "redo", None)
    for status in ("redo", "cancelled"):
        if any(e[0] == status for e in ends):
            return ("end", status, None)
    return ("end", "ok", None)
