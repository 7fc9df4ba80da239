"""native: every top-level name and every extension module a native distribution ships is loaded (issue 10.1, 10.2).

Real gcc-built extension modules in real venvs: a package whose ``__init__`` is fine
but whose lazily loaded ``pkg.sub._ext`` cannot load was reported ok, and a native
distribution's pure-Python top-level name that raises was never imported.
"""

from __future__ import annotations

import json
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
    (build / "ctlib.c").write_text("int ctlib_answer(void) { return 42; }\n")  # a plain C library: no PyInit_
    _gcc(["-shared", "-fPIC", str(build / "ctlib.c"), "-o", str(build / "ctlib.so")])
    cvlike = _ext(build, "cvlike", "WH_ONCE")  # a second init (by another name) fails
    tk_optional = _ext(build, "_tkagg", "WH_IMPORT=_tkinter_missing_xyz")
    tk_required = _ext(build, "_tkagg", "WH_IMPORT=zmq_missing_xyz")

    def wheel(name, modules, files, requires=()):
        return make_wheel(folder, name, "1.0", tags=_tags(), modules=modules, files=files, requires=list(requires))

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
        # A library its package loads with ctypes (torchvision._C, torchaudio's _torchaudio): not a module.
        "ctlib": wheel("ctlib", {"ctlib/__init__.py": _CTYPES_INIT}, {"ctlib/_C.so": (build / "ctlib.so").read_bytes(),
                                                                     "_ctroot.so": (build / "ctlib.so").read_bytes()}),
        # cv2's loader: the package imports its extension module by path, under its own name.
        "cvlike": wheel("cvlike", {"cvlike/__init__.py": _BY_PATH_INIT}, {f"cvlike/cvlike{SUFFIX}": cvlike}),
        # matplotlib.backends._tkagg on an image without tkinter: a module it does not require is absent.
        "tkopt": wheel("tkopt", {"tkopt/__init__.py": "X = 1\n", "tkopt/backends/__init__.py": ""},
                       {f"tkopt/backends/_tkagg{SUFFIX}": tk_optional}),
        # xxhash's top_level.txt names `_xxhash`, a module that no longer exists at the top (it moved into
        # xxhash/): the names a distribution provides are the ones its files provide.
        "stale": wheel("stale", {"stale/__init__.py": "from ._core import answer\n"},
                       {f"stale/_core{SUFFIX}": ok_core, "stale-1.0.dist-info/top_level.txt": "stale\n_stale\n"}),
        # Submodules a plain interpreter has not loaded, used after importing only their package: the probe's own
        # code had imported importlib.util and collections.abc, and both imported there while failing for the engine.
        "bareutil": wheel("bareutil", {"bareutil/__init__.py": "import importlib\nfrom ._core import answer\n"
                                       "HAVE_JSON = importlib.util.find_spec('json') is not None\n"},
                          {f"bareutil/_core{SUFFIX}": ok_core}),
        "bareabc": wheel("bareabc", {"bareabc/__init__.py": "import collections\nfrom ._core import answer\n"
                                     "class Registry(collections.abc.Mapping):\n    pass\n"},
                         {f"bareabc/_core{SUFFIX}": ok_core}),
        # ... and the same when the distribution requires it: its own stack is incomplete.
        "tkreq": wheel("tkreq", {"tkreq/__init__.py": "X = 1\n", "tkreq/backends/__init__.py": ""},
                       {f"tkreq/backends/_tkagg{SUFFIX}": tk_required}, requires=["zmq-missing-xyz>=1"]),
        # greenlet's tests/_test_extension: its package needs psutil, which greenlet wants only for its `test` extra.
        "tkextra": wheel("tkextra", {"tkextra/__init__.py": "X = 1\n", "tkextra/tests/__init__.py": ""},
                         {f"tkextra/tests/_tkagg{SUFFIX}": tk_required},
                         requires=['zmq-missing-xyz>=1; extra == "test"']),
    }


_CTYPES_INIT = """import ctypes, os
_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "_C.so"))
_root = ctypes.CDLL(os.path.join(os.path.dirname(os.path.dirname(__file__)), "_ctroot.so"))
ANSWER = _lib.ctlib_answer() + _root.ctlib_answer()
"""

_BY_PATH_INIT = """import glob, importlib.util, os, sys
_path = glob.glob(os.path.join(os.path.dirname(__file__), "cvlike.*so"))[0]
_spec = importlib.util.spec_from_file_location("cvlike", _path)
_package = sys.modules["cvlike"]
_native = importlib.util.module_from_spec(_spec)  # registers itself as sys.modules["cvlike"] ...
sys.modules["cvlike"] = _package  # ... so, as cv2's loader does, the package is put back
answer = _native.answer
"""


def _venv(tmp_path: Path, wheels: dict[str, Path], names) -> Path:
    py = make_venv(tmp_path / "venv")
    for n in names:
        install_wheel(py, wheels[n])
    return py


@pytest.fixture(scope="module")
def report(tmp_path_factory, wheels):
    py = _venv(tmp_path_factory.mktemp("native"), wheels,
               ["lazylib", "lazyempty", "lazyundef", "pmdist", "badinit", "fine", "ctlib", "cvlike", "tkopt", "tkreq",
                "stale", "tkextra"])
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


@pytest.mark.parametrize("check_id, missing", [
    ("native:bareutil", "module 'importlib' has no attribute 'util'"),
    ("native:bareabc", "module 'collections' has no attribute 'abc'"),
])
def test_an_import_meets_only_the_modules_a_plain_start_has_loaded(tmp_path, wheels, check_id, missing):
    """The probe's own machinery (json, ctypes, importlib.util...) is not there for the code it imports. (In a venv
    of their own: a package imported before them in the same batch may load what they use, the documented limit.)"""
    r = run_doctor(str(_venv(tmp_path, wheels, ["bareutil", "bareabc"])), checks=["native"], timeout=10).get(check_id)
    assert r.verdict == "fail", r.evidence
    assert f"AttributeError: {missing}" in r.evidence


def test_extension_modules_no_record_lists_are_found_where_the_import_system_finds_the_package(tmp_path, wheels):
    """An .egg-info (setup.py install, Debian's python3-*: no RECORD) and an editable install (its RECORD lists a
    .pth and nothing else) with a broken build: no extension module was known, so nothing was loaded: green."""
    build = tmp_path / "build"
    build.mkdir()
    undef = _ext(build, "_core", "WH_UNDEF")
    py = make_venv(tmp_path / "venv")
    site = site_packages(py)
    (site / "eggy").mkdir()
    (site / "eggy" / "__init__.py").write_text("from ._core import answer\n")
    (site / "eggy" / f"_core{SUFFIX}").write_bytes(undef)
    info = site / "eggy-1.0-py3.11.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: eggy\nVersion: 1.0\n")
    (info / "top_level.txt").write_text("eggy\n")
    src = tmp_path / "checkout"  # `pip install -e`: the build sits in the source tree, a .pth puts it on sys.path
    (src / "edx").mkdir(parents=True)
    (src / "edx" / "__init__.py").write_text("from ._core import answer\n")
    (src / "edx" / f"_core{SUFFIX}").write_bytes(undef)
    install_wheel(py, make_wheel(tmp_path / "w", "edx", "1.0", modules={"__editable__.edx-1.0.pth": f"{src}\n"},
                                 files={"edx-1.0.dist-info/top_level.txt": b"edx\n"}))
    report = run_doctor(str(py), checks=["native"], timeout=10)
    for cid, where in (("native:eggy", site / "eggy"), ("native:edx", src / "edx")):
        r = report.get(cid)
        assert r is not None and r.verdict == "fail", (cid, r)
        assert "wh_missing_symbol" in r.evidence and str(where) in r.evidence


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


def test_a_stale_top_level_txt_name_with_no_file_behind_it_is_not_imported(report):
    r = {x.id: x for x in report.results}["native:stale"]
    assert r.verdict == "ok", r.evidence
    assert "_stale" not in r.evidence


def test_a_healthy_package_with_nested_extensions_loads_them_all(report):
    r = report.get("native:fine")
    assert r.verdict == "ok", r.evidence
    assert set(r.data["modules"]) == {"fine", "fine._core", "fine.sub._ext"}
    assert "2 extension module(s) in separate processes: fine._core, fine.sub._ext" in r.evidence


def test_a_library_its_package_loads_by_path_is_link_checked_not_imported_by_name(report):
    # torchvision._C, torchaudio.lib._torchaudio: no PyInit_, "does not define module export function" by name.
    r = report.get("native:ctlib")
    assert r.verdict == "ok", r.evidence
    # _ctroot.so at the top of site-packages is no top-level module either: only a library provides that name.
    assert r.data["modules"] == ["ctlib"] and sorted(r.data["libraries"]) == ["_ctroot.so", "ctlib/_C.so"]
    assert "library its package loads by path (no Python init function, not imported by name; " in r.evidence
    assert "ctlib/_C.so" in r.evidence
    # ctlib/_C.so loads after ctlib's import (ld.so binds every symbol): said so; _ctroot.so has no package
    assert "libraries loaded after its package's import (1): ctlib/_C.so" in r.evidence
    assert "0 extension module(s), 2 libraries" in r.title and r.evidence.startswith("imported ctlib and loaded 0")


def test_an_extension_its_package_loads_by_path_is_not_imported_again_by_a_dotted_name(report):
    # cv2.cv2: cv2's loader imports cv2/cv2.abi3.so as `cv2`; `import cv2.cv2` is no name the package uses.
    r = report.get("native:cvlike")
    assert r.verdict == "ok", r.evidence
    assert r.data["covered"] == [{"module": "cvlike.cvlike",
                                  "reason": "its package already loaded this file itself, as cvlike._native"}]
    assert "loaded by its package, not by name: cvlike.cvlike" in r.evidence
    assert "loaded 0 extension module(s)" in r.evidence


def test_a_module_that_needs_an_optional_module_its_distribution_does_not_require_is_a_warning(report):
    r = report.get("native:tkopt")
    assert r.verdict == "warn", r.evidence
    assert "import tkopt.backends._tkagg: ModuleNotFoundError: No module named '_tkinter_missing_xyz'" in r.evidence
    assert "does not require" in r.evidence and "drop" not in r.data
    assert "a warning: nothing in the stack reaches it (a lazily loaded module)" in r.evidence
    assert [(f["missing"], f["severity"]) for f in r.data["failures"]] == [("_tkinter_missing_xyz", "warn")]
    # A module the distribution requires is part of its stack: absent, it is red.
    req = report.get("native:tkreq")
    assert req.verdict == "fail" and "No module named 'zmq_missing_xyz'" in req.evidence
    # ... but one it wants only with an extra (greenlet's tests want psutil for its `test` extra) is optional.
    extra = report.get("native:tkextra")
    assert extra.verdict == "warn" and "does not require" in extra.evidence and "drop" not in extra.data, extra


def test_a_module_needed_only_under_an_extra_the_stack_asks_for_is_required(tmp_path, wheels):
    """The manifest asks for tkextra[test]: what that extra brings is part of the stack, so its absence is red."""
    from wheelhouse.manifest import load_manifest

    py = _venv(tmp_path, wheels, ["tkextra"])
    manifest = tmp_path / "stack.toml"
    manifest.write_text('[stack]\nname = "x"\nrequirements = ["tkextra[test]"]\n')
    r = run_doctor(str(py), checks=["native"], timeout=10, manifest=load_manifest(manifest)).get("native:tkextra")
    assert r.verdict == "fail" and "No module named 'zmq_missing_xyz'" in r.evidence, r
    assert run_doctor(str(py), checks=["native"], timeout=10).get("native:tkextra").verdict == "warn"
    # Asked under a marker that does not hold here, the extra is not asked (pip skipped it): optional, no drop.
    manifest.write_text('[stack]\nname = "x"\nrequirements = ["tkextra[test]; platform_machine == \'no-such-cpu\'"]\n')
    r = run_doctor(str(py), checks=["native"], timeout=10, manifest=load_manifest(manifest)).get("native:tkextra")
    assert r.verdict == "warn" and "drop" not in r.data, r
    # Nor by a distribution that asks for it only under an extra of its own nobody asks for (fastapi's
    # `uvicorn[standard]; extra == "standard"`).
    install_wheel(py, make_wheel(tmp_path / "w2", "asker", "1.0", extras={"speed": ["tkextra[test]"]}))
    r = run_doctor(str(py), checks=["native"], timeout=10).get("native:tkextra")
    assert r.verdict == "warn" and "drop" not in r.data, r


def _record_wh_install(python: Path, *names: str) -> None:
    """What `wh install` writes last: <site>/.wh/installed.json naming what it installed there."""
    state = site_packages(python) / ".wh" / "installed.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"wheelhouses": ["/wh"], "installed_at": "2026-01-01T00:00:00Z", "packages": {
        n: {"version": "1.0", "filename": f"{n}-1.0.whl", "sha256": "0" * 64, "wheelhouse": "/wh"} for n in names}}))


def test_who_installed_a_distribution_never_changes_its_verdict(tmp_path, wheels):
    # Issue 28.10: the ownership record (installed.json) decided fail or warn, and every install rewrote it.
    # An image venv (torch's /opt/venv) seen through a .pth; wh installed another distribution into the child.
    parent = _venv(tmp_path / "image", wheels, ["lazylib", "badinit", "tkopt"])
    py = _venv(tmp_path / "child", wheels, ["fine"])
    (site_packages(py) / "image.pth").write_text(f"{site_packages(parent)}\n")
    verdicts = []
    for claimed in ((), ("fine",), ("fine", "lazylib", "tkopt")):
        if claimed:
            _record_wh_install(py, *claimed)
        report = run_doctor(str(py), checks=["native"], timeout=10)
        verdicts.append({k: report.get(f"native:{k}").verdict for k in ("lazylib", "badinit", "tkopt", "fine")})
        lazylib = report.get("native:lazylib")
        assert "import lazylib.sub._ext: ImportError: libwhgone.so: cannot open shared object file" in lazylib.evidence
        assert "no data names this failure optional" in lazylib.evidence and "installed by wh" not in lazylib.evidence
    assert verdicts == [{"lazylib": "fail", "badinit": "fail", "tkopt": "warn", "fine": "ok"}] * 3


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
