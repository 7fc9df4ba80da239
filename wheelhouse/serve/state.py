"""The detach state file: which engine a ``wh serve --detach`` left running, so ``wh stop`` can find its group.

The record keeps the group id and the leader's start time (``start_ticks``): a pid
reused by an unrelated process after the engine died is told apart and never signalled.
``wh stop`` acts only on a leader that is alive with that start time and leads that group
(``leader_matches``); a record that cannot be such an engine (no start time, pid or pgid 0
or 1, wh's own process or its parent's) is refused as damaged (``DamagedState``), never signalled.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from wheelhouse.atomic import write_atomic
from wheelhouse.datafile import load_json
from wheelhouse.errors import UsageError
from wheelhouse.procgroup import group_members, proc_stat, start_ticks

__all__ = [
    "Engine",
    "state_dir",
    "state_path",
    "default_log_path",
    "write_state",
    "read_state",
    "remove_state",
    "engine_alive",
    "leader_matches",
    "DamagedState",
    "check_not_ours",
]


class DamagedState(UsageError):
    """The serve state file cannot name an engine wh started; nothing is signalled."""

    code = "serve-state-damaged"


def _damage_hint(p: Path) -> str:
    return f"check the engine by hand (`ps -o pid,pgid,lstart,cmd -g PGID`), stop it by its own means, then delete {p}"


def _whole(d: Mapping[str, Any], key: str, *, required: bool = True) -> int | None:
    value = d.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{key} must be an integer, not {value!r}")
    return value


@dataclass(frozen=True)
class Engine:
    """A started engine: enough to find and stop its whole group later (the detach state file)."""

    pid: int
    pgid: int
    url: str
    log: str
    command: tuple[str, ...]
    started: float
    start_ticks: int | None = None  # /proc/<pid>/stat starttime: tells a reused pid apart
    tag: str | None = None  # listener.TAG_VARIABLE's value in the engine's environment (this launch's)
    allowed_flags: tuple[str, ...] = ()  # flag rules overridden with `wh serve --allow-flag` for this launch

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["command"] = list(self.command)
        d["allowed_flags"] = list(self.allowed_flags)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Engine":
        """The engine a state file records; ValueError names the first field that is missing or of the wrong type."""
        for key in ("url", "log"):
            if not isinstance(d.get(key), str):
                raise ValueError(f"{key} must be a string, not {d.get(key)!r}")
        command = d.get("command", [])
        if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
            raise ValueError(f"command must be a list of strings, not {command!r}")
        started = d.get("started", 0)
        if not isinstance(started, (int, float)) or isinstance(started, bool):
            raise ValueError(f"started must be a number, not {started!r}")
        tag = d.get("tag")
        if tag is not None and not isinstance(tag, str):
            raise ValueError(f"tag must be a string, not {tag!r}")
        allowed = d.get("allowed_flags", [])
        if not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed):
            raise ValueError(f"allowed_flags must be a list of strings, not {allowed!r}")
        return cls(_whole(d, "pid"), _whole(d, "pgid"), d["url"], d["log"], tuple(command), float(started),
                   _whole(d, "start_ticks", required=False), tag, tuple(allowed))


def state_dir() -> Path:
    """$WH_STATE_DIR, else $XDG_STATE_HOME/wh, else ~/.local/state/wh."""
    if os.environ.get("WH_STATE_DIR"):
        return Path(os.environ["WH_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "wh"


def state_path() -> Path:
    return state_dir() / "serve.json"


def default_log_path() -> Path:
    """One log per run: the time, and this process's id (two runs started in the same second are two
    processes)."""
    return state_dir() / "logs" / f"{time.strftime('serve-%Y%m%d-%H%M%S')}-{os.getpid()}.log"


def write_state(engine: Engine, path: Path | None = None) -> Path:
    return write_atomic(path or state_path(), json.dumps(engine.to_json(), indent=2) + "\n")


def read_state(path: Path | None = None) -> Engine | None:
    p = path or state_path()
    if not os.path.lexists(p):
        return None
    hint = _damage_hint(p)
    data = load_json(p, what="serve state file", error=DamagedState, hint=hint)
    try:
        return Engine.from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise DamagedState(f"serve state file {p} is damaged: {exc}", hint=hint) from exc


def check_not_ours(engine: Engine, path: Path) -> None:
    """Refuse a record no ``wh serve`` can have written: no start time, pid or pgid 0 or 1 (or below), the
    caller's own process or group, or its parent's; signalling any of them would hit what is not the engine."""
    own = {os.getpid(), os.getpgrp(), os.getppid()}
    try:
        own.add(os.getpgid(os.getppid()))
    except OSError:
        pass
    problem = None
    if engine.pid <= 1 or engine.pgid <= 1:
        problem = f"pid {engine.pid} / pgid {engine.pgid} cannot be an engine wh started"
    elif engine.pid in own or engine.pgid in own:
        problem = f"pid {engine.pid} / pgid {engine.pgid} is wh's own process or its parent's"
    elif engine.start_ticks is None:
        problem = "it has no start time (start_ticks), so a reused pid could not be told apart"
    elif engine.pgid != engine.pid:
        problem = f"pgid {engine.pgid} is not the leader's pid {engine.pid} (wh serve starts its engine as its group's leader)"
    if problem:
        raise DamagedState(f"serve state file {path} is damaged: {problem}; nothing was signalled",
                           hint=_damage_hint(path))


def leader_matches(engine: Engine) -> bool:
    """True when the recorded leader is alive (not a zombie), with the recorded start time, and leads the
    recorded group: only then is the group the engine's to signal."""
    st = proc_stat(engine.pid)
    if not st or len(st) <= 19 or st[0] in ("Z", "X"):
        return False
    return int(st[19]) == engine.start_ticks and st[2] == str(engine.pgid)


def remove_state(path: Path | None = None) -> None:
    try:
        (path or state_path()).unlink()
    except FileNotFoundError:
        pass


def engine_alive(engine: Engine) -> bool:
    """True when the recorded group still has processes and its leader pid was not reused."""
    ticks = start_ticks(engine.pid)
    if ticks is not None and engine.start_ticks is not None and ticks != engine.start_ticks:
        return False  # the pid now belongs to someone else; the recorded engine is gone
    return bool(group_members(engine.pgid))
