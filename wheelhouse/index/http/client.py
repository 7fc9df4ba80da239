"""wh's HTTP client for index pages, metadata and wheels: urllib3, plus what is wh's. Thread-safe.

urllib3 keeps the connections alive (one pool per host), retries connection errors, 429 and 5xx
with backoff and ``Retry-After``, follows redirects and speaks to proxies, CONNECT included
(``transport``: the seams where wh plugs into it). ``file://`` URLs work the same way (including
``Range``), so find-links folders and local indexes need no special casing.

What is wh's: a hostile or broken server cannot hold wh: every request has deadlines
(``deadline``: a watchdog cuts the socket of a request past its deadline), and what is read whole
(pages, metadata) is size-bounded. Credentials in a URL are kept in memory for its host
(``credentials``, with ~/.netrc) and never appear in a URL this client hands back.
``get_cached`` adds an on-disk cache with ETag / Last-Modified revalidation, for index pages
(``cache``). The response types live in ``messages``, reading a streamed body (blocks, or into a
caller's reused buffer) in ``body``, TLS trust in ``tls``, ``file://`` in ``file_url``.
"""

from __future__ import annotations

import contextlib
import threading
import urllib.parse
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

from .cache import NotCached, entry_paths, get_cached as _get_cached
from .credentials import CredentialStore
from .deadline import Watchdog, body_deadline, max_body_bytes, stall_seconds
from .file_url import open_file_url
from .resolver import HostResolver
from .messages import Headers, HttpError, Response, ResponseTooLarge, StreamResponse, user_agent

if TYPE_CHECKING:  # loaded where a response is read
    from .body import BodyReader

# urllib3 (with ssl and http.client) and the modules over it (``transport``, ``body``) are loaded by the
# first request that leaves this machine: a run answered from the page cache alone never loads them.

__all__ = ["HttpClient", "HttpError", "ResponseTooLarge", "Response", "StreamResponse", "Headers", "user_agent"]


class HttpClient:
    """GET over http(s) and file://, with keep-alive, retries, deadlines and an optional page cache.

    Safe to share between threads: each request takes its own connection from a per-host pool
    and gives it back when the body has been read.
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
        self.credentials = CredentialStore()  # learnt from URLs, used for requests, never recorded
        self.resolver = HostResolver()  # one getaddrinfo per (host, port) for this client's life
        self._router_made = None  # the connection pools (``_router``), made with the first request
        self._router_lock = threading.Lock()
        self._watchdog = Watchdog()
        self.requests = 0  # round trips made (for tests and benchmarks)

    @property
    def _router(self):
        with self._router_lock:
            if self._router_made is None:
                from .transport import Router

                self._router_made = Router(self.credentials, self.timeout, self._is_trusted)
                # Idle keep-alive sockets are closed when the client goes away (no ResourceWarning).
                weakref.finalize(self, self._router_made.clear)
            return self._router_made

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
        from .body import BodyReader

        resp, final, watch, raw = self._open(url, hdrs)
        window = stall_seconds()
        if whole:
            watch.set(body_deadline(), "body")
        else:
            watch.set(window, "stalled")
        body = BodyReader(resp, final, watch, window, whole, self._deadline_reason, raw)
        stream = _SocketStream(final, resp.status, Headers(resp.headers.items()), body)
        try:
            yield stream
        finally:
            self._watchdog.unwatch(watch)
            if not body.done or watch.expired:
                resp.close()  # the connection is not kept: unread bytes, a cut, an error
            resp.release_conn()

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

    def cache_entries(self, url: str, headers: Mapping[str, str] | None = None) -> tuple[Path, ...] | None:
        """The files in which ``get_cached(url, headers)`` looks (the packed entry, then the old layout's); None
        where it keeps none (no cache_dir, a ``file://`` URL read as it is)."""
        if self.cache_dir is None or urllib.parse.urlsplit(url).scheme == "file":
            return None
        return entry_paths(self.cache_dir, self.credentials.strip(url), headers)

    def close(self) -> None:
        """Close idle connections (the client stays usable)."""
        if self._router_made is not None:
            self._router_made.clear()

    # --- requests -----------------------------------------------------------------------
    def _deadline_reason(self, watch, received: int) -> str:
        if watch.what == "interrupted":
            return watch.what
        if watch.what == "headers":
            return f"no response headers within {self.timeout:g} s"
        if watch.what == "body":
            return f"the response was not complete within {body_deadline():g} s (WH_HTTP_DEADLINE) after {received} bytes"
        return f"the download stalled: less than 16 KiB in {stall_seconds():g} s (WH_HTTP_STALL) after {received} bytes"

    def _open(self, url: str, headers: dict[str, str]):
        """Send the request (urllib3 follows redirects and retries); returns (response, final url,
        watch, the http.client response under it) for a 2xx or 304, else raises HttpError."""
        from urllib3.exceptions import MaxRetryError

        from .body import READ_ERRORS
        from .transport import Cut, retry_policy, set_current, take_raw

        try:
            watch = self._watchdog.watch(None, self.timeout, "headers")
        except InterruptedError as exc:  # aborted (Ctrl-C): no new request starts
            raise HttpError(url, None, "interrupted") from exc
        set_current((self, watch))
        try:
            resp = self._router.manager_for(url).urlopen(
                "GET", url, headers=headers, retries=retry_policy(self.retries, self.backoff), preload_content=False,
                decode_content=False, enforce_content_length=False)
        except (MaxRetryError, Cut, *READ_ERRORS) as exc:
            self._watchdog.unwatch(watch)
            raise self._failed(url, exc, watch) from exc
        finally:
            set_current(None)
        final = _final_url(url, resp)
        status = resp.status
        if 200 <= status < 300 or status == 304:
            return resp, self.credentials.strip(final), watch, take_raw()
        self._watchdog.unwatch(watch)
        resp.close()
        resp.release_conn()
        raise HttpError(self.credentials.strip(final), status, resp.reason or "")

    def _failed(self, url: str, exc: BaseException, watch) -> HttpError:
        from urllib3.exceptions import MaxRetryError

        from .transport import Cut

        reason = exc.reason if isinstance(exc, MaxRetryError) and exc.reason is not None else exc
        if self._watchdog.aborted:
            return HttpError(url, None, "interrupted")
        if isinstance(exc, Cut) or watch.expired:  # a server this slow is not retried
            return HttpError(url, None, self._deadline_reason(watch, 0))
        if isinstance(exc, MaxRetryError) and "redirect" in str(reason):
            return HttpError(url, None, "too many redirects")
        return HttpError(url, None, str(reason) or type(reason).__name__)

    def _is_trusted(self, host: str, port: int) -> bool:
        if self._trusted is None:
            from wheelhouse.index.pip_config import read_pip_index_config

            self._trusted = frozenset(read_pip_index_config().trusted_hosts)
        return host in self._trusted or f"{host}:{port}" in self._trusted


def _final_url(url: str, resp) -> str:
    """The URL a response came from: the last redirect's target, else ``url``."""
    for hop in resp.retries.history if resp.retries is not None else ():
        if hop.redirect_location:
            url = urllib.parse.urljoin(hop.url, hop.redirect_location)
    return url


class _SocketStream(StreamResponse):
    """A response read from a connection: its body also fills a caller's buffer (``batches_into``)."""

    def __init__(self, url: str, status: int, headers: Headers, body: BodyReader):
        super().__init__(url, status, headers, body.chunks)  # type: ignore[arg-type]
        self._body = body

    def batches_into(self, buf: bytearray, limit: int | None = None, seconds: float = 0.05) -> Iterator[memoryview]:
        """The body read into ``buf`` (one reused buffer), handed out as
        views when full or ``seconds`` after each batch began, up to ``limit`` bytes; each view is
        valid until the next step (``body.BodyReader.into``)."""
        return self._body.into(buf, limit, seconds)
