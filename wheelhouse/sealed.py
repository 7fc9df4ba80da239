"""A cache file that checks itself: one header line ``MAGIC FORMAT SHA256`` of the body, then the body. A torn,
edited or foreign file (another format, another writer) is read as nothing: the caller recomputes. Used by the
stored resolutions (``stage/stored.py``) and the recorded dry runs (``cli/_recorded.py``)."""

from __future__ import annotations

import hashlib

__all__ = ["seal", "unseal"]


def _header(magic: str, fmt: int, body: bytes) -> bytes:
    return f"{magic} {fmt} {hashlib.sha256(body).hexdigest()}".encode()


def seal(magic: str, fmt: int, body: bytes) -> bytes:
    """``body`` under its header line: what to write."""
    return _header(magic, fmt, body) + b"\n" + body


def unseal(raw: bytes, magic: str, fmt: int) -> bytes | None:
    """The body of ``raw`` when its header names ``magic``, ``fmt`` and the body's sha256; else None."""
    head, sep, body = raw.partition(b"\n")
    return body if sep and head == _header(magic, fmt, body) else None
