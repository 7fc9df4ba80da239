"""wh drop: only executed failures are dropped; RECORD uninstall is exact; find_spec is re-checked in a new process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig

import pytest

from broken_packages import _tags, have_toolchain, install_wheel, make_venv, site_packages
from wheelhouse.doctor.drop import DropPlan, drop_distributions, forced_kept, plan_drops, read_dropped
from wheelhouse.doctor.report import CheckResult, DoctorReport
from wheelmaker import make_wheel


def _report(*results):
    return DoctorReport(python="py", results=tuple(results))


def _drop(name):
    return {"drop": {"distribution": name, "version": "1.0", "modules": [name], "reason": "import failed"}}


def test_only_failed_executed_probes_are_planned():
    report = _report(
        CheckResult("native:a", "a", "fail", "ImportError: x", data=_drop("a")),
        CheckResult("native:b", "b", "ok", "imported", data={"modules": ["b"]}),
        CheckResult("native:c", "c", "warn", "slow", data=_drop("c")),  # not a failure: never dropped
        CheckResult("rule:r", "r", "fail", "bug"),  # a failed rule names no distribution to drop
        CheckResult("jit:d", "d", "fail", "nvcc: error", data=_drop("d")),
        CheckResult("jit:triton", "t", "fail", "ptxas error", data={"distribution": "triton"}),  # not droppable
    )
    assert [(p.distribution, p.check_id) for p in plan_drops(report)] == [("a", "native:a"), ("d", "jit:d")]


def test_forced_entries_are_kept_unless_included():
    # issue 4: a manifest force = true entry whose probe passed is reported, dropped only with include_forced
    report = DoctorReport(python="py", results=(
        CheckResult("native:a", "a", "fail", "ImportError: x", data=_drop("a")),), facts={"forced_drops": [
            {"distribution": "flashinfer-python", "version": "0.5.0", "modules": ["flashinfer"],
             "reason": "tvm_ffi headers fail with CUDA 13.4"},
            {"distribution": "a", "version": "1.0", "modules": ["a"], "reason": "also forced"}]})
    assert [(p.distribution, p.forced) for p in plan_drops(report)] == [("a", False)]
    [kept] = forced_kept(report)  # "a" failed its probe: dropped for that, not listed as kept
    assert (kept.distribution, kept.modules, kept.reason) == ("flashinfer-python", ("flashinfer",), "forced by manifest")
    assert "tvm_ffi headers fail with CUDA 13.4" in kept.evidence
    plans = plan_drops(report, include_forced=True)
    assert [(p.distribution, p.modules, p.forced, p.reason) for p in plans] == [
        ("a", ("a",), False, "import failed"), ("flashinfer-python", ("flashinfer",), True, "forced by manifest")]


def test_record_uninstall_removes_exactly_the_records_files(tmp_path):
    py = make_venv(tmp_path / "venv")
    wheels = tmp_path / "w"
    install_wheel(py, make_wheel(wheels, "victim", "1.0", modules={"victim/__init__.py": "", "victim/sub/m.py": "",
                                                                  "nspkg/victim_part.py": ""}))
    install_wheel(py, make_wheel(wheels, "bystander", "2.0", modules={"nspkg/other.py": "", "bystander.py": ""}))
    site = site_packages(py)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([str(py), "-c", "import victim.sub.m"], check=True, env=env)  # leaves __pycache__ behind
    assert (site / "victim" / "sub" / "__pycache__").is_dir()
    plan = DropPlan("victim", "1.0", ("victim",), "import failed", "RuntimeError: boom", "native:victim")
    [rec] = drop_distributions(str(py), [plan])
    assert rec.method == "record" and rec.confirmed and rec.still_found == ()
    assert not (site / "victim").exists() and not list(site.glob("victim-*.dist-info"))
    assert (site / "nspkg" / "other.py").exists() and not (site / "nspkg" / "victim_part.py").exists()
    assert (site / "bystander.py").exists() and list(site.glob("bystander-*.dist-info"))
    [entry] = read_dropped(site)
    assert entry["name"] == "victim" and entry["evidence"] == "RuntimeError: boom" and entry["reason"] == "import failed"


@pytest.mark.parametrize("stale", ["victim-1.0.post2", "victim-0.9"])
def test_a_stale_second_copy_listing_another_distributions_file_does_not_take_that_file(tmp_path, stale):
    """Hostile round 9: with two dist-infos of the dropped name (an interrupted upgrade leaves the old one), the
    files kept for other distributions came from the first copy's RECORD only; the uninstall removes every copy,
    and the second's row for good/__init__.py deleted another distribution's file."""
    py = make_venv(tmp_path / "venv")
    wheels = tmp_path / "w"
    install_wheel(py, make_wheel(wheels, "victim", "1.0", modules={"victim/__init__.py": "raise RuntimeError('x')\n"}))
    install_wheel(py, make_wheel(wheels, "good", "1.0", modules={"good/__init__.py": "answer = 42\n"}))
    site = site_packages(py)
    real, copy = site / "victim-1.0.dist-info", site / f"{stale}.dist-info"
    copy.mkdir()
    (copy / "METADATA").write_text((real / "METADATA").read_text().replace("Version: 1.0", f"Version: {stale[7:]}"))
    rows = [r for r in (real / "RECORD").read_text().splitlines() if ".dist-info/" not in r]
    good_row = next(r for r in (site / "good-1.0.dist-info" / "RECORD").read_text().splitlines()
                    if r.startswith("good/__init__.py,"))
    (copy / "RECORD").write_text("\n".join([*rows, good_row, f"{copy.name}/RECORD,,"]) + "\n")
    plan = DropPlan("victim", "1.0", ("victim",), "import failed", "RuntimeError: x", "native:victim")
    [dry] = drop_distributions(str(py), [plan], dry_run=True)
    assert [(k.path, k.listed_by) for k in dry.kept] == [("good/__init__.py", ("good 1.0",))]
    [rec] = drop_distributions(str(py), [plan])
    assert not list(site.glob("victim-*.dist-info")) and not (site / "victim").exists()
    works = subprocess.run([str(py), "-c", "from good import answer; print(answer)"], capture_output=True, text=True)
    assert works.stdout.strip() == "42", works.stderr
    assert [k.path for k in rec.kept] == ["good/__init__.py"]


def test_dry_run_touches_nothing(tmp_path):
    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "victim", "1.0", modules={"victim/__init__.py": ""}))
    [rec] = drop_distributions(str(py), [DropPlan("victim", "1.0", ("victim",), "r", "e", None)], dry_run=True)
    assert rec.name == "victim" and not rec.confirmed
    assert (site_packages(py) / "victim" / "__init__.py").exists()
    assert read_dropped(site_packages(py)) == []


def test_a_second_copy_on_pythonpath_is_reported_not_hidden(tmp_path):
    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "twice", "1.0", modules={"twice/__init__.py": "raise ImportError('x')\n"}))
    shadow = tmp_path / "shadow" / "twice"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    os.environ["PYTHONPATH"] = str(tmp_path / "shadow")
    try:
        [rec] = drop_distributions(str(py), [DropPlan("twice", "1.0", ("twice",), "r", "e", None)])
    finally:
        del os.environ["PYTHONPATH"]
    assert not rec.confirmed and rec.still_found == ("twice",)
    assert json.loads((site_packages(py) / ".wh" / "dropped.json").read_text())["dropped"][0]["confirmed"] is False


def test_drop_cli_keeps_the_installed_copy_when_the_failing_one_is_a_shadow(tmp_path):
    """issue 29.9: before, the installed twice was dropped and find_spec still found the broken shadow (exit 1)."""
    py = make_venv(tmp_path / "venv")
    (tmp_path / "shadow" / "twice").mkdir(parents=True)
    (tmp_path / "shadow" / "twice" / "__init__.py").write_text("raise ImportError('still broken')\n")
    wheel = make_wheel(tmp_path / "w", "twice", "1.0", tags="cp311-cp311-linux_x86_64",
                       modules={"twice/__init__.py": "raise ImportError('broken')\n"},
                       files={"twice/_x.cpython-311-x86_64-linux-gnu.so": b"not really an ELF"})
    install_wheel(py, wheel)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shadow")}
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "drop", "--python", str(py), "--timeout", "10"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"the failing copy of twice is {tmp_path / 'shadow' / 'twice'}" in proc.stderr
    assert any(site_packages(py).glob("twice-1.0.dist-info"))


def test_record_uninstall_never_follows_a_record_out_of_the_environment(tmp_path):
    """issue 11.6: a RECORD naming ../../outside.txt (or wh's own .wh/ records) must not make drop delete them;
    drop uses install's one guarded uninstaller."""
    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "victim", "1.0", modules={"victim/__init__.py": ""}))
    site = site_packages(py)
    outside = tmp_path / "outside.txt"
    outside.write_text("not wh's to delete\n")
    (site / ".wh").mkdir()
    (site / ".wh" / "links.json").write_text("{}\n")
    record = next(site.glob("victim-1.0.dist-info")) / "RECORD"
    rel = os.path.relpath(outside, site)
    record.write_text(record.read_text() + f"{rel},,\n.wh/links.json,,\n")
    [rec] = drop_distributions(str(py), [DropPlan("victim", "1.0", ("victim",), "r", "e", None)])
    assert rec.method == "record" and rec.confirmed
    assert outside.read_text() == "not wh's to delete\n"
    assert (site / ".wh" / "links.json").read_text() == "{}\n"
    assert not (site / "victim").exists() and not list(site.glob("victim-*.dist-info"))


@pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")
def test_a_drop_keeps_the_files_another_installed_distribution_lists_too(tmp_path, exts):
    """opencv-python beside opencv-contrib-python: ``bad`` and ``good`` both ship ``vision/`` (the same bytes), and
    ``bad`` also a broken ``bad_extra``. pip's uninstall of bad removed every file its RECORD lists, vision/ too:
    ``wh doctor --fix`` took good's working package away and the re-check blamed good. The drop keeps them now."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    py = make_venv(tmp_path / "venv", with_pip=True)
    vision = {"modules": {"vision/__init__.py": "from ._ext import answer\n"}, "files": {f"vision/_ext{suffix}": exts["ok"]}}
    bad = make_wheel(tmp_path / "w", "bad", "1.0", tags=_tags(),
                     modules={**vision["modules"], "bad_extra/__init__.py": "from ._ext import answer\n"},
                     files={**vision["files"], f"bad_extra/_ext{suffix}": exts["undef"]})
    good = make_wheel(tmp_path / "w", "good", "1.0", tags=_tags(), **vision)
    for wheel in (bad, good):  # good second: its files are the ones on disk, and both RECORDs list vision/
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", str(wheel)], check=True, capture_output=True)
    site = site_packages(py)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")} | {"WH_CACHE_DIR": str(tmp_path / "cache")}

    def wh(*args):
        return subprocess.run([sys.executable, "-m", "wheelhouse", *args, "--python", str(py), "--json", "--timeout",
                               "20"], capture_output=True, text=True, env=env)

    dry = wh("drop", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    [plan] = json.loads(dry.stdout)["dropped"]
    kept = {k["path"]: k["listed_by"] for k in plan["kept"]}
    assert kept["vision/__init__.py"] == kept[f"vision/_ext{suffix}"] == ["good 1.0"]
    assert plan["method"] == "record" and plan["modules"] == ["bad_extra"]  # pip cannot leave a file in place
    assert (site / "bad_extra" / "__init__.py").is_file()  # a dry run changes nothing

    fixed = wh("doctor", "--check", "native", "--fix")
    report = json.loads(fixed.stdout)
    assert fixed.returncode == 0, fixed.stdout
    [drop] = [f for f in report["fixes"] if f["action"] == "drop"]
    assert drop["what"] == "bad 1.0" and drop["confirmed"] is True
    assert {k["path"] for k in drop["kept"]} >= {"vision/__init__.py", f"vision/_ext{suffix}"}
    assert {r["id"]: r["verdict"] for r in report["results"] if r["id"].startswith("native:")} == {"native:good": "ok"}
    assert "good 1.0 lists them too" in fixed.stderr
    works = subprocess.run([str(py), "-c", "import vision; print(vision.answer())"], capture_output=True, text=True)
    assert works.stdout.strip() == "42", works.stderr
    assert not (site / "bad_extra").exists() and not list(site.glob("bad-*.dist-info"))
