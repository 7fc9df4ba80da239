"""An on-disk cache of index pages, revalidated with ETag / Last-Modified.

Entries live under ``<cache_dir>/http/`` keyed by the URL and request headers; the body's sha256
is stored with them, so a torn or edited entry is a miss, never a wrong page. URLs reach here
without credentials (the client strips them) and the Authorization header is never part of the
key or the entry; entries are mode 0600 all the same (a private index's page is private).

Three ways to use an entry (docs/cache.md):

- normal: younger than ``max_age`` it is used as is; older, it is revalidated with a conditional
  request (If-None-Match / If-Modified-Since when the index sent validators; a plain GET when it
  did not) and a 304 renews it;
- ``refresh``: every entry is revalidated, however young;
- ``offline``: every entry is used, however old, and no request is ever made; a page that is not
  cached raises ``NotCached``. A 404 is remembered too (a project an index does not have), so an
  offline run searches several indexes the way the online run did.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from wheelhouse.errors import WhError
from wheelhouse.faults import checkpoint
from wheelhouse.redact import redact
from .messages import Headers, HttpError, Response

__all__ = ["get_cached", "read_deferred_body", "store_entry", "CachedResponse", "NotCached", "OFFLINE_HINT"]

OFFLINE_HINT = "run the same command once without --offline (it fills the cache), or drop --offline (WH_OFFLINE)"
_KEPT_HEADERS = ("etag", "last-modified", "content-type")


class NotCached(WhError):
    """--offline, and what is asked for was never cached."""

    code = "not-cached"

    def __init__(self, what: str, *, hint: str = OFFLINE_HINT):
        super().__init__(f"offline: {what} is not in the cache", hint=hint)
        self.what = what


@dataclass(frozen=True)
class CachedResponse(Response):
    """A page answered through the cache: ``sha256`` is its body's, ``entry`` the cache entry's
    path without suffix (None when it could not be stored), ``revalidated`` whether a request
    confirmed it in this call (a 304 or a 200). ``deferred``: the body was not read (asked with
    ``defer_body``; ``body`` is empty): ``read_deferred_body`` reads and verifies it."""

    sha256: str = ""
    entry: Path | None = None
    revalidated: bool = False
    deferred: bool = False


def get_cached(get: Callable[..., Response], cache_dir: Path | None, url: str, headers: Mapping[str, str] | None = None,
               *, max_age: float = 600.0, offline: bool = False, refresh: bool = False,
               defer_body: bool = False) -> Response:
    """GET with an on-disk cache (see the module docstring for the rules). Without a cache_dir
    this is ``get`` (offline: ``NotCached``); ``file://`` URLs are read as they are, never cached.

    ``defer_body``: an answer from the cache does not read its body (a caller that keeps what it
    makes of a page by the body's sha256 may never need it; ``parsed``)."""
    if urllib.parse.urlsplit(url).scheme == "file":
        return get(url, headers)
    if cache_dir is None:
        if offline:
            raise NotCached(url, hint="give --cache-dir (the folder an online run filled), or drop --offline")
        return get(url, headers)
    key = hashlib.sha256(json.dumps([url, sorted((headers or {}).items())]).encode()).hexdigest()
    entry = cache_dir / "http" / key[:2] / key
    meta_p, body_p = entry.with_suffix(".json"), entry.with_suffix(".body")
    meta, body = _load(meta_p, body_p, read_body=not defer_body)
    if meta is not None and meta.get("status") == 404:
        if offline:
            raise HttpError(url, 404, "not found (remembered from an online run)")
        meta = None  # a remembered 404 is only for offline runs: online it is asked again
    if offline:
        if meta is None:
            raise NotCached(url)
        return _answer(meta, body, entry, revalidated=False, deferred=defer_body)
    if meta is not None and not refresh and time.time() - meta["stored"] < max_age:
        return _answer(meta, body, entry, revalidated=False, deferred=defer_body)
    cond = dict(headers or {})
    if meta is not None:
        if meta["headers"].get("etag"):
            cond["If-None-Match"] = meta["headers"]["etag"]
        if meta["headers"].get("last-modified"):
            cond["If-Modified-Since"] = meta["headers"]["last-modified"]
    try:
        resp = get(url, cond)
    except HttpError as exc:
        if exc.status == 404:  # remembered for offline runs (no body, no validators)
            _store(meta_p, json.dumps({"url": redact(url), "status": 404, "headers": {}, "stored": time.time(), "sha256": ""}))
        raise
    if resp.status == 304 and meta is not None:
        meta["stored"] = time.time()
        _store(meta_p, json.dumps(meta))
        return _answer(meta, body, entry, revalidated=True, deferred=defer_body)
    if resp.status != 200:
        return resp
    digest = hashlib.sha256(resp.body).hexdigest()
    keep = {k: v for k, v in resp.headers.items() if k in _KEPT_HEADERS}
    stored = _store(body_p, resp.body) and _store(meta_p, json.dumps(
        {"url": redact(resp.url), "status": 200, "headers": keep, "stored": time.time(), "sha256": digest}))
    return CachedResponse(resp.url, 200, resp.headers, resp.body, sha256=digest, entry=entry if stored else None,
                          revalidated=True)


def read_deferred_body(resp: CachedResponse) -> bytes | None:
    """The body of a ``deferred`` answer, checked against its sha256; None when it is gone, torn
    or edited since (then ask ``get_cached`` again: it is a miss)."""
    if resp.entry is None:
        return None
    try:
        body = resp.entry.with_suffix(".body").read_bytes()
    except OSError:
        return None
    return body if hashlib.sha256(body).hexdigest() == resp.sha256 else None


def _load(meta_p: Path, body_p: Path, *, read_body: bool = True) -> tuple[dict | None, bytes]:
    """The entry's metadata and body, or (None, b"") when absent, torn or edited. Without
    ``read_body`` the body is not read (nor checked): only that its sha256 is recorded."""
    try:
        meta = json.loads(meta_p.read_text())
        if not isinstance(meta, dict) or not isinstance(meta["stored"], (int, float)) or not isinstance(meta["headers"], dict):
            return None, b""
        if meta.get("status") == 404:
            return meta, b""
        if not read_body:
            return (meta, b"") if isinstance(meta["sha256"], str) and len(meta["sha256"]) == 64 else (None, b"")
        body = body_p.read_bytes()
        if hashlib.sha256(body).hexdigest() == meta["sha256"]:
            return meta, body
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None, b""


def _answer(meta: dict, body: bytes, entry: Path, *, revalidated: bool, deferred: bool = False) -> CachedResponse:
    return CachedResponse(meta["url"], 200, Headers(meta["headers"]), body, sha256=meta["sha256"], entry=entry,
                          revalidated=revalidated, deferred=deferred)


def _store(path: Path, data: bytes | str) -> bool:
    """Write a cache file (0600); a cache that cannot be written (a full disk, a read-only
    folder) costs a request next time, never the run."""
    try:
        checkpoint("index.cache-write")
        store_entry(path, data)
    except OSError:
        return False
    return True


def store_entry(path: Path, data: bytes | str) -> None:
    """Write a cache file (0600) under a temp name in its folder, then rename it into place.

    Not fsynced (a cold resolve writes ~600 of them: fsyncs cost seconds): every entry here is
    checked when read (a body against the sha256 its .json records, a .json by parsing it, a
    .parsed file against its checksum), so what a power cut leaves half-written is a miss."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
