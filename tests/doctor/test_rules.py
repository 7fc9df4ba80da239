"""Known-bug rules as data: the shipped rules fire on the facts they name, and clear when one changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import install_wheel, make_venv, site_packages
from wheelhouse.doctor import run_doctor
from wheelhouse.target.gpu import Gpu
from wheelhouse.resources import doctor_dir
from wheelhouse.doctor.rules import InstalledPackage, RuleError, RuleFacts, evaluate_rules, load_rules, parse_rules
from wheelmaker import make_wheel

FT_FILE = "freetoken/kernel/triton/fp8_pertensor_linear.py"
UNPATCHED = "def fp8_linear(x, w):\n    return torch._scaled_mm(x, w)\n"
PATCHED = UNPATCHED + "\ndef rowwise_scaled_mm_ok():\n    return False  # pytorch#177651\n"
HINT_SPEC = "WHEELHOUSE/patches/freetoken-fp8-rowwise/freetoken-fp8-rowwise.toml"


def _l4(n=4):
    return [Gpu(i, "NVIDIA L4", "8.9", 23034, 0) for i in range(n)]


def _facts(tmp_path, torch="2.11.0", text=UNPATCHED, gpus=None, environ=None) -> RuleFacts:
    site = tmp_path / "site"
    (site / FT_FILE).parent.mkdir(parents=True, exist_ok=True)
    (site / FT_FILE).write_text(text)
    pkgs = {"torch": InstalledPackage("torch", torch, str(site)),
            "freetoken": InstalledPackage("freetoken", "0.1.2", str(site))}
    return RuleFacts(gpus=_l4() if gpus is None else gpus, packages=pkgs, environ=environ or {})


def _shipped():
    return load_rules([doctor_dir() / "rules"])


def _by_id(results):
    return {r.id: r for r in results}


def test_sm89_rule_fires_on_unpatched_freetoken_with_old_torch(tmp_path):
    r = _by_id(evaluate_rules(_shipped(), _facts(tmp_path)))["rule:sm89-rowwise-scaled-mm"]
    assert r.verdict == "fail"
    # The bundled spec has no payload: the hint names the wheelhouse copy, beside what `wh build` exported.
    assert f"`wh patch apply {HINT_SPEC} --python PY`" in r.hint and "wh build freetoken-pr70" in r.hint
    assert "`wh install WHEELHOUSE --python PY`" in r.hint and "engine_src/" not in r.hint
    assert "sm 8.9" in r.evidence and "torch 2.11.0" in r.evidence and "does not contain 'rowwise_scaled_mm_ok'" in r.evidence
    assert "pytorch#177651" in r.evidence


@pytest.mark.parametrize("change,why", [
    (dict(text=PATCHED), "contains 'rowwise_scaled_mm_ok'"),
    (dict(torch="2.12.0"), "torch 2.12.0 (not <2.12)"),
    (dict(gpus=[Gpu(0, "NVIDIA H200", "9.0", 143771, 0)]), "no GPU with sm 8.9"),
    (dict(gpus=[]), "no GPUs"),
])
def test_sm89_rule_clears_when_any_condition_changes(tmp_path, change, why):
    r = _by_id(evaluate_rules(_shipped(), _facts(tmp_path, **change)))["rule:sm89-rowwise-scaled-mm"]
    assert r.verdict == "ok" and why in r.evidence


def test_sgl_kernel_and_sglang_kernel_together_fail(tmp_path):
    both = RuleFacts(packages={"sgl-kernel": InstalledPackage("sgl-kernel", "0.3.0", None),
                               "sglang-kernel": InstalledPackage("sglang-kernel", "0.4.0", None)})
    one = RuleFacts(packages={"sgl-kernel": InstalledPackage("sgl-kernel", "0.3.0", None)})
    assert _by_id(evaluate_rules(_shipped(), both))["rule:sgl-kernel-twice"].verdict == "fail"
    assert _by_id(evaluate_rules(_shipped(), one))["rule:sgl-kernel-twice"].verdict == "ok"


def test_expandable_segments_is_info(tmp_path):
    on = RuleFacts(environ={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True"})
    r = _by_id(evaluate_rules(_shipped(), on))["rule:expandable-segments"]
    assert r.verdict == "info" and "expandable_segments:True" in r.evidence
    assert _by_id(evaluate_rules(_shipped(), RuleFacts()))["rule:expandable-segments"].verdict == "ok"


def test_sha256_condition(tmp_path):
    import hashlib

    facts = _facts(tmp_path)
    digest = hashlib.sha256(UNPATCHED.encode()).hexdigest()
    rules = parse_rules({"rule": [{"id": "known-bad", "title": "t", "verdict": "warn", "when": [
        {"package": "freetoken", "file": FT_FILE, "sha256": digest}]}]})
    fired = evaluate_rules(rules, facts)[0]
    assert fired.verdict == "warn"
    assert fired.hint == "see rule known-bad in <rules>"  # no hint of its own: it says where the rule lives
    rules = parse_rules({"rule": [{"id": "known-bad", "title": "t", "verdict": "warn", "when": [
        {"package": "freetoken", "file": FT_FILE, "sha256": "0" * 64}]}]})
    assert evaluate_rules(rules, facts)[0].verdict == "ok"


@pytest.mark.parametrize("bad,match", [
    ({"rule": [{"id": "x", "title": "t", "verdict": "explode", "when": [{"env": "A"}]}]}, "verdict 'explode'"),
    ({"rule": [{"id": "x", "title": "t", "when": [{"gpu": "8.9"}]}]}, "unknown key"),
    ({"rule": [{"id": "x", "title": "t", "when": []}]}, "no \\[\\[rule.when\\]\\]"),
    ({"rule": [{"id": "x", "title": "t", "when": [{"package": "torch", "version": "lt 2"}]}]}, "not a specifier"),
    ({"rule": [{"title": "t"}]}, "needs id and title"),
])
def test_bad_rules_are_clear_errors(bad, match):
    with pytest.raises(RuleError, match=match) as exc:
        parse_rules(bad, "x.toml")
    assert exc.value.hint


def test_duplicate_rule_ids_across_files_are_refused(tmp_path):
    (tmp_path / "dup.toml").write_text('[[rule]]\nid = "sgl-kernel-twice"\ntitle = "t"\n[[rule.when]]\nenv = "X"\n')
    with pytest.raises(RuleError, match="defined twice"):
        load_rules([doctor_dir() / "rules", tmp_path])


# ---- end to end: a venv with a fake torch and freetoken, faked GPUs through the documented hook ------


@pytest.fixture
def ft_venv(tmp_path):
    py = make_venv(tmp_path / "venv")
    wheels = tmp_path / "wheels"
    install_wheel(py, make_wheel(wheels, "torch", "2.11.0", modules={"torch/__init__.py": "__version__ = '2.11.0'\n"}))
    install_wheel(py, make_wheel(wheels, "freetoken", "0.1.2",
                                 modules={"freetoken/__init__.py": "", FT_FILE: UNPATCHED}))
    return py


def _wh(py, gpus_json, *extra):
    env = {**os.environ, "WH_DOCTOR_FAKE_GPUS": str(gpus_json), "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "rule:sm89",
                           "--json", *extra], capture_output=True, text=True, env=env)


def _wheelhouse_with_the_patch(house: Path) -> None:
    """What `wh stage` (the spec, copied to patches/<stem>/) and `wh build freetoken-pr70` (payload, wh.json) write."""
    import hashlib
    import shutil

    from wheelhouse.resources import engine_src_dir

    folder = house / "patches" / "freetoken-fp8-rowwise"
    folder.mkdir(parents=True)
    shutil.copyfile(engine_src_dir() / "freetoken-fp8-rowwise.toml", folder / "freetoken-fp8-rowwise.toml")
    (folder / "fp8_pertensor_linear.py").write_text(PATCHED)
    (house / "wh.json").write_text(json.dumps({"schema": "wh-wheelhouse/1", "engine": {"artifacts": [
        {"path": "patches/freetoken-fp8-rowwise/fp8_pertensor_linear.py",
         "sha256": hashlib.sha256(PATCHED.encode()).hexdigest(),
         "before_sha256": hashlib.sha256(UNPATCHED.encode()).hexdigest()}]}}))


def test_fake_gpus_and_fake_freetoken_trigger_then_clear_the_rule(tmp_path, ft_venv):
    gpus = tmp_path / "gpus.json"
    gpus.write_text(json.dumps({"driver_version": "580.159.04", "cuda_version": "13.0", "gpus": [
        {"index": i, "name": "NVIDIA L4", "compute_capability": "8.9", "memory_total_mib": 23034, "memory_used_mib": 0}
        for i in range(4)]}))
    proc = _wh(ft_venv, gpus)
    assert proc.returncode == 1, proc.stderr
    [r] = json.loads(proc.stdout)["results"]
    assert r["id"] == "rule:sm89-rowwise-scaled-mm" and r["verdict"] == "fail"
    assert f"wh patch apply {HINT_SPEC}" in r["hint"] and "wh patch apply" in proc.stderr  # the table folds it
    # Run the hint's command as written, WHEELHOUSE and PY filled in: the patch applies and the rule clears.
    house = tmp_path / "wh-box"
    _wheelhouse_with_the_patch(house)
    cmd = r["hint"].split("`")[1].replace("WHEELHOUSE", str(house)).replace("PY", str(ft_venv)).split()
    assert cmd[:3] == ["wh", "patch", "apply"]
    env = {**os.environ, "WH_DOCTOR_FAKE_GPUS": str(gpus)}  # the patch's own sm condition asks the GPU query
    applied = subprocess.run([sys.executable, "-m", "wheelhouse", *cmd[1:], "--json"], capture_output=True, text=True,
                             env=env)
    assert applied.returncode == 0, applied.stderr
    assert json.loads(applied.stdout)["state"] == "applied"
    target = site_packages(ft_venv) / FT_FILE
    assert target.read_text() == PATCHED
    proc = _wh(ft_venv, gpus)
    assert proc.returncode == 0 and json.loads(proc.stdout)["results"][0]["verdict"] == "ok"
    # Unpatched again, but on sm_90 cards: does not apply.
    target.write_text(UNPATCHED)
    gpus.write_text(json.dumps({"gpus": [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0"}]}))
    proc = _wh(ft_venv, gpus)
    assert proc.returncode == 0 and "no GPU with sm 8.9" in json.loads(proc.stdout)["results"][0]["evidence"]


def test_facts_override_drives_the_rules_too(ft_venv):
    fake = {"gpu": {"gpus": [{"index": 0, "name": "NVIDIA L4", "compute_capability": "8.9"}]}}
    report = run_doctor(str(ft_venv), checks=["rule:sm89"], facts_override=fake)
    assert report.get("rule:sm89-rowwise-scaled-mm").verdict == "fail"
    report = run_doctor(str(ft_venv), checks=["rule:sm89"], facts_override={**fake, "packages": {"torch": "2.12.1"}})
    assert report.get("rule:sm89-rowwise-scaled-mm").verdict == "ok"
