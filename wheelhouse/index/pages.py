"""Index pages read into ``Distfile`` values: PEP 691 JSON and PEP 503 HTML (also find-links
HTML pages), with the PEP 592 (yanked), PEP 658/714 (core metadata) and ``requires-python`` fields.
Pure: the caller fetches the page.
"""

from __future__ import annotations

import urllib.parse
from html.parser import HTMLParser
from typing import Callable, Mapping

from packaging.utils import canonicalize_name

from .distfile import Distfile, distfile_from_filename, split_hash_fragment

__all__ = ["parse_simple_json", "parse_simple_html"]


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
    for f in data.get("files", ()):
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
        has_meta, meta_sha = _metadata_info(meta)
        yanked = f.get("yanked", False)
        size = f.get("size")
        info = dict(
            requires_python=f.get("requires-python") or None,
            yanked=bool(yanked),
            yanked_reason=yanked if isinstance(yanked, str) and yanked else None,
            size=size if isinstance(size, int) else None,
            metadata_url=url + ".metadata" if has_meta else None,
            metadata_sha256=meta_sha,
        )
        parts = filename[:-4].split("-") if filename.endswith(".whl") else ()
        if len(parts) in (5, 6):
            name = names.get(parts[0])
            if name is None:
                name = names[parts[0]] = canonicalize_name(parts[0])
            out.append(Distfile(name=name, version=parts[1], filename=filename, url=url, hashes=hashes, origin=origin, **info))
            continue
        d = distfile_from_filename(filename, url, hashes=hashes, origin=origin, **info)
        if d is not None:
            out.append(d)
    return out


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
