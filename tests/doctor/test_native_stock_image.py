"""What the stock H200 image showed once the first round of data was in (tests/device/evidence.sh, part A): four
reds on packages that run there, each reproduced with small real packages (gcc-built extension modules, real
venv, the real doctor) and now a warning with its reason, so `wh drop --dry-run` drops nothing:

- CuPy's `cupyx._cutensor` without libcutensor (the module name the real wheel uses);
- numba's own `numba.cuda.cudadrv._extras`, never loaded: numba hands its `numba.cuda` name to numba-cuda's copy;
- numba-cuda's modules imported by their file-path name `numba_cuda.numba.cuda.*` (the set-up runs twice);
- cuda-core's torch bridge, which binds libtorch's `aoti_torch_*` symbols only when torch is loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _ext, _gcc, ext_needing_a_gone_library, have_toolchain, install_dist, make_venv
from wheelhouse.doctor import run_doctor

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")

_NEEDS_SYMBOL = r"""
#include <Python.h>
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
extern int aoti_torch_dtype_float32(void);  /* libtorch's, unresolved until torch is loaded */
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "m", NULL, -1, NULL};
PyMODINIT_FUNC CAT(PyInit_, MODNAME)(void) { aoti_torch_dtype_float32(); return PyModule_Create(&def); }
"""




def _needs_torch_symbol(build: Path, modname: str) -> bytes:
    src = build / f"{modname}-aoti.c"
    src.write_text(_NEEDS_SYMBOL)
    out = build / f"{modname}-aoti.so"
    _gcc(["-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", f"-DMODNAME={modname}", str(src), "-o", str(out)])
    return out.read_bytes()


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stock-image")
    build = root / "build"
    build.mkdir()
    py = make_venv(root / "venv")
    w = root / "wheels"
    install_dist(py, w, "cupy-cuda13x", {"cupy/__init__.py": "X = 1\n", "cupyx/__init__.py": "X = 1\n"},
                 {f"cupyx/_cutensor{SUFFIX}": ext_needing_a_gone_library(build, "_cutensor", "libcutensor.so.2")})
    # numba-cuda's copy: `import numba_cuda` sets numba.cuda up (a target registered once), and numba.cuda's name
    # is served from numba_cuda/numba/cuda/ (numba's own numba/cuda/__init__.py hands it over).
    register = ("from numba import _targets\n"
                "assert 'CUDA' not in _targets.registry, \"key already in dictionary: <class 'numba.core.target_extension.CUDA'>\"\n"
                "_targets.registry['CUDA'] = 1\n")
    install_dist(py, w, "numba-cuda", {"numba_cuda/__init__.py": "import numba.cuda\n",
                                       "numba_cuda/numba/__init__.py": "",
                                       "numba_cuda/numba/cuda/__init__.py": register,
                                       "numba_cuda/numba/cuda/cudadrv/__init__.py": "",
                                       "numba_cuda/numba/cuda/cext/__init__.py": ""},
                 {f"numba_cuda/numba/cuda/cext/_dispatcher{SUFFIX}": _ext(build, "_dispatcher")})
    hand_over = ("import os, importlib.util\n"
                 "_s = importlib.util.find_spec('numba_cuda')\n"
                 "__path__ = [os.path.join(os.path.dirname(_s.origin), 'numba', 'cuda')]\n"
                 "exec(open(os.path.join(__path__[0], '__init__.py')).read())\n")
    install_dist(py, w, "numba", {"numba/__init__.py": "X = 1\n", "numba/_targets.py": "registry = {}\n",
                                  "numba/cuda/__init__.py": hand_over, "numba/cuda/cudadrv/__init__.py": ""},
                 {f"numba/cuda/cudadrv/_extras{SUFFIX}": _ext(build, "_extras")})
    install_dist(py, w, "cuda-core", {"cuda/core/__init__.py": "X = 1\n", "cuda/core/cu13/__init__.py": ""},
                 {f"cuda/core/cu13/_tensor_bridge{SUFFIX}": _needs_torch_symbol(build, "_tensor_bridge"),
                  f"cuda/core/cu13/_context{SUFFIX}": _ext(build, "_context")})
    return py


@pytest.fixture(scope="module")
def report(image):
    return run_doctor(str(image), checks=["native"], timeout=30)


@pytest.mark.parametrize("check_id, module, why", [
    ("native:cupy-cuda13x", "cupyx._cutensor", "an optional CuPy backend (cuTENSOR"),
    ("native:numba", "numba.cuda.cudadrv._extras", "numba.cuda.cudadrv is served by numba-cuda 1.0"),
    ("native:numba-cuda", "numba_cuda.numba.cuda.cext._dispatcher", "run numba.cuda's set-up a second time"),
    ("native:cuda-core", "cuda.core.cu13._tensor_bridge", "cuda.core's bridge to torch tensors"),
])
def test_a_module_of_the_stock_image_that_runs_there_is_a_warning_with_its_reason(report, check_id, module, why):
    r = report.get(check_id)
    assert r is not None, [x.id for x in report.results]
    assert r.verdict == "warn", r.evidence
    assert f"import {module}:" in r.evidence and why in r.evidence, r.evidence
    assert [(f["module"], f["severity"]) for f in r.data["failures"]] == [(module, "warn")]


def test_the_stock_image_gives_no_fail_and_drop_dry_run_drops_nothing(image, report):
    assert not report.failed, [(r.id, r.evidence) for r in report.failed]
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "drop", "--python", str(image), "--dry-run", "--json",
                           "--timeout", "30"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["dropped"] == []


def test_a_checkout_on_sys_path_that_lacks_the_module_still_fails(image, tmp_path):
    """The numba.cuda rule is about an installed distribution taking a name over; a copy on PYTHONPATH that
    serves numba.cuda.cudadrv without _extras is what the engine gets, and stays a fail."""
    checkout = tmp_path / "checkout"
    (checkout / "numba" / "cuda" / "cudadrv").mkdir(parents=True)
    (checkout / "numba" / "__init__.py").write_text("X = 1\n")
    (checkout / "numba" / "_targets.py").write_text("registry = {}\n")
    (checkout / "numba" / "cuda" / "__init__.py").write_text("")
    (checkout / "numba" / "cuda" / "cudadrv" / "__init__.py").write_text("")
    r = run_doctor(str(image), checks=["native:numba"], timeout=30,
                   environ={**__import__("os").environ, "PYTHONPATH": str(checkout)})
    res = r.get("native:numba")
    assert res.verdict == "fail", res.evidence
