"""Where distributions come from: PEP 691 JSON / PEP 503 HTML simple indexes, find-links
folders or pages, and wheel files named directly.

``PackageSource`` (in ``source``) lists every file of a project as ``Distfile`` values; pages are
cached on disk (``http``) and kept pre-parsed (``parsed``). ``Distfile`` lives in ``distfile``, the page
parsers in ``pages``, pip's index configuration in ``pip_config`` (read from its documented files and
variables, without importing pip).
"""

from __future__ import annotations

from .distfile import Distfile, distfile_from_filename
from .http.cache import NotCached
from .pages import parse_simple_html, parse_simple_json
from .pip_config import NoIndexConfigured, default_index_url, read_pip_index_config
from .source import SIMPLE_ACCEPT, BadDirectReference, IndexPageError, PackageSource  # SIMPLE_ACCEPT: as before

__all__ = [
    "Distfile",
    "PackageSource",
    "IndexPageError",
    "BadDirectReference",
    "default_index_url",
    "read_pip_index_config",
    "NoIndexConfigured",
    "NotCached",
    "parse_simple_json",
    "parse_simple_html",
    "distfile_from_filename",
]
