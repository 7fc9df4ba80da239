"""The one redaction function: URL credentials are replaced by ``***`` before anything is printed,
logged, cached or written.

Index credentials (``https://user:token@host/simple``, a ``-f`` URL, ``name @ https://...``) are
used for requests (wheelhouse.index.http keeps them in memory only) and never recorded: a
wheelhouse is uploaded as a dataset and copied to many boxes, and its JSON, lock, caches and
every message wh prints go through here.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["redact", "redact_data", "MASK"]

MASK = "***"

# RFC 3986: scheme "://" [userinfo "@"] host... The userinfo ends at the LAST "@" before the path
# (a raw "@" in a password is common), so the class excludes only what ends an authority.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s\"'<>]*)@")
# The same without a scheme (a URL typed without http://): "user:password@host".
_BARE_USERINFO = re.compile(r"(?<![\w.+\-/:@])[\w.+\-%~]+:[^\s/@\"'<>]+@(?=[\w\[])")


def redact(text: str) -> str:
    """``text`` with the user:password part of every URL in it replaced by ``***``.

    Works on a bare URL and on text that contains URLs (an error message, a requirement
    ``name @ https://user:token@host/x.whl``); text without credentials comes back unchanged.
    """
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
