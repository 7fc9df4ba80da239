"""Run an engine: preflight, launch in its own process group, gate on real readiness, stop the whole group.

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
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping
from urllib.parse import urlsplit

from wheelhouse.errors import UsageError, WhError
from wheelhouse.procgroup import (
    StopFailed,
    StopReport,
    group_members,
    no_interrupts,
    spawn_group,
    start_ticks,
    stop_group,
)
from wheelhouse.progress import NullReporter, Reporter
from wheelhouse.redact import known_secrets, redact
from .listener import TAG_VARIABLE, describe, listening_pids, owned_by_engine, tagged_pids
from .readiness import Readiness
from .log import TAIL_LINES, LogFollower, log_tail
from .state import (DamagedState, Engine, check_not_ours, default_log_path, engine_alive, leader_matches, read_state,
                    remove_state, state_dir, state_path, write_state)

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

class ServeError(WhError):
    code = "serve-failed"


def _tail_detail(log: Path) -> str:
    """An error's detail: the log's last lines, where the engine says what went wrong (redacted of every
    secret wh knows: an engine that echoes its argv shows --api-key)."""
    return f"--- last {TAIL_LINES} lines of {log} ---\n{log_tail(log)}"


class EngineExited(ServeError):
    """The engine process ended on its own; the log's tail says why."""

    code = "engine-exited"

    def __init__(self, returncode: int | None, log: Path, *, after_ready: bool = False):
        self.returncode = returncode
        self.log = Path(log)
        when = "after it was ready" if after_ready else "before it was ready"
        how = f"with code {returncode}" if returncode is not None and returncode >= 0 else (
            f"on signal {-returncode}" if returncode is not None else "")
        super().__init__(
            f"the engine exited {how} {when}".replace("  ", " "),
            hint=f"read the log's tail above (full log: {self.log}), fix the cause and run wh serve again",
            detail=_tail_detail(self.log),
        )


class EngineFailed(ServeError):
    """The engine itself reported an error through its readiness endpoint."""

    code = "engine-error"

    def __init__(self, message: str, log: Path):
        super().__init__(
            f"the engine reported an error while loading: {message}",
            hint=f"fix what it names and run wh serve again (full log: {log})",
            detail=_tail_detail(log),
        )


class ReadyTimeout(ServeError):
    code = "not-ready"

    def __init__(self, timeout: float, last: str, log: Path):
        hint = f"raise --timeout if it is still loading, or read {log}"
        if "/health: HTTP 404" in last:
            hint = "this engine has no /health endpoint: use --ready generate (or --ready http --path P)"
        super().__init__(
            f"the engine was not ready after {timeout:g} s (last check: {last or 'no answer'}); it was stopped",
            hint=hint,
            detail=_tail_detail(log),
        )


class PortBusy(ServeError):
    code = "port-busy"

    def __init__(self, url: str, *, after_stop: bool = False, holder: str | None = None, held_by: str | None = None):
        host, port = _host_port(url)
        what = "is still held by another process after the engine's group was stopped" if after_stop else (
            "is already in use: readiness would be judged on whatever answers there")
        if after_stop and held_by:
            what = (f"is still held by another process ({held_by}) after the engine's group was stopped (not "
                    "started by this launch, or not wh's to stop: a daemon the engine asked to serve?)")
        if holder:
            what = (f"is answered by {holder}, not the engine (it bound the port after wh found it free); "
                    "the engine was stopped")
        super().__init__(
            f"port {port} on {host} {what}",
            hint=f"find it with `ss -ltnp 'sport = :{port}'`, stop it (or `wh stop` if wh started it), or pick another --url/--port",
        )


class NotServing(ServeError):
    code = "not-serving"


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


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if not parts.hostname:
        raise UsageError(f"--url {url!r} has no host", hint="write it like http://127.0.0.1:1919")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def port_open(url: str, timeout: float = 0.5) -> bool:
    """True when something accepts connections on the URL's host:port."""
    host, port = _host_port(url)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


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


class StrayEngine(ServeError):
    """A process this launch started is still running after its group was stopped, and wh could not stop it."""

    code = "stray-engine"


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


# --- detached engines ----------------------------------------------------------------------------


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
