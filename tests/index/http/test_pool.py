"""HttpClient's connections: one pool per host, kept alive, and each host name resolved once per client.

A burst of parallel requests to a name (the observed failure: 16 parallel connections, 2-3 of them waiting
exactly 5 s in getaddrinfo) must make one DNS query. Names below are resolved by a counting stand-in for
socket.getaddrinfo that maps them to loopback: nothing leaves 127.0.0.1, and every lookup is seen.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pki import make_test_pki
from wheelhouse.index.http import HttpClient, HttpError

BURST = 16


class _Lookups:
    """socket.getaddrinfo for ``names`` (each -> a list of IPv4 addresses, tried in that order), counted."""

    def __init__(self, monkeypatch, names: dict[str, list[str]], delay: float = 0.2):
        self.calls: list[str] = []
        self.names = names
        self.fail_next = 0
        real = socket.getaddrinfo

        def fake(host, port, *args, **kwargs):
            if host not in self.names:
                if host in ("127.0.0.1", "127.0.0.2", "localhost"):  # (an address literal: no DNS query)
                    return real(host, port, *args, **kwargs)
                raise AssertionError(f"an unexpected DNS lookup for {host!r}")
            self.calls.append(host)
            time.sleep(delay)  # a slow resolver widens the window in which the burst would each ask
            if self.fail_next:
                self.fail_next -= 1
                raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, int(port))) for ip in self.names[host]]

        monkeypatch.setattr(socket, "getaddrinfo", fake)


def _server(handler_body=b"ok", delay: float = 0.1, context: ssl.SSLContext | None = None):
    """A keep-alive HTTP/1.1 server on 127.0.0.1 that records each request's connection and path."""
    seen: list[tuple[tuple, str]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802
            seen.append((self.client_address, self.path))
            time.sleep(delay)  # every request of the burst is in flight at once
            self.send_response(200)
            self.send_header("Content-Length", str(len(handler_body)))
            self.end_headers()
            self.wfile.write(handler_body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    httpd.seen = seen
    httpd.port = httpd.server_address[1]
    return httpd


@pytest.fixture
def server():
    httpd = _server()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
                "no_proxy", "NO_PROXY", "WH_CA_BUNDLE", "PIP_CERT", "REQUESTS_CA_BUNDLE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(urllib.request, "_opener", None)


def _burst(client: HttpClient, urls: list[str]) -> list[bytes]:
    with ThreadPoolExecutor(len(urls)) as pool:
        return list(pool.map(lambda u: client.get(u).body, urls))


def test_a_burst_of_parallel_requests_resolves_the_host_once(server, monkeypatch):
    lookups = _Lookups(monkeypatch, {"index.test": ["127.0.0.1"]})
    client = HttpClient(retries=0)
    urls = [f"http://index.test:{server.port}/f{i}" for i in range(BURST)]
    started = time.monotonic()
    assert _burst(client, urls) == [b"ok"] * BURST
    elapsed = time.monotonic() - started
    assert lookups.calls == ["index.test"] and client.resolver.lookups == 1
    connections = {addr for addr, _ in server.seen}
    assert len(connections) > 1  # the burst really opened connections in parallel
    assert elapsed < 0.2 * 3 + 2  # not one slow lookup after another


def test_connections_are_kept_alive_in_one_pool_per_host(server, monkeypatch):
    _Lookups(monkeypatch, {"index.test": ["127.0.0.1"], "mirror.test": ["127.0.0.1"]}, delay=0)
    client = HttpClient(retries=0)
    urls = [f"http://index.test:{server.port}/a{i}" for i in range(BURST)]
    _burst(client, urls)
    first = {addr for addr, _ in server.seen}
    _burst(client, [u.replace("/a", "/b") for u in urls])
    assert {addr for addr, _ in server.seen} == first  # the second burst opened no new connection
    assert len(server.seen) == 2 * BURST
    # the same server under another name is another host: its own pool, its own connections
    client.get(f"http://mirror.test:{server.port}/c")
    assert _opened(client, f"http://mirror.test:{server.port}/") == 1
    assert _opened(client, urls[0]) == len(first)
    assert server.seen[-1][0] not in first


def _opened(client: HttpClient, url: str) -> int:
    """The connections the client's pool for ``url``'s host has opened (urllib3's count)."""
    return client._router.manager_for(url).connection_from_url(url).num_connections


def test_addresses_are_tried_in_order_and_the_one_that_answers_goes_first(server, monkeypatch):
    # 127.0.0.2 is loopback too, but nothing listens there: connection refused, then 127.0.0.1 answers.
    lookups = _Lookups(monkeypatch, {"index.test": ["127.0.0.2", "127.0.0.1"]}, delay=0)
    client = HttpClient(retries=0)
    assert client.get(f"http://index.test:{server.port}/x").body == b"ok"
    order = [info[4][0] for info in client.resolver.addresses("index.test", server.port)]
    assert order == ["127.0.0.1", "127.0.0.2"]
    assert lookups.calls == ["index.test"]


def test_a_failed_lookup_is_not_kept(server, monkeypatch):
    lookups = _Lookups(monkeypatch, {"index.test": ["127.0.0.1"]}, delay=0)
    lookups.fail_next = 1
    client = HttpClient(retries=1, backoff=0.01)
    assert client.get(f"http://index.test:{server.port}/x").body == b"ok"  # the retry asks again
    assert lookups.calls == ["index.test", "index.test"]


def test_a_host_whose_every_address_refuses_is_asked_again(monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lookups = _Lookups(monkeypatch, {"index.test": ["127.0.0.1"]}, delay=0)
    client = HttpClient(retries=1, backoff=0.01)
    with pytest.raises(HttpError):
        client.get(f"http://index.test:{port}/x")
    assert lookups.calls == ["index.test", "index.test"]  # a stale answer is not trusted forever


def test_through_a_proxy_only_the_proxys_name_is_resolved(server, monkeypatch):
    # The server answers any request line, so it stands in for a forward proxy (it sees absolute URIs).
    lookups = _Lookups(monkeypatch, {"proxy.test": ["127.0.0.1"]})
    monkeypatch.setenv("http_proxy", f"http://proxy.test:{server.port}")
    client = HttpClient(retries=0)
    urls = [f"http://index.example.invalid/simple/p{i}/" for i in range(BURST)]
    assert _burst(client, urls) == [b"ok"] * BURST
    assert lookups.calls == ["proxy.test"]  # the index host is never looked up here: the proxy does
    assert {path for _, path in server.seen} == set(urls)


# ---- TLS: the connection is made to an address, the certificate is checked against the name ----------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_test_pki(tmp_path_factory.mktemp("pki"), cn="index.test", san="DNS:index.test")  # the name only: not valid for 127.0.0.1


@pytest.fixture
def tls_server(pki):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "srv.pem", pki / "srv.key")
    names: list[str | None] = []
    ctx.sni_callback = lambda sock, name, _ctx: names.append(name)
    httpd = _server(context=ctx, delay=0.05)
    httpd.sni = names
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_tls_verifies_the_host_name_and_sends_it_as_sni(tls_server, pki, monkeypatch):
    lookups = _Lookups(monkeypatch, {"index.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    monkeypatch.setenv("WH_CA_BUNDLE", str(pki / "ca.pem"))
    client = HttpClient(retries=0)
    urls = [f"https://index.test:{tls_server.port}/t{i}" for i in range(8)]
    assert _burst(client, urls) == [b"ok"] * 8
    assert lookups.calls == ["index.test"]
    assert tls_server.sni and set(tls_server.sni) == {"index.test"}  # SNI is the name, never the address
    # the same address under a name the certificate does not carry is refused: the check uses the name
    with pytest.raises(HttpError) as err:
        client.get(f"https://other.test:{tls_server.port}/t")
    assert "certificate" in str(err.value).lower() or "hostname" in str(err.value).lower()
