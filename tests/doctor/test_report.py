"""The doctor's report: verdicts, exit codes, JSON and JUnit renderings (direct tests of report.py)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from wheelhouse.doctor.report import CheckResult, DoctorReport, Fix, render_junit


def _report(*results: CheckResult, fixes=()) -> DoctorReport:
    return DoctorReport(python="/venv/bin/python", results=tuple(results), fixes=tuple(fixes))


def test_unknown_verdict_is_refused():
    with pytest.raises(ValueError):
        CheckResult("x:y", "t", "green")


def test_exit_code_fail_beats_warn_and_strict_makes_warnings_count():
    ok = CheckResult("a:ok", "t", "ok")
    warn = CheckResult("a:warn", "t", "warn")
    fail = CheckResult("a:fail", "t", "fail")
    err = CheckResult("a:err", "t", "error")
    assert _report(ok).exit_code() == 0
    assert _report(ok, warn).exit_code() == 0 and _report(ok, warn).exit_code(strict=True) == 2
    assert _report(warn, fail).exit_code(strict=True) == 1
    assert _report(err).exit_code() == 1  # a check that could not be evaluated is not a pass


def test_junit_failure_message_is_the_evidences_first_line():
    fail = CheckResult("native:x", "x imports", "fail", "import x: ImportError: cannot load [/opt/lib] libx.so\n"
                       "Traceback (most recent call last):\n  ...", hint="wh drop x")
    err = CheckResult("jit:y", "y compiles", "error", "RuntimeError: boom\nmore")
    suite = ET.fromstring(render_junit(_report(fail, err, CheckResult("gpu:z", "z", "skip", "no GPU"))))
    by = {c.get("name"): c for c in suite.findall("testcase")}
    failure = by["native:x"].find("failure")
    assert failure.get("message") == "import x: ImportError: cannot load [/opt/lib] libx.so"
    assert "Traceback" in failure.text and "hint: wh drop x" in failure.text
    assert by["jit:y"].find("error").get("message") == "RuntimeError: boom"
    assert by["gpu:z"].find("skipped").get("message") == "no GPU"
    assert suite.get("failures") == "1" and suite.get("errors") == "1" and suite.get("skipped") == "1"


def test_junit_message_falls_back_to_the_title_without_evidence():
    suite = ET.fromstring(render_junit(_report(CheckResult("a:b", "the title", "fail"))))
    assert suite.find("testcase/failure").get("message") == "the title"


def test_json_round_trips_fixes_as_values():
    fix = Fix(action="drop", what="x 1.0", forced=False, confirmed=True, reason="import failed", check="native:x")
    data = _report(CheckResult("a:b", "t", "ok", "[bold]not markup[/]"), fixes=[fix]).to_json()
    assert json.loads(json.dumps(data))["fixes"] == [{"action": "drop", "what": "x 1.0", "forced": False,
                                                      "confirmed": True, "reason": "import failed",
                                                      "check": "native:x", "still_found": [], "dependents": [],
                                                      "kept": []}]
    assert data["results"][0]["evidence"] == "[bold]not markup[/]"
    with pytest.raises(Exception):
        fix.action = "links"  # frozen: a report's fixes cannot change after the fact
