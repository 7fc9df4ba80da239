"""Proxies the environment names: http through a forward proxy (absolute URI), https through a CONNECT
tunnel (the index host is resolved by the proxy, TLS and credentials go end to end), no_proxy hosts
straight, and the proxy's own credentials from its URL. Proxies and servers on 127.0.0.1."""

from __future__ import annotations

import base64
import select
import socket
import ssl
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pki import make_test_pki
from wheelhouse.index.http import HttpClient, HttpError
from wheelhouse.index.http.proxy import proxy_for

TARGET = "http://index.example.invalid/simple/demo/"  # never resolved: the proxy answers for it

_PROXY_VARS = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
               "no_proxy", "NO_PROXY", "REQUEST_METHOD")


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch, tmp_path):
    for var in _PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(urllib.request, "_opener", None)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


def _start(handler) -> ThreadingHTTPServer:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    return httpd


@pytest.fixture
def proxy():
    """A proxy on 127.0.0.1 that answers plain requests itself and tunnels CONNECT (the names it is
    asked for all mean 127.0.0.1); records each request line and its headers."""
    seen: list[tuple[str, str, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802
            seen.append(("GET", self.path, dict(self.headers.items())))
            missing = self.path.endswith("/missing/")
            body = b"not here" if missing else b"<html>via proxy</html>"
            self.send_response(404 if missing else 200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Served-By", "test-proxy")
            self.end_headers()
            self.wfile.write(body)

        def do_CONNECT(self):  # noqa: N802
            seen.append(("CONNECT", self.path, {k.lower(): v for k, v in self.headers.items()}))
            port = int(self.path.rsplit(":", 1)[1])
            with socket.create_connection(("127.0.0.1", port)) as upstream:
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                ends = [self.connection, upstream]
                while True:
                    ready, _, _ = select.select(ends, [], [], 5)
                    if not ready:
                        return
                    for s in ready:
                        data = s.recv(65536)
                        if not data:
                            return
                        (upstream if s is self.connection else self.connection).sendall(data)

    httpd = _start(Handler)
    httpd.seen = seen
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_test_pki(tmp_path_factory.mktemp("pki"), cn="index.test", san="DNS:index.test")


@pytest.fixture
def tls_index(pki):
    """An https server for the name index.test (only the proxy knows where it is) recording headers."""
    seen: list[tuple[str, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802
            seen.append((self.path, dict(self.headers.items())))
            self.send_response(200)
            self.send_header("Content-Length", "6")
            self.end_headers()
            self.wfile.write(b"secure")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "srv.pem", pki / "srv.key")
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    httpd.seen = seen
    httpd.port = httpd.server_address[1]
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
    resp = HttpClient(retries=0).get("http://alice:s3cret@index.example.invalid:8080/simple/demo/?x=1#frag",
                                     {"User-Agent": "wh/test"})
    assert resp.status == 200 and resp.body == b"<html>via proxy</html>"
    assert resp.headers["content-type"] == "text/html" and resp.headers["X-SERVED-BY"] == "test-proxy"
    assert resp.headers.get("etag", "none") == "none"
    assert "s3cret" not in resp.url
    [(method, path, headers)] = proxy.seen
    assert method == "GET" and path == "http://index.example.invalid:8080/simple/demo/?x=1"  # absolute URI, no userinfo
    assert "s3cret" not in path
    assert headers["User-Agent"] == "wh/test"
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"alice:s3cret").decode()  # for the index


def test_an_error_status_through_the_proxy_is_an_http_error(proxy, monkeypatch):
    monkeypatch.setenv("http_proxy", proxy.url)
    with pytest.raises(HttpError) as err:
        HttpClient(retries=0).get("http://index.example.invalid/missing/")
    assert err.value.status == 404


def test_a_no_proxy_host_is_asked_directly(proxy, monkeypatch):
    direct = []

    class Index(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802
            direct.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "6")
            self.end_headers()
            self.wfile.write(b"direct")

    index = _start(Index)
    try:
        monkeypatch.setenv("http_proxy", proxy.url)
        monkeypatch.setenv("no_proxy", "127.0.0.1")
        assert HttpClient(retries=0).get(index.url + "/simple/").body == b"direct"
        assert direct == ["/simple/"] and proxy.seen == []
    finally:
        index.shutdown()
        index.server_close()


def test_https_goes_through_a_connect_tunnel_with_tls_and_credentials_end_to_end(proxy, tls_index, pki, monkeypatch):
    lookups = []

    def lookup(host, port, *a, **kw):  # the index host is the proxy's to resolve, never wh's
        if host == "index.test":
            raise AssertionError("wh looked up the index host behind a proxy")
        if host != "127.0.0.1":  # (the test proxy's own connection, and the address wh connects to)
            lookups.append(host)
        return real("127.0.0.1" if host == "proxy.test" else host, port, *a, **kw)

    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    monkeypatch.setenv("https_proxy", proxy.url.replace("http://127.0.0.1", "http://puser:pp%40ss@proxy.test"))
    monkeypatch.setenv("WH_CA_BUNDLE", str(pki / "ca.pem"))
    client = HttpClient(retries=0)
    for _ in range(2):
        resp = client.get(f"https://alice:s3cret@index.test:{tls_index.port}/simple/")
        assert resp.body == b"secure" and "s3cret" not in resp.url
    assert lookups == ["proxy.test"]  # the proxy's name, once; TLS inside the tunnel checks index.test
    [(method, target, headers)] = proxy.seen  # one tunnel, kept alive for the second request
    assert method == "CONNECT" and target == f"index.test:{tls_index.port}"
    assert headers["proxy-authorization"] == "Basic " + base64.b64encode(b"puser:pp@ss").decode()
    assert "authorization" not in headers  # the index's credentials go only inside the tunnel
    assert [h["Authorization"] for _, h in tls_index.seen] == ["Basic " + base64.b64encode(b"alice:s3cret").decode()] * 2
    assert all(k.lower() != "proxy-authorization" for _, h in tls_index.seen for k in h)
