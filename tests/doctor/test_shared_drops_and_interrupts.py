"""Hostile round 8b: drops that touch what others share, rules fed odd facts, a doctor stopped from outside.

Real gcc-built extension modules in real venvs (tests/support/broken_packages.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import have_toolchain, install_dist, install_wheel, make_venv, site_packages
from schema_check import validate
from wheelmaker import make_wheel
from wheelhouse.doctor import run_doctor
from wheelhouse.doctor.drop import drop_distributions, plan_drops

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
SCHEMA = Path(__file__).parents[1] / "support" / "doctor_schema.json"
needs_gcc = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")


def _find(py: Path, module: str) -> bool:
    out = subprocess.run([str(py), "-c", f"import importlib.util as u; print(u.find_spec({module!r}) is not None)"],
                         capture_output=True, text=True, cwd="/", check=True)
    return out.stdout.strip() == "True"


@needs_gcc
def test_dropping_one_portion_of_a_shared_namespace_package_is_confirmed_and_spares_the_other(tmp_path, exts):
    # nsa ships nspkg/a/_ext (broken), nsb ships nspkg/b (fine): both provide the namespace nspkg. Dropping nsa
    # must leave nsb importable, and find_spec('nspkg') still finding nsb's portion is no failed drop.
    py = make_venv(tmp_path / "venv")
    w = tmp_path / "w"
    site = install_dist(py, w, "nsa", {"nspkg/a/__init__.py": "from . import _ext\n"}, {f"nspkg/a/_ext{SUFFIX}": exts["undef"]})
    install_dist(py, w, "nsb", {"nspkg/b/__init__.py": "X = 1\n"}, {})
    report = run_doctor(str(py), checks=["native"], timeout=20)
    assert report.get("native:nsa").verdict == "fail"
    [rec] = drop_distributions(str(py), plan_drops(report))
    assert not (site / "nspkg" / "a").exists() and (site / "nspkg" / "b" / "__init__.py").is_file()
    assert _find(py, "nspkg.b") and not _find(py, "nspkg.a")
    assert rec.confirmed, rec.still_found


def _wh(*args, env=None, **kw):
    base = {k: v for k, v in os.environ.items() if not k.startswith("WH_")} | {"NO_COLOR": "1", "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          env={**base, **(env or {})}, **kw)


@needs_gcc
def test_fix_dropping_what_another_distribution_requires_stays_red_and_says_so(tmp_path, exts):
    py = make_venv(tmp_path / "venv")
    w = tmp_path / "w"
    install_dist(py, w, "kern", {"kern/__init__.py": "from . import _ext\n"}, {f"kern/_ext{SUFFIX}": exts["undef"]})
    install_dist(py, w, "engine", {"engine/__init__.py": "X = 1\n"}, {}, requires=["kern>=1"])
    proc = _wh("doctor", "--python", py, "--check", "native", "--check", "deps", "--fix", "--json", "--timeout", "20")
    out = json.loads(proc.stdout)
    assert [f["what"] for f in out["fixes"] if f["action"] == "drop"] == ["kern 1.0"]
    assert not _find(py, "kern")
    (r,) = [x for x in out["results"] if x["id"] == "deps:engine"]
    assert r["verdict"] == "fail" and "kern>=1: not installed" in r["evidence"], r
    assert proc.returncode == 1, proc.stderr


@needs_gcc
def test_fix_whose_drop_leaves_a_broken_copy_findable_is_not_green(tmp_path, exts):
    # The venv's `twice` is dropped, but a second copy (on PYTHONPATH, no dist-info of its own) is still what
    # `import twice` finds, and it raises. The re-run has no distribution left to probe: it must not say ok.
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "twice", {"twice/__init__.py": "raise ImportError('broken')\n"},
             {f"twice/_x{SUFFIX}": exts["ok"]})
    shadow = tmp_path / "shadow" / "twice"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('still broken')\n")
    junit = tmp_path / "d.xml"
    proc = _wh("doctor", "--python", py, "--check", "native", "--fix", "--json", "--junit", junit, "--timeout", "20",
               env={"PYTHONPATH": str(tmp_path / "shadow")})
    out = json.loads(proc.stdout)
    assert validate(out, json.loads(SCHEMA.read_text())) == []
    # issue 29.9: the failing copy is the shadow, so the installed one is kept (a drop would change nothing the
    # engine imports); the re-run still fails on the shadow.
    assert not [f for f in out["fixes"] if f["action"] == "drop"] and _find(py, "twice")
    [kept] = [f for f in out["fixes"] if f["action"] == "not-dropped"]
    assert str(tmp_path / "shadow") in kept["reason"]
    assert proc.returncode == 1, proc.stderr
    assert out["exit_code"] == 1
    bad = [r for r in out["results"] if r["verdict"] == "fail"]
    assert [r["id"] for r in bad] == ["native:twice"] and "still broken" in bad[0]["evidence"]
    assert "<failure" in junit.read_text() and "not dropped: twice 1.0" in proc.stderr


# ---- the sm_89 rule fed odd facts ------------------------------------------------------------------

from wheelhouse.doctor.rules import InstalledPackage, RuleFacts, evaluate_rules, load_rules  # noqa: E402
from wheelhouse.resources import doctor_dir  # noqa: E402
from wheelhouse.target.gpu import Gpu  # noqa: E402

FT_FILE = "freetoken/kernel/triton/fp8_pertensor_linear.py"


def _sm89(tmp_path, torch="2.11.0", sm="8.9", rule_sm=None):
    site = tmp_path / "site"
    (site / FT_FILE).parent.mkdir(parents=True, exist_ok=True)
    (site / FT_FILE).write_text("def fp8_linear(x, w):\n    return x\n")
    pkgs = {"freetoken": InstalledPackage("freetoken", "0.1.2", str(site))}
    if torch is not None:
        pkgs["torch"] = InstalledPackage("torch", torch, str(site))
    rules = [r for r in load_rules([doctor_dir() / "rules"]) if r.id == "sm89-rowwise-scaled-mm"]
    if rule_sm is not None:
        from dataclasses import replace

        from wheelhouse.doctor.rules import Condition

        rules = [replace(rules[0], conditions=(Condition({"gpu_sm": rule_sm}),) + rules[0].conditions[1:])]
    gpus = [Gpu(0, "NVIDIA L4", sm, 23034, 0)] if sm is not None else []
    [r] = evaluate_rules(rules, RuleFacts(gpus=gpus, packages=pkgs))
    return r


@pytest.mark.parametrize("torch,fires", [
    ("2.11.0", True), ("2.11.0+cu130", True), ("2.11.0a0+git1234.nv25.03", True), ("2.4.1", True),
    ("2.12.0", False), ("2.12.0+cu130", False), ("2.13.0.dev20261101", False), (None, False)])
def test_sm89_rule_and_torch_versions(tmp_path, torch, fires):
    r = _sm89(tmp_path, torch=torch)
    assert r.verdict == ("fail" if fires else "ok"), r


@pytest.mark.parametrize("gpu_sm,rule_sm,fires", [
    ("8.9", None, True), ("8.6", None, False), ("9.0", None, False), (None, None, False),
    ("8.9", "89", True), ("8.9", "sm_89", True), ("8.9", ["8.6", "8.9"], True), ("8.6", "86", True),
    ("89", None, True), ("sm_89", None, True), ("12.0", "120", True), ("12.0", "12.1", False), ("9.0", "sm_90a", True)])
def test_sm89_rule_and_how_an_sm_is_written(tmp_path, gpu_sm, rule_sm, fires):
    r = _sm89(tmp_path, sm=gpu_sm, rule_sm=rule_sm)
    assert r.verdict == ("fail" if fires else "ok"), r


def test_a_torch_version_that_cannot_be_judged_is_not_an_ok(tmp_path):
    # "does not apply" is an ok: it must be a condition seen NOT to hold, not one that could not be read.
    r = _sm89(tmp_path, torch="2.11.0-custom-build")
    assert r.verdict != "ok", r
    assert "2.11.0-custom-build" in r.evidence


# ---- stopped from outside ---------------------------------------------------------------------------


def _sigterm_once(args: list[str], started: Path, settle: float, wait: float = 60) -> tuple[int, str, str]:
    """Run ``wh ARGS`` (no WH_* variables), SIGTERM it ``settle`` s after ``started`` appears, as a CI
    timeout would; (exit code, stdout, stderr)."""
    import signal
    import time

    base = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    proc = subprocess.Popen([sys.executable, "-m", "wheelhouse", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=base)
    try:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not started.exists():
            time.sleep(0.1)
        assert started.exists(), "what the signal should interrupt never started"
        time.sleep(settle)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    return proc.returncode, out, err


@needs_gcc
def test_sigterm_while_a_probe_hangs_still_writes_junit_and_json_and_is_never_green(tmp_path, exts):
    # A CI job's timeout sends SIGTERM. The runner uploads doctor.xml `if: always()`: a stale green file from
    # the last run, or none at all, hides which probe hung. What finished is kept; the rest is an error.
    import xml.etree.ElementTree as ET

    py = make_venv(tmp_path / "venv")
    started = tmp_path / "started"
    hang = f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\nwhile True:\n    time.sleep(1)\n"
    install_dist(py, tmp_path / "w", "stuck", {"stuck/__init__.py": hang},
             {f"stuck/_ext{SUFFIX}": exts["ok"]})
    junit = tmp_path / "doctor.xml"
    junit.write_text('<?xml version="1.0"?>\n<testsuite name="wh doctor" tests="1" failures="0"><testcase name="old"/>'
                     "</testsuite>\n")
    code, out, err = _sigterm_once(["doctor", "--python", str(py), "--check", "native", "--check", "deps", "--json",
                                    "--junit", str(junit), "--timeout", "120"], started, 5)  # the import is stuck
    # (5 s for the deps group to finish beside it: 1.5 s was too little on a busy machine, and the hang lasts 120)
    assert code == 130, err
    suite = ET.parse(junit).getroot()
    names = {c.get("name"): c for c in suite.iter("testcase")}
    assert "old" not in names, "the stale green JUnit of an earlier run was left in place"
    assert any(c.find("error") is not None for c in names.values()), names
    assert "deps:requirements" in names  # finished before the signal: kept
    report = json.loads(out)
    assert validate(report, json.loads(SCHEMA.read_text())) == []
    assert report["exit_code"] != 0
    assert any(r["verdict"] == "error" and r["group"] == "native" for r in report["results"])


def test_junit_aimed_at_the_file_stdout_goes_to_does_not_eat_the_json(tmp_path):
    # `wh doctor --json --junit report.json > report.json`: the JUnit replaced the file the shell opened for the
    # JSON, which then went to an unlinked inode. Either refuse before running, or keep both readable.
    py = make_venv(tmp_path / "venv")
    out = tmp_path / "report.json"
    with out.open("w") as fh:
        base = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
        proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "platform",
                               "--json", "--junit", str(out)], stdout=fh, stderr=subprocess.PIPE, text=True, env=base)
    text = out.read_text()
    if proc.returncode == 2:
        assert "--junit" in proc.stderr and "hint:" in proc.stderr
    else:
        json.loads(text)  # the JSON the shell redirected is still there


def test_two_drops_at_once_both_stay_recorded_so_both_can_be_restored(tmp_path, monkeypatch):
    # dropped.json was read, extended and written outside the target's lock: two `wh drop` runs on one
    # environment (two CI jobs, a --fix beside a drop) each wrote the list they had read, and one drop was
    # forgotten: `wh drop --restore` then said it was never dropped. Made deterministic: both writers meet
    # at a barrier between reading and writing (a lock makes the second wait instead; the barrier then times out).
    import threading

    from wheelhouse.doctor import drop as drop_mod
    from wheelhouse.doctor.drop import DropPlan, read_dropped

    py = make_venv(tmp_path / "venv")
    for name in ("one", "two"):
        install_wheel(py, make_wheel(tmp_path / "w", name, "1.0", modules={f"{name}/__init__.py": "raise ImportError\n"}))
    barrier = threading.Barrier(2, timeout=3)
    real = drop_mod._write_dropped

    def write_after_both_read(platlib, entries):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        real(platlib, entries)

    monkeypatch.setattr(drop_mod, "_write_dropped", write_after_both_read)
    errors = []

    def drop(name):
        try:
            drop_distributions(str(py), [DropPlan(name, "1.0", (name,), "import failed", "ImportError", None)])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=drop, args=(n,)) for n in ("one", "two")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(e["name"] for e in read_dropped(site_packages(py))) == ["one", "two"]


def test_a_drop_that_fails_halfway_still_records_what_it_uninstalled(tmp_path, monkeypatch):
    # Two distributions to drop; the second cannot be uninstalled (a file that will not go). The first is
    # already gone: unrecorded, `wh drop --restore one` said "was not dropped" and nothing could bring it back.
    from wheelhouse.doctor import drop as drop_mod
    from wheelhouse.doctor.drop import DropPlan, read_dropped

    py = make_venv(tmp_path / "venv")
    for name in ("one", "two"):
        install_wheel(py, make_wheel(tmp_path / "w", name, "1.0", modules={f"{name}/__init__.py": "raise ImportError\n"}))
    real = drop_mod.remove_distribution

    def remove(name, scheme, **kw):
        if name == "two":
            raise OSError(16, "Device or resource busy", "two/__init__.py")
        return real(name, scheme, **kw)

    monkeypatch.setattr(drop_mod, "remove_distribution", remove)
    plans = [DropPlan(n, "1.0", (n,), "import failed", "ImportError", None) for n in ("one", "two")]
    with pytest.raises(OSError):
        drop_distributions(str(py), plans)
    assert not _find(py, "one")
    [entry] = read_dropped(site_packages(py))
    assert entry["name"] == "one" and entry["confirmed"] is True


def test_a_doctor_stopped_before_its_checks_ran_reports_each_selected_group_as_an_error():
    from wheelhouse.doctor import interrupted_report

    report = interrupted_report("/py", ["native", "rule:sm89"])
    assert [r.id for r in report.results] == ["native:interrupted", "rule:interrupted"]
    assert report.exit_code() == 1
    assert validate(report.to_json(), json.loads(SCHEMA.read_text())) == []


def test_an_unconfirmed_drop_whose_remaining_copy_the_rerun_judged_is_not_reported_twice():
    from wheelhouse.doctor import with_fixes
    from wheelhouse.doctor.report import CheckResult, DoctorReport, Fix

    fix = Fix("drop", "twice 1.0", confirmed=False, check="native:twice", still_found=("twice",))
    judged = with_fixes(DoctorReport("/py", (CheckResult("native:twice", "t", "fail", "base copy: ImportError"),)), [fix])
    assert [r.id for r in judged.results] == ["native:twice"]
    assert judged.to_json()["fixes"][0]["still_found"] == ["twice"]  # the names reach the JSON either way
    unjudged = with_fixes(DoctorReport("/py", ()), [fix])
    assert [(r.id, r.verdict) for r in unjudged.results] == [("native:twice", "fail")]


def test_stopped_while_facts_are_gathered_the_report_names_the_groups_the_manifest_selects(tmp_path):
    # SIGTERM before any check ran: each group the run would have run is an error, and only those (a manifest
    # `[doctor] checks` selects them as --check does); the report is written, never green.

    py = make_venv(tmp_path / "venv")
    started = tmp_path / "started"
    # Every interpreter start sleeps, the facts probe's too: the doctor is stopped while it gathers them.
    (site_packages(py) / "slow.pth").write_text(
        f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(60)\n")
    manifest = tmp_path / "m.toml"
    manifest.write_text('[doctor]\nchecks = ["platform", "install"]\n')
    code, out, err = _sigterm_once(["doctor", "--python", str(py), "--manifest", str(manifest), "--json",
                                    "--timeout", "120"], started, 0.5)
    assert code == 130, err
    report = json.loads(out)
    assert [r["id"] for r in report["results"]] == ["platform:interrupted", "install:interrupted"], report["results"]
    assert report["exit_code"] != 0


@needs_gcc
def test_stopped_in_the_rerun_after_a_drop_the_report_keeps_what_fix_did(tmp_path, exts):
    # --fix dropped a broken distribution, then the check run after it is stopped (a CI timeout). The JSON must
    # still say what was uninstalled: it is the only record CI keeps of why the package is gone.

    py = make_venv(tmp_path / "venv")
    site = install_dist(py, tmp_path / "w", "brokenx", {"brokenx/__init__.py": "from . import _ext\n"},
                    {f"brokenx/_ext{SUFFIX}": exts["undef"]})
    started = tmp_path / "started"
    # Once the drop is recorded as confirmed, every interpreter start sleeps: the re-run's probes are stopped in
    # flight. (The record is written before the uninstall, unconfirmed, and confirmed after find_spec said so.)
    record = str(site / '.wh' / 'dropped.json')
    (site / "slow_after_drop.pth").write_text(
        f"import os, pathlib, time; os.path.exists({record!r}) and '\"confirmed\": true' in open({record!r}).read() "
        f"and (pathlib.Path({str(started)!r}).touch(), time.sleep(60))\n")
    code, out, err = _sigterm_once(["doctor", "--python", str(py), "--check", "native", "--fix", "--json",
                                    "--timeout", "120"], started, 0.5, wait=90)  # started: the re-run
    assert code == 130, err
    report = json.loads(out)
    assert [(f["action"], f["what"]) for f in report["fixes"]] == [("drop", "brokenx 1.0")], report["fixes"]
    assert report["exit_code"] != 0


def _broken_with_rows(py: Path, tmp_path: Path, exts, rows: list[str]) -> Path:
    """badpkg (its import raises), whose RECORD also lists ``rows``; returns the site folder."""
    site = install_dist(py, tmp_path / "w", "badpkg", {"badpkg/__init__.py": "from . import _ext\n"},
                        {f"badpkg/_ext{SUFFIX}": exts["undef"]})
    record = next(site.glob("badpkg-1.0.dist-info")) / "RECORD"
    record.write_text(record.read_text() + "".join(f"{r},,\n" for r in rows))
    return site


@needs_gcc
def test_a_drop_where_pip_is_installed_never_removes_the_venvs_interpreter_that_a_record_row_names(tmp_path, exts):
    """With pip in the target the drop ran `pip uninstall`, which removes every path the RECORD lists inside the
    prefix: a row ``../../../bin/python`` took the interpreter (and wh then crashed with an internal error)."""
    py = make_venv(tmp_path / "venv", with_pip=True)
    site = site_packages(py)
    _broken_with_rows(py, tmp_path, exts, [os.path.relpath(tmp_path / "venv" / "bin" / "python", site)])
    proc = _wh("drop", "--python", py, "--json")
    assert proc.returncode == 0, proc.stderr
    assert os.path.lexists(tmp_path / "venv" / "bin" / "python")
    assert not _find(py, "badpkg")
    [entry] = json.loads((site / ".wh" / "dropped.json").read_text())["dropped"]
    assert entry["method"] == "record" and entry["confirmed"]


@needs_gcc
@pytest.mark.parametrize("pip", [False, True], ids=["guarded", "pip-in-target"])
def test_a_record_row_naming_another_distributions_folder_or_file_by_absolute_path_removes_neither(tmp_path, exts, pip):
    """A row ``good,,`` (a folder: another distribution's package) moved the whole folder away; an absolute row
    for good's file was not seen as shared (the rows starting with / were skipped) and the file went."""
    py = make_venv(tmp_path / "venv", with_pip=pip)
    site = install_dist(py, tmp_path / "w", "good", {"good/__init__.py": "X = 42\n", "good/util.py": ""}, {})
    _broken_with_rows(py, tmp_path, exts, ["good", str(site / "good" / "util.py")])
    proc = _wh("drop", "--python", py, "--json")
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(site / "good")) == ["__init__.py", "util.py"]
    out = subprocess.run([str(py), "-c", "import good, good.util; print(good.X)"], capture_output=True, text=True)
    assert out.stdout.strip() == "42", out.stderr
    [entry] = json.loads((site / ".wh" / "dropped.json").read_text())["dropped"]
    assert [k["listed_by"] for k in entry["kept"]] == [["good 1.0"]], entry
