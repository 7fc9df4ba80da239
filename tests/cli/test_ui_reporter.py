"""The rich reporter is shared by threads (the doctor's check groups run concurrently)."""

from __future__ import annotations

import io
import threading

from rich.console import Console

from wheelhouse.cli._ui import RichReporter


def test_tasks_started_and_finished_from_many_threads_never_raise():
    """Before: one group finishing (which stops the bars) while another started left a task id of a stopped
    Progress behind; the next advance raised KeyError inside the doctor's native check ('native:internal')."""
    reporter = RichReporter(Console(file=io.StringIO(), force_terminal=False))
    errors: list[BaseException] = []
    go = threading.Barrier(8)

    def work(n: int) -> None:
        go.wait()
        try:
            for i in range(300):
                task = f"t{n}-{i}"
                reporter.start(task, total=3)
                reporter.advance(task)
                reporter.advance(task, 2)
                reporter.finish(task)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reporter.close()
    assert errors == []
