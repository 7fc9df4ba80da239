"""Fixtures shared by the fetch tests: a loopback file server and a download session."""

from __future__ import annotations

import pytest
from file_server import FileServer

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
