"""Hostile round 8 for `wh patch`: stale bytecode after a rollback, spec names that escape the
journal folder, and two applies of one patch at the same time."""

from __future__ import annotations

import threading
import time

import pytest

import wheelhouse.patch.apply as patch_mod  # the module whose recover_interrupted and _run_call apply_patch calls
from wheelhouse.errors import WhError
from wheelhouse.patch import apply_patch, revert_patch
from wheelhouse.patch.spec import PatchSpecError, load_patch_spec

import importlib.util
import subprocess
from pathlib import Path

# The venv fixtures of test_patch.py (--import-mode=importlib: load it by path, under another name).
_spec = importlib.util.spec_from_file_location("_wh_test_patch_fixtures", Path(__file__).with_name("test_patch.py"))
_tp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tp)
ORIGINAL, PAYLOAD, sha, write_spec = _tp.ORIGINAL, _tp.PAYLOAD, _tp.sha, _tp.write_spec
engine_wheel, installed_venv, venv = _tp.engine_wheel, _tp.installed_venv, _tp.venv

# Same length as ORIGINAL: the pyc header (source mtime in whole seconds, source size) cannot tell them apart.
SAME_SIZE = "def rowwise_ok():\n    return 1234\n"
assert len(SAME_SIZE) == len(ORIGINAL)


def _value(py, cwd) -> str:
    return subprocess.run([str(py), "-c", "import tinyengine.kernel as k; print(k.rowwise_ok())"],
                          capture_output=True, text=True, cwd=cwd).stdout.strip()


def test_a_rolled_back_payload_leaves_no_bytecode_that_shadows_the_original(tmp_path, venv):
    py, installed = venv
    spec = write_spec(tmp_path / "spec", payload=SAME_SIZE, expect=False)  # returns 1234, expected False
    while time.time() % 1 > 0.3:  # start early in a second: apply and rollback then share one mtime second
        time.sleep(0.05)
    with pytest.raises(patch_mod.PatchRolledBack):
        apply_patch(spec, str(py), facts={"sm": None})
    assert installed.read_text() == ORIGINAL
    # The interpreter must run the restored original, not the payload's bytecode left by py_compile.
    assert _value(py, tmp_path) == "True"


def test_revert_leaves_no_payload_bytecode_either(tmp_path, venv):
    py, installed = venv
    spec = write_spec(tmp_path / "spec", payload=SAME_SIZE, expect=1234)
    while time.time() % 1 > 0.3:
        time.sleep(0.05)
    assert apply_patch(spec, str(py), facts={"sm": None}).state == "applied"
    assert revert_patch(spec, str(py)).state == "reverted"
    assert installed.read_text() == ORIGINAL
    assert _value(py, tmp_path) == "True"


@pytest.mark.parametrize("name", ["..", ".", "../..", "a/b", "../../../x"])
def test_a_spec_name_that_is_not_a_plain_name_is_refused(tmp_path, name):
    spec = write_spec(tmp_path / "spec", name=name)
    with pytest.raises(PatchSpecError):
        load_patch_spec(spec)


def test_a_spec_named_dotdot_cannot_wipe_the_wh_folder(tmp_path, venv):
    py, installed = venv
    site = installed.parents[1]
    links = site / ".wh" / "links.json"
    links.parent.mkdir(parents=True)
    links.write_text('{"changes": []}\n')
    spec = write_spec(tmp_path / "spec", name="..")
    try:
        apply_patch(spec, str(py), facts={"sm": None})
        revert_patch(spec, str(py))
    except PatchSpecError:
        pass
    assert links.read_text() == '{"changes": []}\n'  # another tool's record survives


def test_two_applies_of_one_patch_at_once_end_patched(tmp_path, venv, monkeypatch):
    """Both read the file before either replaced it; the slower one must not undo the faster one's work."""
    py, installed = venv
    spec = load_patch_spec(write_spec(tmp_path / "spec"))
    barrier = threading.Barrier(2, timeout=3)
    real_recover, real_call = patch_mod.recover_interrupted, patch_mod._run_call

    def recover(*a, **k):
        try:
            barrier.wait()  # both past locate, about to read the file
        except threading.BrokenBarrierError:
            pass
        return real_recover(*a, **k)

    def call(*a, **k):
        if threading.current_thread().name == "slow":
            time.sleep(1.0)
        return real_call(*a, **k)

    monkeypatch.setattr(patch_mod, "recover_interrupted", recover)
    monkeypatch.setattr(patch_mod, "_run_call", call)
    results: dict[str, object] = {}

    def run(name):
        try:
            results[name] = apply_patch(spec, str(py), facts={"sm": None}).state
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            results[name] = exc

    threads = [threading.Thread(target=run, args=(n,), name=n) for n in ("fast", "slow")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert set(results.values()) <= {"applied", "already-patched"}, results
    assert installed.read_text() == PAYLOAD
    record = installed.parents[1] / ".wh" / "patches" / "tiny-rowwise" / "record.json"
    assert record.is_file() and not (record.parent / "intent.json").exists()
    assert revert_patch(spec, str(py)).state == "reverted" and installed.read_text() == ORIGINAL


def test_a_symlinked_target_is_never_replaced_by_a_copy(tmp_path, venv):
    """A target that links out of site-packages (a `flit install --symlink` checkout): applying over the
    link would leave a regular file, and revert could never put the link back."""
    py, installed = venv
    outside = tmp_path / "checkout" / "kernel.py"
    outside.parent.mkdir()
    outside.write_text(ORIGINAL)
    installed.unlink()
    installed.symlink_to(outside)
    spec = write_spec(tmp_path / "spec")
    try:
        out = apply_patch(spec, str(py), facts={"sm": None})
    except WhError as exc:
        assert "symlink" in exc.message
    else:
        assert out.state == "applied"
        revert_patch(spec, str(py))
    assert installed.is_symlink() and installed.resolve() == outside.resolve()
    assert outside.read_text() == ORIGINAL
