"""wh's HTTP client for index pages, metadata and wheels: urllib3, plus what is wh's. Thread-safe.

``HttpClient`` (in ``client``, whose docstring has the rules) is urllib3's pools, retries, redirects
and proxies (``transport``: the seams where wh plugs into it) with wh's deadlines (``deadline``),
size bounds, credentials (``credentials``), an on-disk page cache (``cache``) and ``file://``
(``file_url``). The response types live in ``messages``, reading a streamed body in ``body``.
"""

from __future__ import annotations

from .client import HttpClient
from .messages import Headers, HttpError, Response, ResponseTooLarge, StreamResponse, user_agent

__all__ = ["HttpClient", "HttpError", "ResponseTooLarge", "Response", "StreamResponse", "Headers", "user_agent"]
