"""Loopback ports and processes, as the serve tests check them: a free port, whether one is free, whether a pid
is gone (a zombie counts: it holds no port and no memory while it waits for its reaper)."""

from __future__ import annotations

import socket
from pathlib import Path

__all__ = ["free_port", "port_free", "gone"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return False
    except OSError:
        return True


def gone(pid: int) -> bool:
    """No such process, or only a zombie (holds no port, no memory) waiting for its reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] in "ZX"
