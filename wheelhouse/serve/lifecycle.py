"""Launch an engine in its own process group, gate on real readiness, stop the whole group.

The engine is started with ``start_new_session`` so it and every tensor/pipeline-parallel
rank worker it spawns share one process group that wh can signal as a unit:
``terminate()`` on the leader alone leaves the rank workers alive, holding the port.
Stopping is SIGTERM to the group, a grace period, SIGKILL to whatever is left, then a
check that the port is free. On any failure before "ready" (the engine exits, reports
an error, times out, or the user presses Ctrl-C) the group is stopped: nothing is left
half-started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from wheelhouse.errors import UsageError
from wheelhouse.procgroup import StopFailed, StopReport, no_interrupts, spawn_group, start_ticks, stop_group
from wheelhouse.progress import NullReporter, Reporter
from wheelhouse.redact import known_secrets, redact
from .errors import EngineExited, EngineFailed, PortBusy, ReadyTimeout, StrayEngine
from .listener import TAG_VARIABLE, describe, listening_pids, owned_by_engine, tagged_pids
from .ports import _host_port, port_open
from .readiness import Readiness
from .state import Engine

__all__ = [
    "LaunchSpec",
    "engine_env",
    "ensure_port_free",
    "start_engine",
    "stop_strays",
    "stop_engine",
    "wait_ready",
    "launch",
    "shutdown",
    "serve_until_exit",
]


@dataclass(frozen=True)
class LaunchSpec:
    """What to run and where its readiness is judged."""

    command: tuple[str, ...]
    url: str
    log: Path
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    redact: tuple[str, ...] = ()  # secrets in the command (an API key) never written to the log


# --- ports and processes ---------------------------------------------------------------------


def engine_env(python: str | None, serve_env: Mapping[str, str]) -> dict[str, str]:
    """What ``wh serve`` sets over its own environment for the engine, the environment ``wh doctor`` judged: ``wh
    env``'s variables for the engine's interpreter (PATH, CUDA_HOME, LIBRARY_PATH; LD_LIBRARY_PATH with stub folders
    taken off and the NVIDIA wheels' folders appended, never replaced) computed over wh's own environment, then the
    manifest's ``[serve] env``. An interpreter that cannot be asked adds nothing but ``[serve] env``."""
    from wheelhouse.env.cuda import serving_variables
    from wheelhouse.target.interpreter import InterpreterError, inspect_interpreter

    try:
        sites = [Path(d) for d in inspect_interpreter(python or sys.executable).visible_site_dirs]
    except InterpreterError:
        return dict(serve_env)
    return serving_variables(sites, os.environ, serve_env)


def ensure_port_free(url: str) -> None:
    if port_open(url):
        raise PortBusy(url)


def _check_listener(url: str, engine: Engine) -> None:
    """Refuse a "ready" answered by a process that is not the engine's (where /proc can tell)."""
    owners = listening_pids(_host_port(url)[1])
    if owners and not any(owned_by_engine(pid, engine.pgid, engine.pid) for pid in owners):
        raise PortBusy(url, holder=", ".join(describe(pid) for pid in sorted(owners)))


def start_engine(spec: LaunchSpec) -> tuple[Engine, subprocess.Popen]:
    """Start the command in a new session (its own process group), stdout+stderr to the log."""
    if shutil.which(spec.command[0]) is None and not os.path.exists(os.path.join(spec.cwd or "", spec.command[0])):
        raise _not_found(spec.command[0])
    log = Path(spec.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex
    env = {**os.environ, **{k: str(v) for k, v in spec.env.items()}, TAG_VARIABLE: tag}
    with open(log, "ab") as fh:
        header = redact(" ".join(spec.command), (*spec.redact, *known_secrets()))
        fh.write(f"# wh serve: {header}\n".encode())
        fh.flush()
        try:
            proc = spawn_group(spec.command, stdout=fh, env=env, cwd=spec.cwd)
        except FileNotFoundError as exc:
            raise _not_found(spec.command[0]) from exc
        except PermissionError as exc:
            raise UsageError(f"cannot start the engine: {spec.command[0]!r} is not executable", hint="chmod +x it or run it through its interpreter") from exc
    engine = Engine(proc.pid, proc.pid, spec.url, str(log), tuple(spec.command), time.time(), start_ticks(proc.pid), tag)
    return engine, proc


def stop_strays(engine: Engine, *, grace: float = 15.0) -> list[int]:
    """After the group is stopped: stop every process that still carries this launch's tag (a daemon that left
    the session, a rank started with setsid), each in its own group; returns their pids. Where one cannot be
    stopped, StrayEngine names it and the command to stop it."""
    if not engine.tag:
        return []
    strays, _ = tagged_pids(engine.tag)
    stuck = []
    for pid in strays:
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            continue
        try:
            if pgid > 1 and pgid != os.getpgrp() and pgid == pid:
                stop_group(pgid, grace=grace)
            else:  # not the leader of a group of its own: that one process only
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + grace
                while start_ticks(pid) is not None and time.monotonic() < deadline and pid in tagged_pids(engine.tag)[0]:
                    time.sleep(0.05)
                if pid in tagged_pids(engine.tag)[0]:
                    os.kill(pid, signal.SIGKILL)
        except (PermissionError, StopFailed):
            stuck.append(pid)
        except ProcessLookupError:
            pass
    if stuck:
        raise StrayEngine(f"the engine left {', '.join(describe(p) for p in stuck)} running outside its process group, "
                          "and wh could not stop it",
                          hint=f"stop it with `kill -TERM {' '.join(map(str, stuck))}` (then -KILL if it stays)")
    return strays


def _not_found(program: str) -> UsageError:
    return UsageError(f"cannot start the engine: {program!r} not found",
                      hint="check the command (is the engine's venv on PATH? try its full path)")


# SIGTERM, grace, SIGKILL, confirm gone: wheelhouse.procgroup does it for any group.
stop_engine = stop_group


def _confirm_port_free(url: str, sleep: Callable[[float], None] = time.sleep) -> None:
    for _ in range(20):  # the kernel closes a dead listener at once; allow a moment anyway
        if not port_open(url, timeout=0.2):
            return
        sleep(0.1)
    holders = listening_pids(_host_port(url)[1]) or set()
    raise PortBusy(url, after_stop=True, held_by=", ".join(describe(pid) for pid in sorted(holders)) or None)


# --- the readiness loop ----------------------------------------------------------------------


def wait_ready(
    probe: Callable[[], Readiness],
    *,
    exited: Callable[[], int | None],
    log: Path,
    timeout: float,
    interval: float = 1.0,
    reporter: Reporter = NullReporter(),
    on_tick: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Poll until the probe says ready; return the seconds it took.

    The engine exiting fails at once with the log's tail; a reported error fails with the
    engine's own message; "loading" drives a progress bar named after the phase.
    """
    t0 = clock()
    task: str | None = None
    shown = 0.0
    last = ""
    try:
        while True:
            rc = exited()
            if rc is not None:
                raise EngineExited(rc, log)
            state = probe()
            last = state.detail
            if state.state == "ready":
                rc = exited()
                if rc is not None:  # something else answered for a dead engine
                    raise EngineExited(rc, log)
                return clock() - t0
            if state.state == "error":
                raise EngineFailed(state.detail, log)
            if state.state == "loading":
                name = f"loading: {state.phase}" if state.phase else "loading"
                if name != task:
                    if task:
                        reporter.finish(task)
                    task, shown = name, 0.0
                    reporter.start(task, total=state.total, unit="B")
                if state.done is not None and state.done > shown:
                    reporter.advance(task, state.done - shown)
                    shown = state.done
            if on_tick:
                on_tick()
            if clock() - t0 >= timeout:
                raise ReadyTimeout(timeout, last, log)
            sleep(interval)
    finally:
        if task:
            reporter.finish(task)


def launch(
    spec: LaunchSpec,
    probe: Callable[[], Readiness],
    *,
    timeout: float,
    interval: float = 1.0,
    grace: float = 15.0,
    reporter: Reporter = NullReporter(),
    on_tick: Callable[[], None] | None = None,
) -> tuple[Engine, subprocess.Popen, float]:
    """Start the engine and wait for readiness. On ANY failure (Ctrl-C included) stop the group, then re-raise."""
    ensure_port_free(spec.url)
    engine, proc = start_engine(spec)
    try:
        seconds = wait_ready(probe, exited=proc.poll, log=Path(spec.log), timeout=timeout, interval=interval,
                             reporter=reporter, on_tick=on_tick)
        _check_listener(spec.url, engine)
    except BaseException as exc:
        reporter.note(f"stopping process group {engine.pgid} ...")
        with no_interrupts():  # a second Ctrl-C must not leave the group half-stopped
            stop_engine(engine.pgid, leader=proc, grace=grace)
            stop_strays(engine, grace=grace)  # nothing half-started: a daemon it spawned goes too
        if not isinstance(exc, PortBusy):  # an impostor holds it: that is the error already
            _confirm_port_free(spec.url)
        raise
    return engine, proc, seconds


def shutdown(engine: Engine, proc: subprocess.Popen | None = None, *, grace: float = 15.0) -> StopReport:
    """Stop the engine's whole group and confirm its port is free (PortBusy if something else holds it)."""
    with no_interrupts():
        report = stop_engine(engine.pgid, leader=proc, grace=grace)
        stop_strays(engine, grace=grace)
    _confirm_port_free(engine.url)
    return report


def serve_until_exit(
    engine: Engine,
    proc: subprocess.Popen,
    *,
    grace: float = 15.0,
    on_tick: Callable[[], None] | None = None,
    interval: float = 0.5,
) -> StopReport:
    """Stay attached: return after Ctrl-C has stopped the group; raise EngineExited if it ends by itself."""
    try:
        while proc.poll() is None:
            if on_tick:
                on_tick()
            time.sleep(interval)
    except KeyboardInterrupt:
        return shutdown(engine, proc, grace=grace)
    stop_engine(engine.pgid, leader=proc, grace=grace)  # ranks outliving their leader
    stop_strays(engine, grace=grace)
    raise EngineExited(proc.returncode, Path(engine.log), after_ready=True)
