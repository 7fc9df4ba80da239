"""Where distributions come from: PEP 691 JSON / PEP 503 HTML simple indexes, find-links
folders or pages, and wheel files named directly.

``PackageSource.files(name)`` lists every file of a project as ``Distfile`` values (wheels and
sdists alike: the resolver decides, and says "only sdists" when that is all there is). Pages are
cached on disk and revalidated with ETag / Last-Modified. Nothing here downloads a wheel body.

Several indexes are searched like uv's default ``first-index`` strategy: a project's files come
from the first index that knows it (so an extra index cannot shadow a name on the main one by
accident, nor the other way round); find-links files are always added.
"""

from __future__ import annotations

import os
import threading
import urllib.parse
import urllib.request
from concurrent.futures import Future
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable, Mapping, Sequence

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

from .errors import UsageError, WhError
from .http import HttpClient, HttpError

__all__ = [
    "Distfile",
    "PackageSource",
    "IndexPageError",
    "BadDirectReference",
    "default_index_url",
    "parse_simple_json",
    "parse_simple_html",
    "distfile_from_filename",
]

SIMPLE_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
_SDIST_SUFFIXES = (".tar.gz", ".zip", ".tar.bz2", ".tgz")


class IndexPageError(WhError):
    """An index page could not be read or understood."""

    code = "index"


class BadDirectReference(UsageError):
    """A requirement that names a file or URL which is not a usable wheel."""

    code = "bad-reference"


@dataclass(frozen=True)
class Distfile:
    """One file a project publishes (a wheel or an sdist) and what the index says about it."""

    name: str  # canonical project name
    version: str
    filename: str
    url: str
    hashes: Mapping[str, str] = field(default_factory=dict, compare=False)
    requires_python: str | None = None
    yanked: bool = False
    yanked_reason: str | None = None
    size: int | None = None
    metadata_url: str | None = None  # PEP 658/714: <url>.metadata when the index serves it
    metadata_sha256: str | None = None
    origin: str = ""  # the index URL, find-links location, or "direct"

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")

    @property
    def sha256(self) -> str | None:
        return self.hashes.get("sha256")

    @property
    def local_path(self) -> Path | None:
        """The file on disk, for file:// URLs."""
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme == "file":
            return Path(urllib.request.url2pathname(parts.path))
        return None

    @property
    def build_tag(self) -> tuple:
        if not self.is_wheel:
            return ()
        return parse_wheel_filename(self.filename)[2]

    @property
    def tags(self) -> tuple[str, ...]:
        """Wheel tags (``cp312-cp312-manylinux_2_28_x86_64``...), empty for an sdist."""
        if not self.is_wheel:
            return ()
        return tuple(sorted(str(t) for t in parse_wheel_filename(self.filename)[3]))


def default_index_url() -> str:
    """The index pip would use here: PIP_INDEX_URL, pip's config files, else pip's default."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    try:
        from pip._internal.configuration import Configuration  # type: ignore

        conf = Configuration(isolated=False)
        conf.load()
        for key in ("global.index-url", "install.index-url", "download.index-url"):
            try:
                return str(conf.get_value(key))
            except Exception:
                continue
    except Exception:
        pass
    from pip._internal.models.index import PyPI  # type: ignore

    return PyPI.simple_url


def distfile_from_filename(
    filename: str,
    url: str,
    *,
    hashes: Mapping[str, str] | None = None,
    origin: str = "",
    **info,
) -> Distfile | None:
    """A Distfile for a wheel or sdist filename, or None when the name is not one."""
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        elif filename.endswith(_SDIST_SUFFIXES):
            name, version = parse_sdist_filename(filename if not filename.endswith((".tar.bz2", ".tgz")) else filename.rsplit(".t", 1)[0] + ".tar.gz")
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename, ValueError):
        return None
    return Distfile(name=canonicalize_name(name), version=str(version), filename=filename, url=url, hashes=dict(hashes or {}), origin=origin, **info)


def _split_hash_fragment(url: str) -> tuple[str, dict[str, str]]:
    base, _, frag = url.partition("#")
    hashes: dict[str, str] = {}
    for part in frag.split("&") if frag else ():
        algo, _, value = part.partition("=")
        if algo in ("sha256", "sha384", "sha512", "md5") and value:
            hashes[algo] = value
    return base, hashes


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
            url, hashes = _split_hash_fragment(raw_url)
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
        url, hashes = _split_hash_fragment(urllib.parse.urljoin(base, href))
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


class _Memo:
    """Compute each key once, even when several threads ask at the same time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict = {}

    def get(self, key, compute: Callable[[], object]):
        with self._lock:
            fut = self._futures.get(key)
            owner = fut is None
            if owner:
                fut = self._futures[key] = Future()
        if owner:
            try:
                fut.set_result(compute())
            except BaseException as exc:
                fut.set_exception(exc)
        return fut.result()


class PackageSource:
    """Lists a project's files from the configured indexes and find-links.

    No I/O happens until ``files`` (or ``direct``) is called; results are memoized per name and
    safe to request from several threads (the resolver prefetches in parallel).
    """

    def __init__(
        self,
        index_urls: Sequence[str] | None = None,
        find_links: Sequence[str | Path] = (),
        *,
        client: HttpClient | None = None,
        page_ttl: float = 600.0,
    ) -> None:
        # None -> pip's default index; () -> no index (find-links / direct files only).
        self.index_urls = tuple(u if u.endswith("/") else u + "/" for u in (index_urls if index_urls is not None else (default_index_url(),)))
        self.find_links = tuple(str(f) for f in find_links)
        self.client = client or HttpClient()
        self.page_ttl = page_ttl
        self._memo = _Memo()
        self._links_memo = _Memo()

    # --- public -------------------------------------------------------------------------
    def files(self, name: str, keep: Callable[[str], bool] | None = None) -> list[Distfile]:
        """Every file of ``name``: from the first index that has the project, plus find-links.

        ``keep(filename)`` drops files before they are parsed: big projects publish tens of
        thousands of files, and a resolver for one target needs a few of them. Results are
        memoized per (name, keep).
        """
        key = canonicalize_name(name)
        return list(self._memo.get((key, keep), lambda: self._files(key, keep)))

    def locations(self) -> list[str]:
        """Where this source looks, for messages."""
        return [*self.index_urls, *self.find_links]

    def direct(self, ref: str) -> Distfile:
        """A Distfile for a wheel named by path or URL (``./x.whl``, ``file:///...``, ``https://...``)."""
        parts = urllib.parse.urlsplit(ref)
        if parts.scheme in ("http", "https", "file"):
            url, hashes = _split_hash_fragment(ref)
        else:
            path = Path(ref).expanduser().resolve()
            if not path.is_file():
                raise BadDirectReference(f"{ref}: no such file", hint="give the path to a .whl file, or a name like `pkg==1.0`")
            url, hashes = path.as_uri(), {}
        filename = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        d = distfile_from_filename(filename, url, hashes=hashes, origin="direct")
        if d is None:
            raise BadDirectReference(
                f"{ref}: not a wheel or sdist file name",
                hint="wheel names look like name-1.0-py3-none-any.whl (PEP 427)",
            )
        if not d.is_wheel:
            raise BadDirectReference(
                f"{ref}: is a source distribution; wh stages wheels only",
                hint="build it first (`wh build`, or `python -m build --wheel`) and pass the .whl",
            )
        return d

    # --- internals ----------------------------------------------------------------------
    def _files(self, name: str, keep: Callable[[str], bool] | None) -> list[Distfile]:
        found: list[Distfile] = []
        for index in self.index_urls:
            files = self._index_files(index, name, keep)
            if files is not None:
                found = files
                break
        for loc in self.find_links:
            found += [d for d in self._links_memo.get(loc, lambda loc=loc: self._find_links(loc))
                      if d.name == name and (keep is None or keep(d.filename))]
        return found

    def _index_files(self, index: str, name: str, keep: Callable[[str], bool] | None = None) -> list[Distfile] | None:
        """The project's files on one index (None when the index does not know the project)."""
        url = urllib.parse.urljoin(index, name + "/")
        try:
            resp = self.client.get_cached(url, {"Accept": SIMPLE_ACCEPT}, max_age=self.page_ttl)
        except HttpError as exc:
            if exc.status == 404:
                return None
            raise
        ctype = (resp.headers.get("content-type") or "").split(";")[0].strip().lower()
        if ctype.endswith("json") or (ctype == "" and resp.body[:1] == b"{"):
            try:
                data = resp.json()
            except ValueError as exc:
                raise IndexPageError(f"{url}: not valid JSON ({exc})", hint="check --index-url; it must be a PEP 503/691 simple index") from exc
            return parse_simple_json(data, resp.url, index, keep)
        return parse_simple_html(resp.body.decode("utf-8", "replace"), resp.url, index, keep)

    def _find_links(self, loc: str) -> list[Distfile]:
        parts = urllib.parse.urlsplit(loc)
        if parts.scheme in ("http", "https"):
            resp = self.client.get_cached(loc, {"Accept": "text/html"}, max_age=self.page_ttl)
            return parse_simple_html(resp.body.decode("utf-8", "replace"), resp.url, loc)
        path = Path(urllib.request.url2pathname(parts.path)) if parts.scheme == "file" else Path(loc).expanduser()
        if path.is_dir():
            out = []
            for f in sorted(path.iterdir()):
                if f.is_file():
                    d = distfile_from_filename(f.name, f.resolve().as_uri(), origin=loc, size=f.stat().st_size)
                    if d is not None:
                        out.append(d)
            return out
        if path.is_file():
            return parse_simple_html(path.read_text(encoding="utf-8", errors="replace"), path.resolve().as_uri(), loc)
        raise BadDirectReference(f"--find-links {loc}: no such folder or page", hint="pass a folder of wheels or an HTML page of links")
