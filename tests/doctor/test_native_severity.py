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


# ---- namespace packages, exception chains, variants without the build the package would load -------------------


def _native_okpkg(py: Path, w: Path, build: Path) -> None:
    """A native distribution that loads: the native check runs (and judges the stack's entries) only with one."""
    install_dist(py, w, "okpkg", {"okpkg/__init__.py": "from ._core import answer\n"},
                 {f"okpkg/_core{SUFFIX}": _ext(build, "_core")})


def test_a_requested_engine_in_a_namespace_package_is_its_entry_not_the_bare_namespace(tmp_path):
    """acme-engine ships acme/engine/ and no acme/__init__.py (as google-*, azure-*, nvidia-* do). Its entry was the
    bare namespace `acme`, whose import runs nothing: `OK native:entry:acme: imported acme`, though the engine cannot
    start. The distribution's own package under the namespace is what the engine imports."""
    from broken_packages import install_wheel
    from wheelmaker import make_wheel

    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    w = tmp_path / "w"
    _native_okpkg(py, w, build)
    install_wheel(py, make_wheel(w, "acme-engine", "1.0", modules={
        "acme/engine/__init__.py": "import okpkg\nraise ImportError('acme.engine is broken: the engine cannot start')\n"}))
    manifest = tmp_path / "stack.toml"
    manifest.write_text('[stack]\nname = "acme"\nrequirements = ["acme-engine"]\n')
    report = run_doctor(str(py), checks=["native"], timeout=20, manifest=load_manifest(manifest))
    ids = [r.id for r in report.results]
    assert "native:entry:acme" not in ids, ids
    r = report.get("native:entry:acme.engine")
    assert r is not None and r.verdict == "fail", ids
    assert "import acme.engine: ImportError: acme.engine is broken: the engine cannot start" in r.evidence
    assert report.exit_code() == 1


def test_own_names_expand_a_namespace_portion_to_the_distributions_packages_below_it():
    from wheelhouse.doctor.severity import own_names

    rows = ["acme/engine/__init__.py", "acme/engine/core.py", "acme/tools/cli.py", "acme/tools/sub/__init__.py",
            f"acme/_speed{SUFFIX}", "acme/data/lib/libfoo.so.1", "acme/README.txt", "plain/__init__.py", "solo.py",
            "acme_engine-1.0.dist-info/RECORD", "../../bin/acme"]
    exts = ((f"acme/_speed{SUFFIX}", "acme._speed"),)
    assert own_names(rows, ("acme", "plain", "solo"), exts) == (
        "acme.engine", "acme.tools.cli", "acme.tools.sub", "acme._speed", "plain", "solo")
    assert own_names(["acme/__init__.py", "acme/engine/__init__.py"], ("acme",), ()) == ("acme",)
    # Nothing importable below it (a folder of libraries only): the name stays as it is.
    assert own_names(["nvidia/cu13/lib/libcudart.so.13"], ("nvidia",), ()) == ("nvidia",)


_NEEDS_UNDECLARED = "import msgspec_turbo  # a module nothing installs\nfrom ._core import answer\n"


def test_a_native_package_under_a_namespace_whose_import_fails_is_a_fail_as_a_top_level_package_is(tmp_path):
    """acme/fast/__init__.py imports a module nothing installs: under a namespace it was judged a lazily loaded module
    (`only acme.fast._core needs msgspec_turbo ... an optional module`, a warning --strict does not count), where the
    same package at the top (plainfast) fails. find_spec('acme.fast') finds it: code that probes for it imports it."""
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    w = tmp_path / "w"
    install_dist(py, w, "acme-fast", {"acme/fast/__init__.py": _NEEDS_UNDECLARED},
                 {f"acme/fast/_core{SUFFIX}": _ext(build, "_core")})
    install_dist(py, w, "plainfast", {"plainfast/__init__.py": _NEEDS_UNDECLARED},
                 {f"plainfast/_core{SUFFIX}": _ext(build, "_core")})
    report = run_doctor(str(py), checks=["native"], timeout=20)
    assert report.get("native:plainfast").verdict == "fail"
    r = report.get("native:acme-fast")
    assert r.verdict == "fail", r.evidence
    assert "No module named 'msgspec_turbo'" in r.evidence
    assert "a fail: acme.fast is a top-level name of acme-fast (a package under the namespace acme)" in r.evidence
    assert r.data["drop"]["distribution"] == "acme-fast"
    # The drop takes it: the namespace folder find_spec('acme') names holds acme-fast's own files, so it is no other
    # copy on sys.path (before: "the failing copy of acme is .../site-packages/acme, not the installed one": kept).
    from wheelhouse.doctor.repair import plan_repair
    from wheelhouse.target.interpreter import inspect_interpreter

    plan = plan_repair(report, inspect_interpreter(str(py)))
    assert "acme-fast" in [d.distribution for d in plan.drops], plan.kept


_FALLS_BACK = ("try:\n    from ._kernels import answer as kernel\n"
               "except ImportError:\n    from numexpr import evaluate as kernel  # an optional fallback\n")
_TWO_OPTIONAL = ("try:\n    from numexpr import evaluate as kernel\n"
                 "except ImportError:\n    from bottleneck import nansum as kernel\n")


def test_a_fallback_import_does_not_hide_the_broken_build_it_fell_back_from(tmp_path):
    """fastk.accel tries its compiled kernels (an undefined symbol) and falls back to numexpr, which is not installed:
    judged by the last exception alone it was `only fastk.accel._kernels needs numexpr (an optional module)`, a
    warning, though the .so can never load. An earlier link of the chain that is no optional missing module decides
    too. Two optional modules in a row (numexpr, then bottleneck) stay a warning."""
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    w = tmp_path / "w"
    install_dist(py, w, "fastk", {"fastk/__init__.py": "", "fastk/accel/__init__.py": _FALLS_BACK},
                 {f"fastk/accel/_kernels{SUFFIX}": _ext(build, "_kernels", "WH_UNDEF")})
    install_dist(py, w, "slowk", {"slowk/__init__.py": "", "slowk/accel/__init__.py": _TWO_OPTIONAL},
                 {f"slowk/accel/_kernels{SUFFIX}": _ext(build, "_kernels")})
    report = run_doctor(str(py), checks=["native"], timeout=20)
    r = report.get("native:fastk")
    assert r.verdict == "fail", r.evidence
    assert "undefined symbol" in r.evidence and "No module named 'numexpr'" in r.evidence
    assert "a fail: before ModuleNotFoundError" in r.evidence
    assert r.data["drop"]["distribution"] == "fastk"
    ok = report.get("native:slowk")
    assert ok.verdict == "warn" and ok.strict is False, ok.evidence
    assert "needs bottleneck, which is not installed" in ok.evidence


@pytest.mark.parametrize("folders", [("fastattn/cu12",), ("fastattn/cu12", "fastattn/cu13")], ids=["alone", "empty-cu13"])
def test_a_build_for_another_cuda_major_without_one_for_the_stacks_is_a_fail(tmp_path, folders):
    """fastattn ships its kernels only as a CUDA 12 build and the stack's CUDA is 13: the package has no build for
    the CUDA it finds, so its call loads cu12/. It was excused as `a build for CUDA 12 ... the package loads the
    folder for the CUDA it finds`; then (round 8) an empty cu13/__init__.py still excused it: the sibling must be a
    build of the same module (cu13/_ops...). numba-cuda's cu12/ beside cu13/ stays a warning (above)."""
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    w = tmp_path / "w"
    install_dist(py, w, "fastattn", {"fastattn/__init__.py": "def run():\n    from .cu12 import _ops\n",
                                     **_pkgs(*folders)},
                 {f"fastattn/cu12/_ops{SUFFIX}": ext_needing_a_gone_library(build, "_ops", "libcudart.so.12")})
    _cuda_bindings(py, w)
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:fastattn")
    assert r.verdict == "fail", r.evidence
    assert "a build for CUDA 12 (cu12/), and fastattn ships no build of it for the stack's CUDA 13" in r.evidence
    assert r.data["drop"]["distribution"] == "fastattn"


def test_a_cpu_variant_is_excused_only_beside_a_build_its_package_could_pick_instead():
    """A SIGILL in `_dot_avx512` is a build the package picks only where the CPU has AVX-512 when there is another
    build to pick (`_dot`, `_dot_avx2`, `_generic` beside `_avx512`, faiss's `_swigfaiss` beside
    `_swigfaiss_avx512_spr`); without one, the package's call imports it and dies: a fail."""
    from wheelhouse.doctor.checks import Distribution
    from wheelhouse.doctor.imports import ImportOutcome
    from wheelhouse.doctor.optional import load_optional_modules
    from wheelhouse.doctor.severity import StackReach, judge_failure

    data = load_optional_modules()
    reach = StackReach(loaded=frozenset({"vecops"}), cpu_flags=frozenset({"sse4_2", "avx2", "fma"}))

    def judged(module: str, *siblings: str):
        d = Distribution("vecops", "1.0", "/site", None, ("vecops",), 1, ("vecops",))
        o = ImportOutcome(module, ok=False, crash="killed by SIGILL (signal 4)")
        files = {m: m.replace(".", "/") + SUFFIX for m in (module, *siblings)}
        return judge_failure(d, o, files[module], reach, data, {}, files)

    alone = judged("vecops._dot_avx512")
    assert alone.severity == "fail", alone
    assert "no other build of it" in alone.reason
    assert judged("vecops._dot_avx512", "vecops._other").severity == "fail"
    # Another build named for a feature this CPU lacks is none the package could pick here either.
    assert judged("vecops._dot_avx512", "vecops._dot_avx512bw").severity == "fail"
    for siblings in (("vecops._dot",), ("vecops._dot_avx2",), ("vecops._dot_generic",)):
        w = judged("vecops._dot_avx512", *siblings)
        assert (w.severity, w.strict) == ("warn", False), (siblings, w)
    assert judged("vecops._avx512", "vecops._generic").severity == "warn"
    assert judged("vecops._swigfaiss_avx512_spr", "vecops._swigfaiss", "vecops._swigfaiss_avx2").severity == "warn"


@pytest.mark.skipif(_has_avx512f(), reason="needs a CPU without AVX-512 (its AVX-512 build must die of SIGILL)")
def test_an_avx512_only_build_with_no_other_build_is_a_fail(tmp_path):
    """vecops ships only _dot_avx512 and imports it when dot() runs: on this CPU the process dies of SIGILL. It was a
    warning `optional by design` --strict did not count."""
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "vecops",
                 {"vecops/__init__.py": "def dot(a, b):\n    from . import _dot_avx512\n    return 0\n"},
                 {f"vecops/_dot_avx512{SUFFIX}": _sigill_at_init(build, "_dot_avx512", avx512=True)})
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:vecops")
    assert r.verdict == "fail", r.evidence
    assert "import vecops._dot_avx512: import killed by SIGILL" in r.evidence
    assert "vecops ships no other build of it" in r.evidence


_WRAPS_MISSING = """try:
    import torchlike
except ModuleNotFoundError as e:
    raise ImportError(f"the torchlike frontend is not available, please install it: {e}")
"""

_WRAPS_BROKEN = """try:
    from . import _impl
except ImportError as e:
    raise ImportError(f"the frontend is not available: {e}")
"""


def test_a_package_that_rewords_a_missing_optional_module_is_a_warning_not_a_drop(tmp_path):
    """Hostile round 10 (openvino 2026.4 without torch; ray's vendored aiohttp): a package above a lazily loaded
    module catches "No module named 'torch'" and raises its own ImportError. The probe kept only find_spec's text,
    so the missing module was never seen: a fail, and `wh drop` would uninstall openvino, whose CPU inference runs.
    A rewording of a build that cannot load (an undefined symbol) stays a fail."""
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    w = tmp_path / "w"
    install_dist(py, w, "ovlike", {"ovlike/__init__.py": "from ._core import answer\n",
                                   "ovlike/frontend/__init__.py": "", "ovlike/frontend/torchfe/__init__.py": _WRAPS_MISSING},
                 {f"ovlike/_core{SUFFIX}": _ext(build, "_core"), f"ovlike/frontend/torchfe/_fe{SUFFIX}": _ext(build, "_fe")})
    install_dist(py, w, "brokenfe", {"brokenfe/__init__.py": "", "brokenfe/fe/__init__.py": _WRAPS_BROKEN},
                 {f"brokenfe/fe/_impl{SUFFIX}": _ext(build, "_impl", "WH_UNDEF"),
                  f"brokenfe/fe/_other{SUFFIX}": _ext(build, "_other")})
    report = run_doctor(str(py), checks=["native"], timeout=20)
    r = report.get("native:ovlike")
    assert r.verdict == "warn" and r.strict is False, r.evidence
    assert "needs torchlike, which is not installed" in r.evidence
    assert report.get("native:brokenfe").verdict == "fail", report.get("native:brokenfe").evidence
    dropped = subprocess.run([sys.executable, "-m", "wheelhouse", "drop", "--python", str(py), "--dry-run", "--json"],
                             capture_output=True, text=True, timeout=300)
    names = [d.get("name") for d in json.loads(dropped.stdout).get("dropped") or []]
    assert "ovlike" not in names and "brokenfe" in names, dropped.stdout


def test_a_second_top_level_package_needing_an_extras_requirement_is_a_warning_not_a_drop(tmp_path):
    """Hostile round 10 (duckdb 2.0): duckdb also ships adbc_driver_duckdb, which needs adbc-driver-manager, a
    requirement of duckdb's [all] extra only. Every top-level name failing was a fail, and `wh drop` would have
    uninstalled duckdb, whose queries run. A module missing that no extra names stays a fail."""
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    w = tmp_path / "w"
    install_dist(py, w, "ducklike", {"ducklike/__init__.py": "from ._core import answer\n",
                                     "adbc_ducklike/__init__.py": "import adbc_manager_like\n"},
                 {f"ducklike/_core{SUFFIX}": _ext(build, "_core")},
                 requires=['adbc-manager-like; extra == "all"'])
    install_dist(py, w, "sloppy", {"sloppy/__init__.py": "from ._core import answer\n",
                                   "sloppy_extra/__init__.py": "import undeclared_thing\n"},
                 {f"sloppy/_core{SUFFIX}": _ext(build, "_core")})
    report = run_doctor(str(py), checks=["native"], timeout=20)
    r = report.get("native:ducklike")
    assert r.verdict == "warn" and r.strict is False, r.evidence
    assert "requires only with its extra [all]" in r.evidence
    assert report.get("native:sloppy").verdict == "fail"


def test_a_top_level_name_its_requirer_must_import_first_is_judged_through_it_not_dropped(tmp_path):
    """Hostile round 10 (psycopg[binary] 3.3): `import psycopg_binary` alone raises "the psycopg package should be
    imported before psycopg_binary", by design; `import psycopg` loads it and runs on it. The doctor failed
    psycopg-binary and `wh drop` would have removed it (psycopg then needs a system libpq). A name that fails after
    its requirer's import too stays a fail."""
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    w = tmp_path / "w"
    guard = ("import sys\nif 'pgthin' not in sys.modules:\n"
             "    raise ImportError('the pgthin package should be imported before pgbin')\nfrom ._core import answer\n")
    install_dist(py, w, "pgbin", {"pgbin/__init__.py": guard}, {f"pgbin/_core{SUFFIX}": _ext(build, "_core")})
    install_dist(py, w, "pgthin", {"pgthin/__init__.py": "try:\n    import pgbin\nexcept ImportError:\n    pgbin = None\n"},
                 {}, requires=['pgbin; extra == "binary"'])
    install_dist(py, w, "alwaysbad", {"alwaysbad/__init__.py": "raise ImportError('broken')\nfrom ._core import answer\n"},
                 {f"alwaysbad/_core{SUFFIX}": _ext(build, "_core")})
    install_dist(py, w, "badthin", {"badthin/__init__.py": "import alwaysbad\n"}, {}, requires=["alwaysbad"])
    report = run_doctor(str(py), checks=["native"], timeout=20)
    r = report.get("native:pgbin")
    assert r.verdict == "ok", r.evidence
    assert "imported after pgthin of pgthin, which requires pgbin" in r.evidence
    assert report.get("native:alwaysbad").verdict == "fail"


def test_a_pass_that_used_a_name_an_earlier_import_registered_is_confirmed_alone(tmp_path):
    """Hostile round 10: light packages share one probe process; engine's `import engine_compat` found the module
    shimlib's import had put in sys.modules (no file serves that name), so engine passed there, with --jobs 1 too,
    while `python -c 'import engine'` fails. A pass that used such a name is confirmed in a process of its own,
    and never stored from the batch."""
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    w = tmp_path / "w"
    install_dist(py, w, "aashim", {"aashim/__init__.py": "import sys, types\nfrom ._core import answer\n"
                                                         "sys.modules['engine_compat'] = types.ModuleType('engine_compat')\n"},
                 {f"aashim/_core{SUFFIX}": _ext(build, "_core")})
    install_dist(py, w, "zzengine", {"zzengine/__init__.py": "import engine_compat\nfrom ._core import answer\n"},
                 {f"zzengine/_core{SUFFIX}": _ext(build, "_core")})
    alone = subprocess.run([str(py), "-c", "import zzengine"], capture_output=True, text=True)
    assert alone.returncode == 1 and "engine_compat" in alone.stderr
    for _ in range(2):  # and again: nothing the batch passed was stored
        report = run_doctor(str(py), checks=["native"], timeout=20, jobs=1)
        r = report.get("native:zzengine")
        assert r.verdict == "fail" and "No module named 'engine_compat'" in r.evidence, r.evidence
        assert report.get("native:aashim").verdict == "ok"
