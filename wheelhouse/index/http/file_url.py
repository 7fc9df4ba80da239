"""``file://`` URLs answered like HTTP (200, 206 for ``Range``, 404, 416), so find-links folders
and local indexes need no special casing in the client's callers.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Iterator, Mapping

from .messages import Headers, HttpError, StreamResponse

__all__ = ["open_file_url"]


def open_file_url(url: str, headers: Mapping[str, str]) -> StreamResponse:
    """A StreamResponse for a file (a folder's ``index.html``); a ``Range`` header is honoured."""
    parts = urllib.parse.urlsplit(url)
    path = Path(_url2pathname(parts.path))
    if path.is_dir():
        index = path / "index.html"
        if not index.is_file():
            raise HttpError(url, 404, "is a folder without index.html")
        path = index
    try:
        size = path.stat().st_size
    except FileNotFoundError as exc:
        raise HttpError(url, 404, "no such file") from exc
    except OSError as exc:
        raise HttpError(url, None, str(exc)) from exc
    start, end, status = 0, size, 200
    rng = Headers(headers).get("range")
    hdrs = Headers({"content-length": str(size)})
    if rng:
        parsed = _parse_range(rng, size)
        if parsed is None:
            raise HttpError(url, 416, f"range {rng} not satisfiable for {size} bytes")
        start, end = parsed
        status = 206
        hdrs = Headers({"content-length": str(end - start), "content-range": f"bytes {start}-{end - 1}/{size}"})
    hdrs["accept-ranges"] = "bytes"

    def chunks(chunk: int) -> Iterator[bytes]:
        with open(path, "rb") as fh:
            fh.seek(start)
            left = end - start
            while left > 0:
                data = fh.read(min(chunk, left))
                if not data:
                    break
                left -= len(data)
                yield data

    return StreamResponse(url, status, hdrs, chunks)  # type: ignore[arg-type]


def _parse_range(value: str, size: int) -> tuple[int, int] | None:
    """``bytes=a-b`` / ``bytes=a-`` / ``bytes=-n`` -> half-open (start, end), or None."""
    unit, _, spec = value.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return None
    first, _, last = spec.strip().partition("-")
    if first == "":
        n = int(last)
        if n <= 0:
            return None
        return max(0, size - n), size
    start = int(first)
    end = min(size, int(last) + 1) if last else size
    if start >= size or end <= start:
        return None
    return start, end


def _url2pathname(path: str) -> str:
    """``urllib.request.url2pathname``, loaded when a file:// URL is met (urllib.request loads http.client,
    email and ssl: most runs never need them)."""
    from urllib.request import url2pathname

    return url2pathname(path)
