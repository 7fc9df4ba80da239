"""native: fail or warn follows from what the stack loads and what the data names optional (issue 28, finding 10).

The stock H200 image failed native for cupy (optional cuTENSOR), numba (``tbbpool`` without libtbb), numba-cuda
and cuda-core (builds for CUDA 12 beside CUDA 13), matplotlib (``_tkagg`` raising "initialization failed"
without tkinter) and jaxlib (``_sdy_mpmd``), and ``wh drop --dry-run`` would have uninstalled all of them,
though each runs there. Each is made here as a small real package of the same name and layout, with a
gcc-built module that fails the same way; nothing records who installed them.
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
from wheelhouse.manifest import load_manifest

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")

_INIT_FAILS = r"""
#include <Python.h>
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
PyMODINIT_FUNC CAT(PyInit_, MODNAME)(void) {  /* as pybind11 reports an exception thrown in its module init */
    PyErr_SetString(PyExc_ImportError, "initialization failed");
    return NULL;
}
"""




def _init_fails(build: Path, modname: str) -> bytes:
    src = build / f"{modname}-initfails.c"
    src.write_text(_INIT_FAILS)
    out = build / f"{modname}-initfails.so"
    _gcc(["-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", f"-DMODNAME={modname}", str(src), "-o", str(out)])
    return out.read_bytes()


def _pkgs(*folders: str) -> dict[str, str]:
    return {f"{f}/__init__.py": "" for f in folders}


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    """A venv like the stock H200 image's, in small: every package imports, one lazily loaded module each fails."""
    root = tmp_path_factory.mktemp("h200-like")
    build = root / "build"
    build.mkdir()
    py = make_venv(root / "venv")
    w = root / "wheels"
    install_dist(py, w, "numba", {"numba/__init__.py": "X = 1\n", **_pkgs("numba/np", "numba/np/ufunc")},
                 {f"numba/np/ufunc/tbbpool{SUFFIX}": ext_needing_a_gone_library(build, "tbbpool", "libtbb.so.12"),
                  f"numba/np/ufunc/omppool{SUFFIX}": _ext(build, "omppool")})
    install_dist(py, w, "cupy-cuda13x", {"cupy/__init__.py": "X = 1\n",
                                         **_pkgs("cupy_backends", "cupy_backends/cuda", "cupy_backends/cuda/libs")},
                 {f"cupy_backends/cuda/libs/cutensor{SUFFIX}": ext_needing_a_gone_library(build, "cutensor", "libcutensor.so.2")})
    install_dist(py, w, "matplotlib", {"matplotlib/__init__.py": "X = 1\n", **_pkgs("matplotlib/backends")},
                 {f"matplotlib/backends/_tkagg{SUFFIX}": _init_fails(build, "_tkagg"),
                  f"matplotlib/backends/_backend_agg{SUFFIX}": _ext(build, "_backend_agg")})
    install_dist(py, w, "jaxlib", {"jaxlib/__init__.py": "X = 1\n", **_pkgs("jaxlib/mlir", "jaxlib/mlir/_mlir_libs")},
                 {f"jaxlib/mlir/_mlir_libs/_sdy_mpmd{SUFFIX}": _ext(build, "_sdy_mpmd", "WH_UNDEF")})
    # numba-cuda ships a build per CUDA major; the stack's CUDA is 13 (its cuda-bindings wheel says so).
    install_dist(py, w, "numba-cuda", {"numba_cuda/__init__.py": "X = 1\n",
                                       **_pkgs("numba_cuda/cext", "numba_cuda/cext/cu12", "numba_cuda/cext/cu13")},
                 {f"numba_cuda/cext/cu12/_devices{SUFFIX}": ext_needing_a_gone_library(build, "_devices", "libcudart.so.12"),
                  f"numba_cuda/cext/cu13/_devices{SUFFIX}": _ext(build, "_devices")})
    _cuda_bindings(py, w)
    return py


def _cuda_bindings(py: Path, folder: Path) -> None:
    from broken_packages import install_wheel
    from wheelmaker import make_wheel

    install_wheel(py, make_wheel(folder, "cuda-bindings", "13.0.1", modules={"cuda/bindings/__init__.py": "X = 1\n"}))


@pytest.fixture(scope="module")
def report(image):
    return run_doctor(str(image), checks=["native"], timeout=20)


@pytest.mark.parametrize("check_id, module, why", [
    ("native:numba", "numba.np.ufunc.tbbpool", "optional (doctor/optional.toml): numba's TBB threading layer"),
    ("native:cupy-cuda13x", "cupy_backends.cuda.libs.cutensor", "an optional CuPy backend (cuTENSOR"),
    ("native:matplotlib", "matplotlib.backends._tkagg", "the Tk backend (TkAgg)"),
    ("native:jaxlib", "jaxlib.mlir._mlir_libs._sdy_mpmd", "Shardy's MPMD"),
    ("native:numba-cuda", "numba_cuda.cext.cu12._devices",
     "a build for CUDA 12 (cu12/); the stack's CUDA is 13 (cuda-bindings 13.0.1)"),
])
def test_an_optional_lazily_loaded_module_of_the_h200_image_is_a_warning_with_its_reason(report, check_id, module, why):
    r = report.get(check_id)
    assert r.verdict == "warn", r.evidence
    assert f"import {module}:" in r.evidence and why in r.evidence
    assert "a warning: nothing in the stack reaches it (a lazily loaded module)" in r.evidence
    assert [(f["module"], f["severity"]) for f in r.data["failures"]] == [(module, "warn")]
    assert "drop" not in r.data


def test_the_h200_like_image_gives_no_fail_and_wh_drop_dry_run_drops_nothing(image, report):
    assert not report.failed, [(r.id, r.evidence) for r in report.failed]
    assert report.get("native:numba-cuda").data["modules"].count("numba_cuda.cext.cu13._devices") == 1
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "drop", "--python", str(image), "--dry-run", "--json",
                           "--timeout", "20"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["dry_run"] is True and out["dropped"] == [], out


def test_a_failure_the_data_does_not_name_stays_a_fail(tmp_path):
    # numba's TBB pool with an undefined symbol is no missing optional library: a broken numba, red.
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "numba", {"numba/__init__.py": "X = 1\n", **_pkgs("numba/np", "numba/np/ufunc")},
                 {f"numba/np/ufunc/tbbpool{SUFFIX}": _ext(build, "tbbpool", "WH_UNDEF")})
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:numba")
    assert r.verdict == "fail", r.evidence
    assert "a fail: its package loads it by this name when that code runs" in r.evidence
    assert r.data["drop"]["distribution"] == "numba"


def test_without_a_known_cuda_major_a_variant_whose_other_build_loads_is_a_warning(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "cuda-core", {"cuda/core/__init__.py": "X = 1\n",
                                                   **_pkgs("cuda/core/cu12", "cuda/core/cu13")},
                 {f"cuda/core/cu12/_resource{SUFFIX}": ext_needing_a_gone_library(build, "_resource", "libcudart.so.12"),
                  f"cuda/core/cu13/_resource{SUFFIX}": _ext(build, "_resource")})
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:cuda-core")
    assert r.verdict == "warn", r.evidence
    assert "its build for CUDA 13 (cuda/core/cu13/_resource" in r.evidence


_ENGINE = """from numba.np.ufunc import tbbpool  # the engine needs the TBB pool: what it loads must load
"""


def test_an_optional_module_the_stacks_entry_imports_fails_the_stack(tmp_path, image):
    # The manifest's [doctor] entry names the engine's start-up module: it imports the TBB pool, which cannot load.
    from broken_packages import install_wheel
    from wheelmaker import make_wheel

    install_wheel(image, make_wheel(tmp_path / "w", "tbbengine", "1.0", modules={"tbbengine/__init__.py": "",
                                                                                "tbbengine/server.py": _ENGINE}))
    manifest = tmp_path / "stack.toml"
    manifest.write_text('[stack]\nname = "tbb"\nrequirements = ["tbbengine"]\n\n[doctor]\nentry = ["tbbengine.server"]\n')
    report = run_doctor(str(image), checks=["native"], timeout=20, manifest=load_manifest(manifest))
    r = report.get("native:entry:tbbengine.server")
    assert r.verdict == "fail", r.evidence
    assert "import tbbengine.server: ImportError: libtbb.so.12: cannot open shared object file" in r.evidence
    assert report.exit_code() == 1
    # Without the entry, nothing in the stack loads the pool: a warning.
    assert run_doctor(str(image), checks=["native:numba"], timeout=20).exit_code() == 0


def test_by_default_the_top_level_names_of_what_the_stack_requests_are_its_entries(tmp_path, image):
    from broken_packages import install_wheel
    from wheelmaker import make_wheel

    install_wheel(image, make_wheel(tmp_path / "w", "poolengine", "1.0",
                                    modules={"poolengine/__init__.py": _ENGINE}))
    manifest = tmp_path / "stack.toml"
    manifest.write_text('[stack]\nname = "pool"\nrequirements = ["poolengine>=1"]\n')
    r = run_doctor(str(image), checks=["native"], timeout=20, manifest=load_manifest(manifest)).get(
        "native:entry:poolengine")
    assert r.verdict == "fail" and "libtbb.so.12: cannot open shared object file" in r.evidence, r


def test_a_file_its_record_lists_that_is_gone_is_a_fail_even_where_the_data_calls_the_module_optional(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    site = install_dist(py, tmp_path / "w", "jaxlib", {"jaxlib/__init__.py": "X = 1\n",
                                                      **_pkgs("jaxlib/mlir", "jaxlib/mlir/_mlir_libs")},
                        {f"jaxlib/mlir/_mlir_libs/_sdy_mpmd{SUFFIX}": _ext(build, "_sdy_mpmd")})
    (site / f"jaxlib/mlir/_mlir_libs/_sdy_mpmd{SUFFIX}").unlink()
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:jaxlib")
    assert r.verdict == "fail", r.evidence
    assert "a fail: a file its RECORD lists is not on disk" in r.evidence and "reinstall jaxlib" in r.hint


def test_what_the_stacks_entries_loaded_is_a_fail_whatever_the_data_says():
    # The trace (sys.modules after importing the entries) outranks the optional data.
    from wheelhouse.doctor.checks import Distribution
    from wheelhouse.doctor.imports import ImportOutcome
    from wheelhouse.doctor.optional import load_optional_modules
    from wheelhouse.doctor.severity import StackReach, judge_failure

    numba = Distribution("numba", "1.0", "/site", None, ("numba",), 1, ())
    o = ImportOutcome("numba.np.ufunc.tbbpool", ok=False, error_type="ImportError",
                      error="libtbb.so.12: cannot open shared object file: No such file or directory")
    data = load_optional_modules()
    lazy = judge_failure(numba, o, "numba/np/ufunc/tbbpool.so", StackReach(), data, {}, {})
    assert lazy.severity == "warn" and "numba's TBB threading layer" in lazy.reason
    reached = StackReach(entries=("engine.server",), reached={"numba.np.ufunc.tbbpool": "engine.server"})
    judged = judge_failure(numba, o, "numba/np/ufunc/tbbpool.so", reached, data, {}, {})
    assert (judged.severity, judged.reason) == ("fail", "the stack loads it: importing engine.server imports it")


def test_an_optional_entry_that_does_not_say_which_failure_is_refused(tmp_path):
    from wheelhouse.doctor.optional import OptionalDataError, load_optional_modules

    bad = tmp_path / "optional.toml"
    bad.write_text('[[optional]]\ndistribution = "numba"\nmodules = ["numba.*"]\nreason = "anything goes"\n')
    with pytest.raises(OptionalDataError, match="needs modules and libraries or errors"):
        load_optional_modules(bad)


_SIGILL_AT_INIT = r"""
#include <Python.h>
#define STR2(x) #x
#define STR(x) STR2(x)
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, STR(MODNAME), NULL, -1, NULL};
PyMODINIT_FUNC CAT(PyInit_, MODNAME)(void) {
#ifdef WH_AVX512
    __asm__ volatile("vpxord %%zmm0, %%zmm0, %%zmm0" ::: "xmm0");  /* code built with -mavx512f runs at init */
#else
    __builtin_trap();  /* ud2: SIGILL on every CPU */
#endif
    return PyModule_Create(&mod);
}
"""

# faiss-cpu's layout: a build per CPU level, and an __init__ that imports the one /proc/cpuinfo says runs here.
_PICKS_BY_CPU = """def _flags():
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()
if "avx512f" in _flags():
    from ._avx512 import *
else:
    from ._generic import answer
"""


def _sigill_at_init(build: Path, modname: str, avx512: bool) -> bytes:
    src = build / f"{modname}-sigill.c"
    src.write_text(_SIGILL_AT_INIT)
    out = build / f"{modname}-sigill-{avx512}.so"
    _gcc(["-shared", "-fPIC", "-O1", f"-I{sysconfig.get_paths()['include']}", f"-DMODNAME={modname}",
          *(["-mavx512f", "-DWH_AVX512"] if avx512 else []), str(src), "-o", str(out)])
    return out.read_bytes()


def _has_avx512f() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return True


@pytest.mark.skipif(_has_avx512f(), reason="needs a CPU without AVX-512 (its AVX-512 build must die of SIGILL)")
def test_a_build_for_cpu_features_this_host_lacks_that_its_package_does_not_load_is_a_warning_not_a_drop(tmp_path):
    """Before: the doctor imported cpuvar._avx512 by name, it died of SIGILL, native:cpuvar failed and `wh drop`
    uninstalled cpuvar, whose own import works on this CPU. Its package imports it only where the CPU has avx512f."""
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "cpuvar", {"cpuvar/__init__.py": _PICKS_BY_CPU},
                 {f"cpuvar/_generic{SUFFIX}": _ext(build, "_generic"),
                  f"cpuvar/_avx512{SUFFIX}": _sigill_at_init(build, "_avx512", avx512=True)})
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:cpuvar")
    assert r.verdict == "warn" and r.strict is False, r.evidence
    assert "import cpuvar._avx512: import killed by SIGILL" in r.evidence
    assert ("cpuvar's import does not load it here): cpuvar._avx512 is built for CPU features this host lacks "
            "(SIGILL; its name says avx512, which /proc/cpuinfo's flags here do not have)") in r.evidence
    assert [(f["module"], f["severity"]) for f in r.data["failures"]] == [("cpuvar._avx512", "warn")]
    assert "drop" not in r.data
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "drop", "--python", str(py), "--json", "--timeout",
                           "20"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and json.loads(proc.stdout)["dropped"] == [], proc.stdout + proc.stderr
    works = subprocess.run([str(py), "-c", "import cpuvar; print(cpuvar.answer())"], capture_output=True, text=True)
    assert works.stdout.strip() == "42", works.stderr


def test_a_sigill_its_name_does_not_explain_is_a_warning_strict_counts_and_one_its_package_loads_is_a_fail(tmp_path):
    # A module that traps (ud2: SIGILL on any CPU) which its package does not import: no drop, but nothing says
    # it is a CPU variant, so --strict counts it. The same module imported by its package's __init__ is a fail.
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    w = tmp_path / "w"
    install_dist(py, w, "trapvar", {"trapvar/__init__.py": "from ._generic import answer\n"},
                 {f"trapvar/_generic{SUFFIX}": _ext(build, "_generic"),
                  f"trapvar/_fast{SUFFIX}": _sigill_at_init(build, "_fast", avx512=False)})
    install_dist(py, w, "eagervar", {"eagervar/__init__.py": "from ._avx512 import *\n"},
                 {f"eagervar/_avx512{SUFFIX}": _sigill_at_init(build, "_avx512", avx512=False)})
    report = run_doctor(str(py), checks=["native"], timeout=20)
    trap = report.get("native:trapvar")
    assert trap.verdict == "warn" and trap.strict is True, trap.evidence
    assert "trapvar._fast is built for CPU features this host lacks (SIGILL" in trap.evidence
    assert "its name does not say which feature it needs, so --strict counts it" in trap.evidence
    assert "optional by design" not in trap.evidence and "drop" not in trap.data
    eager = report.get("native:eagervar")
    assert eager.verdict == "fail" and "import eagervar: import killed by SIGILL" in eager.evidence, eager.evidence
    assert eager.data["drop"]["distribution"] == "eagervar"


@pytest.mark.skipif("sse4_2" not in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else True,
                    reason="needs a CPU with SSE4.2")
def test_a_sigill_in_a_build_named_for_a_feature_this_cpu_has_is_a_fail(tmp_path):
    """_kernels_sse42 dies of SIGILL on a CPU that has SSE4.2 (/proc/cpuinfo spells it sse4_2): a package that picks its
    build by the CPU's flags picks this one here. It was a warning --strict did not count ("a feature this host lacks":
    sse42 was matched against the flags as written)."""
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "ssevar", {"ssevar/__init__.py": "from ._generic import answer\n"},
                 {f"ssevar/_generic{SUFFIX}": _ext(build, "_generic"),
                  f"ssevar/_kernels_sse42{SUFFIX}": _sigill_at_init(build, "_kernels_sse42", avx512=False)})
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:ssevar")
    assert r.verdict == "fail", r.evidence
    assert "its name says sse42, which this CPU has" in r.evidence


def test_requirement_markers_are_judged_for_the_target_interpreter_not_for_wh_s():
    """wh may run on 3.11 against a 3.12 target: `fastlib; python_version < "3.12"` is not installed there (pip skipped
    it) and `fastpkg[fast]; python_version < "3.12"` asks nothing of fastpkg. Judged by wh's own interpreter, a module
    only that requirement brings was a fail and `wh drop` uninstalled a working fastpkg."""
    from wheelhouse.doctor.checks.context import Distribution
    from wheelhouse.doctor.severity import _own_or_required, target_markers

    markers = {"python_version": "3.12", "python_full_version": "3.12.1", "implementation_name": "cpython",
               "platform_machine": "x86_64", "platform_system": "Linux", "sys_platform": "linux"}
    on312 = target_markers({"markers": markers})  # as the facts probe reads them in the target
    on311 = target_markers({"markers": {**markers, "python_version": "3.11", "python_full_version": "3.11.7"}})
    assert on312["python_version"] == "3.12" and on312["sys_platform"] == "linux"
    fastpkg = Distribution("fastpkg", "1.0", None, None, ("fastpkg",), 1, ("fastpkg",),
                           requires=('fastlib; python_version < "3.12"',))
    fastlib = Distribution("fastlib", "1.0", None, None, ("fastlib",), 0, ())
    installed = {"fastpkg": fastpkg, "fastlib": fastlib}
    assert not _own_or_required(fastpkg, "fastlib", installed, markers=on312)
    assert _own_or_required(fastpkg, "fastlib", installed, markers=on311)
