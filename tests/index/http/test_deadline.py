"""wheelhouse.index.http.deadline: a request past its deadline has its socket cut, whatever it is
blocked in; Ctrl-C cuts everything; the limits come from the environment."""

from __future__ import annotations

import http.client
import socket
import threading
import time

import pytest

from wheelhouse.index.http.deadline import (
    LOW_SPEED_BYTES,
    Watchdog,
    body_deadline,
    max_body_bytes,
    stall_seconds,
)


@pytest.fixture
def silent_server():
    """Accepts connections, reads the request, never answers (a hung index)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            held.append(conn)

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    for c in held:
        c.close()
    srv.close()


def _request(port: int) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)  # the socket timeout alone would wait 10 s
    conn.request("GET", "/simple/")
    return conn


def test_a_request_without_headers_in_time_is_cut(silent_server):
    wd = Watchdog(tick=0.02)
    conn = _request(silent_server)
    w = wd.watch(conn, 0.2, "headers")
    w.bind()
    t0 = time.monotonic()
    with pytest.raises((OSError, http.client.HTTPException)):
        conn.getresponse()
    assert time.monotonic() - t0 < 2
    assert w.expired and w.what == "headers"
    conn.close()


def test_an_unwatched_request_is_left_alone(silent_server):
    wd = Watchdog(tick=0.02)
    conn = _request(silent_server)
    w = wd.watch(conn, 0.1, "headers")
    w.bind()
    wd.unwatch(w)
    conn.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):  # only the socket's own timeout ends it: nobody cut it
        conn.getresponse()
    assert not w.expired
    conn.close()


def test_abort_all_cuts_requests_in_flight_and_refuses_new_ones(silent_server):
    wd = Watchdog(tick=0.02)
    conns = [_request(silent_server) for _ in range(3)]
    watches = [wd.watch(c, 60, "body") for c in conns]
    for w in watches:
        w.bind()
    errors = []

    def wait(c):
        try:
            c.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wait, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    time.sleep(0.1)
    t0 = time.monotonic()
    wd.abort_all()
    for t in threads:
        t.join(5)
    assert time.monotonic() - t0 < 2 and len(errors) == 3
    assert all(w.expired and w.what == "interrupted" for w in watches)
    assert wd.aborted
    with pytest.raises(InterruptedError):
        wd.watch(None, 60, "headers")
    for c in conns:
        c.close()


def test_a_stream_that_keeps_moving_gets_more_time_and_a_trickle_does_not():
    w = Watchdog().watch(None, 0.5, "stalled")
    first = w.deadline
    w.progress(LOW_SPEED_BYTES - 1, 30)
    assert w.deadline == first  # a trickle earns nothing
    w.progress(1, 30)
    assert w.deadline > first + 29  # LOW_SPEED_BYTES in all: another window
    w.progress(LOW_SPEED_BYTES // 2, 60)
    assert w.deadline < first + 31  # the count restarted with the new window


def test_limits_come_from_the_environment(monkeypatch):
    for var in ("WH_HTTP_DEADLINE", "WH_HTTP_STALL", "WH_MAX_PAGE_MB"):
        monkeypatch.delenv(var, raising=False)
    assert (body_deadline(), stall_seconds(), max_body_bytes()) == (300.0, 30.0, 64 << 20)
    monkeypatch.setenv("WH_HTTP_DEADLINE", "12.5")
    monkeypatch.setenv("WH_HTTP_STALL", "3")
    monkeypatch.setenv("WH_MAX_PAGE_MB", "0.5")
    assert (body_deadline(), stall_seconds(), max_body_bytes()) == (12.5, 3.0, 1 << 19)
    # nonsense falls back to the defaults instead of disabling the limit
    monkeypatch.setenv("WH_HTTP_DEADLINE", "soon")
    monkeypatch.setenv("WH_HTTP_STALL", "-1")
    monkeypatch.setenv("WH_MAX_PAGE_MB", "0")
    assert (body_deadline(), stall_seconds(), max_body_bytes()) == (300.0, 30.0, 64 << 20)


@pytest.mark.parametrize("keep_alive", [False, True])
def test_a_response_cut_as_its_headers_came_closes_its_socket_at_once(monkeypatch, keep_alive):
    """The watchdog can cut a request in the instant its headers arrive (a hedge's deadline, a ticket):
    the request fails, and the answer's socket is closed then, not left to the garbage collector (an
    HTTP/1.0 answer owns its socket once http.client has it; under load this was a ResourceWarning)."""
    import gc

    from file_server import FileServer
    from wheelhouse.index.http import HttpClient, HttpError

    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    srv = FileServer()
    if keep_alive:
        srv.httpd.RequestHandlerClass.protocol_version = "HTTP/1.1"
    item = srv.add("a-1.0-py3-none-any.whl", b"x" * 1000)
    answers: list[http.client.HTTPResponse] = []
    real = http.client.HTTPConnection.getresponse

    def getresponse(self):
        answers.append(real(self))
        return answers[-1]

    monkeypatch.setattr(http.client.HTTPConnection, "getresponse", getresponse)
    client = HttpClient(retries=0)
    real_extend = client._watchdog.extend
    monkeypatch.setattr(client._watchdog, "extend",
                        lambda w, s, what: False if what == "headers" else real_extend(w, s, what))
    gc.disable()  # only an explicit close may close it
    try:
        with pytest.raises(HttpError):
            client.get(item.url)
        assert answers and all(a.fp is None for a in answers), "an answer's socket was left open"
    finally:
        gc.enable()
        client.close()
        srv.close()
