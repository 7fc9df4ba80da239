"""The engine's log: its tail for error messages, and its new lines for ``-v``.

Both pass through :func:`wheelhouse.redact.redact` with every secret wh knows (the API key, index
credentials): an engine that echoes its argv would otherwise print ``--api-key`` in the clear.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from wheelhouse.redact import known_secrets, redact

__all__ = ["TAIL_LINES", "log_tail", "LogFollower"]

TAIL_LINES = 40


def log_tail(path: str | Path, lines: int = TAIL_LINES, secrets: Iterable[str] = ()) -> str:
    """The last ``lines`` lines of a log (read from its end, so a huge log costs nothing), redacted of
    ``secrets`` and of every secret wh knows."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read()
    except OSError as exc:
        return f"(cannot read {path}: {exc.strerror})"
    text = data.decode("utf-8", "replace").splitlines()
    return redact("\n".join(text[-lines:]), (*secrets, *known_secrets())) if text else "(the log is empty)"


class LogFollower:
    """Hands out the log's new complete lines since the last call (``-v`` tails the log)."""

    def __init__(self, path: str | Path, secrets: Iterable[str] = ()):
        self.path = Path(path)
        self.secrets = (*secrets, *known_secrets())
        self.offset = 0
        self._partial = b""

    def new_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
                self.offset = fh.tell()
        except OSError:
            return []
        data = self._partial + data
        *done, self._partial = data.split(b"\n")
        return [redact(line.decode("utf-8", "replace"), self.secrets) for line in done]
