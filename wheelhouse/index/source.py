"""A package source: where distributions come from (PEP 691 JSON / PEP 503 HTML simple indexes,
find-links folders or pages, and wheel files named directly).

``PackageSource.files(name)`` lists every file of a project as ``Distfile`` values (wheels and
sdists alike: the resolver decides, and says "only sdists" when that is all there is). Pages are
cached on disk and revalidated with ETag / Last-Modified, and kept pre-parsed in their entry
(``parsed``); offline, they come from the cache alone (``NotCached`` on a miss). Nothing here
downloads a wheel body.

Several indexes are searched like uv's default ``first-index`` strategy: a project's files come
from the first index that knows it (so an extra index cannot shadow a name on the main one by
accident, nor the other way round); find-links files are always added.

``Distfile`` lives in ``distfile``, the page parsers in ``pages``, pip's index configuration in
``pip_config`` (read from its documented files and variables, without importing pip).
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import urllib.parse
from concurrent.futures import Future
from pathlib import Path
from typing import Callable, Mapping, Sequence

from packaging.utils import canonicalize_name

from .distfile import Distfile, distfile_from_filename, split_hash_fragment, url2pathname
from wheelhouse.errors import UsageError, WhError
from .http import HttpClient, HttpError
from .http.cache import NotCached, add_extra, read_deferred_body
from .http.deadline import max_body_bytes
from .parsed import decode_parsed, encode_parsed, extra_name
from .pip_config import UNCONFIGURED, default_index_url, no_index_configured, read_pip_index_config

__all__ = ["SIMPLE_ACCEPT", "PackageSource", "IndexPageError", "BadDirectReference"]

SIMPLE_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


class IndexPageError(WhError):
    """An index page could not be read or understood."""

    code = "index"


class BadDirectReference(UsageError):
    """A requirement that names a file or URL which is not a usable wheel."""

    code = "bad-reference"


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
        # None -> pip's configured index and extra indexes; () -> no index (find-links / direct files only).
        # Credentials in a URL are handed to the client (used for requests, kept in memory) and
        # the URL goes on without them: every Distfile, origin and message made from it is clean.
        self.client = client or HttpClient()
        strip = self.client.strip_credentials
        urls = index_urls if index_urls is not None else (default_index_url(), *read_pip_index_config().extra_index_urls)
        self.index_urls = tuple(strip(u if u.endswith("/") else u + "/") for u in urls)
        self.find_links = tuple(strip(str(f)) if "://" in str(f) else str(f) for f in find_links)
        self.page_ttl = page_ttl
        self._memo = _Memo()
        self._links_memo = _Memo()
        # page URL or find-links location -> what identifies its content as read (``_validator``,
        # ``_links_validator``); None once this source read a file named directly
        self._pages: dict[str, str] | None = {}

    # --- public -------------------------------------------------------------------------
    def files(self, name: str, keep: Callable[[str], bool] | None = None) -> list[Distfile]:
        """Every file of ``name``: from the first index that has the project, plus find-links.

        ``keep(filename)`` drops files before they are parsed: big projects publish tens of
        thousands of files, and a resolver for one target needs a few of them. Results are
        memoized per (name, keep). A ``keep`` with a ``cache_key`` attribute (a string that
        changes whenever what it keeps would) has its filtered list stored pre-parsed with
        the cached page (``parsed``); any other ``keep`` is applied to the stored whole page.
        A ``keep`` may also have ``many(filenames) -> list[bool]``, which judges a JSON page's
        names at once and may use what the page holds (the resolver's leaves out sdists of
        releases it keeps a wheel of); names from find-links and HTML pages go one by one.
        """
        key = canonicalize_name(name)
        return list(self._memo.get((key, keep), lambda: self._files(key, keep)))

    def pages_read(self) -> dict[str, str] | None:
        """Every index page and find-links location this source has read, with what identifies its
        content (a page: its body's sha256, or ``"404"``; a folder: its files' names, sizes and
        modification times); None when it also read a file named directly."""
        return None if self._pages is None else dict(self._pages)

    def unchanged(self, pages: Mapping[str, str]) -> bool:
        """Whether every page of ``pages`` (as ``pages_read`` gave them) reads the same now.

        Asked through the page cache and its rules, bodies left unread: offline, the cache alone;
        otherwise an entry younger than the page lifetime as it is, an older one revalidated (a
        conditional request), every one with ``refresh``. Any doubt (not cached, an error) is False."""
        for url, seen in pages.items():
            try:
                if url in self.find_links:
                    if self._links_validator(url) != seen:
                        return False
                    continue
                now = _validator(self.client.get_cached(url, {"Accept": SIMPLE_ACCEPT}, max_age=self.page_ttl,
                                                        defer_body=True))
            except HttpError as exc:
                now = "404" if exc.status == 404 else None
            except (WhError, OSError, ValueError):
                return False
            if now != seen:
                return False
        return True

    def page_files(self, pages: Mapping[str, str]) -> list[Path] | None:
        """The cache files that ``unchanged(pages)`` reads, offline, for every page of ``pages``; None when one is
        read elsewhere (a find-links location, a ``file://`` index) or no cache keeps them."""
        files: list[Path] = []
        for url in pages:
            entries = None if url in self.find_links else self.client.cache_entries(url, {"Accept": SIMPLE_ACCEPT})
            if entries is None:
                return None
            files += entries
        return files

    def locations(self) -> list[str]:
        """Where this source looks, for messages."""
        return [*self.index_urls, *self.find_links]

    def direct(self, ref: str) -> Distfile:
        """A Distfile for a wheel named by path or URL (``./x.whl``, ``file:///...``, ``https://...``)."""
        self._pages = None  # a file named directly: its content is not an index page's
        parts = urllib.parse.urlsplit(ref)
        if parts.scheme in ("http", "https", "file"):
            url, hashes = split_hash_fragment(self.client.strip_credentials(ref))
        else:
            path = Path(ref).expanduser().resolve()
            if not path.is_file():
                what = "is a folder, not a wheel file" if path.is_dir() else "no such file"
                raise BadDirectReference(f"{ref}: {what}", hint="give the path to a .whl file, or a name like `pkg==1.0`")
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
                # A page may list files of other projects (a lying or misconfigured index): they are
                # not releases of this one, as pip and find-links below judge them.
                found = [d for d in files if d.name == name]
                break
        for loc in self.find_links:
            found += [d for d in self._links_memo.get(loc, lambda loc=loc: self._find_links(loc))
                      if d.name == name and (keep is None or keep(d.filename))]
        return found

    def _index_files(self, index: str, name: str, keep: Callable[[str], bool] | None = None) -> list[Distfile] | None:
        """The project's files on one index (None when the index does not know the project)."""
        if index.rstrip("/") == UNCONFIGURED:
            raise no_index_configured()
        url = urllib.parse.urljoin(index, name + "/")
        keep_key = "all" if keep is None else getattr(keep, "cache_key", None)
        kk, parse_keep = keep_key or "all", keep if keep_key else None
        made: dict[str, list[Distfile]] = {}

        def make(resp, digest: str) -> bytes:  # a page fetched now: parsed once, kept with it pre-parsed
            made["files"] = self._parse_page(resp, url, index, parse_keep)
            return encode_parsed(digest, resp.url, index, kk, made["files"])

        accept = {"Accept": SIMPLE_ACCEPT}
        try:
            # The body of a cached page is read only if its pre-parsed form cannot be used (parsed).
            resp = self.client.get_cached(url, accept, max_age=self.page_ttl, defer_body=True,
                                          extra=(extra_name(index, kk), make))
            files = made.get("files")
            digest = getattr(resp, "sha256", "")
            if files is None and digest:
                files = decode_parsed(getattr(resp, "extra", None), digest, resp.url, index, kk)
            if files is None:
                if getattr(resp, "deferred", False):
                    body = read_deferred_body(resp)
                    # gone or torn since the entry was read: a miss, asked again (offline: NotCached)
                    resp = (dataclasses.replace(resp, body=body, deferred=False) if body is not None
                            else self.client.get_cached(url, accept, max_age=self.page_ttl, extra=(extra_name(index, kk), make)))
                files = made.get("files")
                if files is None:
                    files = self._parse_page(resp, url, index, parse_keep)
                    if getattr(resp, "sha256", ""):
                        add_extra(resp, extra_name(index, kk), encode_parsed(resp.sha256, resp.url, index, kk, files))
        except HttpError as exc:
            if exc.status == 404:
                self._read(url, "404")
                return None
            raise
        except NotCached as exc:
            raise NotCached(f"the index page of {name} ({url})") from exc
        self._read(url, _validator(resp))
        if keep is not None and keep_key is None:  # a filter without a key: the whole page is kept, filtered here
            files = [d for d in files if keep(d.filename)]
        return files

    def _read(self, url: str, validator: str) -> None:
        pages = self._pages
        if pages is not None:
            pages[url] = validator

    @staticmethod
    def _parse_page(resp, url: str, index: str, keep: Callable[[str], bool] | None) -> list[Distfile]:
        from .pages import parse_simple_html, parse_simple_json_body  # here: a stored answer parses no page

        ctype = (resp.headers.get("content-type") or "").split(";")[0].strip().lower()
        if ctype.endswith("json") or (ctype == "" and resp.body[:1] == b"{"):
            try:
                return parse_simple_json_body(resp.body, resp.url, index, keep)
            except ValueError as exc:
                raise IndexPageError(f"{url}: not valid JSON ({exc})", hint="check --index-url; it must be a PEP 503/691 simple index") from exc
        return parse_simple_html(resp.body.decode("utf-8", "replace"), resp.url, index, keep)

    def _links_validator(self, loc: str) -> str:
        """What identifies a find-links location's content now (``_find_links`` reads the same)."""
        parts = urllib.parse.urlsplit(loc)
        if parts.scheme in ("http", "https"):
            return _validator(self.client.get_cached(loc, {"Accept": "text/html"}, max_age=self.page_ttl, defer_body=True))
        path = Path(url2pathname(parts.path)) if parts.scheme == "file" else Path(loc).expanduser()
        if path.is_dir():
            listing = sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in path.iterdir() if f.is_file())
            return "folder:" + hashlib.sha256(repr(listing).encode()).hexdigest()
        return "file:" + hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"

    def _find_links(self, loc: str) -> list[Distfile]:
        try:
            self._read(loc, self._links_validator(loc))
        except (WhError, OSError):
            self._pages = None  # cannot say what it holds: this run's resolution is not stored
        from .pages import parse_simple_html

        parts = urllib.parse.urlsplit(loc)
        if parts.scheme in ("http", "https"):
            resp = self.client.get_cached(loc, {"Accept": "text/html"}, max_age=self.page_ttl)
            return parse_simple_html(resp.body.decode("utf-8", "replace"), resp.url, loc)
        path = Path(url2pathname(parts.path)) if parts.scheme == "file" else Path(loc).expanduser()
        if path.is_dir():
            out = []
            for f in sorted(path.iterdir()):
                if f.is_file():
                    d = distfile_from_filename(f.name, f.resolve().as_uri(), origin=loc, size=f.stat().st_size)
                    if d is not None:
                        out.append(d)
            return out
        if path.is_file():
            limit = max_body_bytes()
            if path.stat().st_size > limit:
                raise BadDirectReference(f"--find-links {loc}: the page is larger than {limit >> 20} MiB",
                                         hint="give a folder of wheels, or raise the bound with WH_MAX_PAGE_MB")
            return parse_simple_html(path.read_text(encoding="utf-8", errors="replace"), path.resolve().as_uri(), loc)
        raise BadDirectReference(f"--find-links {loc}: no such folder or page", hint="pass a folder of wheels or an HTML page of links")


def _validator(resp) -> str:
    """What identifies a page's content: the sha256 the cache keeps of its body, else the body's own."""
    return getattr(resp, "sha256", "") or hashlib.sha256(resp.body).hexdigest()

