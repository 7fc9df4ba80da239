"""What goes wrong serving an engine: each failure's error, with the log's tail where the engine says why."""

from __future__ import annotations

from pathlib import Path

from wheelhouse.errors import WhError
from .log import TAIL_LINES, log_tail
from .ports import _host_port

__all__ = ["ServeError", "EngineExited", "EngineFailed", "ReadyTimeout", "PortBusy", "NotServing", "StrayEngine"]


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


class StrayEngine(ServeError):
    """A process this launch started is still running after its group was stopped, and wh could not stop it."""

    code = "stray-engine"
