"""native on a real scientific/serving stack from the package registry: no fail, no untrue warning, no drop (issue 28).

Opt-in (``-m registry`` or ``WH_TEST_REGISTRY=1``): pip installs the real wheels into a fresh venv (torch is
left out: it is several GB). ``WH_REAL_STACK_VENV=/path/to/venv`` runs it on a venv built earlier with the
same packages instead (torch may be in it too). A warning is true when the module it names really fails to import on its own and its
distribution's top-level names import: what the warning says, executed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import make_venv
from wheelhouse.doctor import run_doctor

STACK = ("numpy", "scipy", "pandas", "pyarrow", "scikit-learn", "numba", "matplotlib", "opencv-python-headless",
         "lxml", "cryptography", "grpcio", "orjson", "pydantic", "tokenizers", "onnxruntime")


def _stack_venv(tmp_path: Path) -> Path:
    given = os.environ.get("WH_REAL_STACK_VENV")
    if given:
        return Path(given) / "bin" / "python"
    py = make_venv(tmp_path / "venv", with_pip=True)
    got = subprocess.run([str(py), "-m", "pip", "install", "--only-binary=:all:", *STACK],
                         capture_output=True, text=True, timeout=3000)
    assert got.returncode == 0, got.stderr[-3000:]
    return py


def _imports(py: Path, module: str) -> bool:
    return subprocess.run([str(py), "-c", f"import {module}"], capture_output=True, timeout=300).returncode == 0


@pytest.mark.registry
@pytest.mark.timeout(3600)  # a real stack with torch on a shared 2-core host: minutes
def test_registry_a_real_stack_gives_no_fail_no_untrue_warning_and_drops_nothing(tmp_path):
    py = _stack_venv(tmp_path)
    report = run_doctor(str(py), timeout=120)
    assert not report.failed, [(r.id, r.evidence[:800]) for r in report.failed]
    for r in report.warnings:
        if not r.id.startswith("native:"):
            continue
        for f in r.data["failures"]:
            assert f["severity"] == "warn"
            assert not _imports(py, f["module"]), f"{r.id}: {f['module']} imports, the warning is untrue"
        for top in r.data["modules"]:
            if "." not in top:
                assert _imports(py, top), f"{r.id}: {top} does not import, yet only a warning"
    native = [r for r in report.results if r.id.startswith("native:")]
    # Every one of them ships extension modules (pydantic's are pydantic-core's), and each was loaded.
    shipped = {n for n in STACK if n != "pydantic"} | {"pydantic-core"}
    assert {f"native:{n}" for n in shipped} <= {r.id for r in native}
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "drop", "--python", str(py), "--dry-run", "--json",
                           "--timeout", "120"], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["dropped"] == []
    print(f"\nreal stack: {report.counts()} in {report.seconds:.1f}s; warnings: "
          + "; ".join(f"{r.id}: {', '.join(f['module'] for f in r.data.get('failures', []))}"
                      for r in report.warnings))
