"""`wh patch`: one-file patches of an installed distribution, in a throwaway venv with a tiny engine."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wheelmaker import make_wheel
from wheelhouse.patch import PatchDrifted, PatchRolledBack, apply_patch, revert_patch
from wheelhouse.patch.conditions import check_conditions
from wheelhouse.patch.spec import load_patch_spec

ORIGINAL = "def rowwise_ok():\n    return True\n"  # the released file
PAYLOAD = "def rowwise_ok():\n    # backported fix\n    return False\n"
DRIFTED = "def rowwise_ok():\n    return None  # main moved on\n"
FILE = "tinyengine/kernel.py"


def sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


@pytest.fixture(scope="module")
def engine_wheel(tmp_path_factory):
    return make_wheel(tmp_path_factory.mktemp("wheels"), "tinyengine", "1.0",
                      modules={"tinyengine/__init__.py": "", FILE: ORIGINAL})


@pytest.fixture(scope="module")
def installed_venv(tmp_path_factory, engine_wheel) -> Path:
    """A venv with tinyengine 1.0 installed by pip from a local wheel (no index): made once, copied per test."""
    path = tmp_path_factory.mktemp("template") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(path / "bin" / "python"), "install", "--no-index",
                    "--no-deps", "-q", "--disable-pip-version-check", str(engine_wheel)], check=True, capture_output=True)
    return path


@pytest.fixture
def venv(tmp_path, installed_venv):
    """A fresh venv with tinyengine 1.0 as pip installed it: a copy of ``installed_venv`` (links kept, so its
    python is the base interpreter's; a venv finds its prefix from where it is), each test its own."""
    path = tmp_path / "venv"
    shutil.copytree(installed_venv, path, symlinks=True)
    py = path / "bin" / "python"
    installed = next(path.glob("lib/python3*/site-packages")) / FILE
    assert installed.read_text() == ORIGINAL
    return py, installed


def write_spec(folder: Path, *, payload: str = PAYLOAD, before=None, payload_sha=True, when=None,
               call="tinyengine.kernel:rowwise_ok", expect=False, name="tiny-rowwise") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel_fix.py").write_text(payload)
    before = [sha(ORIGINAL)] if before is None else before
    lines = ["[patch]", f'name = "{name}"', 'distribution = "tinyengine"', f'file = "{FILE}"',
             'payload = "kernel_fix.py"']
    if before:
        lines.append(f"before-sha256 = {json.dumps(before)}")
    if payload_sha:
        lines.append(f'payload-sha256 = "{sha(payload)}"')
    if when:
        lines += ["", "[patch.when]"] + [f"{k} = {json.dumps(v)}" for k, v in when.items()]
    if call:
        lines += ["", "[patch.verify]", f'call = "{call}"'] + ([f"expect = {json.dumps(expect)}"] if expect is not None else [])
    spec = folder / "spec.toml"
    spec.write_text("\n".join(lines) + "\n")
    return spec


def patch_dir(installed: Path) -> Path:
    return installed.parents[1] / ".wh" / "patches"


def wh(*args):
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})


def test_apply_replaces_verifies_and_keeps_a_backup(tmp_path, venv):
    py, installed = venv
    spec = write_spec(tmp_path / "spec", when={"tinyengine": ">=1.0"})
    out = apply_patch(spec, str(py))
    assert out.state == "applied" and out.ok
    assert installed.read_text() == PAYLOAD
    assert out.verification.ran and out.verification.compared and out.verification.value is False
    backup = Path(out.backup)
    assert backup == patch_dir(installed) / "tiny-rowwise" / f"{sha(ORIGINAL)}.orig"
    assert backup.read_text() == ORIGINAL
    # The target interpreter itself now imports the payload.
    run = subprocess.run([str(py), "-c", "import tinyengine.kernel as k; print(k.rowwise_ok())"], capture_output=True, text=True, cwd=tmp_path)
    assert run.stdout.strip() == "False"


def test_reapply_is_idempotent(tmp_path, venv):
    py, installed = venv
    spec = write_spec(tmp_path / "spec")
    assert apply_patch(spec, str(py), facts={"sm": None}).state == "applied"
    mtime = installed.stat().st_mtime_ns
    again = apply_patch(spec, str(py), facts={"sm": None})
    assert again.state == "already-patched" and again.ok
    assert installed.read_text() == PAYLOAD and installed.stat().st_mtime_ns == mtime


def test_drifted_file_refused_with_both_hashes_and_nothing_changed(tmp_path, venv):
    py, installed = venv
    installed.write_text(DRIFTED)
    before_bytes = installed.read_bytes()
    spec = write_spec(tmp_path / "spec")
    with pytest.raises(PatchDrifted) as info:
        apply_patch(spec, str(py))
    assert sha(DRIFTED) in info.value.message and sha(ORIGINAL) in info.value.message
    assert installed.read_bytes() == before_bytes
    assert not patch_dir(installed).exists()  # no backup, no record
    # Through the CLI: exit 1, both hashes, a hint.
    proc = wh("patch", "apply", spec, "--python", py)
    assert proc.returncode == 1 and sha(DRIFTED) in proc.stderr and sha(ORIGINAL) in proc.stderr and "hint:" in proc.stderr
    assert installed.read_bytes() == before_bytes


def test_payload_that_does_not_compile_is_rolled_back(tmp_path, venv):
    py, installed = venv
    original = installed.read_bytes()
    spec = write_spec(tmp_path / "spec", payload="def rowwise_ok(:\n    return False\n")
    with pytest.raises(PatchRolledBack) as info:
        apply_patch(spec, str(py))
    assert "does not compile" in info.value.message and "SyntaxError" in info.value.detail
    assert installed.read_bytes() == original
    assert not patch_dir(installed).exists()


def test_wrong_verification_result_is_rolled_back(tmp_path, venv):
    py, installed = venv
    original = installed.read_bytes()
    spec = write_spec(tmp_path / "spec", expect=True)  # the payload returns False
    with pytest.raises(PatchRolledBack, match=r"returned False, expected True"):
        apply_patch(spec, str(py), facts={"sm": None})
    assert installed.read_bytes() == original and not patch_dir(installed).exists()


def test_verification_that_raises_is_rolled_back(tmp_path, venv):
    py, installed = venv
    original = installed.read_bytes()
    spec = write_spec(tmp_path / "spec", payload="import no_such_module_anywhere\ndef rowwise_ok():\n    return False\n")
    with pytest.raises(PatchRolledBack) as info:
        apply_patch(spec, str(py))
    assert "no_such_module_anywhere" in info.value.detail
    assert installed.read_bytes() == original


def test_revert_restores_the_exact_bytes(tmp_path, venv):
    py, installed = venv
    original = installed.read_bytes()
    spec = write_spec(tmp_path / "spec")
    apply_patch(spec, str(py))
    out = revert_patch(spec, str(py))
    assert out.state == "reverted" and installed.read_bytes() == original
    assert not (patch_dir(installed) / "tiny-rowwise").exists()
    assert revert_patch(spec, str(py)).state == "unpatched"  # again: nothing to do


def test_revert_refuses_a_file_changed_after_patching(tmp_path, venv):
    py, installed = venv
    spec = write_spec(tmp_path / "spec")
    apply_patch(spec, str(py))
    installed.write_text(DRIFTED)
    with pytest.raises(PatchDrifted, match="changed since it was patched"):
        revert_patch(spec, str(py))
    assert installed.read_text() == DRIFTED


def test_conditions_not_met_skip_with_the_reason_unless_forced(tmp_path, venv):
    py, installed = venv
    spec = write_spec(tmp_path / "spec", when={"sm": ["8.9"], "tinyengine": "<1.0"}, expect=True)
    out = apply_patch(spec, str(py), facts={"sm": ["9.0"]})
    assert out.state == "skipped" and out.ok and out.conditions_met is False
    assert "sm 9.0" in out.reason and "tinyengine 1.0 is outside <1.0" in out.reason
    assert installed.read_text() == ORIGINAL
    # Forced: applied; the expectation holds only under the conditions, so it is not compared.
    forced = apply_patch(spec, str(py), facts={"sm": ["9.0"]}, force=True)
    assert forced.state == "applied" and forced.verification.compared is False and forced.verification.value is False
    assert installed.read_text() == PAYLOAD


def test_check_conditions():
    assert check_conditions({"sm": ["8.9"], "torch": "<2.12"}, {"sm": ["8.9", "8.9"], "torch": "2.11.0+cu130"}) == (True, [])
    ok, why = check_conditions({"sm": ["8.9"], "torch": "<2.12"}, {"sm": None, "torch": "2.12.0"})
    assert not ok and any("unknown" in w for w in why) and any("2.12.0 is outside <2.12" in w for w in why)


def test_verify_reports_unpatched_patched_drifted(tmp_path, venv):
    py, installed = venv
    spec = write_spec(tmp_path / "spec", when={"tinyengine": ">=1"})
    proc = wh("patch", "verify", spec, "--python", py, "--json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 1 and data["state"] == "unpatched"
    assert data["verification"]["value"] is True and data["verification"]["matched"] is False
    assert wh("patch", "apply", spec, "--python", py).returncode == 0
    data = json.loads(wh("patch", "verify", spec, "--python", py, "--json").stdout)
    assert data["state"] == "patched" and data["verification"]["matched"] is True and data["ok"]
    installed.write_text(DRIFTED)
    proc = wh("patch", "verify", spec, "--python", py, "--json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["state"] == "drifted"


def test_verify_that_is_not_ok_says_error_and_hint(tmp_path, venv):
    """A missing distribution used to print only `tiny-rowwise: not-installed`, with neither error: nor hint:."""
    py, installed = venv
    spec = write_spec(tmp_path / "spec")
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    r = wh("patch", "verify", spec, "--python", bare / "bin" / "python")
    assert r.returncode == 1 and r.stdout == ""
    assert "error: patch tiny-rowwise: tinyengine or tinyengine/kernel.py is not installed" in r.stderr, r.stderr
    assert r.stderr.rstrip().splitlines()[-1].startswith("hint: install it first (`wh install WHEELHOUSE --python ")
    assert f"`wh patch apply {spec} --python {bare / 'bin' / 'python'}`" in r.stderr
    r = wh("patch", "verify", spec, "--python", py)  # unpatched where the conditions hold
    assert r.returncode == 1 and "error: patch tiny-rowwise is not applied" in r.stderr
    assert f"hint: apply it: `wh patch apply {spec} --python {py}`" in r.stderr
    installed.write_text(DRIFTED)
    r = wh("patch", "verify", spec, "--python", py)
    assert r.returncode == 1 and "is neither the expected original nor the payload" in r.stderr and "hint: " in r.stderr


def test_hashes_come_from_the_wheelhouse_that_wh_build_wrote(tmp_path, venv):
    """A spec without hashes, staged next to a payload `wh build` exported, uses wh.json's hashes."""
    py, installed = venv
    wheelhouse = tmp_path / "wheelhouse"
    spec = write_spec(wheelhouse / "patches", before=[], payload_sha=False)
    (wheelhouse / "wh.json").write_text(json.dumps({"schema": "wh-wheelhouse/1", "engine": {"artifacts": [
        {"path": "patches/kernel_fix.py", "sha256": sha(PAYLOAD), "before_sha256": sha(ORIGINAL)}]}}))
    loaded = load_patch_spec(spec)
    assert loaded.before_sha256 == (sha(ORIGINAL),) and loaded.payload_sha256 == sha(PAYLOAD)
    assert loaded.hash_source.endswith("wh.json")
    assert apply_patch(spec, str(py)).state == "applied"


def test_no_known_before_hash_refuses_to_guess(tmp_path, venv):
    py, installed = venv
    spec = write_spec(tmp_path / "spec", before=[], payload_sha=False)
    with pytest.raises(PatchDrifted, match="refusing to guess"):
        apply_patch(spec, str(py))
    assert installed.read_text() == ORIGINAL and not patch_dir(installed).exists()


def test_bundled_fp8_spec_documents_sm89_torch_and_skips_elsewhere(tmp_path, venv):
    py, _ = venv
    spec = load_patch_spec("freetoken-fp8-rowwise.toml")
    assert spec.distribution == "freetoken" and spec.file == "freetoken/kernel/triton/fp8_pertensor_linear.py"
    assert spec.when == {"sm": ["8.9"], "torch": "<2.12"}
    assert spec.verify.call == "freetoken.kernel.triton.fp8_pertensor_linear:rowwise_scaled_mm_ok" and spec.verify.expect is False
    text = Path(spec.path).read_text()
    assert "safe" in text and "torch >= 2.12" in text
    out = apply_patch(spec, str(py), facts={"sm": ["9.0"], "torch": "2.11.0"})
    assert out.state == "skipped" and "sm 9.0" in out.reason


# --- relative --python; kill -9 during verification (issue 11.16) --------------------------------------

def test_relative_python_with_a_verify_call(tmp_path, venv):
    """Before: the verify call ran in a temp folder where `venv/bin/python` does not exist: internal error."""
    py, installed = venv
    spec = write_spec(tmp_path / "spec")
    rel = os.path.relpath(py, tmp_path)
    for cmd, state in (("apply", "applied"), ("verify", "patched"), ("revert", "reverted")):
        r = subprocess.run([sys.executable, "-m", "wheelhouse", "patch", cmd, str(spec), "--python", rel, "--json"],
                           capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["state"] == state
    assert installed.read_text() == ORIGINAL


def _killed_in_verification(spec, py, installed):
    from faults import run_with_fault

    p = run_with_fault(["patch", "apply", spec, "--python", py], "patch.apply.verify")
    assert p.returncode == -9, p.stderr
    assert installed.read_text() != ORIGINAL  # the payload is in place, unverified
    assert (patch_dir(installed) / "tiny-rowwise" / "intent.json").is_file()


def test_after_a_kill_in_verification_reapply_finishes_the_patch(tmp_path, venv):
    py, installed = venv
    spec = write_spec(tmp_path / "spec")
    _killed_in_verification(spec, py, installed)
    r = wh("patch", "apply", spec, "--python", py, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "applied" and out["verification"]["matched"] is True
    assert "interrupted apply" in out["reason"]
    pdir = patch_dir(installed) / "tiny-rowwise"
    assert installed.read_text() == PAYLOAD and (pdir / "record.json").is_file() and not (pdir / "intent.json").exists()
    assert wh("patch", "revert", spec, "--python", py).returncode == 0 and installed.read_text() == ORIGINAL


def test_after_a_kill_in_verification_a_failing_payload_is_rolled_back(tmp_path, venv):
    """Before: re-apply said 'already patched', MISMATCH, and left the payload in place."""
    py, installed = venv
    spec = write_spec(tmp_path / "spec", expect=True)  # the payload returns False: verification fails
    _killed_in_verification(spec, py, installed)
    r = wh("patch", "apply", spec, "--python", py)
    assert r.returncode == 1 and "error: " in r.stderr and "restored" in r.stderr, r.stderr
    assert installed.read_text() == ORIGINAL
    assert not (patch_dir(installed) / "tiny-rowwise").exists()


@pytest.mark.parametrize("cmd, state", [("verify", "unpatched"), ("revert", "unpatched")])
def test_after_a_kill_verify_and_revert_roll_the_apply_back(tmp_path, venv, cmd, state):
    py, installed = venv
    spec = write_spec(tmp_path / "spec", when={"tinyengine": "<1"})  # conditions do not hold: unpatched is fine
    p = __import__("faults").run_with_fault(["patch", "apply", spec, "--python", py, "--force"], "patch.apply.verify")
    assert p.returncode == -9
    r = wh("patch", cmd, spec, "--python", py, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == state and "interrupted apply" in out["reason"] and "rolled back" in out["reason"]
    assert installed.read_text() == ORIGINAL and not (patch_dir(installed) / "tiny-rowwise").exists()


def test_a_kill_between_restoring_and_cleaning_up_a_revert_is_finished(tmp_path, venv):
    from faults import run_with_fault

    py, installed = venv
    spec = write_spec(tmp_path / "spec")
    assert wh("patch", "apply", spec, "--python", py).returncode == 0
    p = run_with_fault(["patch", "revert", spec, "--python", py], "patch.revert.restored")
    assert p.returncode == -9 and installed.read_text() == ORIGINAL
    r = wh("patch", "revert", spec, "--python", py, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["state"] == "reverted" and not (patch_dir(installed) / "tiny-rowwise").exists()


def test_a_payload_that_is_a_fifo_is_refused(tmp_path, venv):
    py, installed = venv
    spec = write_spec(tmp_path / "spec", payload_sha=False)
    (tmp_path / "spec" / "kernel_fix.py").unlink()
    os.mkfifo(tmp_path / "spec" / "kernel_fix.py")
    r = subprocess.run([sys.executable, "-m", "wheelhouse", "patch", "apply", str(spec), "--python", str(py)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "is not a regular file (a FIFO)" in r.stderr and "hint: " in r.stderr, r.stderr
    assert installed.read_text() == ORIGINAL


def test_a_record_naming_a_backup_outside_its_folder_is_refused(tmp_path, venv):
    py, installed = venv
    spec = write_spec(tmp_path / "spec")
    assert wh("patch", "apply", spec, "--python", py).returncode == 0
    record = patch_dir(installed) / "tiny-rowwise" / "record.json"
    rec = json.loads(record.read_text())
    (tmp_path / "elsewhere.orig").write_text(ORIGINAL)
    record.write_text(json.dumps({**rec, "backup": str(tmp_path / "elsewhere.orig")}))
    r = wh("patch", "revert", spec, "--python", py)
    assert r.returncode == 1 and "names no valid backup" in r.stderr, r.stderr
    assert installed.read_text() == PAYLOAD


def test_an_interpreter_that_prints_at_startup_still_locates_the_file(tmp_path, venv):
    """A sitecustomize that prints a banner made the locate answer unreadable (internal error)."""
    py, installed = venv
    site = installed.parents[1]
    (site / "sitecustomize.py").write_text("print('welcome to the box')\n")
    spec = write_spec(tmp_path / "spec")
    r = wh("patch", "verify", spec, "--python", py, "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["state"] == "unpatched", r.stderr
