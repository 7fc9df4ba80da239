"""Index pages read into ``Distfile`` values: PEP 691 JSON and PEP 503 HTML (also find-links
HTML pages), with the PEP 592 (yanked), PEP 658/714 (core metadata) and ``requires-python`` fields.
Pure: the caller fetches the page.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from html.parser import HTMLParser
from typing import Callable, Mapping

from packaging.utils import canonicalize_name

from .distfile import Distfile, distfile_from_filename, distfile_of, split_hash_fragment

__all__ = ["parse_simple_json", "parse_simple_json_body", "parse_simple_html"]


def _metadata_info(value) -> tuple[bool, str | None]:
    """PEP 658 / 714 ``core-metadata`` (JSON: bool or hashes dict; HTML: "true" or "sha256=...")."""
    if value is None or value is False:
        return False, None
    if isinstance(value, dict):
        return True, value.get("sha256")
    if isinstance(value, str):
        if value.lower() == "true" or value == "":
            return True, None
        algo, _, digest = value.partition("=")
        return True, digest if algo == "sha256" else None
    return bool(value), None


def parse_simple_json(data: Mapping, page_url: str, origin: str, keep: Callable[[str], bool] | None = None) -> list[Distfile]:
    """PEP 691 project page -> Distfiles. URLs may be relative to the page.

    Big projects list tens of thousands of files (every nightly, every platform), so this is a hot
    path: wheel names are split by hand (PEP 427) and absolute URLs are not re-joined.
    """
    out = []
    names: dict[str, str] = {}
    files = data.get("files", ())
    many = getattr(keep, "many", None)  # a filter that judges a whole page at once (the resolver's)
    if many is not None and isinstance(files, list) and all(isinstance(f, dict) for f in files):
        filenames = [f.get("filename") or "" for f in files]
        if all(isinstance(n, str) for n in filenames):  # anything odd: judged one by one below, as before
            files = [f for f, ok in zip(files, many(filenames)) if ok]
            keep = None
    for f in files:
        filename = f.get("filename") or ""
        if keep is not None and not keep(filename):
            continue
        raw_url = f.get("url", "")
        if not raw_url.startswith(("https://", "http://")):
            raw_url = urllib.parse.urljoin(page_url, raw_url)
        if "#" in raw_url:
            url, hashes = split_hash_fragment(raw_url)
        else:
            url, hashes = raw_url, {}
        h = f.get("hashes")
        if h:
            hashes.update({k: v for k, v in h.items() if isinstance(v, str)})
        meta = f.get("core-metadata", f.get("data-dist-info-metadata", f.get("dist-info-metadata")))
        has_meta, meta_sha = _metadata_info(meta) if meta is not None else (False, None)
        yanked = f.get("yanked", False)
        size = f.get("size")
        info = {
            "requires_python": f.get("requires-python") or None,
            "yanked": bool(yanked),
            "yanked_reason": yanked if isinstance(yanked, str) and yanked else None,
            "size": size if isinstance(size, int) else None,
            "metadata_url": url + ".metadata" if has_meta else None,
            "metadata_sha256": meta_sha,
        }
        parts = filename[:-4].split("-") if filename.endswith(".whl") else ()
        if len(parts) in (5, 6):
            name = names.get(parts[0])
            if name is None:
                name = names[parts[0]] = canonicalize_name(parts[0])
            out.append(distfile_of({"name": name, "version": parts[1], "filename": filename, "url": url, "hashes": hashes,
                                    "origin": origin, **info}))
            continue
        d = distfile_from_filename(filename, url, hashes=hashes, origin=origin, **info)
        if d is not None:
            out.append(d)
    return out


# Byte patterns of a PEP 691 page. In valid JSON an unescaped quote only ever delimits a string, so
# `"url":` is always a key and `{"filename": "` always an object whose first key is "filename".
_FILE_START = re.compile(rb'\{\s*"filename"\s*:\s*"([^"\\]*)"')  # a file object's start and its name
_FILENAME_KEY = re.compile(rb'"filename"\s*:')
_URL_KEY = re.compile(rb'"url"\s*:')
_FILES_OPEN = re.compile(rb'"files"\s*:\s*\[\s*$')
_BETWEEN = re.compile(r"\s*,\s*")  # matched on the decoded text of an object and what follows it
_LAST = re.compile(r"\s*\]")
_FAST_MIN_BYTES = 256 * 1024  # smaller pages are parsed whole: cheap, and the fast path buys nothing


def parse_simple_json_body(body: bytes, page_url: str, origin: str, keep: Callable[[str], bool] | None = None) -> list[Distfile]:
    """A PEP 691 page's raw bytes -> Distfiles (``json.loads`` raises ValueError for a bad page).

    With ``keep``, a big page is not decoded whole: its file objects are found by their first key
    and only the kept ones (a few percent: one target's wheels) are decoded, each checked to end
    where the next begins; what precedes the list, the last object and what follows it are decoded
    too, so a page cut short is refused as before. A page shaped any other way (keys in another
    order, escapes in a file name, a count that does not add up) is decoded whole. The one
    difference: a skipped object that is itself malformed JSON is not noticed. On a cold vllm
    resolve this is ~60 MB of JSON not turned into Python objects (~0.3 s of CPU).
    """
    if keep is not None and len(body) >= _FAST_MIN_BYTES:
        kept = _kept_file_objects(body, keep)
        if kept is not None:
            return parse_simple_json({"files": kept}, page_url, origin)
    return parse_simple_json(json.loads(body), page_url, origin, keep)


def _kept_file_objects(body: bytes, keep: Callable[[str], bool]) -> list[dict] | None:
    if not body.lstrip()[:1] == b"{" or not body.rstrip()[-1:] == b"}":
        return None
    raw_names = _FILE_START.findall(body)  # object i's name (no object built, no slice of the page kept)
    n = len(raw_names)
    if not n:
        return None
    # every file object starts with its name, and there is no other: PEP 691 gives each a url
    # (the plain counts are C scans: when one equals n, no other such key can exist)
    if ((body.count(b'"filename"') != n and len(_FILENAME_KEY.findall(body)) != n)
            or (body.count(b'"url"') != n and len(_URL_KEY.findall(body)) != n)):
        return None
    first = _FILE_START.search(body)
    head = body[:first.start()]
    if _FILES_OPEN.search(head) is None:
        return None
    try:  # what comes before the list is whole JSON (closed here as the list and page would be)
        json.loads(head + b"]}")
    except ValueError:
        return None
    try:  # decoded at once (JSON strings hold no raw line break: a count that differs is an odd page)
        names = b"\n".join(raw_names).decode("utf-8").split("\n")
    except UnicodeDecodeError:
        return None
    if len(names) != n:
        return None
    many = getattr(keep, "many", None)
    verdicts = many(names) if many is not None else [keep(f) for f in names]
    decoder = json.JSONDecoder()
    kept = []
    pos = first.start()  # object i starts at or after here (just after the start of the last one decoded)
    for i in [i for i, ok in enumerate(verdicts) if ok] + ([] if verdicts[-1] else [n - 1]):
        filename, last = names[i], i + 1 == n
        start = _object_start(body, raw_names[i], pos)
        if start is None:
            return None
        # what it holds runs to the next object's start (the last: to the end of the page)
        nxt = _FILE_START.search(body, start + 1) if not last else None
        if (nxt is None) != last:
            return None
        try:
            text = body[start:nxt.start() if nxt is not None else len(body)].decode("utf-8")
            obj, stop = decoder.raw_decode(text)
        except ValueError:  # UnicodeDecodeError included
            return None
        # the object ends where the next begins (a comma between), the last one where the list does
        after = _BETWEEN.fullmatch(text, stop) if not last else _LAST.match(text, stop)
        if not isinstance(obj, dict) or obj.get("filename") != filename or after is None:
            return None
        if last:
            try:  # the page ends whole after the list: a page cut short is decoded whole (and refused)
                json.loads('{"_": 0' + text[after.end():])
            except ValueError:
                return None
            if not verdicts[i]:
                continue
        kept.append(obj)
        pos = start + 1
    return kept


def _object_start(body: bytes, raw_name: bytes, pos: int) -> int | None:
    """Where the first file object at or after ``pos`` named ``raw_name`` starts. Objects skipped
    on the way have other names: one with this name would have had the same verdict, and been
    found first. The name's text is found where it is the value of an object's first key."""
    quoted = b'"' + raw_name + b'"'
    at = body.find(quoted, pos)
    while at != -1:
        start = body.rfind(b"{", pos, at)
        m = _FILE_START.match(body, start) if start != -1 else None
        if m is not None and m.end() == at + len(quoted):
            return start
        at = body.find(quoted, at + 1)
    return None


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.base: str | None = None
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self._current: dict | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "base" and self.base is None:
            self.base = dict(attrs).get("href")
        elif tag == "a":
            self._current, self._text = dict(attrs), []

    def handle_data(self, data):
        if self._current is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._current is not None:
            self.anchors.append((self._current, "".join(self._text).strip()))
            self._current = None


def parse_simple_html(text: str, page_url: str, origin: str, keep: Callable[[str], bool] | None = None) -> list[Distfile]:
    """PEP 503 page (or a find-links HTML page) -> Distfiles, with PEP 592/658/714 attributes."""
    parser = _Anchors()
    parser.feed(text)
    base = urllib.parse.urljoin(page_url, parser.base) if parser.base else page_url
    out = []
    for attrs, _text in parser.anchors:
        href = attrs.get("href")
        if not href:
            continue
        url, hashes = split_hash_fragment(urllib.parse.urljoin(base, href))
        filename = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        if keep is not None and not keep(filename):
            continue
        has_meta, meta_sha = False, None
        for key in ("data-core-metadata", "data-dist-info-metadata"):
            if key in attrs:  # a bare attribute (value None) means "true"
                has_meta, meta_sha = _metadata_info(attrs[key] if attrs[key] is not None else "true")
                break
        yanked = "data-yanked" in attrs
        d = distfile_from_filename(
            filename,
            url,
            hashes=hashes,
            origin=origin,
            requires_python=attrs.get("data-requires-python") or None,
            yanked=yanked,
            yanked_reason=(attrs.get("data-yanked") or None) if yanked else None,
            metadata_url=url + ".metadata" if has_meta else None,
            metadata_sha256=meta_sha,
        )
        if d is not None:
            out.append(d)
    return out
