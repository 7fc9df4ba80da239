"""Fixtures shared by the fetch tests: a loopback file server, files served with their FetchItems,
a download session, and an in-place write of one byte (what wh never does; a user or a tool might)."""

from __future__ import annotations

import hashlib
import os

import pytest
from file_server import FileServer, serve_files

from wheelhouse.fetch import FetchItem

from wheelhouse.fetch.session import Session
from wheelhouse.index.http import HttpClient
from wheelhouse.progress import RecordingReporter


@pytest.fixture
def server():
    s = FileServer()
    yield s
    s.close()


@pytest.fixture
def session(tmp_path, monkeypatch, request):
    """A Session on a fresh cache, no proxy; a test module may set SESSION_RETRIES (default 2)."""
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    retries = getattr(request.module, "SESSION_RETRIES", 2)
    with HttpClient(retries=0) as client:
        yield Session(tmp_path / "cache", client, RecordingReporter(), "dl", retries=retries, backoff=0.01)


@pytest.fixture
def files():
    """``start({name: bytes}, rate=None)`` serves the files; returns (server, their FetchItems)."""
    servers = []

    def start(named: dict[str, bytes], rate=None):
        servers.append(serve_files(named, rate))
        srv = servers[-1]
        return srv, [FetchItem(srv.url(n), n, hashlib.sha256(d).hexdigest(), len(d)) for n, d in named.items()]

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def flip_byte():
    """``flip(path, at=1000)``: one bit of one byte changed in place, through this name (same size)."""

    def flip(path, at: int = 1000) -> None:
        os.chmod(path, 0o644)
        with open(path, "r+b") as fh:
            fh.seek(at)
            b = fh.read(1)
            fh.seek(at)
            fh.write(bytes([b[0] ^ 0xFF]))

    return flip
