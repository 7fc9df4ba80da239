"""Engines a detached ``wh serve`` left running: stopping the one its state file records."""

from __future__ import annotations

from pathlib import Path

from wheelhouse.procgroup import StopReport, group_members, start_ticks
from .errors import NotServing
from .lifecycle import _confirm_port_free, stop_engine, stop_strays
from .state import Engine, check_not_ours, leader_matches, read_state, remove_state, state_path

__all__ = ["stop_detached"]


def stop_detached(path: Path | None = None, *, grace: float = 15.0) -> tuple[Engine, StopReport]:
    """Stop the engine a detached ``wh serve`` recorded, confirm its port is free, remove the state file."""
    p = path or state_path()
    engine = read_state(p)
    if engine is None:
        raise NotServing(f"no detached engine is recorded ({p} does not exist)",
                         hint="start one with `wh serve --detach ...`; for other engines stop them by their own means")
    check_not_ours(engine, p)  # a damaged or hand-edited record: an error, never a signal
    if leader_matches(engine):
        report = stop_engine(engine.pgid, grace=grace)
        stop_strays(engine, grace=grace)
    else:
        if start_ticks(engine.pid) is None and group_members(engine.pgid):
            # The leader is gone, so its start time can no longer vouch for the group: wh does not signal it.
            left = ", ".join(map(str, group_members(engine.pgid)))
            raise NotServing(f"the engine's leader (pid {engine.pid}) is gone but process group {engine.pgid} still "
                             f"has {left}; wh stops only a group whose leader it can verify",
                             hint=f"check them with `ps -o pid,lstart,cmd -g {engine.pgid}`; if they are the engine's "
                                  f"ranks, `kill -TERM -- -{engine.pgid}`, then delete {p}")
        report = StopReport(engine.pgid, was_running=False)
    remove_state(p)  # the recorded engine is gone; a port held by someone else is a separate problem
    _confirm_port_free(engine.url)
    return engine, report
