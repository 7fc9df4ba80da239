"""An on-disk cache of index pages, revalidated with ETag / Last-Modified.

Each page is ONE file, ``<cache_dir>/http/<key>.page``, keyed by the URL and request headers: a
header line, the header (URL, kept response headers, the body's sha256 and length, and the
"extras" stored with it), the extras, then the body. An extra is what a caller made of the page
and wants back without reading the body again (``wheelhouse.index.parsed``: the page pre-parsed
for one target); each carries its own sha256. A cold resolve used to create three files (and a
folder) per page; file creation on a busy ext4 was a tenth of its CPU.

Nothing is trusted blindly: the header's own sha256 and the file's length are checked on every
read, the body against its sha256 whenever it is read, an extra against its sha256; a torn or
edited entry is a miss (fetched again; offline, ``NotCached``), never a wrong page. The time an
entry was last confirmed is its modification time (a 304 touches it; nothing is rewritten). URLs
reach here without credentials (the client strips them) and the Authorization header is never
part of the key or the entry; entries are mode 0600 all the same (a private index's page is
private). Entries of the layout before this one (``http/ab/<key>.json`` + ``.body``) are read
when no packed entry exists, never written.

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

__all__ = ["get_cached", "entry_paths", "sweep_temp", "read_deferred_body", "add_extra", "store_entry", "CachedResponse", "NotCached",
           "OFFLINE_HINT", "PACK_FORMAT"]

OFFLINE_HINT = "run the same command once without --offline (it fills the cache), or drop --offline (WH_OFFLINE)"
PACK_FORMAT = 1  # bump when the packed layout changes: older entries are then misses
_MAGIC = b"wh-page"
_KEPT_HEADERS = ("etag", "last-modified", "content-type")
_MAX_EXTRAS = 8  # targets whose pre-parsed form one page keeps (the oldest is dropped)

# An extra asked for: its name, and what to make of a page fetched now (None: nothing to keep).
Extra = tuple[str, Callable[[Response, str], "bytes | None"]]  # make(response, its body's sha256)


class NotCached(WhError):
    """--offline, and what is asked for was never cached."""

    code = "not-cached"

    def __init__(self, what: str, *, hint: str = OFFLINE_HINT):
        super().__init__(f"offline: {what} is not in the cache", hint=hint)
        self.what = what


@dataclass(frozen=True)
class CachedResponse(Response):
    """A page answered through the cache: ``sha256`` is its body's, ``entry`` the cache entry's
    path (None when it could not be stored), ``revalidated`` whether a request confirmed it in
    this call (a 304 or a 200). ``deferred``: the body was not read (asked with ``defer_body``;
    ``body`` is empty): ``read_deferred_body`` reads and verifies it. ``extra``: the payload
    stored with the page under the name asked for (checked), or made now from a fetched page;
    None when there is none."""

    sha256: str = ""
    entry: Path | None = None
    revalidated: bool = False
    deferred: bool = False
    extra: bytes | None = None


@dataclass
class _Entry:
    """A packed entry's header, as read and checked: ``meta`` (url, status, headers, sha256,
    size, extras), where the extras and the body start, and when it was last confirmed."""

    path: Path
    meta: dict
    extras_at: int
    stored: float
    legacy: bool = False

    @property
    def body_at(self) -> int:
        return self.extras_at + sum(size for _, size, _ in self.meta["extras"])


def get_cached(get: Callable[..., Response], cache_dir: Path | None, url: str, headers: Mapping[str, str] | None = None,
               *, max_age: float = 600.0, offline: bool = False, refresh: bool = False,
               defer_body: bool = False, extra: Extra | None = None) -> Response:
    """GET with an on-disk cache (see the module docstring for the rules). Without a cache_dir
    this is ``get`` (offline: ``NotCached``); ``file://`` URLs are read as they are, never cached.

    ``defer_body``: an answer from the cache does not read its body (a caller that keeps what it
    makes of a page as an extra may never need it). ``extra``: (name, make): the answer carries
    the extra stored under ``name``; a page fetched now is stored with ``make(response, sha256)``."""
    if urllib.parse.urlsplit(url).scheme == "file":
        return get(url, headers)
    if cache_dir is None:
        if offline:
            raise NotCached(url, hint="give --cache-dir (the folder an online run filled), or drop --offline")
        return get(url, headers)
    path, ent = _lookup(cache_dir, url, headers)
    if ent is not None and ent.meta["status"] == 404:
        if offline:
            raise HttpError(url, 404, "not found (remembered from an online run)")
        ent = None  # a remembered 404 is only for offline runs: online it is asked again
    name = extra[0] if extra else None
    if ent is not None and (offline or _fresh(ent, max_age, refresh)):
        answer = _answer(ent, name, revalidated=False, defer_body=defer_body)
        if answer is not None:
            return answer
        ent = None  # its body is torn: a miss
    if ent is None and offline:
        raise NotCached(url)
    cond = dict(headers or {})
    if ent is not None:
        if ent.meta["headers"].get("etag"):
            cond["If-None-Match"] = ent.meta["headers"]["etag"]
        if ent.meta["headers"].get("last-modified"):
            cond["If-Modified-Since"] = ent.meta["headers"]["last-modified"]
    try:
        resp = get(url, cond)
    except HttpError as exc:
        if exc.status == 404:  # remembered for offline runs (no body, no validators)
            _write(path, {"url": redact(url), "status": 404, "headers": {}}, b"", [])
        raise
    if resp.status == 304 and ent is not None:
        renewed = _renew(ent, path)
        answer = _answer(renewed or ent, name, revalidated=True, defer_body=defer_body)
        if answer is not None:
            return answer
        resp = get(url, headers)  # the entry went bad between reading and now: ask for the page whole
    if resp.status != 200:
        return resp
    digest = hashlib.sha256(resp.body).hexdigest()
    keep = {k: v for k, v in resp.headers.items() if k in _KEPT_HEADERS}
    made = extra[1](resp, digest) if extra else None
    extras = [(name, made)] if made is not None else []
    stored = _write(path, {"url": redact(resp.url), "status": 200, "headers": keep}, resp.body, extras, sha256=digest)
    return CachedResponse(resp.url, 200, resp.headers, resp.body, sha256=digest, entry=path if stored else None,
                          revalidated=True, extra=made)


def entry_paths(cache_dir: Path, url: str, headers: Mapping[str, str] | None = None) -> tuple[Path, Path]:
    """Where (url, headers) is kept: the packed entry's path, then the old layout's."""
    key = hashlib.sha256(json.dumps([url, sorted((headers or {}).items())]).encode()).hexdigest()
    return cache_dir / "http" / f"{key}.page", cache_dir / "http" / key[:2] / key


def _lookup(cache_dir: Path, url: str, headers: Mapping[str, str] | None) -> tuple[Path, "_Entry | None"]:
    """The packed entry's path for (url, headers), and its checked header (None: no usable entry)."""
    path, legacy = entry_paths(cache_dir, url, headers)
    return path, _load(path) or _load_legacy(legacy)


def _fresh(ent: "_Entry", max_age: float, refresh: bool) -> bool:
    return not refresh and time.time() - ent.stored < max_age


def read_deferred_body(resp: CachedResponse) -> bytes | None:
    """The body of a ``deferred`` answer, checked against its sha256; None when it is gone, torn
    or edited since (then ask ``get_cached`` again: it is a miss)."""
    if resp.entry is None:
        return None
    ent = _load(resp.entry) if resp.entry.suffix == ".page" else _load_legacy(resp.entry)
    if ent is None or ent.meta["sha256"] != resp.sha256:
        return None
    return _read_body(ent)


def add_extra(resp: CachedResponse, name: str, payload: bytes) -> None:
    """Keep ``payload`` under ``name`` with the cached page ``resp`` (whose body the caller has
    read): the entry is rewritten whole with it (at most ``_MAX_EXTRAS`` kept). Nothing happens
    when the entry changed since ``resp`` was read; a cache that cannot be written is ignored."""
    if resp.entry is None or not resp.sha256 or resp.deferred:
        return
    legacy = resp.entry.suffix != ".page"
    ent = _load_legacy(resp.entry) if legacy else _load(resp.entry)
    if ent is None or ent.meta["sha256"] != resp.sha256 or hashlib.sha256(resp.body).hexdigest() != resp.sha256:
        return
    kept = [] if legacy else [(n, p) for n, p in _read_extras(ent) if n != name and p is not None]
    path = resp.entry.parent.parent / f"{resp.entry.name}.page" if legacy else resp.entry
    meta = {k: ent.meta[k] for k in ("url", "status", "headers")}
    _write(path, meta, resp.body, [*kept[-(_MAX_EXTRAS - 1):], (name, payload)], stored=ent.stored)


# --- reading ----------------------------------------------------------------------------------
def _load(path: Path) -> _Entry | None:
    """A packed entry's checked header, or None when absent, torn, edited or of another format."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            head = fh.read(4096)
            line, sep, rest = head.partition(b"\n")
            parts = line.split(b" ")
            if not sep or len(parts) != 4 or parts[0] != _MAGIC or parts[1] != str(PACK_FORMAT).encode():
                return None
            size = int(parts[3])
            if len(rest) < size:
                rest += fh.read(size - len(rest))
        raw = rest[:size]
        if len(raw) != size or hashlib.sha256(raw).hexdigest().encode() != parts[2]:
            return None
        meta = json.loads(raw)
        _check_meta(meta)
        ent = _Entry(path, meta, len(line) + 1 + size, st.st_mtime)
        if st.st_size != ent.body_at + meta["size"]:  # cut short (or grown): a miss
            return None
        return ent
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


def _check_meta(meta) -> None:
    """Raise TypeError/KeyError unless ``meta`` has every field with its type."""
    if not (isinstance(meta, dict) and isinstance(meta["url"], str) and meta["status"] in (200, 404)
            and isinstance(meta["headers"], dict) and isinstance(meta["sha256"], str) and isinstance(meta["size"], int)
            and isinstance(meta["extras"], list)):
        raise TypeError("entry header")
    for name, size, digest in meta["extras"]:
        if not (isinstance(name, str) and isinstance(size, int) and size >= 0 and isinstance(digest, str)):
            raise TypeError("entry extras")


def _load_legacy(entry: Path) -> _Entry | None:
    """An entry of the layout before packing (``<key>.json`` + ``<key>.body``), read-only."""
    try:
        meta = json.loads(entry.with_suffix(".json").read_text())
        if not isinstance(meta, dict) or not isinstance(meta["stored"], (int, float)) or not isinstance(meta["headers"], dict):
            return None
        status = meta.get("status")
        if status not in (200, 404) or not isinstance(meta.get("url"), str):
            return None
        size = 0 if status == 404 else entry.with_suffix(".body").stat().st_size
        sha = meta.get("sha256") or ""
        if status == 200 and (not isinstance(sha, str) or len(sha) != 64):
            return None
        return _Entry(entry, {"url": meta["url"], "status": status, "headers": meta["headers"], "sha256": sha,
                              "size": size, "extras": []}, 0, float(meta["stored"]), legacy=True)
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


def _read_body(ent: _Entry) -> bytes | None:
    try:
        if ent.legacy:
            body = ent.path.with_suffix(".body").read_bytes()
        else:
            with open(ent.path, "rb") as fh:
                fh.seek(ent.body_at)
                body = fh.read(ent.meta["size"] + 1)
    except OSError:
        return None
    return body if hashlib.sha256(body).hexdigest() == ent.meta["sha256"] else None


def _read_extras(ent: _Entry, only: str | None = None) -> list[tuple[str, bytes | None]]:
    """The entry's extras (only the one named ``only``, when given), each checked: a bad one is None."""
    out: list[tuple[str, bytes | None]] = []
    if ent.legacy or not ent.meta["extras"]:
        return out
    try:
        with open(ent.path, "rb") as fh:
            offset = ent.extras_at
            for name, size, digest in ent.meta["extras"]:
                if only is None or name == only:
                    fh.seek(offset)
                    data = fh.read(size)
                    out.append((name, data if len(data) == size and hashlib.sha256(data).hexdigest() == digest else None))
                offset += size
    except OSError:
        return [(name, None) for name, _, _ in ent.meta["extras"] if only is None or name == only]
    return out


def _answer(ent: _Entry, name: str | None, *, revalidated: bool, defer_body: bool) -> CachedResponse | None:
    """The entry as a response; None when its body (read because it was asked for) is torn."""
    found = _read_extras(ent, name) if name else []
    body = b"" if defer_body else _read_body(ent)
    if body is None:
        return None
    return CachedResponse(ent.meta["url"], 200, Headers(ent.meta["headers"]), body, sha256=ent.meta["sha256"],
                          entry=ent.path, revalidated=revalidated, deferred=defer_body,
                          extra=found[0][1] if found else None)


# --- writing ----------------------------------------------------------------------------------
def _renew(ent: _Entry, path: Path) -> _Entry | None:
    """A 304 confirmed ``ent``: from now it counts as fresh (a packed entry is touched, one of
    the old layout rewritten packed). None when that entry is gone or torn meanwhile."""
    if ent.legacy:
        body = _read_body(ent)
        if body is None:
            return None
        meta = {k: ent.meta[k] for k in ("url", "status", "headers")}
        return _load(path) if _write(path, meta, body, []) else ent
    try:
        os.utime(path)
    except OSError:
        pass
    ent.stored = time.time()
    return ent


def _write(path: Path, meta: dict, body: bytes, extras: list[tuple[str, bytes]], *, stored: float | None = None,
           sha256: str | None = None) -> bool:
    """Write one packed entry (``sha256``: the body's, when the caller has it); False when the
    cache cannot be written (a full disk, a read-only folder: that costs a request next time,
    never the run)."""
    if meta["status"] != 200:
        sha256 = ""
    elif sha256 is None:
        sha256 = hashlib.sha256(body).hexdigest()
    head = json.dumps({**meta, "sha256": sha256,
                       "size": len(body), "extras": [[n, len(p), hashlib.sha256(p).hexdigest()] for n, p in extras]},
                      separators=(",", ":")).encode()
    line = b"%s %d %s %d\n" % (_MAGIC, PACK_FORMAT, hashlib.sha256(head).hexdigest().encode(), len(head))
    try:
        checkpoint("index.cache-write")
        store_entry(path, [line, head, *(p for _, p in extras), body], mtime=stored)
    except OSError:
        return False
    return True


_MADE: set[Path] = set()  # folders this process made or found
STALE_TEMP = 3600.0  # a temp file older than this is a killed writer's (a live one's is seconds old)


def sweep_temp(cache_dir: Path | None, *, older_than: float = STALE_TEMP) -> int:
    """Remove the temp files (``.<name>.*.tmp``) that writers killed mid-write left in the page and
    metadata folders (SIGKILL, a power cut); the number
    removed. Entries themselves are never touched: they are checked when read."""
    if cache_dir is None:
        return 0
    cutoff = time.time() - older_than
    removed = 0
    for folder in (cache_dir / "http", cache_dir / "metadata"):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for e in entries:
            if not (e.name.startswith(".") and e.name.endswith(".tmp")):
                continue
            try:
                if e.is_file(follow_symlinks=False) and e.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(e.path)
                    removed += 1
            except OSError:
                pass  # gone meanwhile, or not ours to remove: the next sweep tries again
    return removed


def store_entry(path: Path, data: bytes | str | list[bytes], *, mtime: float | None = None) -> None:
    """Write a cache file (0600) under a temp name in its folder, then rename it into place
    (``data`` may be a list of pieces, written one after the other; ``mtime``: the time it
    records, else now).

    Not fsynced (a cold resolve writes hundreds of them: fsyncs cost seconds): every entry here
    is checked when read (a page against the sha256s its header records, a metadata file
    against its own), so what a power cut leaves half-written is a miss."""
    pieces = [data.encode()] if isinstance(data, str) else [data] if isinstance(data, bytes) else data
    if path.parent not in _MADE:  # one mkdir per folder and process, not one per entry
        path.parent.mkdir(parents=True, exist_ok=True)
        _MADE.add(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except FileNotFoundError:  # the folder was removed since: made again
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:  # mkstemp made it 0600
            for piece in pieces:
                fh.write(piece)
        if mtime is not None:
            os.utime(tmp, (mtime, mtime))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
