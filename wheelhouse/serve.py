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

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import urlsplit

from .atomic import write_atomic
from .errors import UsageError, WhError
from .progress import NullReporter, Reporter
from .readiness import Readiness

__all__ = [
    "ServeError",
    "EngineExited",
    "EngineFailed",
    "ReadyTimeout",
    "PortBusy",
    "StopFailed",
    "NotServing",
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

TAIL_LINES = 40


class ServeError(WhError):
    code = "serve-failed"


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
            detail=f"--- last {TAIL_LINES} lines of {self.log} ---\n{log_tail(self.log)}",
        )


class EngineFailed(ServeError):
    """The engine itself reported an error through its readiness endpoint."""

    code = "engine-error"

    def __init__(self, message: str, log: Path):
        super().__init__(
            f"the engine reported an error while loading: {message}",
            hint=f"fix what it names and run wh serve again (full log: {log})",
            detail=f"--- last {TAIL_LINES} lines of {log} ---\n{log_tail(log)}",
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
            detail=f"--- last {TAIL_LINES} lines of {log} ---\n{log_tail(log)}",
        )


class PortBusy(ServeError):
    code = "port-busy"

    def __init__(self, url: str, *, after_stop: bool = False):
        host, port = _host_port(url)
        what = "is still held by another process after the engine's group was stopped" if after_stop else (
            "is already in use: readiness would be judged on whatever answers there")
        super().__init__(
            f"port {port} on {host} {what}",
            hint=f"find it with `ss -ltnp 'sport = :{port}'`, stop it (or `wh stop` if wh started it), or pick another --url/--port",
        )


class StopFailed(ServeError):
    code = "stop-failed"

    def __init__(self, pgid: int, survivors: Sequence[int]):
        self.survivors = tuple(survivors)
        super().__init__(
            f"process group {pgid} still has {len(self.survivors)} process(es) after SIGKILL: {', '.join(map(str, self.survivors))}",
            hint=f"they may be stuck in the kernel (D state, GPU driver); check `ps -o pid,stat,cmd -g {pgid}`",
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

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["command"] = list(self.command)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Engine":
        return cls(int(d["pid"]), int(d["pgid"]), str(d["url"]), str(d["log"]), tuple(d.get("command", ())),
                   float(d.get("started", 0)), d.get("start_ticks"))


@dataclass(frozen=True)
class StopReport:
    pgid: int
    was_running: bool
    sigterm: bool = False
    sigkill: bool = False
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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


def _proc_stat(pid: int) -> list[str] | None:
    """Fields after ``(comm)`` of /proc/<pid>/stat: [state, ppid, pgrp, ..., starttime at index 19]."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()


def _start_ticks(pid: int) -> int | None:
    st = _proc_stat(pid)
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
            st = _proc_stat(int(entry.name))
            if st and len(st) > 2 and st[2] == str(pgid) and st[0] not in ("Z", "X"):
                out.append(int(entry.name))
    return sorted(out)


def start_engine(spec: LaunchSpec) -> tuple[Engine, subprocess.Popen]:
    """Start the command in a new session (its own process group), stdout+stderr to the log."""
    if shutil.which(spec.command[0]) is None and not os.path.exists(os.path.join(spec.cwd or "", spec.command[0])):
        raise UsageError(f"cannot start the engine: {spec.command[0]!r} not found",
                         hint="check the command (is the engine's venv on PATH? try its full path)")
    log = Path(spec.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **{k: str(v) for k, v in spec.env.items()}}
    with open(log, "ab") as fh:
        header = " ".join(spec.command)
        for secret in spec.redact:
            header = header.replace(secret, "***")
        fh.write(f"# wh serve: {header}\n".encode())
        fh.flush()
        try:
            proc = subprocess.Popen(list(spec.command), stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                    env=env, cwd=spec.cwd, start_new_session=True)
        except FileNotFoundError as exc:
            raise UsageError(f"cannot start the engine: {spec.command[0]!r} not found",
                             hint="check the command (is the engine's venv on PATH? try its full path)") from exc
        except PermissionError as exc:
            raise UsageError(f"cannot start the engine: {spec.command[0]!r} is not executable", hint="chmod +x it or run it through its interpreter") from exc
    engine = Engine(proc.pid, proc.pid, spec.url, str(log), tuple(spec.command), time.time(), _start_ticks(proc.pid))
    return engine, proc


def stop_engine(
    pgid: int, *, leader: subprocess.Popen | None = None, grace: float = 15.0, sleep: Callable[[float], None] = time.sleep
) -> StopReport:
    """SIGTERM the whole group, wait ``grace`` seconds, SIGKILL what is left; raise StopFailed if anything survives."""
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


def _confirm_port_free(url: str, sleep: Callable[[float], None] = time.sleep) -> None:
    for _ in range(20):  # the kernel closes a dead listener at once; allow a moment anyway
        if not port_open(url, timeout=0.2):
            return
        sleep(0.1)
    raise PortBusy(url, after_stop=True)


# --- logs ------------------------------------------------------------------------------------


def log_tail(path: str | Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a log (read from its end, so a huge log costs nothing)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read()
    except OSError as exc:
        return f"(cannot read {path}: {exc.strerror})"
    text = data.decode("utf-8", "replace").splitlines()
    return "\n".join(text[-lines:]) if text else "(the log is empty)"


class LogFollower:
    """Hands out the log's new complete lines since the last call (``-v`` tails the log)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.offset = 0
        self._partial = b""

    def new_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
                self.offset = fh.tell()
        except OSError:
            return []
        data = self._partial + data
        *done, self._partial = data.split(b"\n")
        return [line.decode("utf-8", "replace") for line in done]


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
    except BaseException:
        reporter.note(f"stopping process group {engine.pgid} ...")
        with _no_interrupts():  # a second Ctrl-C must not leave the group half-stopped
            stop_engine(engine.pgid, leader=proc, grace=grace)
        _confirm_port_free(spec.url)
        raise
    return engine, proc, seconds


@contextmanager
def _no_interrupts():
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


def shutdown(engine: Engine, proc: subprocess.Popen | None = None, *, grace: float = 15.0) -> StopReport:
    """Stop the engine's whole group and confirm its port is free (PortBusy if something else holds it)."""
    with _no_interrupts():
        report = stop_engine(engine.pgid, leader=proc, grace=grace)
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
    raise EngineExited(proc.returncode, Path(engine.log), after_ready=True)


# --- detach state ----------------------------------------------------------------------------


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
    try:
        return Engine.from_json(json.loads(p.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"serve state file {p} is unreadable: {exc}", hint=f"check the engine by hand, then delete {p}") from exc


def remove_state(path: Path | None = None) -> None:
    try:
        (path or state_path()).unlink()
    except FileNotFoundError:
        pass


def engine_alive(engine: Engine) -> bool:
    """True when the recorded group still has processes and its leader pid was not reused."""
    ticks = _start_ticks(engine.pid)
    if ticks is not None and engine.start_ticks is not None and ticks != engine.start_ticks:
        return False  # the pid now belongs to someone else; the recorded engine is gone
    return bool(group_members(engine.pgid))


def stop_detached(path: Path | None = None, *, grace: float = 15.0) -> tuple[Engine, StopReport]:
    """Stop the engine a detached ``wh serve`` recorded, confirm its port is free, remove the state file."""
    p = path or state_path()
    engine = read_state(p)
    if engine is None:
        raise NotServing(f"no detached engine is recorded ({p} does not exist)",
                         hint="start one with `wh serve --detach ...`; for other engines stop them by their own means")
    if engine_alive(engine):
        report = stop_engine(engine.pgid, grace=grace)
    else:
        report = StopReport(engine.pgid, was_running=False)
    remove_state(p)  # the recorded engine is gone; a port held by someone else is a separate problem
    _confirm_port_free(engine.url)
    return engine, report
