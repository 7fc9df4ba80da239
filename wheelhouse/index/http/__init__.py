"""A small HTTP client for index pages, metadata and wheels: stdlib only, thread-safe.

Why not plain ``urllib.request.urlopen``: it opens a new TCP (and TLS) connection
for every request, and resolution makes hundreds of small requests to one host.
Here connections are kept alive and reused per host (``http.client``), each host
name is resolved once per client (``resolver``: a burst of parallel connections makes
one DNS query), requests
are retried with exponential backoff on connection errors, 5xx and 429, and
``file://`` URLs work the same way (including ``Range``), so find-links folders
and local indexes need no special casing. When the environment names a proxy
for a host, the request goes through ``urllib.request`` (``proxy``).

A hostile or broken server cannot hold wh: every request has deadlines (``deadline``), and
what is read whole (pages, metadata) is size-bounded. Credentials in a URL are kept in memory
for its host (``credentials``) and never appear in a URL this client hands back.

``get_cached`` adds an on-disk cache with ETag / Last-Modified revalidation, for index pages
(``cache``). The response types live in ``messages``, reading a streamed body (blocks, or into a
caller's reused buffer) in ``body``, TLS trust in ``tls``, ``file://`` in ``file_url``.
"""

from __future__ import annotations

import contextlib
import http.client
import ssl
import threading
import time
import weakref
import urllib.parse
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from .body import BodyReader
from .credentials import CredentialStore
from .deadline import Watchdog, body_deadline, max_body_bytes, stall_seconds
from .file_url import open_file_url
from .proxy import proxy_for, via_urllib
from .resolver import HostResolver
from wheelhouse.tls import ssl_context
from .messages import Headers, HttpError, Response, ResponseTooLarge, StreamResponse, user_agent
from .cache import NotCached, get_cached as _get_cached

__all__ = ["HttpClient", "HttpError", "ResponseTooLarge", "Response", "StreamResponse", "Headers", "user_agent"]

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 10


def _unverified() -> ssl.SSLContext:
    """TLS without certificate checks: only for a host the user's pip configuration trusts (trusted-host)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


class HttpClient:
    """GET over http(s) and file://, with keep-alive, retries and an optional page cache.

    Safe to share between threads: each request takes its own connection from a
    per-host pool and gives it back when the body has been read.
    """

    def __init__(self, cache_dir: Path | None = None, retries: int = 4, backoff: float = 0.5, timeout: float = 60.0,
                 *, offline: bool = False, refresh: bool = False, trusted_hosts: Sequence[str] | None = None):
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        # pip's trusted-host ("host" or "host:port"): https to them is not verified, as pip does.
        # None: pip's configured ones, read at the first https connection (no I/O here).
        self._trusted = None if trusted_hosts is None else frozenset(trusted_hosts)
        self.offline = offline  # cached pages only, whatever their age; a miss is an error
        self.refresh = refresh  # revalidate every cached page, however fresh
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._ssl: ssl.SSLContext | None = None
        self.resolver = HostResolver()  # one getaddrinfo per (host, port) for this client's life
        self.credentials = CredentialStore()  # learnt from URLs, used for requests, never recorded
        self._watchdog = Watchdog()
        self.requests = 0  # round trips made (for tests and benchmarks)
        # Idle keep-alive sockets are closed when the client goes away (no ResourceWarning).
        weakref.finalize(self, _close_pool, self._idle)

    def __enter__(self) -> "HttpClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- public -----------------------------------------------------------------------
    def get(self, url: str, headers: Mapping[str, str] | None = None, *, max_bytes: int | None = None) -> Response:
        """GET ``url`` and read the body, complete within WH_HTTP_DEADLINE seconds and at most
        ``max_bytes`` long (default WH_MAX_PAGE_MB: pages, metadata and ranges are read whole into
        memory). 2xx and 304 are returned; anything else raises HttpError."""
        limit = max_body_bytes() if max_bytes is None else max_bytes
        with self.stream(url, headers, whole=True) as resp:
            length = resp.headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > limit:
                raise ResponseTooLarge(resp.url, int(length), limit)
            parts, got = [], 0
            for chunk in resp.iter_chunks():
                got += len(chunk)
                if got > limit:
                    raise ResponseTooLarge(resp.url, None, limit)
                parts.append(chunk)
        return Response(resp.url, resp.status, resp.headers, b"".join(parts))

    def strip_credentials(self, url: str) -> str:
        """``url`` without user:password; they are kept (in memory) for requests to its host."""
        return self.credentials.strip(url)

    def abort(self) -> None:
        """Stop every request in flight and refuse new ones (Ctrl-C): blocked reads fail at once."""
        self._watchdog.abort_all()

    @contextlib.contextmanager
    def stream(self, url: str, headers: Mapping[str, str] | None = None, *, whole: bool = False) -> Iterator[StreamResponse]:
        """Open ``url``; yields a StreamResponse. Connection errors before the body are retried;
        a connection dropped mid-body raises HttpError with ``received`` set, for resuming.

        Deadlines (wheelhouse.index.http.deadline): headers within ``timeout``; then a ``whole``
        body within WH_HTTP_DEADLINE seconds, a streamed one never WH_HTTP_STALL seconds without
        progress. Credentials in ``url`` are used, and never appear in the response's URL."""
        url = self.credentials.strip(url)
        hdrs = {"User-Agent": user_agent(), **(headers or {})}
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme == "file":
            yield open_file_url(url, hdrs)
            return
        if scheme not in ("http", "https"):
            raise HttpError(url, None, f"unsupported URL scheme {scheme!r}", hint="use an http(s):// or file:// URL, or a local path")
        if self.offline:  # --offline: nothing leaves this machine; what is not cached is named
            raise NotCached(url)
        conn, resp, final, watch = self._open(url, hdrs)
        window = stall_seconds()
        if whole:
            watch.set(body_deadline(), "body")
        else:
            watch.set(window, "stalled")
        body = BodyReader(resp, final, watch, window, whole, self._deadline_reason,
                          conn.sock if conn is not None else None)
        stream = _SocketStream(final, resp.status, Headers(resp.getheaders()), body)
        try:
            yield stream
        finally:
            self._watchdog.unwatch(watch)
            if body.done and not resp.will_close and conn is not None and not watch.expired:
                self._release(conn)
            else:
                with contextlib.suppress(Exception):
                    resp.close()
                if conn is not None:
                    conn.close()


    def get_cached(self, url: str, headers: Mapping[str, str] | None = None, *, max_age: float = 600.0,
                   defer_body: bool = False, extra=None) -> Response:
        """GET with an on-disk cache: fresh (younger than ``max_age``) entries are used as is,
        older ones revalidated with If-None-Match / If-Modified-Since. With ``refresh`` every
        entry is revalidated; ``offline``, every entry is used whatever its age and a miss raises
        ``NotCached`` without a request (``cache``, docs/cache.md). Without a cache_dir this is ``get``.
        ``defer_body``: an answer from the cache leaves its body unread (``cache.read_deferred_body``);
        ``extra``: (name, make), kept with the page (``cache.get_cached``)."""
        return _get_cached(self.get, self.cache_dir, self.credentials.strip(url), headers, max_age=max_age,
                           offline=self.offline, refresh=self.refresh, defer_body=defer_body, extra=extra)


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
        return self._acquire_new(key), False

    def _release(self, conn: http.client.HTTPConnection) -> None:
        key = (("https" if isinstance(conn, http.client.HTTPSConnection) else "http"), conn.host, conn.port)
        with self._lock:
            pool = self._idle.setdefault(key, [])
            if len(pool) < 32:
                pool.append(conn)
                return
        conn.close()

    def _deadline_reason(self, watch, received: int) -> str:
        if watch.what == "interrupted":
            return watch.what
        if watch.what == "headers":
            return f"no response headers within {self.timeout:g} s"
        if watch.what == "body":
            return f"the response was not complete within {body_deadline():g} s (WH_HTTP_DEADLINE) after {received} bytes"
        return f"the download stalled: less than 16 KiB in {stall_seconds():g} s (WH_HTTP_STALL) after {received} bytes"

    def _open(self, url: str, headers: dict[str, str]):
        """Send the request, following redirects and retrying; returns (conn, response, final url, watch)."""
        attempt = 0
        redirects = 0
        while True:
            parts = urllib.parse.urlsplit(url)
            try:
                conn, resp, watch = self._request_once(parts, headers)
            except (OSError, http.client.HTTPException) as exc:
                if self._watchdog.aborted:
                    raise HttpError(url, None, "interrupted") from exc
                if isinstance(exc, _HeadersDeadline):  # a server this slow is not retried
                    raise HttpError(url, None, f"no response headers within {self.timeout:g} s") from exc
                if attempt >= self.retries:
                    raise HttpError(url, None, str(exc) or type(exc).__name__) from exc
                self._sleep(attempt, None)
                attempt += 1
                continue
            status = resp.status
            if status in _REDIRECTS and resp.getheader("Location"):
                location = urllib.parse.urljoin(url, resp.getheader("Location"))
                self._discard(conn, resp, watch)
                redirects += 1
                if redirects > _MAX_REDIRECTS:
                    raise HttpError(url, status, "too many redirects")
                url = self.credentials.strip(location)
                continue
            if 200 <= status < 300 or status == 304:
                return conn, resp, url, watch
            reason = resp.reason
            retry_after = resp.getheader("Retry-After")
            self._discard(conn, resp, watch)
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
        if "Authorization" not in hdrs:
            auth = self.credentials.authorization(parts)
            if auth is not None:
                hdrs["Authorization"] = auth
        if proxy_for(parts):
            self.requests += 1
            resp = via_urllib(parts, hdrs, self.timeout, self._ssl_or_new(), self.resolver)
            watch = self._watchdog.watch(None, self.timeout, "headers")
            return None, resp, watch
        self.requests += 1
        key = self._conn_key(parts)
        conn, was_idle = self._acquire(key)
        while True:
            resp = None
            try:
                watch = self._watchdog.watch(conn, self.timeout, "headers")
            except InterruptedError:  # aborted (Ctrl-C): no new request starts
                conn.close()
                raise
            try:
                if conn.sock is None:
                    conn.connect()
                watch.bind()
                conn.request("GET", path, headers=hdrs)
                resp = conn.getresponse()
                # The caller sets the body's deadline next; a watch the watchdog cut just as the headers came
                # is a late answer, not a body that stalled after 0 bytes.
                if not self._watchdog.extend(watch, self.timeout, "headers"):
                    raise OSError("cut as its headers came")
                return conn, resp, watch
            except BaseException as exc:
                # A response that will close owns the socket (http.client hands it over): closing the
                # connection alone leaves its descriptor to the garbage collector.
                if resp is not None:
                    with contextlib.suppress(Exception):
                        resp.close()
                conn.close()
                self._watchdog.unwatch(watch)
                if not isinstance(exc, (OSError, http.client.HTTPException)):
                    raise
                if watch.expired:
                    raise _HeadersDeadline(watch.what) from exc
                if not was_idle:
                    raise
            # A kept-alive connection the server had already closed: once more on a fresh one.
            conn, was_idle = self._acquire_new(key), False

    def _acquire_new(self, key: tuple[str, str, int]) -> http.client.HTTPConnection:
        scheme, host, port = key
        if scheme == "https":
            ctx = _unverified() if self._is_trusted(host, port) else self._ssl_or_new()
            conn = http.client.HTTPSConnection(host, port, timeout=self.timeout, context=ctx)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
        return self.resolver.attach(conn)  # the name is resolved once; TLS still checks the name

    def _is_trusted(self, host: str, port: int) -> bool:
        if self._trusted is None:
            from wheelhouse.index.pip_config import read_pip_index_config

            self._trusted = frozenset(read_pip_index_config().trusted_hosts)
        return host in self._trusted or f"{host}:{port}" in self._trusted

    def _ssl_or_new(self):
        with self._lock:
            if self._ssl is None:
                self._ssl = ssl_context()
            return self._ssl

    def _discard(self, conn, resp, watch) -> None:
        with contextlib.suppress(Exception):
            resp.read(max_body_bytes())  # an error page is bounded too
            resp.close()
        self._watchdog.unwatch(watch)
        if conn is not None:
            conn.close()

    def _sleep(self, attempt: int, retry_after: str | None) -> None:
        delay = self.backoff * (2**attempt)
        if retry_after and retry_after.isdigit():
            delay = max(delay, min(float(retry_after), 60.0))
        time.sleep(delay)


class _SocketStream(StreamResponse):
    """A response read from a socket: its body also fills a caller's buffer (``batches_into``)."""

    def __init__(self, url: str, status: int, headers: Headers, body: BodyReader):
        super().__init__(url, status, headers, body.chunks)  # type: ignore[arg-type]
        self._body = body

    def batches_into(self, buf: bytearray, limit: int | None = None, seconds: float = 0.05) -> Iterator[memoryview]:
        """The body read into ``buf`` (one reused buffer, no object per socket read), handed out as
        views when full or ``seconds`` after each batch began, up to ``limit`` bytes; each view is
        valid until the next step (``body.BodyReader.into``)."""
        return self._body.into(buf, limit, seconds)


class _HeadersDeadline(OSError):
    """The watchdog cut a request that had no response headers in time."""


def _close_pool(idle: dict) -> None:
    conns = [c for pool in idle.values() for c in pool]
    idle.clear()
    for c in conns:
        with contextlib.suppress(Exception):
            c.close()
