"""An on-disk cache of index pages, revalidated with ETag / Last-Modified.

Entries live under ``<cache_dir>/http/`` keyed by the URL and request headers; the body's sha256
is stored with them, so a torn or edited entry is a miss, never a wrong page. URLs reach here
without credentials (the client strips them) and the Authorization header is never part of the
key or the entry; entries are mode 0600 all the same (a private index's page is private).
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.parse
from pathlib import Path
from typing import Callable, Mapping

from wheelhouse.atomic import write_atomic
from wheelhouse.faults import checkpoint
from wheelhouse.redact import redact
from .messages import Headers, Response

__all__ = ["get_cached"]


def get_cached(get: Callable[..., Response], cache_dir: Path | None, url: str, headers: Mapping[str, str] | None = None,
               *, max_age: float = 600.0) -> Response:
    """GET with an on-disk cache: fresh (younger than ``max_age``) entries are used as is,
    older ones revalidated with If-None-Match / If-Modified-Since. Without a cache_dir
    this is ``get``."""
    if cache_dir is None or urllib.parse.urlsplit(url).scheme == "file":
        return get(url, headers)
    key = hashlib.sha256(json.dumps([url, sorted((headers or {}).items())]).encode()).hexdigest()
    folder = cache_dir / "http" / key[:2]
    meta_p, body_p = folder / f"{key}.json", folder / f"{key}.body"
    cached = None
    try:
        meta = json.loads(meta_p.read_text())
        body = body_p.read_bytes()
        if hashlib.sha256(body).hexdigest() == meta["sha256"] and isinstance(meta["stored"], (int, float)):
            cached = meta, body
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if cached is not None:
        meta, body = cached
        if time.time() - meta["stored"] < max_age:
            return Response(meta["url"], 200, Headers(meta["headers"]), body)
        cond = dict(headers or {})
        if meta["headers"].get("etag"):
            cond["If-None-Match"] = meta["headers"]["etag"]
        if meta["headers"].get("last-modified"):
            cond["If-Modified-Since"] = meta["headers"]["last-modified"]
        resp = get(url, cond)
        if resp.status == 304:
            meta["stored"] = time.time()
            _store(meta_p, json.dumps(meta))
            return Response(meta["url"], 200, Headers(meta["headers"]), body)
    else:
        resp = get(url, headers)
    if resp.status == 200:
        keep = {k: v for k, v in resp.headers.items() if k in ("etag", "last-modified", "content-type")}
        if _store(body_p, resp.body):
            _store(meta_p, json.dumps({"url": redact(resp.url), "headers": keep, "stored": time.time(),
                                       "sha256": hashlib.sha256(resp.body).hexdigest()}))
    return resp


def _store(path: Path, data: bytes | str) -> bool:
    """Write a cache file (0600); a cache that cannot be written (a full disk, a read-only
    folder) costs a request next time, never the run."""
    try:
        checkpoint("index.cache-write")
        write_atomic(path, data, mode=0o600)
    except OSError:
        return False
    return True
