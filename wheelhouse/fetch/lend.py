"""Ranges lent across processes: a download process that has finished its share takes over the tail
of the other's.

Why: ``procs`` splits a big fetch between this process and a helper by whole files, fixed at the start.
The helper starts ~0.15 s later and one slow connection can hold a share back: on the 7 NVIDIA wheels
the helper ended 0.3-1.0 s after this process in three timelines out of three, this process's four
connections idle all that time (docs/benchmarks.md, Fetch). Inside one process an idle connection
already takes half of the range with the most bytes left (``ranges.split_range``); this does the same
across the pipe.

How, in frames on the helper's pipes:

- this process, with connections free and a helper still at work, asks it: ``("lend", n)``;
- the helper splits up to ``n`` of its ranges as it would for a connection of its own (recorded
  before anything is asked for), marks each new range as written elsewhere (none of its connections
  writes it, and it is never split again) and answers ``("lent", [(key, index, start, end), ...])``
  (an empty list: nothing worth lending);
- this process downloads each range into the file's body in the cache, which the helper created and
  preallocated (``pwrite`` at the range's offsets: no byte outside it), and gives it back with how
  many bytes it wrote: ``("returned", key, index, written)``, only once those bytes' writes returned;
- the helper records them, hashes them (read back from the page cache: it keeps the running hash,
  the verification and the filing, as for any range) and, where fewer came than asked for (an HTTP
  error, a server that ignores ranges, Ctrl-C), downloads the rest itself, with its own retries:
  an error is the helper's to report, once, as before.

What a kill costs (never a wrong byte): the helper's record claims a lent range's bytes only after
they were given back, so a process killed at any moment leaves a record that names only bytes on
disk; a range lent and not given back is asked for again by the next run. If the helper dies, this
process stops its borrowed ranges before it downloads what the helper did not file (the body's only
writer again); their bytes count once on the progress bar (``Helper.counted_unfiled``).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Callable, Sequence

from wheelhouse.faults import checkpoint
from wheelhouse.index.http import HttpError, Ticket

from .cache import partial_path
from .ranges import Segmented, split_range
from .session import Cancelled, Session, body_batches, write_blocks
from .spans import Spans, cut_blocks, plan_cut, split_minimum

if TYPE_CHECKING:
    from .procs import Helper

__all__ = ["Lender", "Inbox", "borrow"]

_ASK_AGAIN = 0.5  # after an empty answer, the same helper is asked again no sooner than this
_POLL = 0.1


class Inbox:
    """Tasks handed to a running ``_collect`` from another thread: the futures of lent ranges."""

    def __init__(self, jobs: Sequence[Segmented]):
        self.jobs = list(jobs)
        self.accepting = True  # False once the collect failed or ended: nothing more is lent from it
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.wake: Future = Future()

    def add(self, fut: Future, job: Segmented) -> None:
        self._q.put((fut, job))
        with self._lock:
            if not self.wake.done():
                self.wake.set_result(None)

    def take(self) -> dict[Future, Segmented]:
        """What was added since the last call (a new ``wake`` first: nothing added after is missed)."""
        with self._lock:
            if self.wake.done():
                self.wake = Future()
        out = {}
        while True:
            try:
                fut, job = self._q.get_nowait()
            except queue.Empty:
                return out
            out[fut] = job


class Lender:
    """The helper's side: which of its ranges are lent, and what happens as they come back."""

    def __init__(self, s: Session, submit: Callable, minimum: int):
        self.s, self.submit, self.minimum = s, submit, minimum
        self._lock = threading.Lock()
        self._inboxes: list[Inbox] = []
        self._out: dict[tuple[str, int], tuple[Segmented, Future, Inbox]] = {}
        self._backs: dict[Future, Inbox] = {}  # take-backs running: waited for before their files close

    def open(self, jobs: Sequence[Segmented]) -> Inbox:
        inbox = Inbox(jobs)
        with self._lock:
            self._inboxes.append(inbox)
        return inbox

    def seal(self, inbox: Inbox) -> None:
        """Nothing more is lent from ``inbox`` (its collect is about to end)."""
        with self._lock:
            inbox.accepting = False

    def close(self, inbox: Inbox) -> list[Future]:
        """A collect stops: nothing more lent from it, and what it still waits for is given up. Returns
        the take-backs still running for it (its files stay open until they have ended)."""
        with self._lock:
            inbox.accepting = False
            if inbox in self._inboxes:
                self._inboxes.remove(inbox)
            gone = [k for k, (_, _, ib) in self._out.items() if ib is inbox]
            futures = [self._out.pop(k)[1] for k in gone]
            backs = [f for f, ib in self._backs.items() if ib is inbox]
        for fut in futures:
            if not fut.done():
                fut.set_exception(Cancelled())
        return backs

    def close_all(self) -> None:
        with self._lock:
            inboxes = list(self._inboxes)
        for inbox in inboxes:
            self.close(inbox)

    def lend(self, n: int) -> list[tuple[str, int, int, int]]:
        """Split up to ``n`` ranges for the other process: (key, index, start, end) of each."""
        got = []
        with self._lock:
            if self.s.cancel.is_set():
                return got
            for _ in range(max(0, n)):
                live = {id(job): (job, ib) for ib in self._inboxes if ib.accepting for job in ib.jobs}
                cut = split_range([job for job, _ in live.values()], self.minimum, lend=True)
                if cut is None:
                    break
                job, idx = cut
                inbox = live[id(job)][1]
                fut: Future = Future()
                key = job.item.sha256 or ""
                self._out[(key, idx)] = (job, fut, inbox)
                inbox.add(fut, job)
                a, b = job.segments[idx]
                got.append((key, idx, a, b))
        if got:
            try:
                checkpoint("fetch.lend")  # killed here: the splits are recorded, lent to no one
            except OSError:  # (an injected disk error: nothing is lent, the helper does those ranges itself)
                for key, idx, *_ in got:
                    self.returned(key, idx, 0)
                return []
        return got

    def returned(self, key: str, idx: int, written: int) -> None:
        with self._lock:
            entry = self._out.pop((key, idx), None)
        if entry is None:
            return  # (given up: its collect stopped)
        job, fut, inbox = entry
        with self._lock:
            try:
                inner = self.submit(_take_back, job, idx, written, self.s)
            except RuntimeError:  # (the pool is shut down: the run is ending)
                inner = None
            else:
                self._backs[inner] = inbox
        if inner is None:
            fut.set_exception(Cancelled())
            return

        def chain(done: Future) -> None:
            with self._lock:
                self._backs.pop(done, None)
            if fut.done():
                return
            exc = done.exception()
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(done.result())

        inner.add_done_callback(chain)


def _take_back(job: Segmented, idx: int, written: int, s: Session):
    """A lent range is back with ``written`` bytes on disk: record them, then finish it as any range
    here (``fetch_range``: the rest downloaded, with its own retries and errors, where some did not
    come; the count of ranges left; the last one verifies and files the file)."""
    from .ranges import _U64, fetch_range

    with job.guard:
        n = job.spans.returned(idx, written)
    if job.record_fd >= 0:
        os.pwrite(job.record_fd, _U64.pack(n), _U64.size * idx)  # (after the bytes: they were written there)
    return fetch_range(job, idx, s)


# --- this process's side -------------------------------------------------------------------------
class _Loan:
    """A range lent by a helper, downloaded here in one or more pieces (an idle connection here takes
    the end of a lagging piece, as ``ranges.split_range`` does in one process); given back once every
    piece has ended, with the bytes written from its start on."""

    def __init__(self, h: "Helper", key: str, idx: int, a: int, b: int):
        self.h, self.key, self.idx, self.a = h, key, idx, a
        self.pieces = Spans.of([(a, b)])
        self.ended = [False]  # a piece whose writer has stopped (done, or failed: it is not cut again)
        self.running = 1  # pieces not yet ended (counted as each is made, under the guard)
        self.fd = -1
        self.guard = threading.Lock()

    def cut(self) -> None:
        with self.guard:
            tickets = [t for t in self.pieces.tickets if t is not None]
        for t in tickets:
            t.cut()

    def written(self) -> int:
        """Bytes on disk from the range's start, up to the first piece that did not finish."""
        return self.pieces.prefix_end() - self.a


def borrow(helpers: Sequence["Helper"], s: Session, pool, jobs: int, segment: int) -> None:
    """While ``helpers`` run, keep this process's free connections (``jobs`` less the helpers') busy: on
    ranges lent by the helper with the most left, else on the tail of a lagging borrowed piece. Returns
    once every helper has ended and every borrowed range was given back. Raises only Cancelled (stopped)."""
    wake = threading.Event()
    loans: list[_Loan] = []
    tasks: set[Future] = set()

    def start(loan: _Loan, j: int) -> None:  # (``loan.running`` already counts the piece)
        tasks.add(pool.submit(_fetch_piece, loan, j, s, wake))

    for h in helpers:
        h.on_lent = wake.set
    try:
        while True:
            tasks.difference_update([f for f in tasks if f.done()])
            loans[:] = [loan for loan in loans if loan.running]
            for loan in loans:
                if loan.h.done.is_set():
                    loan.cut()  # its helper ended: its file is redone here, its pieces stop now
            running = [h for h in helpers if not h.done.is_set()]
            if not running and not tasks:
                return
            for h in running:
                for key, idx, a, b in h.take_lent():
                    loan = _Loan(h, key, idx, a, b)
                    if _open_body(loan, s):
                        loans.append(loan)
                        start(loan, 0)
                    else:
                        h.give_back(key, idx, 0)
            free = jobs - sum(h.jobs for h in running) - len(tasks)
            now = time.monotonic()
            if free > 0 and running and not s.cancel.is_set():
                askable = [h for h in running if not h.asking and now - h.refused >= _ASK_AGAIN
                           and h.outstanding() >= 2 * split_minimum(segment)]
                if askable:
                    max(askable, key=lambda h: h.outstanding()).ask_lend(free)
                elif not any(h.asking for h in running):
                    for _ in range(free):
                        cut = _split_loan(loans, now, split_minimum(segment))
                        if cut is None:
                            break
                        start(*cut)
            s.check()
            wake.wait(_POLL)
            wake.clear()
    finally:
        for h in helpers:
            h.on_lent = None


def _open_body(loan: _Loan, s: Session) -> bool:
    """Open the body the helper made and preallocated for the lent file (nothing is created here)."""
    item = loan.h.item_for(loan.key)
    part = partial_path(s.cache, loan.key)
    try:
        fd = os.open(part.with_name(part.name + ".body"), os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    if item is None or os.fstat(fd).st_size != item.size:
        os.close(fd)
        return False
    loan.fd = fd
    return True


def _split_loan(loans: Sequence[_Loan], now: float, minimum: int) -> tuple[_Loan, int] | None:
    """Cut the borrowed piece that would end last, for an idle connection here (``spans.plan_cut``),
    in pieces of at least ``minimum``."""
    pieces = []
    for loan in loans:
        with loan.guard:
            if not loan.h.done.is_set():
                pieces += [(loan, j, left, rate) for j, left, rate in loan.pieces.open_ranges(now, loan.ended)]
    cut = plan_cut([(left, rate) for _, _, left, rate in pieces], minimum)
    if cut is None:
        return None
    loan, j, _, _ = pieces[cut[0]]
    with loan.guard:
        if not loan.running or loan.ended[j]:
            return None  # (its last piece ended meanwhile: given back)
        made = loan.pieces.split(j, cut[1])
        if made is None:
            return None  # (its writer moved on)
        new, abandoned = made
        loan.ended.append(False)
        loan.running += 1
    if abandoned is not None:
        abandoned.cut()  # (nothing left to wait for: a request with no headers yet)
    return loan, new


def _fetch_piece(loan: _Loan, j: int, s: Session, wake: threading.Event) -> None:
    """Download one piece of a borrowed range (one attempt: what fails goes back to the helper, which
    retries it and reports what keeps failing); the piece that ends last gives the range back."""
    try:
        _write_piece(loan, j, s)
    except (HttpError, OSError, Cancelled):
        pass
    finally:
        with loan.guard:
            loan.ended[j] = True
            loan.running -= 1
            last = loan.running == 0
        if last:
            os.close(loan.fd)
            written = loan.written()
            # On the bar only what goes back: bytes past a piece that failed are not in it, and come again.
            loan.h.count_lent(loan.key, written)
            s.advance(written)
            loan.h.give_back(loan.key, loan.idx, written)  # (every write of it has returned)
        wake.set()


def _write_piece(loan: _Loan, j: int, s: Session) -> None:
    item = loan.h.item_for(loan.key)
    assert item is not None
    ticket = Ticket()
    with loan.guard:
        (a, b), have = loan.pieces.segments[j], loan.pieces.have[j]
        loan.pieces.sent(j, ticket)
    start = a + have
    if start >= b:
        return
    headers = {"Range": f"bytes={start}-{b - 1}", "Accept-Encoding": "identity"}
    with s.client.stream(item.url, headers, ticket=ticket, hedge=True) as resp:
        if resp.status != 206:
            return  # (the server ignores ranges: the helper finds out itself, and falls back)
        for blocks, n in body_batches(resp, b - start):
            if loan.h.done.is_set() or s.cancel.is_set():
                return  # (the helper ended: its files are redone here; or Ctrl-C)
            with loan.guard:
                offset, kept = loan.pieces.claim(j, n)  # (a split may have moved its end)
                end = loan.pieces.segments[j][1]
            if kept < n:
                blocks, n = cut_blocks(blocks, kept), kept
            if n:
                write_blocks(loan.fd, blocks, offset)
            with loan.guard:
                loan.pieces.wrote(j, n)
            checkpoint("fetch.borrow.written")
            if offset + n >= end:
                return  # (cut at a split: the rest is another piece's)
