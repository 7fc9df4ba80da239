"""sha256 of files, read in blocks: the one hash every verification in wh compares against.

Standard library only (the install path imports it: nothing here can open a socket).
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import BinaryIO

__all__ = ["sha256_of", "update_hash", "update_hash_from", "record_digest"]

_CHUNK = 1 << 20  # 1 MiB reads


def update_hash(h: "hashlib._Hash", path: Path) -> None:
    """Feed the whole of ``path`` to the running hash ``h``."""
    with open(path, "rb") as fh:
        update_hash_from(h, fh)


def update_hash_from(h: "hashlib._Hash", fh: BinaryIO) -> None:
    """Feed what is left of the open file ``fh`` to the running hash ``h``."""
    while True:
        block = fh.read(_CHUNK)
        if not block:
            break
        h.update(block)


def sha256_of(path: Path) -> str:
    """Hex sha256 of the file at ``path``."""
    h = hashlib.sha256()
    update_hash(h, path)
    return h.hexdigest()


def record_digest(digest: bytes) -> str:
    """A raw digest as a wheel's RECORD writes it: urlsafe base64 without padding (the one encoder)."""
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
