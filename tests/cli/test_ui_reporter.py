"""The rich reporter is shared by threads (the doctor's check groups run concurrently)."""

from __future__ import annotations

import io
import subprocess
import sys
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


def test_notes_off_a_terminal_are_the_lines_rich_printed(monkeypatch, capsys):
    """Notes off a terminal are written without rich (a stage answered from its stored resolution loads
    nothing else of it); each line is what rich's console printed there, emoji codes apart (left as written)."""
    from wheelhouse.cli._ui import PlainConsole, Ui

    for var in ("TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(var, raising=False)
    samples = ["plain note", "tab\there", "cr\rx", "bell\x07x", "trailing   ", "ünïcødé 漢字", "x" * 300,
               "two\nlines", "[bold]not markup[/]", "https://host:8080/simple/ a:b"]
    ui = Ui()
    assert isinstance(ui.notes, PlainConsole)
    for s in samples:
        ui.info(s)
        ui.reporter().note(s)
    plain = capsys.readouterr().err
    buf = io.StringIO()
    rich_con = Console(file=buf, highlight=False, soft_wrap=True, force_terminal=False)
    for s in samples:
        rich_con.print(s, markup=False, soft_wrap=True)
        rich_con.print(s, markup=False)
    assert plain == buf.getvalue()
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich's rule: a terminal; notes then go through rich
    assert isinstance(Ui().notes, Console)


def test_a_quiet_run_does_not_load_the_progress_bars():
    """`wh -q` draws nothing: rich's progress machinery (~50 ms of imports) is never loaded for its tasks."""
    code = ("import sys\nfrom wheelhouse.cli._ui import RichReporter\n"
            "r = RichReporter(quiet=True)\nr.start('verifying 8 wheels', total=8)\nr.advance('verifying 8 wheels')\n"
            "r.finish('verifying 8 wheels', 'done')\nprint(sorted(m for m in sys.modules if m.startswith('rich.progress')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
