"""TLS trust for index requests and for carry's OCI client (one rule for every client wh opens).

The system's trust store first (where a corporate CA is installed), or an explicit bundle
(WH_CA_BUNDLE, PIP_CERT, REQUESTS_CA_BUNDLE); certifi's Mozilla bundle, a declared dependency,
only when the system store is empty (slim containers without ca-certificates). truststore would
add the macOS/Windows keychains; wh's hosts are Linux, where the system store is OpenSSL's own.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

__all__ = ["ssl_context"]


def ssl_context() -> ssl.SSLContext:
    """The system's trust store (where a corporate CA is installed), or an explicit bundle
    (WH_CA_BUNDLE, PIP_CERT, REQUESTS_CA_BUNDLE); certifi's Mozilla bundle only when the system
    store is empty (slim containers without ca-certificates)."""
    cafile = os.environ.get("WH_CA_BUNDLE") or os.environ.get("PIP_CERT") or os.environ.get("REQUESTS_CA_BUNDLE")
    ctx = ssl.create_default_context(cafile=cafile or None)
    if not cafile and not ctx.get_ca_certs() and not os.environ.get("SSL_CERT_DIR") and not _has_capath():
        import certifi  # a declared dependency (pyproject.toml)

        ctx.load_verify_locations(cafile=certifi.where())
    return ctx


def _has_capath() -> bool:
    """Whether OpenSSL's default CA folder holds certificates (loaded lazily, so get_ca_certs()
    does not list them)."""
    capath = ssl.get_default_verify_paths().capath
    try:
        return bool(capath) and any(Path(capath).iterdir())
    except OSError:
        return False
