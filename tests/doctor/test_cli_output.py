"""`wh doctor`'s output for people: text is never markup, CI logs get one line per check, files come first."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from broken_packages import _ext, _tags, have_toolchain, install_wheel, make_venv
from wheelmaker import make_wheel
from wheelhouse.cli.doctor import _render
from wheelhouse.doctor.report import CheckResult, DoctorReport

BRACKETS = "cannot load [/opt/lib] libfoo.so: [bold]not a tag[/bold] [red]"


class _Ui:
    def __init__(self, terminal: bool, verbose: int = 0):
        self.buf = io.StringIO()
        self.console = Console(file=self.buf, force_terminal=terminal, width=200, no_color=True, highlight=False)
        self.verbose = verbose


def _results() -> tuple[CheckResult, ...]:
    return (
        CheckResult("native:bracket", "bracket [imports]", "fail", f"import bracket: ImportError: {BRACKETS}\nline two",
                    hint="edit the manifest's [[toolchain]] group and re-stage"),
        CheckResult("toolchain:versions", "versions", "ok", "nvcc 13.4.59 [exact]", hint=None),
        CheckResult("gpu:devices", "GPUs", "skip", "no GPU: [nvidia-smi] missing"),
    )


def test_table_shows_brackets_in_evidence_hints_and_titles_verbatim():
    ui = _Ui(terminal=True)
    _render(ui.console, DoctorReport("/py", _results()), 0)
    out = ui.buf.getvalue()
    assert BRACKETS in out
    assert "[[toolchain]]" in out and "[exact]" in out and "[nvidia-smi]" in out


def test_off_a_terminal_each_check_is_one_line():
    ui = _Ui(terminal=False)
    _render(ui.console, DoctorReport("/py", _results()), 0)
    lines = ui.buf.getvalue().splitlines()
    fail = [ln for ln in lines if "native:bracket" in ln]
    assert len(fail) == 1 and fail[0].startswith("FAIL") and BRACKETS in fail[0]
    assert "hint: edit the manifest's [[toolchain]] group" in fail[0]
    assert [ln.split()[0] for ln in lines if ":" in ln.split(" ", 2)[-1]][:3] == ["FAIL", "OK", "skip"]
    assert not any(ch in ui.buf.getvalue() for ch in "┃│━─")  # no table borders in a CI log


@pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")
def test_evidence_with_brackets_still_writes_json_and_junit(tmp_path):
    import sysconfig

    core = _ext(tmp_path, "_core")
    wheel = make_wheel(tmp_path / "w", "bracket", "1.0", tags=_tags(),
                       modules={"bracket/__init__.py": f"from ._core import answer\nraise ImportError({BRACKETS!r})\n"},
                       files={f"bracket/_core{sysconfig.get_config_var('EXT_SUFFIX')}": core})
    py = make_venv(tmp_path / "venv")
    install_wheel(py, wheel)
    junit = tmp_path / "d.xml"
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "native",
                           "--json", "--junit", str(junit), "--timeout", "5"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    (r,) = [r for r in report["results"] if r["id"] == "native:bracket"]
    assert r["verdict"] == "fail" and BRACKETS in r["evidence"]
    failure = ET.parse(junit).getroot().find("testcase[@name='native:bracket']/failure")
    assert failure.get("message").startswith(f"import bracket: ImportError: {BRACKETS}")
    assert BRACKETS in proc.stderr and "internal error" not in proc.stderr
