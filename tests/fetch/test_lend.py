"""fetch.lend: once this process's share is done, its connections take over ranges of the helper's
files; and a request the index leaves without an answer is cut and sent again. Neither may change
the answer: every file verified and placed, each byte counted once on the bar, nothing left in the
cache's partial folder, and a process killed at any point (this one, the helper) leaves a record that
names only bytes on disk, so the next run verifies."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from file_server import FileServer
from helper_procs import wait_for

from wheelhouse.fetch import FetchItem, fetch_all, procs
from wheelhouse.fetch.ranges import _covers, plan_segments
from wheelhouse.fetch.spans import Spans, plan_cut
from wheelhouse.index.http import HttpClient, HttpError, Ticket
from wheelhouse.progress import RecordingReporter

MIB = 1 << 20
HERE = "here-1.0-py3-none-any.whl"  # the biggest: this process's share
THERE = "there-1.0-py3-none-any.whl"  # the helper's, its first requests crawl
FILES = {HERE: os.urandom(8 * MIB), THERE: os.urandom(8 * MIB - 4096)}

CHILD = """
import json, sys
from pathlib import Path
from wheelhouse.fetch import FetchItem, fetch_all
spec = json.loads(sys.argv[1])
fetch_all([FetchItem(*i) for i in spec["items"]], Path(spec["dest"]), Path(spec["cache"]), jobs=4,
          segment_size=1 << 20, backoff=0.01)
print("done")
"""


class SlowStart(FileServer):
    """The first ``slow_first`` requests for THERE crawl at ``slow`` bytes/s (the helper's own); every
    later one (the ranges lent to wh's process, the helper's splits) is as fast as loopback."""

    def __init__(self, slow: float = 400_000, slow_first: int = 2):
        super().__init__()
        self.slow, self.slow_left = slow, slow_first
        self.requests: dict[str, int] = {}
        self.completed: dict[str, int] = {}  # bytes of the fast answers sent to their end (not cut, not resent)

    def _send(self, handler, name, body):
        with self.lock:
            self.requests[name] = self.requests.get(name, 0) + 1
            crawl = name == THERE and self.slow_left > 0
            if crawl:
                self.slow_left -= 1
        if crawl:
            return self.crawl(handler, name, body, self.slow)
        try:
            for pos in range(0, len(body), 256 * 1024):
                handler.wfile.write(body[pos:pos + 256 * 1024])
            handler.wfile.flush()
        except OSError:
            return  # (cut by the client: a stalled or hedged request; its bytes were not used)
        with self.lock:
            self.completed[name] = self.completed.get(name, 0) + len(body)
            self.served[name] = self.served.get(name, 0) + len(body)


@pytest.fixture
def always(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(procs.ENV, "always")


@pytest.fixture
def helpers(monkeypatch):
    """Every procs.Helper made during the test (to read what it lent)."""
    made: list[procs.Helper] = []
    init = procs.Helper.__init__

    def record(self, *a, **kw):
        init(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(procs.Helper, "__init__", record)
    return made


def _serve(srv: FileServer) -> list[FetchItem]:
    return [srv.add(name, data) for name, data in FILES.items()]


def _fetch(items, tmp_path, **kw):
    rep = RecordingReporter()
    fetch_all(items, tmp_path / "dest", tmp_path / "cache", jobs=4, segment_size=MIB, backoff=0.01, reporter=rep, **kw)
    return rep


def _fetch_slow_start(tmp_path) -> tuple[SlowStart, RecordingReporter]:
    """``_fetch`` of FILES from a SlowStart server; the server (closed) and the reporter."""
    srv = SlowStart()
    try:
        return srv, _fetch(_serve(srv), tmp_path)
    finally:
        srv.close()


def _check(tmp_path, rep=None):
    for name, data in FILES.items():
        assert (tmp_path / "dest" / name).read_bytes() == data, name
    assert not list((tmp_path / "cache" / "partial").iterdir())
    if rep is not None:  # each byte once on the bar, the borrowed ones included
        assert sum(e[2] for e in rep.events if e[0] == "advance") == sum(len(d) for d in FILES.values())


def test_this_process_takes_over_the_tail_of_the_helpers_share(always, helpers, tmp_path):
    srv, rep = _fetch_slow_start(tmp_path)
    _check(tmp_path, rep)
    borrowed = sum(sum(h._lent_counted.values()) for h in helpers)
    assert borrowed >= MIB, "this process downloaded part of the helper's file"
    # Nothing was downloaded twice: a lent range is asked for by one process only. (Counted: the crawling
    # answers as sent, the fast ones once sent to their end; under load a late answer is resent, and the
    # loopback server's buffered copy of the one given up is not a byte the client used.)
    assert srv.served[THERE] < len(FILES[THERE]) + MIB, (srv.served[THERE], srv.requests)


def test_a_borrowed_write_that_fails_goes_back_and_the_helper_finishes_the_range(always, helpers, tmp_path,
                                                                                monkeypatch):
    """A full disk on this process's first write of a lent range: it gives the range back with what it had
    written (nothing), and the helper downloads it itself; the run succeeds."""
    monkeypatch.setenv("WH_FAULT", "fetch.borrow.written:enospc")
    srv, rep = _fetch_slow_start(tmp_path)
    _check(tmp_path, rep)
    assert any(h._lent_counted for h in helpers), "a range was lent"


def test_a_helper_killed_as_it_lends_leaves_its_file_to_this_process(always, helpers, tmp_path, monkeypatch):
    """SIGKILL in the helper right after it recorded the splits it lends, before it answered: this process
    downloads the helper's file itself, from the record it left, and counts each byte once."""
    monkeypatch.setenv("WH_FAULT_HELPER", "fetch.lend:kill")
    srv, rep = _fetch_slow_start(tmp_path)
    _check(tmp_path, rep)
    notes = [e[1] for e in rep.events if e[0] == "note"]
    assert any("second download process stopped" in n for n in notes), notes


def test_wh_killed_while_it_writes_a_borrowed_range_and_the_next_run_verifies(always, tmp_path):
    """SIGKILL this process mid-borrow (its helper ends with it): the record names only bytes written,
    the borrowed ones not yet given back are asked for again, and every file verifies."""
    srv = SlowStart()
    items = _serve(srv)
    spec = json.dumps({"items": [(i.url, i.filename, i.sha256, i.size) for i in items],
                       "dest": str(tmp_path / "dest"), "cache": str(tmp_path / "cache")})
    try:
        killed = subprocess.run([sys.executable, "-c", CHILD, spec], capture_output=True, timeout=120,
                                env={**os.environ, procs.ENV: "always", "WH_FAULT": "fetch.borrow.written:kill"})
        assert killed.returncode == -9, killed.stderr[-2000:]
        again = subprocess.run([sys.executable, "-c", CHILD, spec], capture_output=True, text=True, timeout=120,
                               env={**os.environ, procs.ENV: "always"})
        assert again.returncode == 0, again.stderr[-2000:]
    finally:
        srv.close()
    _check(tmp_path)


# --- which range is cut, and where ----------------------------------------------------------------
def test_a_stalled_transfer_gives_up_all_it_had_left():
    # (bytes left, bytes/s): the second has had no byte since its request went out.
    assert plan_cut([(40 * MIB, 50e6), (6 * MIB, 0.0), (30 * MIB, 45e6)], 4 * MIB) == (1, 0)


def test_otherwise_the_range_with_most_left_is_cut_in_half_and_never_below_the_minimum():
    assert plan_cut([(10 * MIB, 50e6), (30 * MIB, 40e6)], 4 * MIB) == (1, 15 * MIB)
    assert plan_cut([(7 * MIB, 50e6), (6 * MIB, 40e6)], 4 * MIB) is None
    assert plan_cut([(9 * MIB, None)], 4 * MIB) == (0, 9 * MIB // 2)  # (no speed known yet)
    assert plan_cut([], 4 * MIB) is None


def test_a_layout_with_a_range_taken_whole_before_its_first_byte_resumes(tmp_path):
    """A split that took a stalled range whole leaves it empty; killed then, the next run resumes from
    that layout (before, an empty range made it start the file again from byte 0)."""
    import struct

    data = os.urandom(3 * MIB)
    item = FetchItem("http://x/f.whl", "f-1.0-py3-none-any.whl", hashlib.sha256(data).hexdigest(), len(data))
    job = plan_segments(item, tmp_path, MIB)
    assert job is not None
    os.pwrite(job.body_fd, data[:MIB], 0)
    job.release()
    segments = [(0, MIB), (MIB, MIB), (MIB, 2 * MIB), (2 * MIB, 3 * MIB)]
    job.layout.write_text(json.dumps({"v": 3, "size": len(data), "segments": segments}))
    job.record.write_bytes(b"".join(struct.pack("<Q", n) for n in (MIB, 0, 0, 0)))
    again = plan_segments(item, tmp_path, MIB)
    assert again is not None
    try:
        assert again.segments == segments and again.on_disk() == MIB
    finally:
        again.release()
    assert _covers([(0, 5), (5, 5), (5, 9)], 9) and not _covers([(0, 5), (6, 9)], 9)


# --- a request the index leaves unanswered --------------------------------------------------------
def _holding_server(hold: set[int], delay: float):
    """An HTTP/1.1 server that answers at once, except the requests numbered in ``hold`` (1-based),
    whose headers come ``delay`` seconds late; returns (server, {"count": requests seen})."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    state = {"count": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802
            with lock:
                state["count"] += 1
                n = state["count"]
            if n in hold:
                time.sleep(delay)
            body = b"x" * 1000
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return httpd, state


@pytest.fixture
def holding(monkeypatch):
    """``start(hold, delay)`` -> (url, state) of a ``_holding_server``, shut down after the test."""
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    servers = []

    def start(hold: set[int], delay: float):
        httpd, state = _holding_server(hold, delay)
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}/f", state

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def _read(client, url, **kw) -> bytes:
    with client.stream(url, **kw) as resp:
        return b"".join(resp.iter_chunks())


def test_a_download_without_headers_long_after_the_others_is_sent_again(holding):
    url, state = holding({5}, delay=4.0)
    client = HttpClient(retries=0)
    for _ in range(4):  # (the client learns how soon this index answers)
        _read(client, url, hedge=True)
    t = time.monotonic()
    assert _read(client, url, hedge=True) == b"x" * 1000
    took = time.monotonic() - t
    assert client.hedged == 1 and state["count"] == 6
    assert took < 3.0, took  # (the held request would have answered after 4 s)


def test_without_hedge_a_slow_answer_is_waited_for(holding):
    """Index pages and metadata (no ``hedge``) are never sent twice: a slow index stays correct."""
    url, state = holding({5}, delay=1.2)
    client = HttpClient(retries=0)
    for _ in range(5):
        _read(client, url)
    assert client.hedged == 0 and state["count"] == 5


def test_a_ticket_cuts_a_request_waiting_for_headers_and_it_is_not_retried(holding):
    url, state = holding({1}, delay=5.0)
    client = HttpClient(retries=3)
    ticket = Ticket()
    threading.Timer(0.5, ticket.cut).start()
    t = time.monotonic()
    with pytest.raises(HttpError) as err:
        _read(client, url, ticket=ticket)
    assert time.monotonic() - t < 3.0
    assert err.value.reason == "cut" and state["count"] == 1


# --- found by the review of this round ------------------------------------------------------------
def test_a_disk_error_as_the_helper_lends_lends_nothing_and_the_run_succeeds(always, helpers, tmp_path,
                                                                           monkeypatch):
    """The splits are recorded, then the lend fails (ENOSPC injected there): the helper downloads those
    ranges itself. Before, the error ended the helper's listener, which cancelled its whole share."""
    monkeypatch.setenv("WH_FAULT_HELPER", "fetch.lend:enospc")
    srv, rep = _fetch_slow_start(tmp_path)
    _check(tmp_path, rep)
    assert not any(h._lent_counted for h in helpers)
    notes = [e[1] for e in rep.events if e[0] == "note"]
    assert not any("second download process stopped" in n for n in notes), notes  # (it did its share)


def test_no_byte_yet_is_not_a_stall_until_a_second_has_passed():
    from wheelhouse.fetch.spans import request_rate

    assert request_rate(100.0, 0, 100.2) is None  # (too young for any speed)
    assert request_rate(100.0, 0, 100.6) is None  # a far index's handshake and first answer: not stalled
    assert request_rate(100.0, 0, 101.2) == 0.0
    assert request_rate(100.0, 3_000_000, 100.5) == 6_000_000


class _Peer:
    """A stand-in for the helper a loan came from."""

    def __init__(self):
        self.done = threading.Event()
        self.back: list[tuple] = []
        self.counted = 0

    def count_lent(self, key, n):
        self.counted += n

    def give_back(self, key, idx, written):
        self.back.append((key, idx, written))


def test_a_borrowed_piece_that_failed_is_not_cut_and_what_follows_it_is_not_counted():
    from wheelhouse.fetch.lend import _Loan, _split_loan

    loan = _Loan(_Peer(), "k", 0, 0, 40 * MIB)
    loan.pieces = Spans.of([(0, 20 * MIB), (20 * MIB, 40 * MIB)], [5 * MIB, 20 * MIB])  # the first failed at 5 MiB
    loan.pieces.began, loan.pieces.moved = [1.0, 1.0], [5 * MIB, 20 * MIB]
    loan.ended, loan.running = [True, True], 0
    assert loan.written() == 5 * MIB  # what goes back: the bytes from the range's start on
    loan.running = 1
    assert _split_loan([loan], 100.0, 4 * MIB) is None  # an ended piece has no writer to cut


def test_a_watch_the_watchdog_has_cut_cannot_be_given_a_new_deadline():
    from wheelhouse.index.http.deadline import Watchdog

    dog = Watchdog(tick=0.05)
    w = dog.watch(None, 0.05, "hedge")
    assert wait_for(lambda: w.expired, 2)
    assert dog.extend(w, 60, "headers") is False  # (the answer that came as it was cut is resent)
    fresh = dog.watch(None, 60, "headers")
    assert dog.extend(fresh, 60, "headers") is True
    dog.unwatch(w)
    dog.unwatch(fresh)

