"""Requests through an HTTP(S) proxy the environment names (https_proxy, no_proxy): urllib knows
how to tunnel, so such requests go through it, answered like http.client responses. The proxy's
host name is resolved through the client's resolver (once per client), like any other host."""

from __future__ import annotations

import functools
import http.client
import os
import urllib.error
import urllib.parse
import urllib.request

from .messages import Headers

__all__ = ["proxy_for", "via_urllib", "UrllibResponse"]


def proxy_for(parts: urllib.parse.SplitResult) -> str | None:
    """The proxy the environment names for this URL's scheme and host (none for no_proxy hosts)."""
    # urllib walks the whole environment twice per call (~10% of a cold resolve's worker CPU):
    # answered once per scheme, host and value of the variables it reads.
    return _proxy_for(parts.scheme, parts.hostname or "", tuple(map(os.environ.get, _PROXY_VARS)))


_PROXY_VARS = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy",
               "NO_PROXY", "REQUEST_METHOD")


@functools.lru_cache(maxsize=1024)
def _proxy_for(scheme: str, host: str, _env: tuple) -> str | None:
    proxy = urllib.request.getproxies().get(scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        return proxy
    return None


def via_urllib(parts: urllib.parse.SplitResult, headers: dict[str, str], timeout: float, context, resolver=None):
    """One GET through urllib (which speaks to proxies), seen as an http.client response; with a
    ``resolver`` (HostResolver) the proxy's name is resolved through it."""
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    req = urllib.request.Request(url, headers=headers)
    try:
        if resolver is None:
            return UrllibResponse(urllib.request.urlopen(req, timeout=timeout, context=context))
        opener = urllib.request.build_opener(_ResolvingHTTP(resolver), _ResolvingHTTPS(resolver, context))
        return UrllibResponse(opener.open(req, timeout=timeout))
    except urllib.error.HTTPError as exc:
        return UrllibResponse(exc)


class UrllibResponse:
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

    def read1(self, size: int = -1) -> bytes:
        reader = getattr(self._raw, "read1", self._raw.read)
        return reader(size)

    def close(self) -> None:
        self._raw.close()


def _connection(cls, resolver, *args, **kwargs):
    return resolver.attach(cls(*args, **kwargs))


class _ResolvingHTTP(urllib.request.HTTPHandler):
    """urllib's http handler whose connections (to the proxy) resolve through ``resolver``."""

    def __init__(self, resolver) -> None:
        super().__init__()
        self._resolver = resolver

    def http_open(self, req):
        return self.do_open(functools.partial(_connection, http.client.HTTPConnection, self._resolver), req)


class _ResolvingHTTPS(urllib.request.HTTPSHandler):
    """urllib's https handler (CONNECT through the proxy, TLS to the index host by name) resolving the proxy."""

    def __init__(self, resolver, context) -> None:
        super().__init__(context=context)
        self._resolver = resolver

    def https_open(self, req):
        return self.do_open(functools.partial(_connection, http.client.HTTPSConnection, self._resolver), req,
                            context=self._context)
