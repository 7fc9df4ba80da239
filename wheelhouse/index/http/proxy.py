"""The proxy the environment names for a URL (http_proxy, https_proxy, all_proxy, no_proxy), as
urllib reads them; the client's ``transport`` sends each hop of a request through it."""

from __future__ import annotations

import functools
import os
import urllib.parse
import urllib.request

__all__ = ["proxy_for"]


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
