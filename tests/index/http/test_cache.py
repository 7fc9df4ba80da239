"""wheelhouse.index.http.cache: index pages cached on disk, revalidated with ETag / Last-Modified,
and never served wrong (a torn or edited entry is a miss)."""

from __future__ import annotations

import base64
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from wheelhouse.index.http import HttpClient
from wheelhouse.index.http.cache import get_cached

LAST_MODIFIED = "Wed, 21 Oct 2026 07:28:00 GMT"


class Pages:
    """A loopback server of pages with ETags; it records every request's conditional headers."""

    def __init__(self, auth: str | None = None):
        self.body = b"<html>v1</html>"
        self.requests: list[dict] = []
        self.auth = auth
        pages = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802
                pages.requests.append(dict(self.headers.items()))
                if pages.auth and self.headers.get("Authorization") != "Basic " + base64.b64encode(pages.auth.encode()).decode():
                    return self._send(401, b"")
                etag = f'"{len(pages.body)}-{pages.body[-10:].hex()}"'
                if self.headers.get("If-None-Match") == etag:
                    return self._send(304, b"", {"ETag": etag})
                self._send(200, pages.body, {"ETag": etag, "Last-Modified": LAST_MODIFIED, "Content-Type": "text/html",
                                             "X-Other": "not kept"})

            def _send(self, status, body, extra=None):
                self.send_response(status)
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/simple/demo/"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def pages():
    p = Pages()
    yield p
    p.close()


@pytest.fixture
def client(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    with HttpClient(retries=0) as c:
        yield c


def _entries(cache):
    return sorted((cache / "http").rglob("*.*"))


def test_a_fresh_entry_is_answered_from_disk(pages, client, tmp_path):
    first = get_cached(client.get, tmp_path, pages.url, {"Accept": "text/html"})
    pages.body = b"<html>v2</html>"  # changed on the server, but the entry is still fresh
    second = get_cached(client.get, tmp_path, pages.url, {"Accept": "text/html"})
    assert first.body == second.body == b"<html>v1</html>"
    assert second.status == 200 and second.headers["Content-Type"] == "text/html"
    assert len(pages.requests) == 1
    assert "x-other" not in second.headers  # only the validators and the content type are kept


def test_a_stale_entry_is_revalidated_and_a_304_reuses_the_body(pages, client, tmp_path):
    get_cached(client.get, tmp_path, pages.url, max_age=0)
    again = get_cached(client.get, tmp_path, pages.url, max_age=0)
    assert again.status == 200 and again.body == b"<html>v1</html>"
    cond = pages.requests[1]
    assert cond["If-None-Match"].startswith('"15-') and cond["If-Modified-Since"] == LAST_MODIFIED
    assert len(pages.requests) == 2


def test_a_changed_page_replaces_the_entry(pages, client, tmp_path):
    get_cached(client.get, tmp_path, pages.url, max_age=0)
    pages.body = b"<html>version two</html>"
    assert get_cached(client.get, tmp_path, pages.url, max_age=0).body == b"<html>version two</html>"
    # ... and the new body is what the next fresh read gets, with no request
    n = len(pages.requests)
    assert get_cached(client.get, tmp_path, pages.url).body == b"<html>version two</html>"
    assert len(pages.requests) == n


def test_request_headers_are_part_of_the_key(pages, client, tmp_path):
    get_cached(client.get, tmp_path, pages.url, {"Accept": "text/html"})
    get_cached(client.get, tmp_path, pages.url, {"Accept": "application/vnd.pypi.simple.v1+json"})
    assert len(pages.requests) == 2
    assert len([p for p in _entries(tmp_path) if p.suffix == ".page"]) == 2


def test_an_edited_entry_is_a_miss_never_a_wrong_page(pages, client, tmp_path):
    get_cached(client.get, tmp_path, pages.url)
    [body] = [p for p in _entries(tmp_path) if p.suffix == ".page"]
    body.chmod(0o600)
    body.write_bytes(b"<html>evil</html>")
    assert get_cached(client.get, tmp_path, pages.url).body == b"<html>v1</html>"
    assert len(pages.requests) == 2
    assert "If-None-Match" not in pages.requests[1]  # nothing from the bad entry was trusted


def test_entries_are_private_and_hold_no_credentials(client, tmp_path):
    secret = Pages(auth="alice:s3cret-token")
    try:
        url = secret.url.replace("http://", "http://alice:s3cret-token@")
        assert get_cached(client.get, tmp_path, url).body == b"<html>v1</html>"
    finally:
        secret.close()
    files = _entries(tmp_path)
    assert {p.suffix for p in files} == {".page"}
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
        assert b"s3cret" not in p.read_bytes() and "s3cret" not in str(p)


def test_without_a_cache_dir_or_for_file_urls_nothing_is_cached(pages, client, tmp_path):
    get_cached(client.get, None, pages.url)
    get_cached(client.get, None, pages.url)
    assert len(pages.requests) == 2
    page = tmp_path / "index.html"
    page.write_text("local")
    cache = tmp_path / "cache"
    assert get_cached(client.get, cache, page.as_uri()).body == b"local"
    assert not cache.exists()


def test_a_cache_that_cannot_be_written_costs_a_request_not_the_run(pages, client, tmp_path):
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache folder should be")
    assert get_cached(client.get, blocked, pages.url).body == b"<html>v1</html>"
    assert get_cached(client.get, blocked, pages.url).body == b"<html>v1</html>"
    assert len(pages.requests) == 2
