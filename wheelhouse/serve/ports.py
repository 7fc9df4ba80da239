"""The engine's URL as a host and port, and whether something accepts connections there."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from wheelhouse.errors import UsageError

__all__ = ["port_open"]


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if not parts.hostname:
        raise UsageError(f"--url {url!r} has no host", hint="write it like http://127.0.0.1:1919")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def port_open(url: str, timeout: float = 0.5) -> bool:
    """True when something accepts connections on the URL's host:port."""
    host, port = _host_port(url)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
