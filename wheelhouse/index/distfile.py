"""One file a project publishes (a wheel or an sdist) and what the index says about it.

``distfile_from_filename`` recognises wheel (PEP 427) and sdist (PEP 625, and the older
``.zip`` / ``.tar.bz2`` / ``.tgz``) names; anything else is not a distribution.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import urllib.parse
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Mapping

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

__all__ = ["NORMAL_VERSION", "Distfile", "distfile_of", "distfile_from_filename", "split_hash_fragment", "url2pathname"]

_SDIST_SUFFIXES = (".tar.gz", ".zip", ".tar.bz2", ".tgz")


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
            return Path(url2pathname(parts.path))
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


_FIELDS = frozenset(f.name for f in fields(Distfile))


def distfile_of(values: dict) -> Distfile:
    """``Distfile(**values)`` for a dict that names every field. A cold resolve makes tens of
    thousands from index pages; the frozen dataclass's ``__init__`` (one ``object.__setattr__`` per
    field) cost more than reading the page, so the fields are set at once (they are plain values:
    ``__init__`` converts nothing)."""
    if values.keys() != _FIELDS:
        raise TypeError(f"a Distfile needs exactly the fields {sorted(_FIELDS)}")
    d = object.__new__(Distfile)
    d.__dict__.update(values)
    return d


# A version text that is already its own PEP 440 normal form (``str(Version(text)) == text``): no
# epoch, no leading zeros, no local part, the canonical spellings of a/b/rc, .post and .dev.
NORMAL_VERSION = re.compile(r"(?:0|[1-9][0-9]*)(?:\.(?:0|[1-9][0-9]*))*(?:(?:a|b|rc)(?:0|[1-9][0-9]*))?"
                             r"(?:\.post(?:0|[1-9][0-9]*))?(?:\.dev(?:0|[1-9][0-9]*))?")


@functools.lru_cache(maxsize=4096)
def _canonical(name: str) -> str:
    return canonicalize_name(name)


def _sdist_name_version(filename: str) -> tuple[str, str]:
    """``parse_sdist_filename``'s (name, str(version)) for a ``.tar.gz`` / ``.zip`` name; a version
    already in normal form is taken as written (a page lists thousands of sdists: no Version each)."""
    stem = filename[:-7] if filename.endswith(".tar.gz") else filename[:-4] if filename.endswith(".zip") else ""
    name, sep, version = stem.rpartition("-")
    if sep and name and NORMAL_VERSION.fullmatch(version):
        return _canonical(name), version
    parsed_name, parsed = parse_sdist_filename(filename)
    return parsed_name, str(parsed)


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
            name, version = _canonical(name), str(version)
        elif filename.endswith(_SDIST_SUFFIXES):
            as_tar_gz = filename.rsplit(".t", 1)[0] + ".tar.gz" if filename.endswith((".tar.bz2", ".tgz")) else filename
            name, version = _sdist_name_version(as_tar_gz)
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename, ValueError):
        return None
    return distfile_of({**_DEFAULTS, **info, "name": name, "version": version, "filename": filename, "url": url,
                        "hashes": dict(hashes or {}), "origin": origin})


_DEFAULTS = {f.name: f.default for f in fields(Distfile) if f.default is not dataclasses.MISSING}


def split_hash_fragment(url: str) -> tuple[str, dict[str, str]]:
    """``url#sha256=...`` -> (url without the fragment, {algorithm: digest}) (PEP 503)."""
    base, _, frag = url.partition("#")
    hashes: dict[str, str] = {}
    for part in frag.split("&") if frag else ():
        algo, _, value = part.partition("=")
        if algo in ("sha256", "sha384", "sha512", "md5") and value:
            hashes[algo] = value
    return base, hashes


def url2pathname(path: str) -> str:
    """``urllib.request.url2pathname``, loaded when a file:// URL is met (urllib.request loads http.client,
    email and ssl: most runs never need them)."""
    from urllib.request import url2pathname

    return url2pathname(path)
