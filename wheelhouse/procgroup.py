"""Process groups: start a command as the leader of its own group, find its members, stop them all.

A command started with ``start_new_session`` shares one process group with every
worker it spawns (an engine's tensor/pipeline-parallel ranks), so the group can be
signalled as a unit: ``terminate()`` on the leader alone leaves the workers alive,
holding the port and the GPU memory. Stopping is SIGTERM to the group, a grace
period, SIGKILL to whatever is left, then a check that nobody in the group is alive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Mapping, Sequence

from .errors import WhError

__all__ = [
    "StopFailed",
    "StopReport",
    "UnsafeGroup",
    "spawn_group",
    "start_ticks",
    "proc_stat",
    "group_members",
    "kill_group",
    "stop_group",
    "no_interrupts",
]


class UnsafeGroup(WhError):
    """A group no stop may signal: 0 (the caller's own), 1 (init's), negative, or the caller's own group."""

    code = "unsafe-group"

    def __init__(self, pgid: int):
        super().__init__(f"refusing to signal process group {pgid}: it is not a group wh started",
                         hint="this is a bug in the caller; stop the engine by its own means")


def _check_signallable(pgid: int) -> None:
    if not isinstance(pgid, int) or isinstance(pgid, bool) or pgid <= 1 or pgid == os.getpgrp():
        raise UnsafeGroup(pgid)


class StopFailed(WhError):
    code = "stop-failed"

    def __init__(self, pgid: int, survivors: Sequence[int]):
        self.survivors = tuple(survivors)
        super().__init__(
            f"process group {pgid} still has {len(self.survivors)} process(es) after SIGKILL: {', '.join(map(str, self.survivors))}",
            hint=f"they may be stuck in the kernel (D state, GPU driver); check `ps -o pid,stat,cmd -g {pgid}`",
        )


@dataclass(frozen=True)
class StopReport:
    pgid: int
    was_running: bool
    sigterm: bool = False
    sigkill: bool = False
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def spawn_group(
    argv: Sequence[str], *, stdout: IO[bytes], env: Mapping[str, str] | None = None, cwd: str | Path | None = None
) -> subprocess.Popen:
    """Start ``argv`` in a new session (leader of its own process group), stdout+stderr to ``stdout``."""
    return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.STDOUT,
                            env=None if env is None else dict(env), cwd=cwd, start_new_session=True)


def proc_stat(pid: int) -> list[str] | None:
    """Fields after ``(comm)`` of /proc/<pid>/stat: [state, ppid, pgrp, ..., starttime at index 19]."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()


def start_ticks(pid: int) -> int | None:
    """/proc/<pid>/stat starttime: tells a reused pid apart (None without procfs or once it is gone)."""
    st = proc_stat(pid)
    return int(st[19]) if st and len(st) > 19 else None


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in group ``pgid``. Zombies hold no port and no GPU memory."""
    proc = Path("/proc")
    if not proc.is_dir():  # no procfs: ask the kernel whether the group has anyone at all
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    out = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            st = proc_stat(int(entry.name))
            if st and len(st) > 2 and st[2] == str(pgid) and st[0] not in ("Z", "X"):
                out.append(int(entry.name))
    return sorted(out)


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` to the whole group at once; False when it is already gone (or not ours to signal)."""
    _check_signallable(pgid)
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_group(
    pgid: int, *, leader: subprocess.Popen | None = None, grace: float = 15.0, sleep: Callable[[float], None] = time.sleep
) -> StopReport:
    """SIGTERM the whole group, wait ``grace`` seconds, SIGKILL what is left; raise StopFailed if anything survives.

    Group 0 (the caller's own), 1, a negative one or the caller's own group is refused (UnsafeGroup)."""
    _check_signallable(pgid)
    t0 = time.monotonic()

    def alive() -> list[int]:
        if leader is not None:
            leader.poll()  # reap our own child so it does not linger as a zombie
        return group_members(pgid)

    if not alive():
        return StopReport(pgid, was_running=False)
    report = {"sigterm": False, "sigkill": False}
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
            report["sigterm" if sig == signal.SIGTERM else "sigkill"] = True
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while alive() and time.monotonic() < deadline:
            sleep(0.05)
        if not alive():
            break
    survivors = alive()
    if survivors:
        raise StopFailed(pgid, survivors)
    return StopReport(pgid, True, report["sigterm"], report["sigkill"], round(time.monotonic() - t0, 3))


@contextmanager
def no_interrupts() -> Iterator[None]:
    """Hold off SIGINT/SIGTERM while a group is being stopped (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
