"""HttpClient.stream's ``batches_into``: a body read into one reused buffer keeps every promise of
``iter_chunks``: the stall watch, what arrived handed out before an error (for resuming), a limit,
keep-alive, and chunked bodies. A scripted server on 127.0.0.1 sends exactly what each case needs."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from wheelhouse.index.http import HttpClient, HttpError

DATA = os.urandom(300_000)


class _Scripted:
    """Answers each connection's requests by ``script(conn, request_number)``; counts connections."""

    def __init__(self, script):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.held: list[socket.socket] = []
        self.stop = threading.Event()
        self.script = script
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        self.sock.settimeout(0.05)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            self.held.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = b""
        n = 0
        try:
            while not self.stop.is_set():
                while b"\r\n\r\n" not in buf:
                    more = conn.recv(65536)
                    if not more:
                        return
                    buf += more
                head, buf = buf.split(b"\r\n\r\n", 1)
                if self.script(conn, n, head.decode()) is False:
                    return
                n += 1
        except OSError:
            pass

    def close(self):
        self.stop.set()
        for c in self.held:
            c.close()
        self.sock.close()


@pytest.fixture
def scripted():
    servers = []

    def start(script):
        servers.append(_Scripted(script))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _head(length: int | None, status: str = "200 OK", extra: str = "") -> bytes:
    size = f"Content-Length: {length}\r\n" if length is not None else ""
    return f"HTTP/1.1 {status}\r\n{size}{extra}\r\n".encode()


def _collect(client: HttpClient, url: str, limit=None, headers=None) -> tuple[bytes, list[int]]:
    got, sizes = bytearray(), []
    with client.stream(url, headers) as resp:
        for view in resp.batches_into(bytearray(64 * 1024), limit, 0.05):
            got += view
            sizes.append(len(view))
    return bytes(got), sizes


def test_the_whole_body_arrives_through_one_reused_buffer_and_the_connection_is_kept(scripted):
    def script(conn, n, head):
        conn.sendall(_head(len(DATA)) + DATA)

    srv = scripted(script)
    with HttpClient(retries=0) as client:
        for _ in range(2):
            got, sizes = _collect(client, f"http://127.0.0.1:{srv.port}/a.whl")
            assert got == DATA and max(sizes) <= 64 * 1024
    assert srv.connections == 1  # read to its end: kept alive for the next request


def test_a_limit_stops_there_and_a_body_that_ends_there_keeps_its_connection(scripted):
    def script(conn, n, head):
        conn.sendall(_head(100_000, "206 Partial Content") + DATA[:100_000])

    srv = scripted(script)
    with HttpClient(retries=0) as client:
        got, _ = _collect(client, f"http://127.0.0.1:{srv.port}/a.whl", limit=100_000)
        assert got == DATA[:100_000]
        got, _ = _collect(client, f"http://127.0.0.1:{srv.port}/a.whl", limit=40_000)  # excess: cut off
        assert got == DATA[:40_000]
        got, _ = _collect(client, f"http://127.0.0.1:{srv.port}/a.whl", limit=100_000)
        assert got == DATA[:100_000]
    assert srv.connections == 2  # the excess cost its connection, nothing else


@pytest.fixture(params=["with a Content-Length", "chunked"])
def framing(request):
    """Each case both ways: a plain body is read from the socket under urllib3, a chunked one through it."""
    return request.param


def _framed(framing: str, data: bytes, total: int) -> bytes:
    if framing == "chunked":
        return _head(None, extra="Transfer-Encoding: chunked\r\n") + b"%x\r\n%s" % (total, data)
    return _head(total) + data


def test_a_big_body_arrives_whole_and_its_connection_is_kept_for_the_next_request(scripted):
    big = DATA * 20  # 6 MB: most of it read from the socket itself

    def script(conn, n, head):
        conn.sendall(_head(len(big)) + big)  # the head of the body comes with the headers

    srv = scripted(script)
    with HttpClient(retries=0) as client:
        for _ in range(3):
            got, sizes = _collect(client, f"http://127.0.0.1:{srv.port}/a.whl")
            assert got == big and max(sizes) <= 64 * 1024
        got, _ = _collect(client, f"http://127.0.0.1:{srv.port}/a.whl", limit=2_000_000)  # excess: cut off
        assert got == big[:2_000_000]
        assert _collect(client, f"http://127.0.0.1:{srv.port}/a.whl")[0] == big
    assert srv.connections == 2  # each body read to its end left its connection; the excess cost one


def test_a_dropped_connection_hands_out_what_arrived_then_raises_with_received(scripted, framing):
    def script(conn, n, head):
        conn.sendall(_framed(framing, DATA[:70_000], len(DATA)))
        conn.shutdown(socket.SHUT_RDWR)
        return False

    srv = scripted(script)
    got = bytearray()
    with HttpClient(retries=0) as client:
        with pytest.raises(HttpError) as err:
            with client.stream(f"http://127.0.0.1:{srv.port}/a.whl") as resp:
                for view in resp.batches_into(bytearray(1 << 20), None, 0.05):
                    got += view
    assert bytes(got) == DATA[:70_000] and err.value.received == 70_000
    if framing != "chunked":
        assert "70000 of 300000" in err.value.reason


def test_a_stalled_body_is_cut_by_the_watch_after_handing_out_what_arrived(scripted, monkeypatch, framing):
    monkeypatch.setenv("WH_HTTP_STALL", "0.5")

    def script(conn, n, head):
        conn.sendall(_framed(framing, DATA[:50_000], len(DATA)))
        time.sleep(30)  # then nothing: a hung server
        return False

    srv = scripted(script)
    got = bytearray()
    t0 = time.monotonic()
    with HttpClient(retries=0) as client:
        with pytest.raises(HttpError) as err:
            with client.stream(f"http://127.0.0.1:{srv.port}/a.whl") as resp:
                for view in resp.batches_into(bytearray(1 << 20), None, 0.05):
                    got += view
    assert time.monotonic() - t0 < 10
    assert bytes(got) == DATA[:50_000] and err.value.received == 50_000
    assert "stalled" in err.value.reason


def test_a_slow_body_is_handed_out_within_the_batch_time_not_when_the_buffer_is_full(scripted):
    def script(conn, n, head):
        conn.sendall(_head(60_000))
        for i in range(0, 60_000, 10_000):
            conn.sendall(DATA[i:i + 10_000])
            time.sleep(0.15)

    srv = scripted(script)
    with HttpClient(retries=0) as client:
        got, sizes = _collect(client, f"http://127.0.0.1:{srv.port}/a.whl")
    assert got == DATA[:60_000] and len(sizes) >= 3  # not one batch at the end: a kill keeps the rest


def test_a_chunked_body_arrives_whole(scripted):
    def script(conn, n, head):
        parts = b"".join(b"%x\r\n%s\r\n" % (len(DATA[i:i + 50_000]), DATA[i:i + 50_000])
                         for i in range(0, len(DATA), 50_000))
        conn.sendall(_head(None, extra="Transfer-Encoding: chunked\r\n") + parts + b"0\r\n\r\n")

    srv = scripted(script)
    with HttpClient(retries=0) as client:
        got, _ = _collect(client, f"http://127.0.0.1:{srv.port}/a.whl")
    assert got == DATA
