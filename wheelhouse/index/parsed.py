"""Index pages kept pre-parsed beside their cache entry, so a warm run does not parse them again.

A big project's page is megabytes of JSON (tens of thousands of files); the resolver for one target
needs a few hundred of them. What ``parse_simple_json`` / ``parse_simple_html`` made of a page (after
the ``keep`` filter) is stored at ``<entry>.<variant>.parsed`` beside the cached page
(``http.cache``), where the variant names what the list depends on: the page's final URL, the
index it came from, and the filter.

An entry is used only when all of this holds, else it is a miss and the page is parsed again (a
pre-parsed entry is never a wrong answer, only a faster one):

- its header names this FORMAT (an entry written by an older wh is ignored, then replaced);
- the sha256 in the header is the payload's (a torn or edited file fails here);
- the page's body sha256 it was made from is the cached body's (a changed page fails here), and
  the URL, index and filter are the ones asked for;
- every row makes a valid ``Distfile``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

from wheelhouse.faults import checkpoint
from .distfile import Distfile
from .http.cache import store_entry

__all__ = ["FORMAT", "parsed_path", "load_parsed", "store_parsed"]

FORMAT = 1  # bump when the row layout or what a filter key means changes
_MAGIC = b"wh-parsed-page"
_FIELDS = ("name", "version", "filename", "url", "hashes", "requires_python", "yanked", "yanked_reason", "size",
           "metadata_url", "metadata_sha256")


def parsed_path(entry: Path, page_url: str, origin: str, keep_key: str) -> Path:
    """Where the pre-parsed form of the cache entry ``entry`` lives for this URL, index and filter."""
    variant = hashlib.sha256(json.dumps([page_url, origin, keep_key]).encode()).hexdigest()[:16]
    return entry.with_name(f"{entry.name}.{variant}.parsed")


def load_parsed(path: Path, body_sha256: str, page_url: str, origin: str, keep_key: str) -> list[Distfile] | None:
    """The Distfiles stored at ``path`` for the page whose body has ``body_sha256``; None on any doubt."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    head, sep, payload = raw.partition(b"\n")
    parts = head.split(b" ")
    if not sep or len(parts) != 3 or parts[0] != _MAGIC or parts[1] != str(FORMAT).encode():
        return None
    if hashlib.sha256(payload).hexdigest().encode() != parts[2]:
        return None
    try:
        data = json.loads(payload)
        if data["body"] != body_sha256 or data["context"] != [page_url, origin, keep_key]:
            return None
        return [_distfile(row, origin) for row in data["files"]]
    except (ValueError, KeyError, TypeError):
        return None


def _distfile(row: list, origin: str) -> Distfile:
    """A Distfile from a stored row. Tens of thousands are loaded per run, so the frozen dataclass's
    ``__init__`` (one ``object.__setattr__`` per field) is bypassed: every field is set here, and
    the types that matter are checked (a wrong one raises TypeError: the entry is a miss)."""
    if len(row) != len(_FIELDS):
        raise TypeError("row length")
    values = dict(zip(_FIELDS, row))
    if not all(isinstance(values[k], str) for k in ("name", "version", "filename", "url")) or not isinstance(values["hashes"], dict):
        raise TypeError("row types")
    d = object.__new__(Distfile)
    d.__dict__.update(values, origin=origin)
    return d


def store_parsed(path: Path, body_sha256: str, page_url: str, origin: str, keep_key: str, files: Sequence[Distfile]) -> None:
    """Keep ``files`` (parsed from the page with ``body_sha256``) at ``path``; a cache that cannot be
    written costs a parse next time, never the run."""
    rows = [[getattr(d, f) if f != "hashes" else dict(d.hashes) for f in _FIELDS] for d in files]
    payload = json.dumps({"body": body_sha256, "context": [page_url, origin, keep_key], "files": rows},
                         separators=(",", ":")).encode()
    head = b" ".join([_MAGIC, str(FORMAT).encode(), hashlib.sha256(payload).hexdigest().encode()])
    try:
        checkpoint("index.cache-write")
        store_entry(path, head + b"\n" + payload)
    except OSError:
        pass
