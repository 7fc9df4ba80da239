"""Run an engine: preflight, launch in its own process group, gate on real readiness, stop the whole group.

Launching, the readiness loop and stopping are in ``lifecycle``; the failures in ``errors``; a detached
engine's stop in ``detached``; its state file in ``state``.
"""

from __future__ import annotations

from wheelhouse.procgroup import StopFailed, StopReport, group_members
from .detached import stop_detached
from .errors import EngineExited, EngineFailed, NotServing, PortBusy, ReadyTimeout, ServeError, StrayEngine
from .lifecycle import (LaunchSpec, engine_env, ensure_port_free, launch, serve_until_exit, shutdown, start_engine, stop_engine,
                     stop_strays, wait_ready)
from .log import LogFollower, log_tail
from .ports import port_open
from .state import (DamagedState, Engine, default_log_path, engine_alive, read_state, remove_state, state_dir,
                    state_path, write_state)

__all__ = [
    "ServeError",
    "EngineExited",
    "EngineFailed",
    "ReadyTimeout",
    "PortBusy",
    "StopFailed",
    "StrayEngine",
    "stop_strays",
    "NotServing",
    "DamagedState",
    "LaunchSpec",
    "engine_env",
    "Engine",
    "StopReport",
    "ensure_port_free",
    "port_open",
    "start_engine",
    "wait_ready",
    "launch",
    "serve_until_exit",
    "shutdown",
    "stop_engine",
    "group_members",
    "log_tail",
    "LogFollower",
    "state_dir",
    "state_path",
    "default_log_path",
    "write_state",
    "read_state",
    "remove_state",
    "engine_alive",
    "stop_detached",
]
