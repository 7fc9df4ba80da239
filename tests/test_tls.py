"""wheelhouse.tls: certificates are always verified; an explicit CA bundle
(WH_CA_BUNDLE, then PIP_CERT, then REQUESTS_CA_BUNDLE) is what a private index's CA is trusted by.
Real handshakes against a loopback TLS server whose certificate a throwaway CA (made by openssl) signed."""

from __future__ import annotations

import shutil
import socket
import ssl
import threading

import pytest

from pki import make_test_pki
from wheelhouse.tls import ssl_context

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")

_BUNDLE_VARS = ("WH_CA_BUNDLE", "PIP_CERT", "REQUESTS_CA_BUNDLE")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_test_pki(tmp_path_factory.mktemp("pki"), cn="127.0.0.1", san="IP:127.0.0.1")


@pytest.fixture(scope="module")
def tls_server(pki):
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(pki / "srv.pem", pki / "srv.key")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    stop = threading.Event()

    def serve():
        sock.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            conn.settimeout(5)
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"hello over tls")
            except (OSError, ssl.SSLError):
                pass  # the client refused our certificate: that is the point of some tests
            finally:
                conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield sock.getsockname()[1]
    stop.set()
    t.join()
    sock.close()


@pytest.fixture(autouse=True)
def _no_bundle_env(monkeypatch):
    for var in _BUNDLE_VARS:
        monkeypatch.delenv(var, raising=False)


def _handshake(ctx: ssl.SSLContext, port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.recv(100)


def test_the_default_context_verifies_and_does_not_trust_an_unknown_ca(tls_server):
    ctx = ssl_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(ctx, tls_server)


@pytest.mark.parametrize("var", _BUNDLE_VARS)
def test_a_named_bundle_is_trusted(var, pki, tls_server, monkeypatch):
    monkeypatch.setenv(var, str(pki / "ca.pem"))
    ctx = ssl_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert _handshake(ctx, tls_server) == b"hello over tls"


def test_wh_ca_bundle_takes_precedence(pki, tls_server, monkeypatch, tmp_path):
    monkeypatch.setenv("PIP_CERT", str(tmp_path / "absent.pem"))  # would fail to load if it were read
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "absent.pem"))
    monkeypatch.setenv("WH_CA_BUNDLE", str(pki / "ca.pem"))
    assert _handshake(ssl_context(), tls_server) == b"hello over tls"


def test_the_bundle_does_not_turn_off_hostname_checks(pki, tls_server, monkeypatch):
    monkeypatch.setenv("WH_CA_BUNDLE", str(pki / "ca.pem"))
    with socket.create_connection(("127.0.0.1", tls_server), timeout=5) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            ssl_context().wrap_socket(raw, server_hostname="index.example.invalid")
