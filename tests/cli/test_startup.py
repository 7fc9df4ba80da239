"""wh's start-up: ``--version`` and the top-level help answered without click or rich, byte-identical to click."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

WH = [sys.executable, "-m", "wheelhouse.cli"]


def _click_render(args: list[str], columns: int) -> tuple[str, str, int]:
    """What click itself prints for ``wh ARGS`` at this terminal width: (stdout, stderr, exit code)."""
    code = (
        "import sys\n"
        "from wheelhouse.cli import cli, _NO_ARGS_IS_HELP\n"
        "try:\n"
        "    rc = cli.main(args=sys.argv[1:], prog_name='wh', standalone_mode=False)\n"
        "except _NO_ARGS_IS_HELP as exc:\n"
        "    exc.show(); rc = 2\n"
        "sys.exit(rc or 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                       env={**os.environ, "COLUMNS": str(columns)})
    return r.stdout.decode(), r.stderr.decode(), r.returncode


def _wh(args: list[str], columns: int) -> tuple[str, str, int]:
    r = subprocess.run([*WH, *args], capture_output=True, env={**os.environ, "COLUMNS": str(columns)})
    return r.stdout.decode(), r.stderr.decode(), r.returncode


def test_the_fast_help_is_clicks_at_every_width(monkeypatch):
    """click clamps the width to 50..78 columns: every one of them (and beyond both ends) renders alike."""
    import click

    from wheelhouse.cli import _fast, cli

    for columns in range(30, 130):
        monkeypatch.setenv("COLUMNS", str(columns))
        assert _fast.help_text() == cli.get_help(click.Context(cli, info_name="wh", **cli.context_settings)), columns


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["-h"], []], ids=["version", "help", "h", "bare"])
@pytest.mark.parametrize("columns", [52, 80])
def test_wh_prints_exactly_what_click_prints(args, columns):
    """Same bytes on the same streams and the same exit code (a bare ``wh``: the help on stderr, exit 2)."""
    fast = _wh(args, columns)
    assert fast == _click_render(args, columns)
    assert fast[0] or fast[1]


@pytest.mark.parametrize("args", [["--version"], ["--help"]], ids=["version", "help"])
def test_a_closed_stdout_is_no_traceback(args):
    cmd = " ".join([*WH, *args])
    r = subprocess.run(["sh", "-c", f"{cmd} >&-"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == ""  # as click's echo: nothing written, no error


def test_a_command_line_with_more_goes_to_click():
    out, err, rc = _wh(["--version", "--nonsense"], 80)
    assert rc == 2 and "error:" in err and "--nonsense" in err


@pytest.mark.parametrize("args", [["--version"], ["--help"], []], ids=["version", "help", "bare"])
def test_start_up_imports_no_click_rich_or_pip(args):
    r = subprocess.run([sys.executable, "-X", "importtime", *WH[1:], *args], capture_output=True, text=True)
    assert r.returncode in (0, 2)
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "wheelhouse.cli._fast" in imported  # the measurement saw wh's own modules
    heavy = sorted(m for m in imported if m.split(".")[0] in ("click", "rich", "pip"))
    assert heavy == []


def test_a_command_still_imports_click_and_runs():
    r = subprocess.run([*WH, "target", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "Usage: wh target" in r.stdout


@pytest.mark.parametrize("command", ["stage", "doctor", "install", "target"])
def test_a_command_s_help_loads_click_and_nothing_heavy(command):
    """Issue 31's start-up goal (<= 0.1 s): where click renders a command's --help (a terminal under 80 columns,
    or texts not rendered from these sources), it loads click and the command's own module, not rich, packaging's
    parsers, resolvelib, urllib3 or the pipeline the command runs."""
    r = subprocess.run([sys.executable, "-X", "importtime", *WH[1:], command, "--help"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "60"})
    assert r.returncode == 0 and f"Usage: wh {command}" in r.stdout, r.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "click" in imported  # the measurement saw the command's imports
    heavy = sorted(m for m in imported if m.split(".")[0] in ("rich", "resolvelib", "urllib3", "requests", "pip")
                   or m in ("packaging.specifiers", "packaging.markers", "packaging.requirements")
                   or (m.startswith("wheelhouse.") and m.split(".")[1] not in ("cli", "errors", "redact")))
    assert heavy == []


def test_every_command_s_help_is_pre_rendered_from_these_sources():
    """``_helptexts`` holds click's own --help of every command at 80 columns, rendered from the sources as they
    are: after a change in wheelhouse/cli, re-run `python -m wheelhouse.cli._helpgen` (until then click answers)."""
    from wheelhouse.cli import _fast, _helpgen, _helptexts

    assert _helptexts.SOURCES == _fast.sources_crc(), "stale: run `python -m wheelhouse.cli._helpgen`"
    assert _helptexts.TEXTS == _helpgen.render_all(), "stale: run `python -m wheelhouse.cli._helpgen`"
    assert {"stage", "doctor", "cache prune", "doctor compare", "serve"} <= set(_helptexts.TEXTS)


@pytest.mark.parametrize("args", [["stage", "--help"], ["doctor", "-h"], ["cache", "prune", "--help"], ["serve", "-h"]],
                         ids=["stage", "doctor-h", "cache-prune", "serve-h"])
@pytest.mark.parametrize("columns", [52, 80, 200])
def test_a_command_s_help_is_exactly_clicks(args, columns):
    """Same bytes on the same streams and the same exit code as click; at 80 columns or more without click."""
    fast = _wh(args, columns)
    assert fast == _click_render(args, columns)
    assert fast[2] == 0 and fast[0].startswith(f"Usage: wh {' '.join(args[:-1])} ")
    r = subprocess.run([sys.executable, "-X", "importtime", *WH[1:], *args], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": str(columns)})
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert ("click" in imported) == (columns < 80)


def test_a_stale_help_text_is_never_printed(tmp_path):
    """A command's help that changed after the texts were rendered comes from click (the checksum differs)."""
    import shutil

    copy = tmp_path / "wheelhouse"
    shutil.copytree(Path(__file__).resolve().parents[2] / "wheelhouse", copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    stage = copy / "cli" / "stage.py"
    stage.write_text(stage.read_text().replace("Resolve a stack for the TARGET", "Resolve a NEW stack for the TARGET"))
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "wheelhouse.cli", "stage", "--help"], capture_output=True,
                       text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0 and "Resolve a NEW stack" in r.stdout, r.stderr


def test_a_value_rendered_into_help_from_outside_cli_is_part_of_the_checksum(tmp_path):
    """`wh serve --help` lists READY_MODES of wheelhouse/serve/readiness.py: a new mode there is a changed text."""
    import ast
    import shutil

    from wheelhouse.cli import _fast

    cli = Path(__file__).resolve().parents[2] / "wheelhouse" / "cli"
    constants = set()
    for source in cli.glob("*.py"):
        for node in ast.parse(source.read_text()).body:
            if (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("wheelhouse.")
                    and not node.module.startswith("wheelhouse.cli") and any(a.name.isupper() for a in node.names)
                    and node.module not in ("wheelhouse.errors",)):  # exit codes and error classes: no help text
                constants.add(node.module.removeprefix("wheelhouse.").replace(".", "/") + ".py")
    assert constants <= set(_fast.RENDERED_FROM), "add the module to _fast.RENDERED_FROM"

    copy = tmp_path / "wheelhouse"
    shutil.copytree(cli.parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    readiness = copy / "serve" / "readiness.py"
    text = readiness.read_text()
    assert "READY_MODES" in text
    readiness.write_text(text.replace('"generate"', '"generate", "newmode"', 1))
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "wheelhouse.cli", "serve", "--help"], capture_output=True,
                       text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0 and "newmode" in r.stdout, r.stderr
