"""patch.conditions: facts from the target interpreter; check_conditions is pure and names every miss."""

from __future__ import annotations

import sys
from importlib.metadata import version

import pytest

from wheelhouse.errors import UsageError
from wheelhouse.patch.conditions import check_conditions, gather_facts


@pytest.mark.parametrize("when, facts, ok, needle", [
    ({"sm": ["8.9"]}, {"sm": ["8.9", "9.0"]}, True, None),
    ({"sm": ["8.9"]}, {"sm": "8.9"}, True, None),
    ({"sm": ["8.9"]}, {"sm": ["9.0"]}, False, "GPUs are sm 9.0, the patch is for sm 8.9"),
    ({"sm": ["8.9"]}, {"sm": None}, False, "GPU compute capability unknown"),
    ({"torch": "<2.12"}, {"torch": "2.11.0+cu130"}, True, None),
    ({"torch": "<2.12"}, {"torch": "2.12.0"}, False, "torch 2.12.0 is outside <2.12"),
    ({"torch": "<2.12"}, {"torch": "2.13.0.dev1"}, False, "outside"),
    ({"torch": "<2.12"}, {}, False, "torch is not installed (wanted torch<2.12)"),
    ({"torch": "<2.12"}, {"torch": "not-a-version"}, False, "outside"),
])
def test_check_conditions(when, facts, ok, needle):
    holds, reasons = check_conditions(when, facts)
    assert holds is ok
    assert (needle is None and reasons == []) or any(needle in r for r in reasons)


def test_every_condition_that_fails_is_named():
    holds, reasons = check_conditions({"sm": ["8.9"], "torch": "<2", "triton": ">=3"}, {"sm": ["9.0"], "torch": "2.5"})
    assert not holds and len(reasons) == 3


def test_gather_facts_asks_the_target_interpreter(monkeypatch):
    facts = gather_facts(sys.executable, ["packaging", "no-such-dist-here"])
    assert facts["packaging"] == version("packaging") and facts["no-such-dist-here"] is None
    assert "sm" in facts


def test_gather_facts_with_an_interpreter_that_cannot_run(tmp_path):
    with pytest.raises(UsageError, match="cannot run interpreter"):
        gather_facts(str(tmp_path / "nope"), ["packaging"])


def test_gather_facts_reads_past_a_startup_banner(tmp_path):
    import subprocess

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "v")], check=True)
    site = next((tmp_path / "v").glob("lib/python3*/site-packages"))
    (site / "sitecustomize.py").write_text("print('banner')\n")
    facts = gather_facts(str(tmp_path / "v" / "bin" / "python"), ["pip"])
    assert facts["pip"] is None
