"""A small HTTP client for index pages, metadata and wheels: stdlib only, thread-safe.

Why not plain ``urllib.request.urlopen``: it opens a new TCP (and TLS) connection
for every request, and resolution makes hundreds of small requests to one host.
Here connections are kept alive and reused per host (``http.client``), requests
are retried with exponential backoff on connection errors, 5xx and 429, and
``file://`` URLs work the same way (including ``Range``), so find-links folders
and local indexes need no special casing. When the environment names a proxy
for a host, the request goes through ``urllib.request`` so proxies keep working.

``get_cached`` adds an on-disk cache with ETag / Last-Modified revalidation, for
index pages.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import ssl
import threading
import time
import weakref
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from .atomic import write_atomic
from .errors import WhError

__all__ = ["HttpClient", "HttpError", "Response", "StreamResponse", "Headers", "user_agent"]

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 10
_CHUNK = 1 << 16


def user_agent() -> str:
    from . import __version__

    return f"wh/{__version__}"


class HttpError(WhError):
    """A request failed for good (after retries). ``status`` is None when no response came."""

    code = "http"

    def __init__(self, url: str, status: int | None, reason: str, *, hint: str | None = None, received: int = 0):
        what = f"HTTP {status}" if status is not None else "connection failed"
        if hint is None:
            if status == 404:
                hint = "check the name and the --index-url / --find-links you gave"
            elif status in (401, 403):
                hint = "the index wants credentials: put them in the URL (https://user:token@host/simple) or ~/.netrc"
            else:
                hint = "check the network (or the proxy: https_proxy), then run the same command again"
        super().__init__(f"GET {_redact(url)}: {what}: {reason}", hint=hint)
        self.url = url
        self.status = status
        self.reason = reason
        # Bytes of the body already handed out before the failure (for resuming).
        self.received = received


class Headers(dict):
    """Response headers, case-insensitive on lookup (keys stored lower-case)."""

    def __init__(self, items=()):
        super().__init__()
        for k, v in (items.items() if isinstance(items, Mapping) else items):
            k = k.lower()
            # Repeated headers: join like RFC 9110 allows for list-valued fields.
            super().__setitem__(k, f"{super().get(k)}, {v}" if k in self else v)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())

    def get(self, key: str, default=None):
        return super().get(key.lower(), default)


@dataclass(frozen=True)
class Response:
    url: str  # final URL, after redirects
    status: int
    headers: Headers
    body: bytes

    def json(self):
        return json.loads(self.body)


def _redact(url: str) -> str:
    """Hide credentials from URLs we print."""
    p = urllib.parse.urlsplit(url)
    if p.password or p.username:
        host = p.hostname or ""
        if p.port:
            host += f":{p.port}"
        return urllib.parse.urlunsplit((p.scheme, "***@" + host, p.path, p.query, p.fragment))
    return url


def _ssl_context() -> ssl.SSLContext:
    cafile = os.environ.get("WH_CA_BUNDLE") or os.environ.get("PIP_CERT") or os.environ.get("REQUESTS_CA_BUNDLE")
    ctx = ssl.create_default_context(cafile=cafile or None)
    if not cafile and not ctx.get_ca_certs() and not os.environ.get("SSL_CERT_DIR"):
        # A system store may be a capath only (loaded lazily) — or empty; pip's
        # vendored certifi is a sound fallback that is always present with pip.
        try:
            from pip._vendor import certifi  # type: ignore

            ctx.load_verify_locations(cafile=certifi.where())
        except Exception:  # pragma: no cover - no pip, keep the system store
            pass
    return ctx


class StreamResponse:
    """An open response: read it with ``iter_chunks``; closed by the ``stream`` context."""

    def __init__(self, url: str, status: int, headers: Headers, chunks: Iterator[bytes]):
        self.url = url
        self.status = status
        self.headers = headers
        self._chunks = chunks

    def iter_chunks(self, size: int = _CHUNK) -> Iterator[bytes]:
        return self._chunks_of(size)

    def _chunks_of(self, size: int) -> Iterator[bytes]:
        yield from self._chunks(size)  # type: ignore[operator]

    def read(self) -> bytes:
        return b"".join(self.iter_chunks())


class HttpClient:
    """GET over http(s) and file://, with keep-alive, retries and an optional page cache.

    Safe to share between threads: each request takes its own connection from a
    per-host pool and gives it back when the body has been read.
    """

    def __init__(self, cache_dir: Path | None = None, retries: int = 4, backoff: float = 0.5, timeout: float = 60.0):
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._ssl: ssl.SSLContext | None = None
        self.requests = 0  # round trips made (for tests and benchmarks)
        # Idle keep-alive sockets are closed when the client goes away (no ResourceWarning).
        weakref.finalize(self, _close_pool, self._idle)

    def __enter__(self) -> "HttpClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- public -----------------------------------------------------------------------
    def get(self, url: str, headers: Mapping[str, str] | None = None) -> Response:
        """GET ``url`` and read the body. 2xx and 304 are returned; anything else raises HttpError."""
        with self.stream(url, headers) as resp:
            body = b"".join(resp.iter_chunks())
        return Response(resp.url, resp.status, resp.headers, body)

    @contextlib.contextmanager
    def stream(self, url: str, headers: Mapping[str, str] | None = None) -> Iterator[StreamResponse]:
        """Open ``url``; yields a StreamResponse. Connection errors before the body are retried;
        a connection dropped mid-body raises HttpError with ``received`` set, for resuming."""
        hdrs = {"User-Agent": user_agent(), **(headers or {})}
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme == "file":
            yield self._file(url, hdrs)
            return
        if scheme not in ("http", "https"):
            raise HttpError(url, None, f"unsupported URL scheme {scheme!r}", hint="use an http(s):// or file:// URL, or a local path")
        conn, resp, final = self._open(url, hdrs)
        done = False

        def chunks(size: int) -> Iterator[bytes]:
            nonlocal done
            received = 0
            try:
                while True:
                    data = resp.read(size)
                    if not data:
                        break
                    received += len(data)
                    yield data
            except (OSError, http.client.HTTPException) as exc:
                raise HttpError(final, resp.status, f"connection dropped after {received} bytes ({exc})", received=received) from exc
            expected = resp.getheader("Content-Length")
            if expected is not None and resp.getheader("Content-Encoding") is None and int(expected) != received:
                raise HttpError(final, resp.status, f"body ended after {received} of {expected} bytes", received=received)
            done = True

        stream = StreamResponse(final, resp.status, Headers(resp.getheaders()), chunks)  # type: ignore[arg-type]
        try:
            yield stream
        finally:
            if done and not resp.will_close and conn is not None:
                self._release(conn)
            else:
                with contextlib.suppress(Exception):
                    resp.close()
                if conn is not None:
                    conn.close()

    def get_cached(self, url: str, headers: Mapping[str, str] | None = None, *, max_age: float = 600.0) -> Response:
        """GET with an on-disk cache: fresh (younger than ``max_age``) entries are used as is,
        older ones revalidated with If-None-Match / If-Modified-Since. Without a cache_dir
        this is ``get``."""
        if self.cache_dir is None or urllib.parse.urlsplit(url).scheme == "file":
            return self.get(url, headers)
        key = hashlib.sha256(json.dumps([url, sorted((headers or {}).items())]).encode()).hexdigest()
        folder = self.cache_dir / "http" / key[:2]
        meta_p, body_p = folder / f"{key}.json", folder / f"{key}.body"
        cached = None
        try:
            meta = json.loads(meta_p.read_text())
            body = body_p.read_bytes()
            if hashlib.sha256(body).hexdigest() == meta["sha256"]:
                cached = meta, body
        except (OSError, ValueError, KeyError):
            pass
        if cached is not None:
            meta, body = cached
            if time.time() - meta["stored"] < max_age:
                return Response(meta["url"], 200, Headers(meta["headers"]), body)
            cond = dict(headers or {})
            if meta["headers"].get("etag"):
                cond["If-None-Match"] = meta["headers"]["etag"]
            if meta["headers"].get("last-modified"):
                cond["If-Modified-Since"] = meta["headers"]["last-modified"]
            resp = self.get(url, cond)
            if resp.status == 304:
                meta["stored"] = time.time()
                write_atomic(meta_p, json.dumps(meta))
                return Response(meta["url"], 200, Headers(meta["headers"]), body)
        else:
            resp = self.get(url, headers)
        if resp.status == 200:
            keep = {k: v for k, v in resp.headers.items() if k in ("etag", "last-modified", "content-type")}
            write_atomic(body_p, resp.body)
            write_atomic(meta_p, json.dumps({"url": resp.url, "headers": keep, "stored": time.time(), "sha256": hashlib.sha256(resp.body).hexdigest()}))
        return resp

    def close(self) -> None:
        """Close idle connections (the client stays usable)."""
        with self._lock:
            _close_pool(self._idle)

    # --- connections --------------------------------------------------------------------
    def _conn_key(self, parts: urllib.parse.SplitResult) -> tuple[str, str, int]:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return parts.scheme, parts.hostname or "", port

    def _acquire(self, key: tuple[str, str, int]) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            pool = self._idle.get(key)
            if pool:
                return pool.pop(), True
            if key[0] == "https" and self._ssl is None:
                self._ssl = _ssl_context()
        scheme, host, port = key
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=self.timeout, context=self._ssl), False
        return http.client.HTTPConnection(host, port, timeout=self.timeout), False

    def _release(self, conn: http.client.HTTPConnection) -> None:
        key = (("https" if isinstance(conn, http.client.HTTPSConnection) else "http"), conn.host, conn.port)
        with self._lock:
            pool = self._idle.setdefault(key, [])
            if len(pool) < 32:
                pool.append(conn)
                return
        conn.close()

    def _open(self, url: str, headers: dict[str, str]):
        """Send the request, following redirects and retrying; returns (conn, response, final url)."""
        attempt = 0
        redirects = 0
        while True:
            parts = urllib.parse.urlsplit(url)
            try:
                conn, resp = self._request_once(parts, headers)
            except (OSError, http.client.HTTPException) as exc:
                if attempt >= self.retries:
                    raise HttpError(url, None, str(exc) or type(exc).__name__) from exc
                self._sleep(attempt, None)
                attempt += 1
                continue
            status = resp.status
            if status in _REDIRECTS and resp.getheader("Location"):
                location = urllib.parse.urljoin(url, resp.getheader("Location"))
                self._discard(conn, resp)
                redirects += 1
                if redirects > _MAX_REDIRECTS:
                    raise HttpError(url, status, "too many redirects")
                url = location
                continue
            if 200 <= status < 300 or status == 304:
                return conn, resp, url
            reason = resp.reason
            retry_after = resp.getheader("Retry-After")
            self._discard(conn, resp)
            if status in _RETRY_STATUS and attempt < self.retries:
                self._sleep(attempt, retry_after)
                attempt += 1
                continue
            raise HttpError(url, status, reason)

    def _request_once(self, parts: urllib.parse.SplitResult, headers: dict[str, str]):
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        hdrs = dict(headers)
        cred = None
        if parts.username is not None:
            cred = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        elif "Authorization" not in hdrs:
            cred = _netrc_credentials(parts.hostname or "")
        if cred is not None:
            import base64

            hdrs["Authorization"] = "Basic " + base64.b64encode(cred.encode()).decode()
        proxy = self._proxy_for(parts)
        if proxy:
            return None, self._via_urllib(parts, hdrs)
        self.requests += 1
        key = self._conn_key(parts)
        conn, was_idle = self._acquire(key)
        try:
            conn.request("GET", path, headers=hdrs)
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException):
            conn.close()
            if not was_idle:
                raise
        # A kept-alive connection the server had already closed: once more on a fresh one.
        conn = self._acquire_new(key)
        try:
            conn.request("GET", path, headers=hdrs)
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException):
            conn.close()
            raise

    def _acquire_new(self, key):
        scheme, host, port = key
        if scheme == "https":
            with self._lock:
                if self._ssl is None:
                    self._ssl = _ssl_context()
            return http.client.HTTPSConnection(host, port, timeout=self.timeout, context=self._ssl)
        return http.client.HTTPConnection(host, port, timeout=self.timeout)

    @staticmethod
    def _proxy_for(parts: urllib.parse.SplitResult) -> str | None:
        proxies = urllib.request.getproxies()
        proxy = proxies.get(parts.scheme)
        if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
            return proxy
        return None

    def _via_urllib(self, parts: urllib.parse.SplitResult, headers: dict[str, str]):
        self.requests += 1
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
        req = urllib.request.Request(url, headers=headers)
        try:
            return _UrllibResponse(urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl_or_new()))
        except urllib.error.HTTPError as exc:
            return _UrllibResponse(exc)

    def _ssl_or_new(self):
        with self._lock:
            if self._ssl is None:
                self._ssl = _ssl_context()
            return self._ssl

    @staticmethod
    def _discard(conn, resp) -> None:
        with contextlib.suppress(Exception):
            resp.read()
            resp.close()
        if conn is not None:
            conn.close()

    def _sleep(self, attempt: int, retry_after: str | None) -> None:
        delay = self.backoff * (2**attempt)
        if retry_after and retry_after.isdigit():
            delay = max(delay, min(float(retry_after), 60.0))
        time.sleep(delay)

    # --- file:// ------------------------------------------------------------------------
    def _file(self, url: str, headers: Mapping[str, str]) -> StreamResponse:
        parts = urllib.parse.urlsplit(url)
        path = Path(urllib.request.url2pathname(parts.path))
        if path.is_dir():
            index = path / "index.html"
            if not index.is_file():
                raise HttpError(url, 404, "is a folder without index.html")
            path = index
        try:
            size = path.stat().st_size
        except FileNotFoundError as exc:
            raise HttpError(url, 404, "no such file") from exc
        except OSError as exc:
            raise HttpError(url, None, str(exc)) from exc
        start, end, status = 0, size, 200
        rng = Headers(headers).get("range")
        hdrs = Headers({"content-length": str(size)})
        if rng:
            parsed = _parse_range(rng, size)
            if parsed is None:
                raise HttpError(url, 416, f"range {rng} not satisfiable for {size} bytes")
            start, end = parsed
            status = 206
            hdrs = Headers({"content-length": str(end - start), "content-range": f"bytes {start}-{end - 1}/{size}"})
        hdrs["accept-ranges"] = "bytes"

        def chunks(chunk: int) -> Iterator[bytes]:
            with open(path, "rb") as fh:
                fh.seek(start)
                left = end - start
                while left > 0:
                    data = fh.read(min(chunk, left))
                    if not data:
                        break
                    left -= len(data)
                    yield data

        return StreamResponse(url, status, hdrs, chunks)  # type: ignore[arg-type]


_NETRC: dict[str, str | None] = {}


def _netrc_credentials(host: str) -> str | None:
    """``user:password`` for ``host`` from ~/.netrc (or $NETRC), like pip and uv read it."""
    if host in _NETRC:
        return _NETRC[host]
    cred = None
    try:
        import netrc

        auth = netrc.netrc(os.environ.get("NETRC")).authenticators(host)
        if auth and (auth[0] or auth[2]):
            cred = f"{auth[0] or ''}:{auth[2] or ''}"
    except (OSError, netrc.NetrcParseError):  # type: ignore[name-defined]
        cred = None
    _NETRC[host] = cred
    return cred


def _close_pool(idle: dict) -> None:
    conns = [c for pool in idle.values() for c in pool]
    idle.clear()
    for c in conns:
        with contextlib.suppress(Exception):
            c.close()


class _UrllibResponse:
    """An urllib response (or HTTPError) seen through http.client.HTTPResponse's interface."""

    will_close = True

    def __init__(self, raw):
        self._raw = raw
        self.status = raw.status if hasattr(raw, "status") else raw.code
        self.reason = getattr(raw, "reason", "") or ""
        self._headers = list(raw.headers.items())

    def getheader(self, name: str, default=None):
        return Headers(self._headers).get(name, default)

    def getheaders(self):
        return self._headers

    def read(self, size: int = -1) -> bytes:
        return self._raw.read(size)

    def close(self) -> None:
        self._raw.close()


def _parse_range(value: str, size: int) -> tuple[int, int] | None:
    """``bytes=a-b`` / ``bytes=a-`` / ``bytes=-n`` -> half-open (start, end), or None."""
    unit, _, spec = value.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return None
    first, _, last = spec.strip().partition("-")
    if first == "":
        n = int(last)
        if n <= 0:
            return None
        return max(0, size - n), size
    start = int(first)
    end = min(size, int(last) + 1) if last else size
    if start >= size or end <= start:
        return None
    return start, end
