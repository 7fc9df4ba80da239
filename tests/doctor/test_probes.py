"""The probe runner: whatever a probe does (hang, crash, junk output), the doctor gets a verdict and goes on."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from wheelhouse.doctor.probes import ProbeError, import_modules, run_probe


def script(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / f"{name}.py"
    p.write_text(body)
    return p


def test_marker_records_survive_stray_output(tmp_path):
    s = script(tmp_path, "noisy", 'import sys\nprint("hello from a module", end="")\n'
                                   'sys.stdout.write("\\n@@WH-PROBE@@ {\\"x\\": 1}\\n")\nprint("trailing junk")\n')
    res = run_probe(sys.executable, s, timeout=10)
    assert res.ok and res.data == {"x": 1}
    assert "hello from a module" in res.stdout


def test_segfault_is_named(tmp_path):
    s = script(tmp_path, "crash", "import ctypes\nctypes.string_at(0)\n")
    res = run_probe(sys.executable, s, timeout=10)
    assert not res.ok and res.signal == "SIGSEGV"
    assert res.failure() == "killed by SIGSEGV (signal 11)"


def test_abort_is_named(tmp_path):
    s = script(tmp_path, "abort", "import os\nos.abort()\n")
    res = run_probe(sys.executable, s, timeout=10)
    assert res.signal == "SIGABRT"


def test_hang_is_killed_with_its_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    s = script(tmp_path, "hang", "import subprocess, sys, time\n"
                                 f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                                 f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
                                 "time.sleep(600)\n")
    t0 = time.monotonic()
    res = run_probe(sys.executable, s, timeout=1.5)
    assert res.timed_out and time.monotonic() - t0 < 10
    assert "timed out after 2s" in res.failure(1.5) or "timed out after 1s" in res.failure(1.5)
    child = int(pidfile.read_text())
    for _ in range(50):  # the grandchild got SIGKILL too (own process group)
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            break
        if state in ("Z", "X"):  # dead, waiting for init to reap it
            break
        time.sleep(0.1)
    else:
        pytest.fail("the probe's child outlived the timeout")


def test_missing_interpreter_is_a_probe_error(tmp_path):
    with pytest.raises(ProbeError):
        run_probe(str(tmp_path / "nope"), tmp_path / "x.py")


def _pkg(root: Path, name: str, body: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(body)


def test_batched_imports_isolate_crashes_and_failures(tmp_path):
    root = tmp_path / "mods"
    _pkg(root, "good_a", "X = 1\n")
    _pkg(root, "good_b", "X = 2\n")
    _pkg(root, "crasher", "import ctypes\nctypes.string_at(0)\n")
    _pkg(root, "raiser", "raise ImportError('nope: broken on purpose')\n")
    # Fails only when another module poisoned the process first: the solo re-run must clear it.
    _pkg(root, "poison", "import builtins\nbuiltins.WH_POISON = True\n")
    _pkg(root, "victim", "import builtins\nif getattr(builtins, 'WH_POISON', False):\n    raise RuntimeError('poisoned')\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    mods = ["good_a", "poison", "victim", "crasher", "raiser", "good_b", "not_installed_anywhere"]
    out = import_modules(sys.executable, mods, jobs=1, timeout=10, env=env, batch_size=100)
    assert list(out) == mods
    assert out["good_a"].ok and out["good_b"].ok and out["poison"].ok
    assert out["victim"].ok and out["victim"].isolated  # failed in the batch, passed alone: ok
    assert not out["crasher"].ok and out["crasher"].isolated and "SIGSEGV" in out["crasher"].crash
    assert out["crasher"].found is None  # it never got to report; the crash is the evidence
    assert not out["raiser"].ok and out["raiser"].found and out["raiser"].error_type == "ImportError"
    assert out["not_installed_anywhere"].found is False and out["not_installed_anywhere"].error_type == "ModuleNotFoundError"


def test_hanging_import_times_out_per_module_not_per_batch(tmp_path):
    root = tmp_path / "mods"
    _pkg(root, "slowish", "import time\ntime.sleep(0.8)\n")
    _pkg(root, "slowish2", "import time\ntime.sleep(0.8)\n")
    _pkg(root, "stuck", "import time\ntime.sleep(600)\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    t0 = time.monotonic()
    out = import_modules(sys.executable, ["slowish", "slowish2", "stuck"], jobs=1, timeout=1.5, env=env, batch_size=10)
    assert out["slowish"].ok and out["slowish2"].ok  # 1.6 s in one batch, but each under 1.5 s
    assert not out["stuck"].ok and "timed out" in out["stuck"].crash and out["stuck"].isolated
    assert time.monotonic() - t0 < 15
