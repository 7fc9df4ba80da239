"""Atomic file writes: a file that matters is never seen half-written under its final name."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from wheelhouse.faults import checkpoint

__all__ = ["write_atomic", "replace_atomic", "probe_writable"]


def write_atomic(path: str | Path, data: bytes | str, mode: int = 0o644, *, fault: str | None = None) -> Path:
    """Write ``data`` to a temp file in ``path``'s folder, fsync it, then ``os.replace`` it into place.

    ``fault``: a ``wheelhouse.faults`` point checked once the bytes are in the temp file, before the fsync."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            if fault is not None:
                checkpoint(fault)
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def replace_atomic(tmp: str | Path, final: str | Path) -> Path:
    """Move a finished temp file (same filesystem) to its final name."""
    os.replace(tmp, final)
    return Path(final)


def probe_writable(path: str | Path) -> Path:
    """The nearest existing folder at or above ``path``, once a folder was made and removed in it.

    Creates nothing that stays. Raises OSError (NotADirectoryError when that ancestor is a file):
    root passes ``os.access`` on read-only mounts, so only a real attempt tells.
    """
    folder = Path(path).resolve()
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise NotADirectoryError(20, "Not a directory", str(folder))
    os.rmdir(tempfile.mkdtemp(prefix=".wh-probe-", dir=folder))
    return folder
