"""Rendering for people: errors, progress bars, tables.

The data a command was asked for goes to stdout (``emit_json``, ``Ui.data``, ``stdout_console``); progress,
notes, hints and errors go to stderr. Off a terminal nothing is hard-wrapped.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from wheelhouse.errors import WhError

if TYPE_CHECKING:  # rich loads with the first console a command opens, not for --help
    from rich.console import Console
    from rich.progress import Progress
from wheelhouse.redact import redact

__all__ = ["Ui", "RichReporter", "PlainConsole", "human_size", "print_error", "emit_json", "errors_as_json", "plural",
           "stderr_console", "stdout_console", "write_output", "check_writable"]


def _console(stderr: bool) -> Console:
    from rich.console import Console

    no_color = bool(os.environ.get("NO_COLOR")) or None
    con = Console(stderr=stderr, no_color=no_color, highlight=False, emoji=False)
    if not con.is_terminal:
        # A CI log or a file: no hard wrapping at 80 columns, a long name or path is never split.
        con = Console(stderr=stderr, no_color=no_color, highlight=False, soft_wrap=True, emoji=False)
    return con


def _stderr_is_terminal() -> bool:
    """rich's documented rule for a terminal (TTY_COMPATIBLE, then FORCE_COLOR, then isatty), for stderr."""
    tty_compatible = os.environ.get("TTY_COMPATIBLE", "")
    if tty_compatible in ("0", "1"):
        return tty_compatible == "1"
    force_color = os.environ.get("FORCE_COLOR")
    if force_color is not None:
        return force_color != ""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class PlainConsole:
    """Notes for a log (stderr off a terminal): each message as one plain line, tabs expanded and the
    control characters a terminal would act on (BEL, BS, VT, FF, CR) dropped, as rich prints them there;
    unlike rich, an ``:emoji_name:`` is left as written. A stage answered from its stored resolution
    prints only notes: without rich its start-up is ~15% shorter."""

    is_terminal = False
    _DROP = dict.fromkeys((7, 8, 11, 12, 13))

    def print(self, message: str, *, markup: bool = False, soft_wrap: bool = True) -> None:
        sys.stderr.write(str(message).translate(self._DROP).expandtabs(8) + "\n")
        sys.stderr.flush()


def stderr_console() -> Console:
    """Progress, notes, hints and errors: stderr."""
    return _console(stderr=True)


def stdout_console() -> Console:
    """The data asked for, rendered for people (the doctor's report): stdout."""
    return _console(stderr=False)


def print_error(exc: WhError) -> None:
    from rich.markup import escape

    con = stderr_console()
    # The message and hint carry user text (paths, TOML like [[patch]]): never rich markup;
    # and URLs the user typed, whose credentials are never printed (wheelhouse.redact).
    con.print(f"[bold red]error[/]: {escape(redact(exc.message))}", soft_wrap=True)
    if exc.detail:
        con.print(redact(exc.detail.rstrip()), markup=False, soft_wrap=True)
    if exc.hint:
        con.print(f"[yellow]hint[/]: {escape(redact(exc.hint))}", soft_wrap=True)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 wheel``, ``2 wheels``: a count and its noun, agreed."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def emit_json(data: Any) -> None:
    """Data goes to stdout, alone."""
    sys.stdout.write(redact(json.dumps(data, indent=2, sort_keys=False, default=str)) + "\n")
    sys.stdout.flush()


@contextmanager
def errors_as_json(on: bool) -> Iterator[None]:
    """With ``--json``, a failure is data too: ``{"error": {"code", "message", "hint"}}`` on stdout (redacted),
    then the error goes on to be rendered on stderr and to set the exit code, as without ``--json``."""
    try:
        yield
    except WhError as exc:
        if on:
            emit_json({"error": {"code": exc.code, "message": exc.message, "hint": exc.hint, "exit_code": exc.exit_code}})
        raise


def write_output(flag: str, path, text: str, *, fault: str | None = None) -> None:
    """Write a file the user named with ``flag`` (atomically); a folder we cannot write to is bad input.
    ``fault``: a ``wheelhouse.faults`` point (``write_atomic``)."""
    from wheelhouse.atomic import write_atomic
    from wheelhouse.errors import UsageError

    try:
        write_atomic(path, text, fault=fault)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write it ({exc.strerror or exc})",
                         hint="choose a path in a folder you can write to") from exc


def check_writable(flag: str, path, hint: str = "choose a path in a folder you can write to") -> None:
    """Before long work: the file ``flag`` names can be written later (its nearest existing folder takes one)."""
    from pathlib import Path

    from wheelhouse.atomic import probe_writable
    from wheelhouse.errors import UsageError

    try:
        probe_writable(Path(path).resolve().parent)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write there ({exc.strerror or exc})", hint=hint) from exc


def _amount_column():
    """Bytes and speed for a download (unit "B"); a plain count for anything else (a resolve counts
    packages: its bar read `0/? bytes ?`). rich.progress is imported with the first bar, not at start-up."""
    from rich.progress import DownloadColumn, ProgressColumn, TransferSpeedColumn
    from rich.text import Text

    class _AmountColumn(ProgressColumn):
        def __init__(self) -> None:
            super().__init__()
            self._bytes, self._speed = DownloadColumn(), TransferSpeedColumn()

        def render(self, task) -> Text:
            if task.fields.get("unit") == "B":
                return Text.assemble(self._bytes.render(task), " ", self._speed.render(task))
            done = int(task.completed)
            return Text(f"{done}/{int(task.total)} {task.fields.get('unit') or ''}".rstrip() if task.total
                        else f"{done} {task.fields.get('unit') or ''}".rstrip())

    return _AmountColumn()


PROGRESS_INTERVAL_ENV = "WH_PROGRESS_INTERVAL"
_PROGRESS_INTERVAL = 10.0  # seconds between two plain progress lines of one task, off a terminal


def _progress_interval() -> float:
    try:
        return max(0.05, float(os.environ.get(PROGRESS_INTERVAL_ENV, _PROGRESS_INTERVAL)))
    except ValueError:
        return _PROGRESS_INTERVAL


def human_size(n: float) -> str:
    """``12.3 MB``: bytes for people (decimal units, as the stage's totals)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


class _PlainTask:
    """One task's progress as plain lines (a CI log, a notebook cell): its counts and when it last said so."""

    def __init__(self, total: float | None, unit: str, now: float):
        self.total, self.unit, self.done = total, unit, 0.0
        self.started = self.said = now
        self.done_said = 0.0

    def line(self, name: str, now: float) -> str:
        """The task's state; the speed is that since the previous line (the one before: since the start)."""
        took = f"{now - self.started:.0f} s"
        if self.unit == "B":
            rate = (self.done - self.done_said) / max(now - self.said, 1e-9)
            amount = (f"{human_size(self.done)} of {human_size(self.total)} ({100 * self.done / self.total:.0f}%)"
                      if self.total else human_size(self.done))
            return f"{name}: {amount}, {human_size(rate)}/s, {took}"
        unit = f" {self.unit}" if self.unit else ""
        amount = (f"{self.done:.0f}/{self.total:.0f}{unit}" if self.total else f"{self.done:.0f}{unit}" if self.done
                  else "still running")  # (a build: no count, only its time)
        return f"{name}: {amount}, {took}"


class RichReporter:
    """A progress.Reporter drawing rich progress bars on stderr; off a terminal, where a bar cannot be
    drawn, one plain line per long task every ``WH_PROGRESS_INTERVAL`` seconds (10 by default), and
    nothing for a task that ends sooner."""

    def __init__(self, console: Console | None = None, quiet: bool = False, interval: float | None = None):
        self.console = console or stderr_console()
        self.quiet = quiet
        self._progress: Progress | None = None
        self._tasks: dict[str, Any] = {}
        # Checks run in threads and share one reporter: one finishing (and stopping the bars) while another
        # starts must not leave a task id that belongs to a Progress already stopped (KeyError in rich).
        self._lock = threading.RLock()
        self._plain: dict[str, _PlainTask] | None = None if quiet or self.console.is_terminal else {}
        self._interval = interval if interval is not None else _progress_interval()
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    def _tick(self) -> None:
        """The plain lines' clock: a daemon thread while a task runs (a task may not advance for minutes)."""
        import time

        while not self._stop.wait(min(1.0, self._interval / 4)):
            with self._lock:
                if not self._plain:
                    self._ticker = None
                    return
                now = time.monotonic()
                for name, task in self._plain.items():
                    if now - task.said >= self._interval:
                        self.console.print(redact(task.line(name, now)), markup=False, soft_wrap=True)
                        task.said, task.done_said = now, task.done
        with self._lock:
            self._ticker = None

    def _start_plain(self, task: str, total: float | None, unit: str) -> None:
        import time

        self._plain[task] = _PlainTask(total, unit, time.monotonic())
        if self._ticker is None:
            self._stop.clear()
            self._ticker = threading.Thread(target=self._tick, name="wh-progress", daemon=True)
            self._ticker.start()

    def _ensure(self) -> Progress:
        if self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            # A quiet run off a terminal is given a PlainConsole for its notes; its (disabled) bars still
            # need a rich console to belong to.
            console = self.console if isinstance(self.console, Console) else stderr_console()
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                _amount_column(),
                TimeRemainingColumn(),
                console=console,
                transient=True,
                # Off a terminal (CI logs) a bar is no use, and each one left a blank line behind.
                disable=self.quiet or not self.console.is_terminal,
            )
            self._progress.start()
        return self._progress

    def start(self, task: str, total: float | None = None, unit: str = "") -> None:
        if self.quiet:  # no bars and no lines: rich's progress (~50 ms of imports) is not even loaded
            return
        with self._lock:
            if self._plain is not None:
                self._start_plain(task, total, unit)
                return
            self._tasks[task] = self._ensure().add_task(task, total=total, unit=unit)

    def advance(self, task: str, amount: float = 1) -> None:
        with self._lock:
            if self._plain is not None:
                if task in self._plain:
                    self._plain[task].done += amount
                return
            if task in self._tasks and self._progress:
                self._progress.advance(self._tasks[task], amount)

    def finish(self, task: str, message: str = "") -> None:
        with self._lock:
            if self._plain is not None:
                self._plain.pop(task, None)
            if task in self._tasks and self._progress:
                self._progress.remove_task(self._tasks.pop(task))
            if message and not self.quiet:
                self.console.print(redact(message), markup=False)
            if not self._tasks and self._progress:
                self._progress.stop()
                self._progress = None

    def note(self, message: str) -> None:
        if not self.quiet:
            with self._lock:
                self.console.print(redact(message), markup=False)

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if self._plain:
                self._plain.clear()
            if self._progress:
                self._progress.stop()
                self._progress = None


class Ui:
    """Per-invocation output settings, stored on the click context."""

    def __init__(self, verbose: int = 0):
        self.verbose = verbose

    @functools.cached_property
    def console(self) -> Console:
        """For people: progress, notes (made on first use, so `wh CMD --help` never loads rich)."""
        return stderr_console()

    @functools.cached_property
    def notes(self) -> Console | PlainConsole:
        """Where notes and progress go: ``console`` on a terminal, plain lines (no rich) off one."""
        return self.console if _stderr_is_terminal() else PlainConsole()

    @functools.cached_property
    def out(self) -> Console:
        """The data asked for."""
        return stdout_console()


    @property
    def quiet(self) -> bool:
        return self.verbose < 0

    def reporter(self) -> RichReporter:
        return RichReporter(self.notes, quiet=self.quiet)

    def info(self, message: str) -> None:
        """A note for people (stderr); -q silences it."""
        if not self.quiet:
            self.notes.print(redact(message), markup=False, soft_wrap=True)

    def data(self, line: str) -> None:
        """A line of the data the user asked for (stdout); printed even with -q, never wrapped."""
        sys.stdout.write(redact(line) + "\n")
        sys.stdout.flush()


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """`kill <wh pid>` (a cancelled CI job) stops wh the way Ctrl-C does: probes and engines are stopped too."""
    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
