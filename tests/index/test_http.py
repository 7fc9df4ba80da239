"""HttpClient against a real server on 127.0.0.1 and real files."""

from __future__ import annotations

import socket
import time
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from wheelhouse.index.http import HttpClient, HttpError


@pytest.fixture
def served(pyindex, wheel_factory):
    path = wheel_factory("alpha", "1.0", pad_bytes=200_000)
    return pyindex(wheel_factory.folder), path


def test_get_reads_body_and_reuses_the_connection(served):
    idx, path = served
    client = HttpClient(retries=0)
    first = client.get(idx.file_url(path.name))
    assert first.status == 200 and first.body == path.read_bytes()
    assert first.headers["Content-Length"] == str(path.stat().st_size)  # case-insensitive
    client.get(idx.url)
    client.get(idx.url)
    # keep-alive: three requests, and the server saw them
    assert idx.hits["/simple/"] == 2
    assert _connections(client, idx.url) == 1


def _connections(client: HttpClient, url: str) -> int:
    """The connections the client's pool for ``url``'s host has opened (urllib3's count)."""
    return client._router.manager_for(url).connection_from_url(url).num_connections


def test_range_request_returns_206_with_only_those_bytes(served):
    idx, path = served
    resp = HttpClient().get(idx.file_url(path.name), {"Range": "bytes=-100"})
    assert resp.status == 206 and resp.body == path.read_bytes()[-100:]
    assert idx.bytes_served(path.name) == 100


def test_404_is_an_http_error_with_hint(served):
    idx, _ = served
    with pytest.raises(HttpError) as err:
        HttpClient(retries=0).get(idx.base + "/simple/nope/")
    assert err.value.status == 404
    assert "nope" in str(err.value) and err.value.hint


def test_dropped_connection_mid_body_reports_bytes_received(served):
    idx, path = served
    idx.drop_after(path.name, 5000)
    got = bytearray()
    with pytest.raises(HttpError) as err:
        with HttpClient(retries=0).stream(idx.file_url(path.name)) as resp:
            for chunk in resp.iter_chunks(1024):
                got += chunk
    assert err.value.received == len(got) == 5000
    # resume with a range from where it stopped
    rest = HttpClient().get(idx.file_url(path.name), {"Range": f"bytes={len(got)}-"})
    assert bytes(got) + rest.body == path.read_bytes()


class _Flaky(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    failures = 2
    seen = 0

    def log_message(self, *a):
        pass

    def do_GET(self):  # noqa: N802
        type(self).seen += 1
        if type(self).seen <= type(self).failures:
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


def _serve(handler):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return srv


def test_5xx_is_retried_with_backoff_then_succeeds():
    handler = type("H", (_Flaky,), {"seen": 0, "failures": 2})
    srv = _serve(handler)
    try:
        resp = HttpClient(retries=3, backoff=0.01).get(f"http://127.0.0.1:{srv.server_address[1]}/x")
        assert resp.body == b"ok" and handler.seen == 3
    finally:
        srv.shutdown()
        srv.server_close()


def test_5xx_gives_up_after_retries():
    handler = type("H", (_Flaky,), {"seen": 0, "failures": 99})
    srv = _serve(handler)
    try:
        with pytest.raises(HttpError) as err:
            HttpClient(retries=2, backoff=0.01).get(f"http://127.0.0.1:{srv.server_address[1]}/x")
        assert err.value.status == 503 and handler.seen == 3
    finally:
        srv.shutdown()
        srv.server_close()


def test_connection_refused_is_an_http_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(HttpError) as err:
        HttpClient(retries=1, backoff=0.01).get(f"http://127.0.0.1:{port}/simple/")
    assert err.value.status is None and "connection failed" in str(err.value)


def test_file_urls_with_ranges(tmp_path):
    f = tmp_path / "blob.bin"
    f.write_bytes(bytes(range(256)) * 4)
    client = HttpClient()
    assert client.get(f.as_uri()).body == f.read_bytes()
    part = client.get(f.as_uri(), {"Range": "bytes=10-19"})
    assert part.status == 206 and part.body == f.read_bytes()[10:20]
    with pytest.raises(HttpError) as err:
        client.get((tmp_path / "missing").as_uri())
    assert err.value.status == 404


def test_parallel_gets_share_one_client(served):
    idx, path = served
    client = HttpClient()
    with ThreadPoolExecutor(8) as pool:
        bodies = list(pool.map(lambda _: client.get(idx.file_url(path.name)).body, range(24)))
    assert all(b == path.read_bytes() for b in bodies)


def test_get_cached_revalidates_with_etag(served, tmp_path):
    idx, _ = served
    client = HttpClient(cache_dir=tmp_path / "cache")
    url = idx.url + "alpha/"
    first = client.get_cached(url, {"Accept": "text/html"}, max_age=0)
    again = client.get_cached(url, {"Accept": "text/html"}, max_age=0)
    assert first.body == again.body and b"alpha-1.0" in again.body
    conditional = [h for p, h in idx.log if p == "/simple/alpha/" and "If-None-Match" in h]
    assert len(conditional) == 1  # second request was a revalidation (304)
    fresh = client.get_cached(url, {"Accept": "text/html"}, max_age=3600)
    assert fresh.body == first.body and idx.hits["/simple/alpha/"] == 2  # served from disk


def test_credentials_from_url_or_netrc_are_sent_and_not_printed(served, tmp_path, monkeypatch):
    import base64

    from wheelhouse.index.http import credentials as whhttp

    idx, _ = served
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login alice password s3cret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setattr(whhttp, "_NETRC", {})
    HttpClient().get(idx.url)
    assert idx.log[-1][1]["Authorization"] == "Basic " + base64.b64encode(b"alice:s3cret").decode()
    with pytest.raises(HttpError) as err:
        HttpClient(retries=0).get(idx.url.replace("http://", "http://bob:hunter2@") + "missing/")
    assert idx.log[-1][1]["Authorization"] == "Basic " + base64.b64encode(b"bob:hunter2").decode()
    assert "hunter2" not in str(err.value) and "bob" not in str(err.value)
    assert "hunter2" not in err.value.url  # the URL wh keeps is the one without credentials


def test_a_proxy_from_the_environment_is_used_with_the_credentials(served, monkeypatch):
    """http_proxy names a (loopback) proxy: the request goes through it, the index still gets the
    Basic credentials, and the URL wh keeps has none."""
    import base64
    import urllib.request

    idx, path = served
    seen = []

    class Proxy(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802 - a forwarding proxy: the request line holds the absolute URL
            seen.append(self.path)
            req = urllib.request.Request(self.path, headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req) as up:
                body = up.read()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    proxy.daemon_threads = True
    threading.Thread(target=proxy.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{proxy.server_address[1]}")
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        url = idx.file_url(path.name).replace("http://", "http://carol:pr0xy-t0ken@")
        resp = HttpClient(retries=0).get(url)
        assert resp.body == path.read_bytes() and "pr0xy-t0ken" not in resp.url
        assert seen and seen[0].endswith(path.name)
        assert idx.log[-1][1]["Authorization"] == "Basic " + base64.b64encode(b"carol:pr0xy-t0ken").decode()
    finally:
        proxy.shutdown()
        proxy.server_close()


class _Recorder(BaseHTTPRequestHandler):
    """Answers from ``script``: path -> (status, headers, body); records (path, headers)."""

    protocol_version = "HTTP/1.1"
    script: dict = {}
    seen: list = []

    def log_message(self, *a):
        pass

    def do_GET(self):  # noqa: N802
        type(self).seen.append((self.path, dict(self.headers.items())))
        status, headers, body = type(self).script[self.path]
        if callable(body):
            status, headers, body = body(len(type(self).seen))
        self.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


def _recorder(script: dict):
    handler = type("R", (_Recorder,), {"script": script, "seen": []})
    return _serve(handler), handler


def test_a_redirect_to_another_host_drops_the_credentials_and_keeps_them_on_the_same_host(tmp_path, monkeypatch):
    import base64

    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    other, other_seen = _recorder({"/x.whl": (200, {}, b"wheel")})
    origin, origin_seen = _recorder({})
    other_url = f"http://127.0.0.1:{other.server_address[1]}/x.whl"  # another port: another origin
    origin_seen.script.update({"/a": (302, {"Location": "/b"}, b""), "/b": (301, {"Location": other_url}, b"")})
    try:
        base = f"http://bob:hunter2@127.0.0.1:{origin.server_address[1]}"
        resp = HttpClient(retries=0).get(base + "/a")
        assert resp.body == b"wheel" and resp.url == other_url  # the final URL, without credentials
        auth = "Basic " + base64.b64encode(b"bob:hunter2").decode()
        assert [(p, h.get("Authorization")) for p, h in origin_seen.seen] == [("/a", auth), ("/b", auth)]
        assert [p for p, _ in other_seen.seen] == ["/x.whl"] and "Authorization" not in other_seen.seen[0][1]
    finally:
        for srv in (origin, other):
            srv.shutdown()
            srv.server_close()


def test_a_redirect_loop_is_an_http_error():
    srv, seen = _recorder({"/loop": (302, {"Location": "/loop"}, b"")})
    try:
        with pytest.raises(HttpError, match="too many redirects"):
            HttpClient(retries=0).get(f"http://127.0.0.1:{srv.server_address[1]}/loop")
        assert len(seen.seen) == 11  # the first request and ten redirects
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_waited_for_then_the_request_succeeds(status):
    def answer(n):
        return (status, {"Retry-After": "1"}, b"slow down") if n == 1 else (200, {}, b"ok")

    srv, seen = _recorder({"/x": (0, {}, answer)})
    try:
        t0 = time.monotonic()
        resp = HttpClient(retries=2, backoff=0.01).get(f"http://127.0.0.1:{srv.server_address[1]}/x")
        assert resp.body == b"ok" and len(seen.seen) == 2
        assert 1.0 <= time.monotonic() - t0 < 5  # the server's second, not the 0.01 s backoff
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_retry_after_of_an_hour_is_waited_for_at_most_the_cap(monkeypatch):
    from wheelhouse.index.http import transport

    monkeypatch.setattr(transport, "MAX_RETRY_AFTER", 0.5)
    srv, seen = _recorder({"/x": (429, {"Retry-After": "3600"}, b"")})
    try:
        t0 = time.monotonic()
        with pytest.raises(HttpError) as err:
            HttpClient(retries=1, backoff=0.01).get(f"http://127.0.0.1:{srv.server_address[1]}/x")
        assert err.value.status == 429 and len(seen.seen) == 2
        assert 0.5 <= time.monotonic() - t0 < 3
    finally:
        srv.shutdown()
        srv.server_close()
