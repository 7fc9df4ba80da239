"""The one redaction function: URL credentials are replaced by ``***`` before anything is printed,
logged, cached or written.

Index credentials (``https://user:token@host/simple``, a ``-f`` URL, ``name @ https://...``) are
used for requests (wheelhouse.index.http keeps them in memory only) and never recorded: a
wheelhouse is uploaded as a dataset and copied to many boxes, and its JSON, lock, caches and
every message wh prints go through here.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping
from urllib.parse import unquote, urlsplit

__all__ = ["redact", "redact_data", "known_secrets", "MASK", "SECRET_VARIABLES"]

MASK = "***"

# Variables whose value is a secret (the engine's API key) and whose URLs carry index credentials.
SECRET_VARIABLES = ("WH_API_KEY",)
_URL_VARIABLES = ("WH_INDEX_URL", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
_SHORTEST = 4  # a shorter "secret" would mask ordinary words

# RFC 3986: scheme "://" [userinfo "@"] host... The userinfo ends at the LAST "@" before the path
# (a raw "@" in a password is common), so the class excludes only what ends an authority.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s\"'<>]*)@")
# The same without a scheme (a URL typed without http://): "user:password@host".
_BARE_USERINFO = re.compile(r"(?<![\w.+\-/:@])[\w.+\-%~]+:[^\s/@\"'<>]+@(?=[\w\[])")


def known_secrets(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The secrets wh knows from ``env`` (default: the process's): the API key (``WH_API_KEY``) and the user
    and password of the index URLs (``WH_INDEX_URL``, ``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``), raw and
    percent-decoded; for text that shows them outside a URL (an engine echoing its argv into its log)."""
    env = os.environ if env is None else env
    found = [env.get(k) or "" for k in SECRET_VARIABLES]
    for k in _URL_VARIABLES:
        for url in (env.get(k) or "").split():
            try:
                parts = urlsplit(url)
            except ValueError:
                continue
            userinfo = parts.netloc.rpartition("@")[0]
            for piece in userinfo.split(":", 1) if userinfo else ():
                found += [piece, unquote(piece)]
    return tuple(sorted({s for s in found if len(s) >= _SHORTEST}, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the user:password part of every URL in it replaced by ``***``, and every one of
    ``secrets`` (e.g. :func:`known_secrets`) wherever it appears.

    Works on a bare URL and on text that contains URLs (an error message, a requirement
    ``name @ https://user:token@host/x.whl``); text without credentials comes back unchanged.
    """
    for secret in secrets:
        if len(secret) >= _SHORTEST and secret in text:
            text = text.replace(secret, MASK)
    if "@" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    return _BARE_USERINFO.sub(f"{MASK}@", text)


def redact_data(data: Any) -> Any:
    """A copy of JSON-like ``data`` (dicts, lists, tuples, strings) with every string redacted."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {redact_data(k): redact_data(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(redact_data(v) for v in data)
    return data
