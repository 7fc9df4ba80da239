"""Credentials for index URLs: from the URL itself (``https://user:token@host/simple``) or from
~/.netrc (or $NETRC), like pip and uv read them; and URLs with their credentials hidden, for messages.
"""

from __future__ import annotations

import base64
import os
import urllib.parse

__all__ = ["basic_authorization", "netrc_credentials", "redact_url"]


def redact_url(url: str) -> str:
    """Hide credentials from URLs we print."""
    p = urllib.parse.urlsplit(url)
    if p.password or p.username:
        host = p.hostname or ""
        if p.port:
            host += f":{p.port}"
        return urllib.parse.urlunsplit((p.scheme, "***@" + host, p.path, p.query, p.fragment))
    return url


def basic_authorization(parts: urllib.parse.SplitResult, headers: dict[str, str]) -> str | None:
    """The ``Authorization`` value for a request to ``parts``: the URL's user:password, else
    ~/.netrc's for the host unless ``headers`` already carry one; None without credentials."""
    cred = None
    if parts.username is not None:
        cred = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    elif "Authorization" not in headers:
        cred = netrc_credentials(parts.hostname or "")
    if cred is None:
        return None
    return "Basic " + base64.b64encode(cred.encode()).decode()


_NETRC: dict[str, str | None] = {}


def netrc_credentials(host: str) -> str | None:
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
