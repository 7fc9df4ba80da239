"""The doctor on a real scientific/serving stack with torch's CUDA wheels: no fail, only true warnings, no drop (issue 28).

Opt-in (``-m registry`` or ``WH_TEST_REGISTRY=1``): pip installs the real wheels into a fresh venv, torch as its
CUDA build (``WH_REAL_STACK_TORCH``, default ``torch==2.14.1``: it brings the nvidia-* wheels, cuBLAS, cuDNN,
NCCL, cuFile, NVSHMEM, and triton; about 5.5 GB, minutes). ``WH_REAL_STACK_VENV=/path/to/venv`` runs it on a
venv built earlier with the same packages instead.

Every warning is named with its reason, and is true: the object it says cannot load, loaded here, fails naming
a library it says is missing; the module it says fails, imported alone, fails, while its distribution's
top-level names import. Which warnings there are follows from this host (no GPU driver, no libtbb, no
rdma-core, no MPI here): each expected one is tied to the library whose absence it reports.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import make_venv
from wheelhouse.doctor import run_doctor
from wheelhouse.manifest import parse_manifest

STACK = ("numpy", "scipy", "pandas", "pyarrow", "scikit-learn", "numba", "matplotlib", "opencv-python-headless",
         "lxml", "cryptography", "grpcio", "orjson", "pydantic", "tokenizers", "onnxruntime")
TORCH = os.environ.get("WH_REAL_STACK_TORCH", "torch==2.14.1")


def _stack_venv(tmp_path: Path) -> Path:
    given = os.environ.get("WH_REAL_STACK_VENV")
    if given:
        return Path(given) / "bin" / "python"
    py = make_venv(tmp_path / "venv", with_pip=True)
    got = subprocess.run([str(py), "-m", "pip", "install", "--only-binary=:all:", *STACK, TORCH],
                         capture_output=True, text=True, timeout=3000)
    assert got.returncode == 0, got.stderr[-3000:]
    return py


def _run(py: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=300)


def _absent(*names: str) -> bool:
    """Is any of these libraries (``tbb`` for libtbb.so*) unknown to this host's loader?"""
    return any(ctypes.util.find_library(n) is None for n in names)


def _expected_warnings() -> dict[str, tuple[str, bool]]:
    """check id -> (the reason its evidence gives, whether --strict counts it), from what this host lacks."""
    out: dict[str, tuple[str, bool]] = {}
    if _absent("tbb"):
        out["native:numba"] = ("this failure is optional (doctor/optional.toml): numba's TBB threading layer", False)
        out["sharedlibs:numba"] = ("needs libtbb.so.12: not found -- optional: numba's TBB threading layer", False)
    if _absent("ibverbs", "rdmacm", "mlx5"):
        out["sharedlibs:nvidia-cufile"] = ("not found -- optional: cuFile's RDMA plugin", False)
    if _absent("mpi", "pmix", "oshmem", "mlx5", "fabric", "ucp", "ucs"):
        out["sharedlibs:nvidia-nvshmem-cu13"] = ("not found -- optional: an NVSHMEM bootstrap or transport plugin", False)
    if _absent("cuda"):  # no NVIDIA driver: torch's NVRTC bridge needs libcuda.so.1, which the driver brings
        out["sharedlibs:torch"] = ("needs libcuda.so.1: not found (the NVIDIA driver's library; this machine has no "
                                   "GPU driver)", True)
    return out


def _cannot_load(py: Path, obj: Path, missing: set[str]) -> None:
    """What a sharedlibs warning says, executed: the object, loaded once torch and triton are, fails naming a
    library the warning lists."""
    got = _run(py, f"import ctypes, torch, triton\nctypes.CDLL({str(obj)!r})")
    assert got.returncode != 0, f"{obj} loads: the warning is untrue"
    assert any(f"{m}: cannot open shared object file" in got.stderr for m in missing), got.stderr[-500:]


@pytest.mark.registry
@pytest.mark.timeout(3600)  # torch's CUDA wheels on a shared 2-core host: minutes
def test_registry_torch_cuda_stack_gives_no_fail_only_true_warnings_and_drops_nothing(tmp_path):
    py = _stack_venv(tmp_path)
    cuda = _run(py, "import torch; print(torch.version.cuda or '')")
    assert cuda.returncode == 0 and cuda.stdout.strip(), f"{TORCH} is not a CUDA build: {cuda.stdout}{cuda.stderr}"
    report = run_doctor(str(py), timeout=120)
    assert not report.failed, [(r.id, r.evidence[:800]) for r in report.failed]

    expected = _expected_warnings()
    warns = {r.id: r for r in report.warnings}
    assert set(warns) == set(expected), {i: r.evidence[:300] for i, r in warns.items()}
    for cid, (reason, counted) in expected.items():
        assert reason in warns[cid].evidence, warns[cid].evidence
        assert warns[cid].strict is counted, cid
    assert report.exit_code(strict=True) == (2 if any(c for _, c in expected.values()) else 0)

    site = Path(_run(py, "import sysconfig; print(sysconfig.get_paths()['platlib'])").stdout.strip())
    for cid, r in warns.items():
        if cid.startswith("sharedlibs:"):
            by_object: dict[str, set[str]] = {}
            for lib, objects in r.data["missing"].items():
                for rel in objects:
                    by_object.setdefault(rel, set()).add(lib)
            assert by_object, r.evidence
            for rel, libs in by_object.items():
                _cannot_load(py, site / rel, libs)
        else:
            for f in r.data["failures"]:
                assert f["severity"] == "warn"
                assert _run(py, f"import {f['module']}").returncode != 0, f"{cid}: {f['module']} imports"
            for top in r.data["modules"]:
                if "." not in top:
                    assert _run(py, f"import {top}").returncode == 0, f"{cid}: {top} does not import"

    # triton's plugins/*.so need libtriton.so, its own extension module: ok, and they load once triton is imported.
    triton = report.get("sharedlibs:triton")
    assert triton.verdict == "ok" and triton.data["found_via"].get("package"), triton.evidence
    plugins = sorted((site / "triton" / "plugins").glob("*.so"))
    assert plugins
    loaded = _run(py, "import ctypes, triton\n" + "".join(f"ctypes.CDLL({str(p)!r})\n" for p in plugins))
    assert loaded.returncode == 0, loaded.stderr[-800:]

    # No GPU here: GPU checks skip; links are ok with what is missing named (torch + triton need no unversioned
    # name, no lib64); kernels are skipped with the reason, or judged against a manifest's sm.
    if _absent("cuda"):
        for r in report.results:
            if r.group == "gpu" or r.id in ("links:libcuda", "jit:triton"):
                assert r.verdict == "skip", (r.id, r.evidence)
        kernels = [r for r in report.results if r.group == "kernels"]
        assert kernels and all(r.verdict == "skip" and "no GPU to judge against" in r.evidence for r in kernels)
        hopper = run_doctor(str(py), checks=["kernels"], manifest=parse_manifest('[doctor]\nsm = "9.0"\n'), timeout=120)
        assert {r.verdict for r in hopper.results} == {"ok"}, [(r.id, r.evidence[:400]) for r in hopper.results]
        assert "harmless: cuFFTW" in hopper.get("kernels:nvidia-cufft").evidence
    for cid in ("links:sonames", "links:lib64"):
        assert report.get(cid).verdict == "ok", report.get(cid).evidence

    native = {r.id for r in report.results if r.group == "native"}
    shipped = {n for n in STACK if n != "pydantic"} | {"pydantic-core", "torch", "triton"}
    assert {f"native:{n}" for n in shipped} <= native

    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "drop", "--python", str(py), "--dry-run", "--json",
                           "--timeout", "120"], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    drop = json.loads(proc.stdout)
    assert drop["dropped"] == [] and drop["reinstall"] == [], drop
    print(f"\nreal stack ({TORCH}): {report.counts()} in {report.seconds:.1f}s; warnings: "
          + "; ".join(f"{r.id} ({'counted' if r.strict else 'not counted'} by --strict)" for r in report.warnings))
