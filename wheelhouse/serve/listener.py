"""Who listens on a TCP port: the processes holding its listening socket, read from /proc.

``wh serve`` asks once the engine looks ready. wh checks the port is free before it starts
the engine, but an engine may take minutes to bind it; a process that binds it meanwhile
(a second engine, a leftover server) would answer the readiness checks, and "ready" would
be judged on it. The engine's listener is held by its process group or its descendants (a
rank worker started with ``setsid`` is still a descendant).
"""

from __future__ import annotations

import os
from pathlib import Path

from wheelhouse.procgroup import proc_stat

__all__ = ["listening_pids", "owned_by_engine", "describe", "TAG_VARIABLE", "tagged_pids"]

# Set in the engine's environment by ``wh serve``: a process that carries it (a daemon that left the
# group, a rank started with setsid) was started by this launch, whatever its parent or group now is.
TAG_VARIABLE = "WH_SERVE_LAUNCH"

_PROC = Path("/proc")
_LISTEN = "0A"  # include/net/tcp_states.h: TCP_LISTEN


def _listening_inodes(port: int) -> set[int] | None:
    """Socket inodes in LISTEN state on ``port`` (any address); None without /proc/net."""
    found: set[int] = set()
    readable = False
    for table in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == _LISTEN and int(f[1].rsplit(":", 1)[1], 16) == port:
                found.add(int(f[9]))
    return found if readable else None


def listening_pids(port: int) -> set[int] | None:
    """Pids holding a listening socket on ``port``: empty when nothing listens, None when /proc cannot tell
    (no procfs, or the holder's file descriptors are not ours to read)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return inodes
    wanted = {f"socket:[{i}]" for i in inodes}
    pids: set[int] = set()
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = os.listdir(entry / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(entry / "fd" / fd) in wanted:
                    pids.add(int(entry.name))
                    break
            except OSError:
                continue
    return pids or None


def owned_by_engine(pid: int, pgid: int, leader: int) -> bool:
    """Whether ``pid`` is in the engine's process group, or descends from its leader or a group member."""
    for _ in range(256):  # a parent chain is short; a bound guards against a pid reused mid-walk
        if pid == leader:
            return True
        st = proc_stat(pid)
        if st is None or len(st) < 3:
            return False
        ppid, pgrp = int(st[1]), int(st[2])
        if pgrp == pgid:
            return True
        if ppid <= 1:
            return False
        pid = ppid
    return False


def describe(pid: int) -> str:
    """``pid N (command line)`` for messages."""
    try:
        cmd = (_PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        cmd = ""
    return f"pid {pid}" + (f" ({cmd[:120]})" if cmd else "")


def tagged_pids(tag: str) -> tuple[list[int], bool]:
    """Pids whose environment holds ``TAG_VARIABLE=tag`` (not wh's own), and whether every process's
    environment could be read (False: some are not ours to read, so a stray may be hidden)."""
    want = f"{TAG_VARIABLE}={tag}".encode()
    found, complete = [], True
    me = os.getpid()
    try:
        entries = list(_PROC.iterdir())
    except OSError:
        return [], False
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except FileNotFoundError:
            continue
        except OSError:
            complete = False
            continue
        if want in environ.split(b"\0"):
            st = proc_stat(int(entry.name))
            if st and st[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return sorted(found), complete
