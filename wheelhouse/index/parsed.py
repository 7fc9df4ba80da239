"""Index pages kept pre-parsed with their cache entry, so a warm run does not parse them again.

A big project's page is megabytes of JSON (tens of thousands of files); the resolver for one target
needs a few hundred of them. What ``parse_simple_json`` / ``parse_simple_html`` made of a page (after
the ``keep`` filter) is stored inside the page's cache entry (``http.cache``: an "extra", checked
against its own sha256 there) under a name made from what the list depends on: the index it came
from and the filter; the page's final URL is checked inside.

A pre-parsed form is used only when all of this holds, else it is a miss and the page is parsed
again (a pre-parsed form is never a wrong answer, only a faster one):

- the cache entry's checksum of it matches (a torn or edited entry fails there);
- it names this FORMAT (a form written by an older wh is ignored, then replaced);
- the page's body sha256 it was made from is the cached body's (a changed page fails here), and
  the URL, index and filter are the ones asked for;
- every row makes a valid ``Distfile``.
"""

from __future__ import annotations

import hashlib
import json
import operator
from typing import Sequence

from .distfile import Distfile, distfile_of

__all__ = ["FORMAT", "extra_name", "decode_parsed", "encode_parsed"]

FORMAT = 2  # bump when the row layout or what a filter key means changes
_MAGIC = b"wh-parsed-page"
_FIELDS = ("name", "version", "filename", "url", "hashes", "requires_python", "yanked", "yanked_reason", "size",
           "metadata_url", "metadata_sha256")
_ROW = operator.attrgetter(*_FIELDS)
_HASHES = _FIELDS.index("hashes")


def extra_name(origin: str, keep_key: str) -> str:
    """The name the pre-parsed form of a page has in its cache entry, for this index and filter."""
    return "parsed:" + hashlib.sha256(json.dumps([origin, keep_key]).encode()).hexdigest()[:16]


def decode_parsed(payload: bytes | None, body_sha256: str, page_url: str, origin: str, keep_key: str) -> list[Distfile] | None:
    """The Distfiles in ``payload`` for the page whose body has ``body_sha256``; None on any doubt."""
    if not payload:
        return None
    head, sep, data = payload.partition(b"\n")
    if not sep or head != b"%s %d" % (_MAGIC, FORMAT):
        return None
    try:
        obj = json.loads(data)
        if obj["body"] != body_sha256 or obj["context"] != [page_url, origin, keep_key]:
            return None
        return [_distfile(row, origin) for row in obj["files"]]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def _distfile(row: list, origin: str) -> Distfile:
    """A Distfile from a stored row (``distfile_of``: tens of thousands are loaded per run); the
    types that matter are checked (a wrong one raises TypeError: the entry is a miss)."""
    if len(row) != len(_FIELDS):
        raise TypeError("row length")
    values = dict(zip(_FIELDS, row))
    if not all(isinstance(values[k], str) for k in ("name", "version", "filename", "url")) or not isinstance(values["hashes"], dict):
        raise TypeError("row types")
    values["origin"] = origin
    return distfile_of(values)


def encode_parsed(body_sha256: str, page_url: str, origin: str, keep_key: str, files: Sequence[Distfile]) -> bytes:
    """``files`` (parsed from the page with ``body_sha256``) as a payload ``decode_parsed`` reads."""
    rows = [list(_ROW(d)) for d in files]
    for row in rows:
        if type(row[_HASHES]) is not dict:  # a Mapping json cannot write
            row[_HASHES] = dict(row[_HASHES])
    data = json.dumps({"body": body_sha256, "context": [page_url, origin, keep_key], "files": rows},
                      separators=(",", ":")).encode()
    return b"%s %d\n" % (_MAGIC, FORMAT) + data
