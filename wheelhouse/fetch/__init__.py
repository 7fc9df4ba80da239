"""Fetch: parallel, resumable, verified downloads into a content-addressed cache.

``fetch_all`` (in ``downloads``, whose docstring has the rules) fetches a batch of ``FetchItem``
into a folder: a file reaches its final name only after its sha256 matched, and one taken from the
cache (``cache``) is hashed again before it is placed. One stream per file (``stream``), or parallel
byte ranges for big files (``ranges``); the HTTP session, its errors and batched writes in
``session``.
"""

from __future__ import annotations

from wheelhouse.cachedir import default_cache_dir

from .cache import HashMismatch, NoSpace, add_to_cache, cached_path, place, sha256_of
from .downloads import fetch_all
from .ranges import SEGMENT_MIN
from .session import Client, FetchError, FetchItem

__all__ = [
    "FetchItem",
    "FetchError",
    "HashMismatch",
    "NoSpace",
    "Client",
    "default_cache_dir",
    "cached_path",
    "add_to_cache",
    "sha256_of",
    "fetch_all",
    "place",
    "SEGMENT_MIN",
]
