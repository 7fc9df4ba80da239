"""Credentials for index URLs: used for requests, never recorded.

A URL given with credentials (``https://user:token@host/simple``, a ``-f`` URL, a
``name @ https://user:token@host/x.whl`` requirement) is split once, where it enters: the
credentials go into a ``CredentialStore`` held in memory by the HTTP client (keyed by scheme,
host and port, like pip and uv scope them) and the URL travels on without them, so every page
URL, file URL, cache key, lock entry and message derived from it is clean by construction.
~/.netrc (or $NETRC) is read for hosts the store does not know. ``redact_url`` is
wheelhouse.redact's one function, for the URLs that are printed before they are split.
"""

from __future__ import annotations

import base64
import netrc
import os
import threading
import urllib.parse

from wheelhouse.redact import redact as redact_url

__all__ = ["CredentialStore", "split_credentials", "netrc_credentials", "redact_url"]


def _origin(parts: urllib.parse.SplitResult) -> tuple[str, str, int]:
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


def split_credentials(url: str) -> tuple[str, str | None]:
    """``(url without user:password, "user:password" or None)``."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal keeps its brackets
    if parts.port:
        host += f":{parts.port}"
    cred = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), cred


class CredentialStore:
    """user:password per (scheme, host, port), learnt from URLs; thread-safe; memory only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_origin: dict[tuple[str, str, int], str] = {}

    def strip(self, url: str) -> str:
        """``url`` without credentials; the credentials it carried are remembered for its host."""
        clean, cred = split_credentials(url)
        if cred is not None:
            with self._lock:
                self._by_origin[_origin(urllib.parse.urlsplit(clean))] = cred
        return clean

    def authorization(self, parts: urllib.parse.SplitResult) -> str | None:
        """The ``Authorization`` value for a request to ``parts``: credentials learnt for its host,
        else ~/.netrc's; None without any."""
        with self._lock:
            cred = self._by_origin.get(_origin(parts))
        if cred is None:
            cred = netrc_credentials(parts.hostname or "")
        if cred is None:
            return None
        return "Basic " + base64.b64encode(cred.encode()).decode()


_NETRC: dict[tuple[str | None, str], str | None] = {}


def netrc_credentials(host: str) -> str | None:
    """``user:password`` for ``host`` from ~/.netrc (or $NETRC), like pip and uv read it."""
    path = os.environ.get("NETRC")
    if (path, host) in _NETRC:
        return _NETRC[(path, host)]
    try:
        auth = netrc.netrc(path).authenticators(host)
        cred = f"{auth[0] or ''}:{auth[2] or ''}" if auth and (auth[0] or auth[2]) else None
    except (OSError, netrc.NetrcParseError):
        cred = None
    _NETRC[(path, host)] = cred
    return cred
