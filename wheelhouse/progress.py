"""Progress reporting, injected: the CLI passes a rich reporter, tests a recording one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Reporter", "NullReporter", "RecordingReporter"]


class Reporter(Protocol):
    """What long-running work tells the user. Every method must be cheap and never raise."""

    def start(self, task: str, total: float | None = None, unit: str = "") -> None:
        """Begin a task (a download, a build, a batch of probes)."""

    def advance(self, task: str, amount: float = 1) -> None:
        """Move a started task forward."""

    def finish(self, task: str, message: str = "") -> None:
        """End a task."""

    def note(self, message: str) -> None:
        """A one-line event worth showing (a cache hit, a retry)."""


class NullReporter:
    """Reports nothing."""

    def start(self, task: str, total: float | None = None, unit: str = "") -> None:
        pass

    def advance(self, task: str, amount: float = 1) -> None:
        pass

    def finish(self, task: str, message: str = "") -> None:
        pass

    def note(self, message: str) -> None:
        pass


@dataclass
class RecordingReporter:
    """Keeps every event, for tests."""

    events: list[tuple] = field(default_factory=list)

    def start(self, task: str, total: float | None = None, unit: str = "") -> None:
        self.events.append(("start", task, total))

    def advance(self, task: str, amount: float = 1) -> None:
        self.events.append(("advance", task, amount))

    def finish(self, task: str, message: str = "") -> None:
        self.events.append(("finish", task, message))

    def note(self, message: str) -> None:
        self.events.append(("note", message))
