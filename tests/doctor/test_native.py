"""native: every top-level name and every extension module a native distribution ships is loaded (issue 10.1, 10.2).

Real gcc-built extension modules in real venvs: a package whose ``__init__`` is fine
but whose lazily loaded ``pkg.sub._ext`` cannot load was reported ok, and a native
distribution's pure-Python top-level name that raises was never imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _ext, _gcc, _tags, have_toolchain, install_wheel, make_venv, site_packages
from wheelmaker import make_wheel
from wheelhouse.doctor import run_doctor

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


def _gpus(sm: str) -> dict:
    return {"gpu": {"driver_version": "580.1", "cuda_version": "13.0",
                    "gpus": [{"index": 0, "name": "NVIDIA L4", "compute_capability": sm,
                              "memory_total_mib": 23034, "memory_used_mib": 0}]}}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("native-wheels")
    build = folder / "build"
    build.mkdir()
    ok = _ext(build, "_ext")
    undef = _ext(build, "_ext", "WH_UNDEF")
    gone = build / "libwhgone.so"
    (build / "whgone.c").write_text("int whgone_value(void) { return 7; }\n")
    _gcc(["-shared", "-fPIC", str(build / "whgone.c"), "-o", str(gone)])
    needlib = _ext(build, "_ext", "WH_NEEDLIB", extra=[f"-L{build}", "-lwhgone"])
    gone.unlink()
    ok_core = _ext(build, "_core")

    def wheel(name, modules, files):
        return make_wheel(folder, name, "1.0", tags=_tags(), modules=modules, files=files)

    return {
        # __init__ is fine; the extension it loads lazily needs a library that is not there.
        "lazylib": wheel("lazylib", {"lazylib/__init__.py": "X = 1\n", "lazylib/sub/__init__.py": ""},
                         {f"lazylib/sub/_ext{SUFFIX}": needlib}),
        "lazyempty": wheel("lazyempty", {"lazyempty/__init__.py": "X = 1\n"}, {f"lazyempty/_ext{SUFFIX}": b""}),
        "lazyundef": wheel("lazyundef", {"lazyundef/__init__.py": "X = 1\n"}, {f"lazyundef/_ext{SUFFIX}": undef}),
        # One native distribution, two top-level names: pm_good holds the extension, pm_bad raises.
        "pmdist": wheel("pmdist", {"pm_good/__init__.py": "from ._core import answer\n",
                                   "pm_bad/__init__.py": "raise ImportError('pm_bad needs something missing')\n"},
                        {f"pm_good/_core{SUFFIX}": ok_core}),
        # An architecture variant the package loads only on sm_100 cards (sgl_kernel/sm100/common_ops.so).
        "variant": wheel("variant", {"variant/__init__.py": "X = 1\n"},
                         {f"variant/_ext{SUFFIX}": ok, f"variant/sm100/_ext{SUFFIX}": undef}),
        "badinit": wheel("badinit", {"badinit/__init__.py": "raise RuntimeError('badinit refuses')\n",
                                     "badinit/sub/__init__.py": ""}, {f"badinit/sub/_ext{SUFFIX}": ok}),
        "fine": wheel("fine", {"fine/__init__.py": "from ._core import answer\n", "fine/sub/__init__.py": ""},
                      {f"fine/_core{SUFFIX}": ok_core, f"fine/sub/_ext{SUFFIX}": ok}),
    }


def _venv(tmp_path: Path, wheels: dict[str, Path], names) -> Path:
    py = make_venv(tmp_path / "venv")
    for n in names:
        install_wheel(py, wheels[n])
    return py


@pytest.fixture(scope="module")
def report(tmp_path_factory, wheels):
    py = _venv(tmp_path_factory.mktemp("native"), wheels, ["lazylib", "lazyempty", "lazyundef", "pmdist", "badinit", "fine"])
    return run_doctor(str(py), checks=["native"], timeout=10)


@pytest.mark.parametrize("check_id, module, why", [
    ("native:lazylib", "lazylib.sub._ext", "libwhgone.so: cannot open shared object file"),
    ("native:lazyempty", "lazyempty._ext", "too short"),
    ("native:lazyundef", "lazyundef._ext", "undefined symbol: wh_missing_symbol"),
])
def test_a_lazily_loaded_extension_that_cannot_load_is_a_fail(report, check_id, module, why):
    r = report.get(check_id)
    assert r.verdict == "fail", r.evidence
    assert f"import {module}:" in r.evidence and why in r.evidence
    assert [f["module"] for f in r.data["failures"]] == [module]
    # wh drop removes the distribution, and confirms it by its top-level names (find_spec works on those)
    assert r.data["drop"]["modules"] == [check_id.split(":")[1]]


def test_every_top_level_name_of_a_native_distribution_is_imported(report):
    r = report.get("native:pmdist")
    assert r.verdict == "fail"
    assert "import pm_bad: ImportError: pm_bad needs something missing" in r.evidence
    assert "pm_good" in r.data["modules"] and "pm_good._core" in r.data["modules"]


def test_extensions_under_a_top_level_name_that_fails_are_named_not_loaded_again(report):
    r = report.get("native:badinit")
    assert r.verdict == "fail"
    assert r.evidence.splitlines()[0].startswith("import badinit: RuntimeError: badinit refuses")
    assert r.evidence.splitlines()[-1] == "not loaded, as badinit does not import: badinit.sub._ext"
    assert [f["module"] for f in r.data["failures"]] == ["badinit"]


def test_a_healthy_package_with_nested_extensions_loads_them_all(report):
    r = report.get("native:fine")
    assert r.verdict == "ok", r.evidence
    assert set(r.data["modules"]) == {"fine", "fine._core", "fine.sub._ext"}
    assert "2 extension module(s)" in r.evidence


def test_an_architecture_variant_for_another_gpu_is_not_loaded_and_says_why(tmp_path, wheels):
    py = _venv(tmp_path, wheels, ["variant"])
    on_l4 = run_doctor(str(py), checks=["native"], timeout=10, facts_override=_gpus("8.9")).get("native:variant")
    assert on_l4.verdict == "ok", on_l4.evidence
    assert "variant.sm100._ext" not in on_l4.data["modules"] and "variant._ext" in on_l4.data["modules"]
    (skipped,) = on_l4.data["not_loaded"]
    assert skipped["module"] == "variant.sm100._ext" and skipped["decided_by"] == "its folder name"
    assert "not loaded: variant.sm100._ext (built for sm_100; GPU 0 is sm_89; decided by its folder name)" \
        in on_l4.evidence
    # On the card it is built for, it is loaded, and its undefined symbol is a fail.
    on_b200 = run_doctor(str(py), checks=["native"], timeout=10, facts_override=_gpus("10.0")).get("native:variant")
    assert on_b200.verdict == "fail" and "undefined symbol" in on_b200.evidence
    # Without a GPU nothing says which variant the package would load: everything is loaded.
    no_gpu = run_doctor(str(py), checks=["native"], timeout=10, facts_override={"gpu": {"gpus": []}})
    assert no_gpu.get("native:variant").verdict == "fail"


def test_wh_drop_drops_a_distribution_whose_submodule_failed(tmp_path, wheels):
    py = _venv(tmp_path, wheels, ["lazylib", "fine"])
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "drop", "--python", str(py), "--json",
                           "--timeout", "10"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [(d["name"], d["confirmed"]) for d in out["dropped"]] == [("lazylib", True)]
    assert "lazylib.sub._ext" in out["dropped"][0]["evidence"]
    assert not (site_packages(py) / "lazylib").exists() and (site_packages(py) / "fine").exists()


_KERNEL_CU = r"""
__global__ void wh_scale(float *x) { x[threadIdx.x] *= 2.0f; }
extern "C" void wh_launch(float *x) { wh_scale<<<1, 32>>>(x); }
"""


@pytest.mark.skipif(not __import__("shutil").which("nvcc"), reason="needs nvcc")
def test_a_variant_whose_kernels_run_on_no_gpu_here_is_decided_by_its_fatbin(tmp_path):
    from broken_packages import _EXT_C

    src = tmp_path / "ext.cu"
    src.write_text(_EXT_C + _KERNEL_CU)
    so = tmp_path / "ext.so"
    proc = subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-arch=sm_100", "-DMODNAME=_ext",
                           f"-I{sysconfig.get_paths()['include']}", str(src), "-o", str(so)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    # sm_90 folder name, sm_100 kernels: the kernels decide.
    wheel = make_wheel(tmp_path / "w", "kvariant", "1.0", tags=_tags(), modules={"kvariant/__init__.py": "X = 1\n"},
                       files={f"kvariant/sm90/_ext{SUFFIX}": so.read_bytes()})
    py = make_venv(tmp_path / "venv")
    install_wheel(py, wheel)
    on_h200 = run_doctor(str(py), checks=["native"], timeout=30, facts_override=_gpus("9.0")).get("native:kvariant")
    assert on_h200.verdict == "ok"
    assert [(s["module"], s["decided_by"]) for s in on_h200.data["not_loaded"]] == \
        [("kvariant.sm90._ext", "its kernels (fatbin)")]
    assert "kernels for sm_100; PTX compute_100 only; GPU 0 is sm_90" in on_h200.evidence
    on_b200 = run_doctor(str(py), checks=["native"], timeout=30, facts_override=_gpus("10.0")).get("native:kvariant")
    assert on_b200.data["not_loaded"] == [] and "kvariant.sm90._ext" in on_b200.data["modules"]


@pytest.mark.registry
def test_registry_healthy_numpy_and_markupsafe_stay_ok_with_every_extension_module_loaded(tmp_path):
    py = make_venv(tmp_path / "venv", with_pip=True)
    got = subprocess.run([str(py), "-m", "pip", "install", "--only-binary=:all:", "numpy", "markupsafe"],
                         capture_output=True, text=True, timeout=900)
    assert got.returncode == 0, got.stderr[-3000:]
    report = run_doctor(str(py), checks=["native", "deps"], timeout=60)
    numpy, markupsafe = report.get("native:numpy"), report.get("native:markupsafe")
    assert numpy.verdict == "ok", numpy.evidence
    assert markupsafe.verdict == "ok", markupsafe.evidence
    assert "numpy.linalg._umath_linalg" in numpy.data["modules"] and len(numpy.data["modules"]) > 10
    assert report.exit_code() == 0, [(r.id, r.evidence) for r in report.failed]
