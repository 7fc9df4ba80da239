"""The detach state file: which engine a ``wh serve --detach`` left running, so ``wh stop`` can find its group.

The record keeps the group id and the leader's start time (``start_ticks``): a pid
reused by an unrelated process after the engine died is told apart and never signalled.
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
from wheelhouse.procgroup import group_members, start_ticks

__all__ = [
    "Engine",
    "state_dir",
    "state_path",
    "default_log_path",
    "write_state",
    "read_state",
    "remove_state",
    "engine_alive",
]


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
    allowed_flags: tuple[str, ...] = ()  # flag rules overridden with `wh serve --allow-flag` for this launch

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["command"] = list(self.command)
        d["allowed_flags"] = list(self.allowed_flags)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Engine":
        return cls(int(d["pid"]), int(d["pgid"]), str(d["url"]), str(d["log"]), tuple(d.get("command", ())),
                   float(d.get("started", 0)), d.get("start_ticks"), tuple(d.get("allowed_flags", ())))


def state_dir() -> Path:
    """$WH_STATE_DIR, else $XDG_STATE_HOME/wh, else ~/.local/state/wh."""
    if os.environ.get("WH_STATE_DIR"):
        return Path(os.environ["WH_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "wh"


def state_path() -> Path:
    return state_dir() / "serve.json"


def default_log_path() -> Path:
    return state_dir() / "logs" / time.strftime("serve-%Y%m%d-%H%M%S.log")


def write_state(engine: Engine, path: Path | None = None) -> Path:
    return write_atomic(path or state_path(), json.dumps(engine.to_json(), indent=2) + "\n")


def read_state(path: Path | None = None) -> Engine | None:
    p = path or state_path()
    if not os.path.lexists(p):
        return None
    hint = f"check the engine by hand, then delete {p}"
    data = load_json(p, what="serve state file", error=UsageError, hint=hint)
    try:
        return Engine.from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"serve state file {p} is unreadable: {exc}", hint=hint) from exc


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
