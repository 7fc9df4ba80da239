"""Finding wh's helper processes (the cold resolve's, the second download process) from a test: by
their command line, which names the module each one serves (wheelhouse.childproc.spawn)."""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["helper_pids", "alive", "wait_for"]


def helper_pids(*markers: bytes, parent: int | None = None, zombies: bool = True) -> list[int]:
    """Processes whose command line holds one of ``markers`` and whose parent is ``parent`` (default:
    this process; 0: any parent; the machine may run other tests' helpers at the same time).
    ``zombies=False`` leaves out those that have exited and wait to be reaped."""
    parent = os.getpid() if parent is None else parent
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            ppid = int(stat[1])
        except (OSError, ValueError, IndexError):
            continue
        if any(m in cmd for m in markers) and (parent == 0 or ppid == parent) and (zombies or stat[0] != "Z"):
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """``pid`` runs (or is stopped): it exists and is not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_for(cond, timeout: float):
    """``cond()``'s first true answer within ``timeout`` seconds (asked every 20 ms), else None."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.02)
    return None
