"""A hostile (or broken) index on 127.0.0.1: slow pages, slow headers, huge pages, trickled
downloads, files lying about their sha256. wh must end in bounded time with a clear error,
bounded memory, and nothing wrong cached."""

from __future__ import annotations

import socket
import threading
import time
import zipfile

import pytest
from wheelmaker import make_wheel

from wheelhouse.index import PackageSource
from wheelhouse.index.http import HttpClient, HttpError, ResponseTooLarge
from wheelhouse.index.metadata import MetadataError, MetadataReader


class Hostile:
    """A raw-socket HTTP/1.0 server whose answer is ``handler(path, send)`` (send writes bytes)."""

    def __init__(self, handler):
        self.handler = handler
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        try:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                request += chunk
            path = request.split(b" ")[1].decode()
            self.handler(path, conn.sendall, self.stop)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.sock.close()


@pytest.fixture
def hostile():
    servers = []

    def start(handler):
        servers.append(Hostile(handler))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _trickle(data: bytes, every: float):
    def handler(path, send, stop):
        for i in range(len(data)):
            if stop.wait(every):
                return
            send(data[i : i + 1])
    return handler


def test_a_page_sent_one_byte_at_a_time_ends_at_the_deadline(hostile, monkeypatch):
    monkeypatch.setenv("WH_HTTP_DEADLINE", "1.5")
    page = b'<html><body><a href="x-1.0-py3-none-any.whl">x</a></body></html>' * 10
    head = b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(page)

    def handler(path, send, stop):
        send(head)
        _trickle(page, 0.2)(path, send, stop)

    srv = hostile(handler)
    t0 = time.monotonic()
    with pytest.raises(HttpError, match="not complete within 1.5 s"):
        PackageSource([srv.base + "/simple/"], client=HttpClient(retries=0)).files("x")
    assert time.monotonic() - t0 < 5


def test_headers_sent_one_byte_at_a_time_end_at_the_timeout_without_retries(hostile):
    srv = hostile(_trickle(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", 0.3))
    t0 = time.monotonic()
    with pytest.raises(HttpError, match="no response headers within 1 s"):
        HttpClient(retries=3, timeout=1).get(srv.base + "/simple/x/")
    assert time.monotonic() - t0 < 4  # one timeout, not four


@pytest.mark.parametrize("announce", [True, False], ids=["content-length", "close-delimited"])
def test_a_huge_page_is_refused_and_not_cached(hostile, monkeypatch, tmp_path, announce):
    monkeypatch.setenv("WH_MAX_PAGE_MB", "1")
    block = b"<!-- padding -->" * 4096  # 64 KiB

    def handler(path, send, stop):
        head = b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n"
        if announce:
            head += b"Content-Length: %d\r\n" % (len(block) * 64)
        send(head + b"\r\n")
        for _ in range(64):  # 4 MiB
            send(block)

    srv = hostile(handler)
    client = HttpClient(cache_dir=tmp_path / "cache", retries=0)
    with pytest.raises(ResponseTooLarge) as exc:
        PackageSource([srv.base + "/simple/"], client=client).files("x")
    assert "at most 1 MiB" in str(exc.value) and "WH_MAX_PAGE_MB" in exc.value.hint
    assert exc.value.code == "response-too-large"
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_a_trickled_download_fails_as_stalled(hostile, monkeypatch):
    monkeypatch.setenv("WH_HTTP_STALL", "1")
    body = b"x" * 100_000
    head = b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)

    def handler(path, send, stop):
        send(head + body[:1000])
        _trickle(body[1000:], 0.2)(path, send, stop)

    srv = hostile(handler)
    t0 = time.monotonic()
    with pytest.raises(HttpError, match="stalled") as exc:
        with HttpClient(retries=0).stream(srv.base + "/files/x.whl") as resp:
            resp.read()
    assert exc.value.received >= 1000  # what arrived is reported, for resuming
    assert time.monotonic() - t0 < 5


def test_abort_stops_a_blocked_read_at_once(hostile):
    srv = hostile(lambda path, send, stop: (send(b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\n"), stop.wait(30)))
    client = HttpClient(retries=0)
    threading.Timer(0.5, client.abort).start()
    t0 = time.monotonic()
    with pytest.raises(HttpError, match="interrupted"):
        client.get(srv.base + "/files/x.whl")
    assert time.monotonic() - t0 < 3
    with pytest.raises(HttpError, match="interrupted"):  # and nothing new starts
        client.get(srv.base + "/files/y.whl")


def test_two_files_claiming_one_sha256_do_not_share_metadata(pyindex, tmp_path):
    make_wheel(tmp_path / "w", "first", "1.0", requires=["alpha"])
    make_wheel(tmp_path / "w", "second", "1.0", requires=["beta"])
    idx = pyindex(tmp_path / "w")
    bogus = "ab" * 32
    for name in list(idx.published):
        idx.published[name] = bogus  # the index claims one hash for both
    src = PackageSource([idx.url])
    (a,), (b,) = src.files("first"), src.files("second")
    assert a.sha256 == b.sha256 == bogus
    for reader in (MetadataReader(src.client, cache_dir=tmp_path / "c"), MetadataReader(src.client, cache_dir=tmp_path / "c")):
        assert reader.read(a).requires_dist == ("alpha",)
        assert reader.read(b).requires_dist == ("beta",)


def test_metadata_and_page_cache_files_are_private(pyindex, tmp_path):
    make_wheel(tmp_path / "w", "priv", "1.0", requires=["dep"])
    idx = pyindex(tmp_path / "w")
    src = PackageSource([idx.url], client=HttpClient(cache_dir=tmp_path / "c"))
    (d,) = src.files("priv")
    MetadataReader(src.client, cache_dir=tmp_path / "c").read(d)
    files = [p for p in (tmp_path / "c").rglob("*") if p.is_file()]
    assert len(files) >= 2 and all(p.stat().st_mode & 0o077 == 0 for p in files), [(str(p), oct(p.stat().st_mode)) for p in files]


def test_range_reader_uses_zipfile_and_checks_the_crc(pyindex, tmp_path):
    """A METADATA member whose bytes were altered on the index is refused (zipfile's CRC check),
    not parsed."""
    path = tmp_path / "w" / "crc-1.0-py3-none-any.whl"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("crc/__init__.py", "")
        zf.writestr("crc-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: crc\nVersion: 1.0\nRequires-Dist: dep\n")
        zf.writestr("crc-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    idx = pyindex(tmp_path / "w", serve_metadata=False)
    data = bytearray(idx.files[path.name])
    pos = data.find(b"Requires-Dist: dep")
    data[pos + len("Requires-Dist: ")] = ord("X")  # "Xep": still valid METADATA, wrong bytes
    idx.files[path.name] = bytes(data)
    src = PackageSource([idx.url])
    (d,) = src.files("crc")
    with pytest.raises(MetadataError, match="CRC"):
        MetadataReader(src.client).read(d)


def test_a_huge_local_find_links_page_is_refused(tmp_path, monkeypatch):
    from wheelhouse.index import BadDirectReference

    monkeypatch.setenv("WH_MAX_PAGE_MB", "1")
    page = tmp_path / "links.html"
    page.write_text("<a href='x-1.0-py3-none-any.whl'>x</a>" + " " * (2 << 20))
    with pytest.raises(BadDirectReference, match="larger than 1 MiB"):
        PackageSource((), [str(page)]).files("x")


def test_a_cache_that_cannot_be_written_costs_requests_not_the_run(pyindex, tmp_path, monkeypatch):
    make_wheel(tmp_path / "w", "full", "1.0", requires=["dep"])
    idx = pyindex(tmp_path / "w")
    monkeypatch.setenv("WH_FAULT", "index.cache-write:enospc")  # the disk is full for cache files
    src = PackageSource([idx.url], client=HttpClient(cache_dir=tmp_path / "c"))
    (d,) = src.files("full")
    assert MetadataReader(src.client, cache_dir=tmp_path / "c").read(d).requires_dist == ("dep",)
    assert not [p for p in (tmp_path / "c").rglob("*") if p.is_file()]


def _wh_stage(index_url: str, tmp_path, env: dict):
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-c", "import sys; from wheelhouse.cli import main; main(sys.argv[1:])",
           "stage", "app", "-i", index_url, "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"),
           "--no-bootstrap"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1", **env})


def test_wh_stage_against_a_one_byte_every_two_seconds_index_ends(hostile, tmp_path):
    page = b'{"meta": {"api-version": "1.1"}, "name": "app", "files": []}'
    head = b"HTTP/1.0 200 OK\r\nContent-Type: application/vnd.pypi.simple.v1+json\r\nContent-Length: %d\r\n\r\n" % len(page)

    def handler(path, send, stop):
        send(head)
        _trickle(page, 2.0)(path, send, stop)

    srv = hostile(handler)
    t0 = time.monotonic()
    proc = _wh_stage(srv.base + "/simple/", tmp_path, {"WH_HTTP_DEADLINE": "3"})
    assert time.monotonic() - t0 < 30
    assert proc.returncode == 1 and "not complete within 3 s" in proc.stderr and "hint:" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_wh_stage_against_a_huge_index_page_is_a_clear_error(hostile, tmp_path):
    block = b" " * 65536

    def handler(path, send, stop):
        send(b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n")
        for _ in range(64):  # 4 MiB, no Content-Length
            if stop.is_set():
                return
            send(block)

    srv = hostile(handler)
    proc = _wh_stage(srv.base + "/simple/", tmp_path, {"WH_MAX_PAGE_MB": "1"})
    assert proc.returncode == 1 and "wh reads at most 1 MiB" in proc.stderr and "WH_MAX_PAGE_MB" in proc.stderr, proc.stderr
    assert "internal error" not in proc.stderr
    assert not [p for p in (tmp_path / "cache").rglob("*.page")]


def test_a_wheel_body_longer_than_the_index_says_is_refused_when_read_whole(hostile, tmp_path):
    """A server that ignores Range makes wh read a whole wheel for its METADATA: never more than
    the size the index listed (a hostile server could stream forever)."""
    import json

    wheel = make_wheel(tmp_path / "w", "liar", "1.0", pad_bytes=200_000).read_bytes()

    def handler(path, send, stop):
        if path.startswith("/simple/"):
            page = json.dumps({"meta": {"api-version": "1.1"}, "name": "liar", "files": [
                {"filename": "liar-1.0-py3-none-any.whl", "url": "/files/liar-1.0-py3-none-any.whl",
                 "hashes": {}, "size": 1000}]}).encode()
            send(b"HTTP/1.0 200 OK\r\nContent-Type: application/vnd.pypi.simple.v1+json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(page) + page)
        else:  # Range ignored: 200 and the whole (much longer) body
            send(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(wheel) + wheel)

    srv = hostile(handler)
    src = PackageSource([srv.base + "/simple/"], client=HttpClient(retries=0))
    (d,) = src.files("liar")
    with pytest.raises(MetadataError, match="more than the 1000 bytes the index lists"):
        MetadataReader(src.client).read(d)
