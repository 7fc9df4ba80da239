"""install:transaction, an install killed half-way is a fail, never green (issue 11.1 seen by the doctor).

A real `wh install` is SIGKILLed at a chosen point (tests/support/faults.py); the doctor
then runs against the half-installed venv.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from faults import run_with_fault, wh_command
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel
from wheelhouse.doctor import run_doctor


def _house(tmp_path: Path) -> Path:
    wheels = [make_wheel(tmp_path / "w", "big", "1.0", modules={f"big/m{i}.py": f"X = {i}\n" for i in range(40)}),
              make_wheel(tmp_path / "w", "upa", "1.0", modules={"upa/__init__.py": "V = 1\n"})]
    return make_wheelhouse(tmp_path / "house", wheels)


def test_a_killed_install_is_a_fail_until_wh_install_runs_again(tmp_path):
    house, venv = _house(tmp_path), tmp_path / "venv"
    killed = run_with_fault(["install", house, "--venv", venv], "install.file.20")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    py = venv / "bin" / "python"
    r = run_doctor(str(py), checks=["install"]).get("install:transaction")
    assert r.verdict == "fail"
    assert "unfinished install" in r.evidence and "did not finish" in r.evidence
    assert r.hint == f"run `wh install` again (e.g. `wh install WHEELHOUSE --python {py}`) to roll it back"
    again = subprocess.run(wh_command(["install", house, "--venv", venv]), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    r = run_doctor(str(py), checks=["install"]).get("install:transaction")
    assert r.verdict == "ok" and "no unfinished install" in r.evidence


def test_no_install_state_at_all_is_ok(tmp_path):
    r = run_doctor(sys.executable, checks=["install"]).get("install:transaction")
    assert r.verdict == "ok"


@pytest.mark.parametrize("damage", ["RECORD emptied", "RECORD a folder", "RECORD a pipe", "METADATA emptied"])
def test_a_record_or_metadata_cut_short_or_replaced_fails_install_records(tmp_path, damage):
    """Hostile round 9: a 0-byte RECORD (what a crash before its bytes reached the disk leaves), a folder in its
    place or an empty METADATA made the distribution vanish from every check: the doctor was green over a package
    whose import fails. A pipe in its place blocked the facts probe until it timed out (exit 3)."""
    import os
    import time

    from broken_packages import install_wheel, make_venv, site_packages

    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "victim", "1.0", modules={"victim/__init__.py": "X = 1\n"}))
    info = site_packages(py) / "victim-1.0.dist-info"
    what, how = damage.split(" ", 1)
    (info / what).unlink()
    if how == "emptied":
        (info / what).write_bytes(b"")
    elif how == "a folder":
        (info / what).mkdir()
    else:
        os.mkfifo(info / what)
    t0 = time.monotonic()
    r = run_doctor(str(py), checks=["install"]).get("install:records")
    assert time.monotonic() - t0 < 30
    assert r.verdict == "fail", r.evidence
    assert ("victim-1.0.dist-info" in r.evidence or "victim 1.0" in r.evidence) and (
        "lists nothing" in r.evidence or "not a file" in r.evidence or "METADATA names no distribution" in r.evidence), r.evidence


def test_a_check_pattern_that_judges_nothing_fails(tmp_path):
    """Hostile round 9: `--check native:vllm` once vllm was uninstalled (or `native:vlm`, a typo the
    per-distribution names let through) ran nothing and exited 0: a CI gated on it passed."""
    from broken_packages import make_venv

    py = make_venv(tmp_path / "venv")
    report = run_doctor(str(py), checks=["native:vllm", "install"])
    [miss] = [r for r in report.results if r.id == "selection:native:vllm"]
    assert miss.verdict == "fail" and "selected no check here" in miss.evidence
    assert not [r for r in report.results if r.id.startswith("selection:install")]
    # a whole group with nothing to judge here (no extension module anywhere) is no typo
    assert not [r for r in run_doctor(str(py), checks=["native"]).results if r.id.startswith("selection:")]
    proc = subprocess.run(wh_command(["doctor", "--python", str(py), "--check", "deps:nosuch", "--json"]),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout


def _launcher_stack(tmp_path: Path, serve: bool) -> tuple[Path, Path]:
    engine = make_wheel(tmp_path / "w", "engine", "1.0", modules={
        "engine/__init__.py": "", "engine/cli.py": "def main():\n    print('ENGINE-REAL')\n"},
        entry_points={"console_scripts": {"engine": "engine.cli:main"}})
    meta = {"serve": {"command": ["engine", "serve"]}} if serve else {}
    house = make_wheelhouse(tmp_path / "house", [engine], extra_meta=meta)
    venv = tmp_path / "venv"
    done = subprocess.run(wh_command(["install", house, "--venv", venv]), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return house, venv


def test_a_launcher_that_lost_its_exec_bits_fails_where_it_serves_and_fix_mends_it(tmp_path):
    """Hostile round 10: the [serve] command's launcher without its x bits (a zip or CI artifact that drops
    modes) fails with Permission denied; the doctor was green and --fix found nothing to mend."""
    _, venv = _launcher_stack(tmp_path, serve=True)
    launcher = venv / "bin" / "engine"
    launcher.chmod(0o644)
    r = run_doctor(str(venv / "bin" / "python"), checks=["install:scripts"]).get("install:scripts")
    assert r.verdict == "fail" and "is not executable" in r.evidence, r.evidence
    fixed = subprocess.run(wh_command(["doctor", "--python", venv / "bin" / "python", "--fix", "--check",
                                       "install:scripts"]), capture_output=True, text=True, timeout=300)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert subprocess.run([launcher], capture_output=True, text=True).stdout.strip() == "ENGINE-REAL"


def test_a_copied_venvs_launchers_that_run_the_original_are_named(tmp_path):
    """Hostile round 10: `cp -a venv copy` while venv is still there: every launcher of the copy runs the
    original's interpreter and packages; install:scripts said every launcher is there."""
    import shutil

    _, venv = _launcher_stack(tmp_path, serve=False)
    copy = tmp_path / "copy"
    shutil.copytree(venv, copy, symlinks=True)
    r = run_doctor(str(copy / "bin" / "python"), checks=["install:scripts"]).get("install:scripts")
    assert r.verdict == "warn", r.evidence
    assert f"runs {venv}/bin/python, another environment's interpreter" in r.evidence
    assert run_doctor(str(venv / "bin" / "python"), checks=["install:scripts"]).get("install:scripts").verdict == "ok"


def test_a_fix_killed_mid_reinstall_is_rolled_back_and_mended_by_the_next_fix(tmp_path):
    """Hostile round 10: `--fix` killed while it reinstalled left a journal; every later `--fix` read the install
    records as empty and said "no wheelhouse holds it": the distribution stayed half gone until a plain
    `wh install`. The next --fix rolls the dead install back first, then mends."""
    _, venv = _launcher_stack(tmp_path, serve=True)
    py = venv / "bin" / "python"
    (venv / "bin" / "engine").chmod(0o644)
    killed = run_with_fault(["doctor", "--python", py, "--fix"], "install.file.1")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    again = subprocess.run(wh_command(["doctor", "--python", py, "--fix"]), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "fixed: rolled back an install started" in again.stdout
    assert subprocess.run([venv / "bin" / "engine"], capture_output=True, text=True).stdout.strip() == "ENGINE-REAL"


def test_a_second_copy_of_a_distributions_metadata_in_its_folder_fails(tmp_path):
    """Hostile round 10: a stale engine-0.9.dist-info beside engine-1.0's (an interrupted upgrade, a merged image
    layer) was never judged where the folder listed it second, and turned the doctor red where it listed it first:
    one image, different verdicts per node (ext4 lists in hash order). Either way it is named now."""
    _, venv = _launcher_stack(tmp_path, serve=False)
    site = next((venv / "lib").glob("python*/site-packages"))
    stale = site / "engine-0.9.dist-info"
    stale.mkdir()
    (stale / "METADATA").write_text("Metadata-Version: 2.1\nName: engine\nVersion: 0.9\n")
    (stale / "RECORD").write_text("engine/__init__.py,sha256=AAAA,1\nengine-0.9.dist-info/RECORD,,\n")
    r = run_doctor(str(venv / "bin" / "python"), checks=["install:records"]).get("install:records")
    assert r.verdict == "fail", r.evidence
    assert "engine-0.9.dist-info (0.9) beside engine-1.0.dist-info" in r.evidence or \
        "engine-1.0.dist-info (1.0) beside engine-0.9.dist-info" in r.evidence, r.evidence
