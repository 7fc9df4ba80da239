"""wh's HTTP client on urllib3: what urllib3 is given, and the three things wh adds to it.

urllib3 keeps the connections (one pool per host, kept alive), retries connection errors, 429 and
5xx with backoff and ``Retry-After``, follows redirects and speaks to proxies (CONNECT for https).
wh adds, at urllib3's public seams:

- routing (``Router``): each hop of a request, redirects included, goes straight or through the
  proxy the environment names for its URL (``proxy.proxy_for``: https_proxy, no_proxy), with the
  credentials wh knows for that hop's origin (``credentials``: from URLs, ~/.netrc). urllib3 drops
  ``Authorization`` on a redirect to another host; the new host gets only its own credentials.
- deadlines (``deadline``): each attempt's connection hands its socket to the thread's current
  watch when its request is sent (``_Watched``), so the watchdog can cut a request blocked in its
  headers; ``_Retry`` never retries a request the watchdog cut (a server that slow is not asked
  again) and waits at most 60 s for a ``Retry-After``.
- TLS trust (``tls``): the system store or the named bundle; pip's trusted-host pools unverified.
"""

from __future__ import annotations

import http.client
import io
import ipaddress
import ssl
import threading
import urllib.parse
import warnings
from typing import Mapping

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, InsecureRequestWarning, NameResolutionError
from urllib3.util import Retry, make_headers

from .credentials import CredentialStore
from .proxy import proxy_for
from wheelhouse.tls import ssl_context

__all__ = ["Router", "Cut", "RawResponse", "take_raw", "RETRY_STATUS", "MAX_REDIRECTS", "MAX_RETRY_AFTER", "current"]

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_REDIRECTS = 10
MAX_RETRY_AFTER = 60.0  # seconds: a server asking for more is not waited for longer

_local = threading.local()  # .request: (client, watch) of the request this thread is making


def current():
    """(client, watch) of the request this thread is making, or None."""
    return getattr(_local, "request", None)


def set_current(value) -> None:
    _local.request = value


class Cut(OSError):
    """The watchdog cut this request (``what``: "headers", "interrupted", ...): not retried."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


class RawResponse(http.client.HTTPResponse):
    """http.client's response (urllib3 reads it), which can also read a plain body into a caller's
    buffer with one ``recv_into`` per TLS record (``read_plain_into``)."""

    def __init__(self, sock, *args, **kwargs):
        super().__init__(sock, *args, **kwargs)
        self.sock = sock
        self._direct = False  # the buffered reader has handed over what it read ahead: the socket itself
        _local.raw = self  # (the last one made on this thread is the answer urllib3 hands back)

    def read_plain_into(self, view: memoryview) -> int:
        """At most one read of a plain body (a Content-Length, not chunked) into ``view``; 0 at its end
        or when the connection closed. Once the body is read whole the response is closed, which leaves
        its connection fit for the next request (keep-alive), as ``read`` would."""
        want = min(len(view), self.length or 0) if self.fp is not None else 0
        if not want:
            got = 0
        elif self._direct:
            got = self.sock.recv_into(view[:want])
        else:
            got = self.fp.readinto1(view[:want])
            # A readinto1 longer than the buffered reader's buffer empties it: the rest is on the socket.
            self._direct = want > 2 * io.DEFAULT_BUFFER_SIZE
        if self.length is not None:
            self.length -= got
        if not got or not self.length:
            self.close()
        return got


def take_raw() -> RawResponse | None:
    """The http.client response last made on this thread (read once)."""
    raw, _local.raw = getattr(_local, "raw", None), None
    return raw


class _Watched:
    """A connection whose socket the thread's current watch may cut while it waits for headers, and
    whose host name is resolved through its client's ``HostResolver`` (once per client)."""

    response_class = RawResponse

    def connect(self):
        req = current()
        name = self.host  # type: ignore[has-type]
        proxy = getattr(self, "proxy", None)
        if req is None or _is_address(name) or (proxy is not None and proxy.scheme == "https"):
            return super().connect()  # type: ignore[misc]  # (TLS to an https proxy checks its name: not here)
        resolver, port = req[0].resolver, self.port  # type: ignore[attr-defined]
        if proxy is None and getattr(self, "server_hostname", "") is None:
            # TLS: SNI and the certificate check use the name, not the address (through a CONNECT
            # tunnel urllib3 uses the tunnel's host: left alone).
            self.server_hostname = name
        try:
            found = resolver.addresses(name, port)
        except OSError as exc:
            raise NameResolutionError(name, self, exc) from exc  # type: ignore[arg-type]
        errors: list[Exception] = []
        for info in found:
            self.host = info[4][0]  # the TCP connect goes to this address...
            try:
                super().connect()  # type: ignore[misc]
            except ConnectTimeoutError as exc:  # (and NewConnectionError, its subclass): the next address
                errors.append(exc)
                continue
            finally:
                self.host = name  # ...and the Host header, messages and the pool key keep the name
            if errors:
                resolver.prefer(name, port, info[4][0])
            return None
        resolver.forget(name, port)  # every address refused: asked again next time
        raise errors[-1]

    def request(self, *args, **kwargs):
        req = current()
        if req is not None:
            client, watch = req
            client.requests += 1
            client._watchdog.restart(watch, self, client.timeout, "headers")  # each attempt: its own deadline
        super().request(*args, **kwargs)  # type: ignore[misc]
        if req is not None:
            req[1].bind()

    def getresponse(self):
        req = current()
        if req is not None:
            req[1].bind()
        resp = super().getresponse()  # type: ignore[misc]
        if req is not None:
            client, watch = req
            # The caller sets the body's deadline next; a watch cut just as the headers came is a late
            # answer (no headers in time), not a body that stalled after 0 bytes.
            if not client._watchdog.extend(watch, client.timeout, "headers"):
                resp.close()
                raise OSError("cut as its headers came")
        return resp


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


class _Conn(_Watched, HTTPConnection):
    pass


class _TLSConn(_Watched, HTTPSConnection):
    pass


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Conn


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = _TLSConn


_POOLS = {"http": _Pool, "https": _TLSPool}


class _Retry(Retry):
    """urllib3's Retry, except that a request the watchdog cut is not retried, and a Retry-After
    is honoured up to MAX_RETRY_AFTER seconds."""

    def increment(self, *args, **kwargs):
        req = current()
        if req is not None and req[1].expired:
            raise Cut(req[1].what) from kwargs.get("error")
        return super().increment(*args, **kwargs)

    def get_retry_after(self, response) -> float | None:
        seconds = super().get_retry_after(response)
        return None if seconds is None else min(seconds, MAX_RETRY_AFTER)


def retry_policy(retries: int, backoff: float) -> Retry:
    """Each kind of failure retried ``retries`` times, redirects followed up to MAX_REDIRECTS."""
    return _Retry(total=None, connect=retries, read=retries, status=retries, other=retries, redirect=MAX_REDIRECTS,
                  status_forcelist=RETRY_STATUS, backoff_factor=backoff, raise_on_status=False)


class _Routed:
    """A pool manager whose every hop goes to the manager the environment names for its URL."""

    router: "Router"

    def urlopen(self, method, url, redirect=True, **kw):
        router = self.router
        url = router.credentials.strip(url)  # a Location with user:password: used for its host, never sent on
        target = router.manager_for(url)
        if target is not self:
            return target.urlopen(method, url, redirect, **kw)
        kw["headers"] = router.with_credentials(url, kw.get("headers") or {})
        return super().urlopen(method, url, redirect, **kw)  # type: ignore[misc]

    def connection_from_host(self, host, port=None, scheme="http", pool_kwargs=None):
        if scheme == "https":
            pool_kwargs = {**(pool_kwargs or {}), **self.router.tls_for(host or "", port or 443)}
        return super().connection_from_host(host, port, scheme, pool_kwargs)  # type: ignore[misc]


class _Direct(_Routed, urllib3.PoolManager):
    pass


class _Proxied(_Routed, urllib3.ProxyManager):
    pass


class Router:
    """The pool managers of one client: one direct, one per proxy; created at the first request."""

    def __init__(self, credentials: CredentialStore, timeout: float, trusted) -> None:
        self.credentials = credentials
        self.timeout = urllib3.Timeout(connect=timeout, read=timeout)
        self._trusted = trusted  # (host, port) -> bool: pip's trusted-host
        self._lock = threading.Lock()
        self._managers: dict[str | None, urllib3.PoolManager] = {}
        self._verified: ssl.SSLContext | None = None
        self._unverified: ssl.SSLContext | None = None

    def manager_for(self, url: str) -> urllib3.PoolManager:
        proxy = proxy_for(urllib.parse.urlsplit(url))
        manager = self._managers.get(proxy)
        if manager is None:
            with self._lock:
                manager = self._managers.get(proxy) or self._new_manager(proxy)
                self._managers[proxy] = manager
        return manager

    def with_credentials(self, url: str, headers: Mapping[str, str]) -> Mapping[str, str]:
        """``headers`` with the ``Authorization`` wh knows for ``url``'s origin (unless one is set)."""
        if any(k.lower() == "authorization" for k in headers):
            return headers
        auth = self.credentials.authorization(urllib.parse.urlsplit(url))
        return {**headers, "Authorization": auth} if auth else headers

    def tls_for(self, host: str, port: int) -> dict:
        """The pool arguments for https to ``host:port`` (contexts made once: they key the pools)."""
        with self._lock:
            if self._trusted(host, port):  # pip's trusted-host: not verified, as pip does
                if self._unverified is None:
                    self._unverified = ssl.create_default_context()
                    self._unverified.check_hostname = False
                    self._unverified.verify_mode = ssl.CERT_NONE
                # The user asked for it (trusted-host): urllib3's warning would say it on every connection.
                warnings.simplefilter("ignore", InsecureRequestWarning)
                return {"ssl_context": self._unverified, "cert_reqs": "CERT_NONE", "assert_hostname": False}
            if self._verified is None:
                self._verified = ssl_context()
            return {"ssl_context": self._verified}

    def clear(self) -> None:
        """Close every idle connection (the managers stay usable)."""
        with self._lock:
            managers = list(self._managers.values())
        for m in managers:
            m.clear()

    def _new_manager(self, proxy: str | None) -> urllib3.PoolManager:
        kw = {"num_pools": 64, "maxsize": 32, "block": False, "timeout": self.timeout}
        if proxy is None:
            manager: urllib3.PoolManager = _Direct(**kw)
        else:
            parts = urllib3.util.parse_url(proxy)
            headers = make_headers(proxy_basic_auth=urllib.parse.unquote(parts.auth)) if parts.auth else None
            manager = _Proxied(parts._replace(auth=None).url, proxy_headers=headers, **kw)
        manager.pool_classes_by_scheme = _POOLS
        manager.router = self  # type: ignore[attr-defined]
        return manager
