"""What an HTTP exchange hands back: headers, a read or an open (streamed) response, and the error
raised when a request fails for good. Shared by the client, the ``file://`` reader and the page cache.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator, Mapping

from .credentials import redact_url
from wheelhouse.errors import WhError

__all__ = ["HttpError", "ResponseTooLarge", "Headers", "Response", "StreamResponse", "user_agent", "CHUNK"]

CHUNK = 1 << 16


def user_agent() -> str:
    from wheelhouse import __version__

    return f"wh/{__version__}"


class HttpError(WhError):
    """A request failed for good (after retries). ``status`` is None when no response came."""

    code = "http"

    def __init__(self, url: str, status: int | None, reason: str, *, hint: str | None = None, received: int = 0):
        what = f"HTTP {status}" if status is not None else "connection failed"
        if hint is None:
            if status == 404:
                hint = "check the name and the --index-url / --find-links you gave"
            elif status in (401, 403):
                hint = "the index wants credentials: put them in the URL (https://user:token@host/simple) or ~/.netrc"
            else:
                hint = "check the network (or the proxy: https_proxy), then run the same command again"
        super().__init__(f"GET {redact_url(url)}: {what}: {reason}", hint=hint)
        self.url = url
        self.status = status
        self.reason = reason
        # Bytes of the body already handed out before the failure (for resuming).
        self.received = received


class ResponseTooLarge(HttpError):
    """A page or metadata file bigger than wh reads into memory (a hostile or broken index)."""

    code = "response-too-large"

    def __init__(self, url: str, size: int | None, limit: int):
        mb = limit / (1 << 20)
        what = f"{size / (1 << 20):.1f} MiB" if size is not None else f"more than {mb:g} MiB"
        super().__init__(url, 200, f"the response is {what}; wh reads at most {mb:g} MiB of a page or metadata file",
                         hint="check the index URL; if the page really is that large, raise the bound with WH_MAX_PAGE_MB")
        self.limit = limit


class Headers(dict):
    """Response headers, case-insensitive on lookup (keys stored lower-case)."""

    def __init__(self, items=()):
        super().__init__()
        for k, v in (items.items() if isinstance(items, Mapping) else items):
            k = k.lower()
            # Repeated headers: join like RFC 9110 allows for list-valued fields.
            super().__setitem__(k, f"{super().get(k)}, {v}" if k in self else v)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())

    def get(self, key: str, default=None):
        return super().get(key.lower(), default)


@dataclass(frozen=True)
class Response:
    url: str  # final URL, after redirects
    status: int
    headers: Headers
    body: bytes

    def json(self):
        return json.loads(self.body)


class StreamResponse:
    """An open response: read it with ``iter_chunks``; closed by the ``stream`` context."""

    def __init__(self, url: str, status: int, headers: Headers, chunks: Iterator[bytes]):
        self.url = url
        self.status = status
        self.headers = headers
        self._chunks = chunks

    def iter_chunks(self, size: int = CHUNK) -> Iterator[bytes]:
        return self._chunks_of(size)

    def _chunks_of(self, size: int) -> Iterator[bytes]:
        yield from self._chunks(size)  # type: ignore[operator]

    def read(self) -> bytes:
        return b"".join(self.iter_chunks())
