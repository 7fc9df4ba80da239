"""The content-addressed download cache: verified files under ``<cache>/sha256/ab/abcdef...``.

A file enters the cache only under the sha256 of its bytes, so a cache entry is
trusted without hashing it again, and a second run (or a second wheelhouse)
downloads nothing. Unfinished downloads wait under ``<cache>/partial/<key>.part``
until they verify. Entries are shared by hardlinks: they are read-only and are
never edited in place. Wheels reach the wheelhouse as hardlinks of the cache when
the two share a filesystem, else as copies.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from wheelhouse.digest import sha256_of, update_hash
from wheelhouse.errors import HashMismatch

__all__ = [
    "HashMismatch",
    "default_cache_dir",
    "cached_path",
    "partial_path",
    "sha256_of",
    "update_hash",
    "cache_hit",
    "add_to_cache",
    "commit_part",
    "place",
]


def default_cache_dir() -> Path:
    """``$WH_CACHE_DIR``, else ``$XDG_CACHE_HOME/wh``, else ``~/.cache/wh``."""
    env = os.environ.get("WH_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "wh"


def cached_path(cache: Path, sha256: str) -> Path:
    """Where a verified file with this sha256 lives in the cache."""
    return Path(cache) / "sha256" / sha256[:2] / sha256


def partial_path(cache: Path, key: str) -> Path:
    """Where the unfinished download ``key`` (its sha256, or a name derived from its URL) is kept."""
    return Path(cache) / "partial" / f"{key}.part"


def cache_hit(cache: Path, sha256: str | None, size: int | None) -> bool:
    """A cached file is trusted (it was verified on entry) unless its size is visibly wrong."""
    if not sha256:
        return False
    path = cached_path(cache, sha256)
    try:
        actual = path.stat().st_size
    except FileNotFoundError:
        return False
    if size is not None and actual != size:
        path.unlink()
        return False
    return True


def add_to_cache(cache: Path, path: Path, sha256: str | None = None) -> Path:
    """Put an existing local file into the cache (hardlink, else copy), verifying its hash first.

    Returns the cache path. Used to seed the cache from a previous wheelhouse, so
    a restage after ``rm -rf ~/.cache/wh`` still downloads nothing it already has.
    """
    actual = sha256_of(path)
    if sha256 and actual != sha256:
        raise HashMismatch(str(path), sha256, actual)
    final = cached_path(cache, actual)
    if not final.exists():
        _link_or_copy(path, final)
    return final


def commit_part(cache: Path, part: Path, sha256: str) -> Path:
    """Give a verified partial file its cache name (the caller has checked ``sha256``)."""
    final = cached_path(cache, sha256)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(part, 0o444)  # cache entries are shared by hardlinks: nobody edits them in place
    os.replace(part, final)
    return final


def _link_or_copy(src: Path, dst: Path) -> None:
    """Make ``dst`` have ``src``'s bytes, atomically: temp name in dst's folder, then os.replace."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".{dst.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        try:
            os.link(src, tmp)
        except OSError:  # another filesystem, or links not allowed: copy
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def place(src: Path, dst: Path) -> Path:
    """Put a cached file at ``dst`` (hardlink when possible); a same-inode ``dst`` is left alone."""
    try:
        if dst.exists() and os.path.samefile(src, dst):
            return dst
    except OSError:
        pass
    _link_or_copy(src, dst)
    return dst
