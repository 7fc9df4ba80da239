"""wheelhouse.index.http.proxy: the proxy the environment names is used (except for no_proxy hosts),
and a request through it reads like an http.client response."""

from __future__ import annotations

import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from wheelhouse.index.http.proxy import proxy_for, via_urllib

TARGET = "http://index.example.invalid/simple/demo/"  # never resolved: the proxy answers for it

_PROXY_VARS = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
               "no_proxy", "NO_PROXY", "REQUEST_METHOD")


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch):
    for var in _PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    # urlopen() builds its opener, with the proxies the environment named then, once per process:
    # each test starts without one (and the one it made is dropped afterwards).
    monkeypatch.setattr(urllib.request, "_opener", None)


@pytest.fixture
def proxy():
    """A forward proxy on 127.0.0.1 that answers every request itself and records it."""
    seen: list[tuple[str, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802
            seen.append((self.path, dict(self.headers.items())))
            missing = self.path.endswith("/missing/")
            body = b"not here" if missing else b"<html>via proxy</html>"
            self.send_response(404 if missing else 200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Served-By", "test-proxy")
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    httpd.seen = seen
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_proxy_for_follows_the_scheme_and_no_proxy(monkeypatch):
    parts = urllib.parse.urlsplit(TARGET)
    assert proxy_for(parts) is None
    monkeypatch.setenv("https_proxy", "http://127.0.0.1:3128")
    assert proxy_for(parts) is None  # an http:// URL does not use the https proxy
    assert proxy_for(urllib.parse.urlsplit("https://index.example.invalid/simple/")) == "http://127.0.0.1:3128"
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:3129")
    assert proxy_for(parts) == "http://127.0.0.1:3129"
    monkeypatch.setenv("no_proxy", "example.invalid,localhost")
    assert proxy_for(parts) is None
    assert proxy_for(urllib.parse.urlsplit("http://other.test/simple/")) == "http://127.0.0.1:3129"


def test_a_request_goes_through_the_proxy_without_the_urls_credentials(proxy, monkeypatch):
    monkeypatch.setenv("http_proxy", proxy.url)
    parts = urllib.parse.urlsplit("http://alice:s3cret@index.example.invalid:8080/simple/demo/?x=1#frag")
    resp = via_urllib(parts, {"User-Agent": "wh/test", "Authorization": "Basic abc"}, 5.0, None)
    try:
        assert resp.status == 200
        assert resp.getheader("content-type") == "text/html" and resp.getheader("X-SERVED-BY") == "test-proxy"
        assert resp.getheader("etag", "none") == "none"
        assert ("X-Served-By", "test-proxy") in resp.getheaders()
        assert resp.read1(5) + resp.read() == b"<html>via proxy</html>"
    finally:
        resp.close()
    [(path, headers)] = proxy.seen
    assert path == "http://index.example.invalid:8080/simple/demo/?x=1"  # absolute URI, no userinfo
    assert "s3cret" not in path
    assert headers["User-Agent"] == "wh/test" and headers["Authorization"] == "Basic abc"


def test_an_error_status_through_the_proxy_is_a_response_not_an_exception(proxy, monkeypatch):
    monkeypatch.setenv("http_proxy", proxy.url)
    resp = via_urllib(urllib.parse.urlsplit("http://index.example.invalid/missing/"), {}, 5.0, None)
    try:
        assert resp.status == 404 and resp.will_close
        assert resp.read() == b"not here"
    finally:
        resp.close()
