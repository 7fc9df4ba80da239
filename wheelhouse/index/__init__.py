"""Where distributions come from: PEP 691 JSON / PEP 503 HTML simple indexes, find-links
folders or pages, and wheel files named directly.

``PackageSource`` (in ``source``) lists every file of a project as ``Distfile`` values; pages are
cached on disk (``http``) and kept pre-parsed (``parsed``). ``Distfile`` lives in ``distfile``, the page
parsers in ``pages``, pip's index configuration in ``pip_config`` (read from its documented files and
variables, without importing pip).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wheelhouse.lazyface import lazy_names

if TYPE_CHECKING:
    from .distfile import Distfile, distfile_from_filename
    from .http.cache import NotCached
    from .pages import parse_simple_html, parse_simple_json
    from .pip_config import NoIndexConfigured, default_index_url, read_pip_index_config
    from .source import SIMPLE_ACCEPT, BadDirectReference, IndexPageError, PackageSource  # SIMPLE_ACCEPT: as before

# Each name is loaded from its module when first asked for (PEP 562): a stage answered from its stored resolution
# (wheelhouse.stage.stored) loads only the modules it uses; start-up is most of such a run.
_WHERE = {
    "Distfile": "distfile", "distfile_from_filename": "distfile", "NotCached": "http.cache", "parse_simple_html":
    "pages", "parse_simple_json": "pages", "NoIndexConfigured": "pip_config", "default_index_url": "pip_config",
    "read_pip_index_config": "pip_config", "SIMPLE_ACCEPT": "source", "BadDirectReference": "source",
    "IndexPageError": "source", "PackageSource": "source"
}


__getattr__ = lazy_names(__name__, _WHERE, globals())


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
