"""wh doctor's static link check: real gcc-built shared objects in wheels, installed into real venvs."""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _ext, _tags, have_toolchain, install_wheel, make_venv
from wheelhouse.doctor import run_doctor
from wheelmaker import make_wheel

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


def _gcc(*args: str) -> None:
    subprocess.run(["gcc", *args], check=True, capture_output=True)


def _lib(build: Path, name: str, *extra: str, symbol: str | None = None) -> Path:
    """lib<name>.so defining <symbol or name>_value()."""
    src = build / f"{name}.c"
    src.write_text(f"int {symbol or name}_value(void) {{ return 7; }}\n")
    out = build / f"lib{name}.so"
    _gcc("-shared", "-fPIC", str(src), "-o", str(out), f"-Wl,-soname,lib{name}.so", *extra)
    return out


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("sharedlibs")
    build = folder / "build"
    build.mkdir()
    whgone = _lib(build, "whgone")
    needs_whgone = _ext(build, "_core", "WH_NEEDLIB", extra=[f"-L{build}", "-lwhgone"])
    bundled = _ext(build, "_core", "WH_NEEDLIB", extra=[f"-L{build}", "-lwhgone", "-Wl,--enable-new-dtags",
                                                       "-Wl,-rpath,$ORIGIN/../bundled.libs"])
    lib_bytes = whgone.read_bytes()
    whgone.unlink()
    # A plain library (not a module) beside the package, needing a library that is nowhere.
    (build / "plain.c").write_text("extern int gone2_value(void);\nint plain(void) { return gone2_value(); }\n")
    gone2 = _lib(build, "gone2")
    _gcc("-shared", "-fPIC", str(build / "plain.c"), "-o", str(build / "libplain.so"), f"-L{build}", "-lgone2")
    gone2.unlink()
    ok_core = _ext(build, "_core")
    out = {
        # The import never touches _core: only reading the .so finds what it lacks.
        "lazylib": make_wheel(folder, "lazylib", "1.0", tags=_tags(), modules={"lazylib/__init__.py": "X = 1\n"},
                              files={f"lazylib/_core{SUFFIX}": needs_whgone}),
        # auditwheel's layout: the library travels in the wheel, found through RUNPATH $ORIGIN.
        "bundled": make_wheel(folder, "bundled", "1.0", tags=_tags(),
                              modules={"bundled/__init__.py": "from ._core import answer\n"},
                              files={f"bundled/_core{SUFFIX}": bundled, "bundled.libs/libwhgone.so": lib_bytes}),
        "plainlib": make_wheel(folder, "plainlib", "1.0", tags=_tags(), modules={"plainlib/__init__.py": ""},
                               files={"plainlib/lib/libplain.so": (build / "libplain.so").read_bytes()}),
        "emptyso": make_wheel(folder, "emptyso", "1.0", tags=_tags(), modules={"emptyso/__init__.py": ""},
                              files={f"emptyso/_core{SUFFIX}": b""}),
        "healthy": make_wheel(folder, "healthy", "1.0", tags=_tags(),
                              modules={"healthy/__init__.py": "from ._core import answer\n"},
                              files={f"healthy/_core{SUFFIX}": ok_core}),
        "purepkg": make_wheel(folder, "purepkg", "1.0", modules={"purepkg/__init__.py": ""}),
    }
    # mpi4py's layout: one module built against each MPI, loaded by path for the MPI that is there.
    out["mpilike"] = make_wheel(folder, "mpilike", "1.0", tags=_tags(), modules={"mpilike/__init__.py": ""},
                                files={f"mpilike/MPI.mpich{SUFFIX}": needs_whgone, f"mpilike/MPI.openmpi{SUFFIX}": ok_core})
    # Two builds of one module where import picks the broken one: no excuse.
    out["twobuilds"] = make_wheel(folder, "twobuilds", "1.0", tags=_tags(), modules={"twobuilds/__init__.py": ""},
                                  files={f"twobuilds/_core{SUFFIX}": needs_whgone, "twobuilds/_core.abi3.so": ok_core})
    # numba's TBB threading layer needs libtbb.so.12, which only the optional tbb package brings.
    tbb = _lib(build, "tbb", "-Wl,-soname,libtbb.so.12", symbol="whgone")
    tbbpool = _ext(build, "tbbpool", "WH_NEEDLIB", extra=[f"-L{build}", "-ltbb"])
    tbb.unlink()
    out["numba"] = make_wheel(folder, "numba", "0.61.0", tags=_tags(), modules={"numba/__init__.py": ""},
                              files={f"numba/np/ufunc/tbbpool{SUFFIX}": tbbpool, f"numba/_core{SUFFIX}": ok_core})
    # Needs the NVIDIA driver's libcuda.so.1 (a stand-in soname, linked then removed).
    fake = _lib(build, "cuda", "-Wl,-soname,libcuda.so.1", symbol="whgone")
    (build / "drv").mkdir()
    shutil.move(fake, build / "drv" / "libcuda.so")
    drv = _ext(build, "_core", "WH_NEEDLIB", extra=[f"-L{build / 'drv'}", "-lcuda"])
    out["needsdriver"] = make_wheel(folder, "needsdriver", "1.0", tags=_tags(),
                                    modules={"needsdriver/__init__.py": ""}, files={f"needsdriver/_core{SUFFIX}": drv})
    # nvidia-cufile's layout: libcufile.so.0, which an extension links, and libcufile_rdma.so.1, a plugin that
    # libcufile dlopens by name when RDMA is asked for; it needs the RDMA verbs library this host lacks.
    rdma = _lib(build, "whrdma")
    cufile = _lib(build, "cufile", "-Wl,-soname,libcufile.so.0")
    plugin = _lib(build, "cufile_rdma", "-Wl,-soname,libcufile_rdma.so.1", f"-L{build}", "-Wl,--no-as-needed",
                  "-lwhrdma")
    rdma.unlink()
    out["nvidia-cufile"] = make_wheel(folder, "nvidia-cufile", "1.15.1.6", tags=_tags(),
                                      files={"nvidia/cu13/lib/libcufile.so.0": cufile.read_bytes(),
                                             "nvidia/cu13/lib/libcufile_rdma.so.1": plugin.read_bytes()})
    shutil.copy(cufile, build / "libcufile.so.0")
    user = _ext(build, "_core", extra=[f"-L{build}", "-Wl,--no-as-needed", "-l:libcufile.so.0",
                                       "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN/../nvidia/cu13/lib"])
    out["cufileuser"] = make_wheel(folder, "cufileuser", "1.0", tags=_tags(), modules={"cufileuser/__init__.py": ""},
                                   files={f"cufileuser/_core{SUFFIX}": user})
    # The same kind of library, but linked by the package's own extension: its miss breaks the import path.
    gone3 = _lib(build, "gone3")
    chain = _lib(build, "chain", f"-L{build}", "-Wl,--no-as-needed", "-lgone3")
    gone3.unlink()
    linked = _ext(build, "_core", extra=[f"-L{build}", "-Wl,--no-as-needed", "-lchain", "-Wl,--enable-new-dtags",
                                         "-Wl,-rpath,$ORIGIN/lib"])
    out["chained"] = make_wheel(folder, "chained", "1.0", tags=_tags(), modules={"chained/__init__.py": ""},
                                files={f"chained/_core{SUFFIX}": linked, "chained/lib/libchain.so": chain.read_bytes()})
    # faiss-cpu's layout: _swigfaiss's RPATH names faiss_cpu.libs/; libopenblas there (no RPATH of its own) needs
    # libgfortran, which needs libquadmath: each found only through the RPATH of the loader chain, two levels down.
    deep = _lib(build, "deepc")
    mid = _lib(build, "deepb", f"-L{build}", "-Wl,--no-as-needed", "-ldeepc")
    top = _lib(build, "deepa", f"-L{build}", "-Wl,--no-as-needed", "-ldeepb")
    deep_ext = _ext(build, "_core", extra=[f"-L{build}", "-Wl,--no-as-needed", "-ldeepa", "-Wl,--disable-new-dtags",
                                           "-Wl,-rpath,$ORIGIN/../deepchain.libs"])
    out["deepchain"] = make_wheel(folder, "deepchain", "1.0", tags=_tags(), modules={"deepchain/__init__.py": ""},
                                  files={f"deepchain/_core{SUFFIX}": deep_ext,
                                         **{f"deepchain.libs/{p.name}": p.read_bytes() for p in (deep, mid, top)}})
    for p in (deep, mid, top):
        p.unlink()
    # Two modules load one library that needs another beside it: _a's RPATH passes down to it, _b's RUNPATH does
    # not (glibc), so `import twoways._b` in a fresh process cannot load it.
    bar = _lib(build, "twbar")
    foo = _lib(build, "twfoo", f"-L{build}", "-Wl,--no-as-needed", "-ltwbar")
    via_rpath = _ext(build, "_a", extra=[f"-L{build}", "-Wl,--no-as-needed", "-ltwfoo", "-Wl,--disable-new-dtags",
                                         "-Wl,-rpath,$ORIGIN/.libs"])
    via_runpath = _ext(build, "_b", extra=[f"-L{build}", "-Wl,--no-as-needed", "-ltwfoo", "-Wl,--enable-new-dtags",
                                           "-Wl,-rpath,$ORIGIN/.libs"])
    out["twoways"] = make_wheel(folder, "twoways", "1.0", tags=_tags(), modules={"twoways/__init__.py": ""},
                                files={f"twoways/_a{SUFFIX}": via_rpath, f"twoways/_b{SUFFIX}": via_runpath,
                                       "twoways/.libs/libtwfoo.so": foo.read_bytes(),
                                       "twoways/.libs/libtwbar.so": bar.read_bytes()})
    for p in (foo, bar):
        p.unlink()
    # An extension module another one links: _xo (RPATH $ORIGIN/.libs, passed down) loads _xi, whose libxdep is found
    # through _xo's RPATH only; `import extroot._xi` alone maps _xi by its path, with no loader above it, and fails.
    xdep = _lib(build, "xdep", symbol="whgone")
    _ext(build, "_xi", "WH_NEEDLIB", extra=[f"-L{build}", "-lxdep", f"-Wl,-soname,_xi{SUFFIX}"])
    xi = build / "_xi-WH_NEEDLIB.so"
    xo = _ext(build, "_xo", extra=[f"-L{build}", "-Wl,--no-as-needed", f"-l:{xi.name}", "-Wl,--disable-new-dtags",
                                   "-Wl,-rpath,$ORIGIN:$ORIGIN/.libs"])
    out["extroot"] = make_wheel(folder, "extroot", "1.0", tags=_tags(), modules={"extroot/__init__.py": ""},
                                files={f"extroot/_xo{SUFFIX}": xo, f"extroot/_xi{SUFFIX}": xi.read_bytes(),
                                       "extroot/.libs/libxdep.so": xdep.read_bytes()})
    xdep.unlink()
    # A diamond under one module: _d (RUNPATH) needs libdma and libdmb; libdma's RPATH would find libdmb's libdmc,
    # but glibc loads _d's needs breadth first, so libdmb's loader is _d (no RPATH passes down): every load fails.
    dmc = _lib(build, "dmc")
    dmb = _lib(build, "dmb", f"-L{build}", "-Wl,--no-as-needed", "-ldmc")
    dma = _lib(build, "dma", f"-L{build}", "-Wl,--no-as-needed", "-ldmb", "-Wl,--disable-new-dtags",
               "-Wl,-rpath,$ORIGIN:$ORIGIN/../cdir")
    dm_ext = _ext(build, "_d", extra=[f"-L{build}", "-Wl,--no-as-needed", "-ldma", "-ldmb", "-Wl,--enable-new-dtags",
                                      "-Wl,-rpath,$ORIGIN/lib"])
    out["diamond"] = make_wheel(folder, "diamond", "1.0", tags=_tags(), modules={"diamond/__init__.py": ""},
                                files={f"diamond/_d{SUFFIX}": dm_ext, "diamond/lib/libdma.so": dma.read_bytes(),
                                       "diamond/lib/libdmb.so": dmb.read_bytes(), "diamond/cdir/libdmc.so": dmc.read_bytes()})
    # A cycle under one module: libcyx (RPATH $ORIGIN) needs libcyy, which needs libcyx back; loaded only by _e.
    cyz = _lib(build, "cyz")
    (build / "cyy.c").write_text("int cyy_value(void) { return 7; }\n")
    _gcc("-shared", "-fPIC", str(build / "cyy.c"), "-o", str(build / "libcyy.so"), "-Wl,-soname,libcyy.so")
    cyx = _lib(build, "cyx", f"-L{build}", "-Wl,--no-as-needed", "-lcyy", "-lcyz", "-Wl,--disable-new-dtags",
               "-Wl,-rpath,$ORIGIN")
    _gcc("-shared", "-fPIC", str(build / "cyy.c"), "-o", str(build / "libcyy.so"), "-Wl,-soname,libcyy.so",
         f"-L{build}", "-Wl,--no-as-needed", "-lcyx")
    cy_ext = _ext(build, "_e", extra=[f"-L{build}", "-Wl,--no-as-needed", "-lcyx", "-Wl,--disable-new-dtags",
                                      "-Wl,-rpath,$ORIGIN/lib:$ORIGIN/zdir"])
    out["cycle"] = make_wheel(folder, "cycle", "1.0", tags=_tags(), modules={"cycle/__init__.py": ""},
                              files={f"cycle/_e{SUFFIX}": cy_ext, "cycle/lib/libcyx.so": cyx.read_bytes(),
                                     "cycle/lib/libcyy.so": (build / "libcyy.so").read_bytes(),
                                     "cycle/zdir/libcyz.so": cyz.read_bytes()})
    for p in (dmc, dmb, dma, cyz, cyx, build / "libcyy.so"):
        p.unlink()
    # triton's layout: _C/libtriton.so is a Python extension module (PyInit_libtriton, SONAME libtriton.so);
    # plugins/*.so need libtriton.so and name only the build machine's folder in RUNPATH. Nothing links them:
    # triton loads them by name, once it is imported, and the loader matches libtriton.so to the loaded object.
    (build / "core").mkdir()
    core = build / "core" / "libplugcore.so"
    core.write_bytes(_ext(build, "libplugcore", extra=["-Wl,-soname,libplugcore.so"]))
    (build / "plug.c").write_text("extern void *PyInit_libplugcore(void);\n"
                                  "void *plug(void) { return (void *)PyInit_libplugcore; }\n")
    _gcc("-shared", "-fPIC", str(build / "plug.c"), "-o", str(build / "libplug.so"), "-Wl,-soname,libplug.so",
         f"-L{core.parent}", "-Wl,--no-as-needed", "-lplugcore", "-Wl,--enable-new-dtags", f"-Wl,-rpath,{core.parent}")
    out["plugpkg"] = make_wheel(folder, "plugpkg", "1.0", tags=_tags(),
                                modules={"plugpkg/__init__.py": "from ._C import libplugcore\n"},
                                files={"plugpkg/_C/libplugcore.so": core.read_bytes(),
                                       "plugpkg/plugins/libplug.so": (build / "libplug.so").read_bytes()})
    shutil.rmtree(core.parent)  # the build machine's folder its RUNPATH names is not on the box
    return out


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheels) -> Path:
    py = make_venv(tmp_path_factory.mktemp("sharedlibs-venv") / "venv")
    for w in wheels.values():
        install_wheel(py, w)
    return py


@pytest.fixture(scope="module")
def report(venv):
    return run_doctor(str(venv), checks=["sharedlibs"], timeout=30)


def test_a_library_nobody_ships_fails_naming_the_so_and_the_library(report):
    r = report.get("sharedlibs:lazylib")
    assert r.verdict == "fail"
    assert f"lazylib/_core{SUFFIX} needs libwhgone.so: not found" in r.evidence
    assert r.data["missing"] == {"libwhgone.so": [f"lazylib/_core{SUFFIX}"]}


def test_the_same_so_with_the_library_beside_it_via_runpath_origin_is_ok(report):
    r = report.get("sharedlibs:bundled")
    assert r.verdict == "ok", r.evidence
    assert "via RUNPATH" in r.evidence and r.data["objects"] == 2


def test_plain_libraries_beside_the_modules_are_checked_too(report):
    # Nothing links libplain.so: what loads it, loads it by name, on demand; its miss is a warn saying so.
    r = report.get("sharedlibs:plainlib")
    assert r.verdict == "warn", r.evidence
    assert "plainlib/lib/libplain.so needs libgone2.so: not found" in r.evidence


def test_a_plugin_loaded_on_demand_is_a_warn_with_the_reason(report):
    # nvidia-cufile on a host without RDMA: libcufile_rdma is dlopened by name, no shipped object links it.
    r = report.get("sharedlibs:nvidia-cufile")
    assert r.verdict == "warn", r.evidence
    assert ("nvidia/cu13/lib/libcufile_rdma.so.1 needs libwhrdma.so: not found -- loaded on demand: no shipped "
            "object names libcufile_rdma.so.1 in DT_NEEDED") in r.evidence
    assert r.data["on_demand"] == {"libwhrdma.so": ["nvidia/cu13/lib/libcufile_rdma.so.1"]}
    assert report.get("sharedlibs:cufileuser").verdict == "ok"  # libcufile.so.0 itself is found, via RUNPATH


def test_a_plugin_needing_its_own_packages_extension_module_finds_it_loaded(report, venv):
    # Before: triton's plugins/*.so were a warn on every torch install ("needs libtriton.so: not found").
    r = report.get("sharedlibs:plugpkg")
    assert r.verdict == "ok", r.evidence
    assert ("plugpkg/plugins/libplug.so needs libplugcore.so: plugpkg/_C/libplugcore.so (a Python extension module "
            "of plugpkg, loaded when its package is imported), already loaded when its package loads this plugin "
            "by name") in r.evidence
    assert r.data["found_via"]["package"] == 1 and r.data["missing"] == {}
    # What the verdict says, executed: alone the plugin cannot load; once its package is imported it does.
    load = "import ctypes, os, sys, plugpkg; ctypes.CDLL(os.path.join(os.path.dirname(plugpkg.__file__), 'plugins/libplug.so'))"
    assert subprocess.run([str(venv), "-c", load], capture_output=True, timeout=60).returncode == 0
    alone = load.replace("import ctypes, os, sys, plugpkg;", "import ctypes, os, sys, importlib.util as u; "
                         "plugpkg = type('m', (), {'__file__': u.find_spec('plugpkg').origin});")
    proc = subprocess.run([str(venv), "-c", alone], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "libplugcore.so: cannot open shared object file" in proc.stderr


def test_libraries_found_only_through_the_rpath_of_the_loader_chain_several_levels_down_are_found(report, venv):
    r = report.get("sharedlibs:deepchain")
    assert r.verdict == "ok", r.evidence
    subprocess.run([str(venv), "-c", "import deepchain._core"], check=True)  # as the loader finds them


def test_a_library_found_through_one_loaders_rpath_but_not_anothers_runpath_is_a_warning_strict_counts(report, venv):
    """Every shipped object that loads libtwfoo counted as its loader, so _a's RPATH found libtwbar for the chain
    through _b too (RUNPATH passes nothing down): ok, while `import twoways._b` dies in a fresh process. Which chain
    loads it first depends on the order of imports (torch._C always first), so a warning --strict counts."""
    r = report.get("sharedlibs:twoways")
    assert r.verdict == "warn" and r.strict is not False, r
    assert ("twoways/.libs/libtwfoo.so needs libtwbar.so: found through its other loaders' RPATH, not when "
            f"_b{SUFFIX} loads it first") in r.evidence, r
    proc = subprocess.run([str(venv), "-c", "import twoways._b"], capture_output=True, text=True)
    assert proc.returncode != 0 and "libtwbar.so" in proc.stderr


def test_an_extension_module_another_one_links_is_judged_as_imported_by_its_own_path_too(report, venv):
    """_xi finds libxdep only through the RPATH of _xo, which links it: it was ok as a library of _xo's chain, while
    the import system maps _xi by its path (`import extroot._xi` first dies). The order of imports decides: a
    warning --strict counts."""
    r = report.get("sharedlibs:extroot")
    assert r.verdict == "warn" and r.strict is not False, r
    assert (f"extroot/_xi{SUFFIX} needs libxdep.so: found through the RPATH of the shipped objects that load it, not "
            "when the import system maps it by its own path first") in r.evidence, r
    proc = subprocess.run([str(venv), "-c", "import extroot._xi"], capture_output=True, text=True)
    assert proc.returncode != 0 and "libxdep.so" in proc.stderr
    subprocess.run([str(venv), "-c", "import extroot._xo, extroot._xi"], check=True)  # through _xo: it loads


def test_the_loader_chain_is_the_one_glibc_follows_from_each_root(report, venv):
    """A diamond under one module: libdmb is loaded by _d (breadth first), never by libdma, so libdma's RPATH does
    not help it: a fail (it was a warning "depends on the order of imports"). A cycle under one module: libcyy is
    loaded by libcyx only, whose loader is _e: no chain ends at libcyy (a warning about it was a false red)."""
    r = report.get("sharedlibs:diamond")
    assert r.verdict == "fail" and "diamond/lib/libdmb.so needs libdmc.so: not found" in r.evidence, r
    assert subprocess.run([str(venv), "-c", "import diamond._d"], capture_output=True).returncode != 0
    r = report.get("sharedlibs:cycle")
    assert r.verdict == "ok", r.evidence
    subprocess.run([str(venv), "-c", "import cycle._e"], check=True)


def test_a_library_that_a_shipped_object_links_still_fails(report):
    r = report.get("sharedlibs:chained")
    assert r.verdict == "fail", r.evidence
    assert "chained/lib/libchain.so needs libgone3.so: not found" in r.evidence


def test_an_empty_so_is_a_fail(report):
    r = report.get("sharedlibs:emptyso")
    assert r.verdict == "fail" and "empty file (0 bytes)" in r.evidence


def test_healthy_extension_is_ok_and_pure_distributions_have_no_check(report):
    assert report.get("sharedlibs:healthy").verdict == "ok"
    assert not [r for r in report.results if r.id == "sharedlibs:purepkg"]


def test_an_alternative_build_beside_one_that_loads_is_a_note(report):
    r = report.get("sharedlibs:mpilike")
    assert r.verdict == "ok", r.evidence
    assert (f"mpilike/MPI.mpich{SUFFIX} needs libwhgone.so: not found -- an alternative build: "
            f"mpilike/MPI.openmpi{SUFFIX} finds all it needs") in r.evidence


def test_the_build_import_picks_is_never_excused_by_a_sibling(report):
    r = report.get("sharedlibs:twobuilds")
    assert r.verdict == "fail" and f"twobuilds/_core{SUFFIX} needs libwhgone.so: not found" in r.evidence


def test_a_known_optional_backend_is_a_warn_with_the_reason_from_the_data_file(report):
    r = report.get("sharedlibs:numba")
    assert r.verdict == "warn", r.evidence
    assert f"numba/np/ufunc/tbbpool{SUFFIX} needs libtbb.so.12: not found -- optional: numba's TBB threading layer" \
        in r.evidence


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="this machine has an NVIDIA driver")
def test_a_missing_driver_library_is_a_warning_without_a_gpu_and_a_fail_with_one(report, venv, tmp_path):
    r = report.get("sharedlibs:needsdriver")
    assert r.verdict == "warn" and "libcuda.so.1: not found (the NVIDIA driver's library" in r.evidence
    gpus = tmp_path / "gpus.json"
    gpus.write_text(json.dumps({"driver_version": "580.1", "cuda_version": "13.0",
                                "gpus": [{"index": 0, "name": "NVIDIA L4", "compute_capability": "8.9"}]}))
    with_gpu = run_doctor(str(venv), checks=["sharedlibs:needsdriver"], timeout=30,
                          environ={**os.environ, "WH_DOCTOR_FAKE_GPUS": str(gpus)})
    assert with_gpu.get("sharedlibs:needsdriver").verdict == "fail"


def test_the_callers_ld_library_path_is_the_engines_and_what_only_it_gives_is_named(venv, wheels, tmp_path):
    """The loader is asked with the engine's environment, the one the import probes get and `wh serve` starts the
    engine with: the caller's LD_LIBRARY_PATH is in it (appended to, never replaced). A library only the caller's
    entry provides is found, and named in a note; a broken copy the caller's entry puts ahead of the RUNPATH one
    fails, as the engine started from that shell fails. (Before: the caller's LD_LIBRARY_PATH was left out, only
    noted: ok, while `wh serve` from that shell stopped at the broken copy: "file too short".)"""
    libdir = tmp_path / "extra"
    libdir.mkdir()
    _lib(libdir, "whgone")
    plain_env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    bare = run_doctor(str(venv), checks=["sharedlibs:lazylib"], timeout=30, environ=plain_env).get("sharedlibs:lazylib")
    shell = run_doctor(str(venv), checks=["sharedlibs:lazylib"], timeout=30,
                       environ={**plain_env, "LD_LIBRARY_PATH": str(libdir)}).get("sharedlibs:lazylib")
    assert bare.verdict == "fail" and shell.verdict == "ok", shell.evidence
    assert f"finds libwhgone.so through {libdir}, an LD_LIBRARY_PATH entry only the caller's environment gives" \
        in shell.evidence
    assert shell.data["caller_ld_library_path"] == [str(libdir)]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "libwhgone.so").write_bytes(b"")  # ahead of everything the stack gives: the loader stops there
    bad = run_doctor(str(venv), checks=["sharedlibs:lazylib"], timeout=30,
                     environ={**plain_env, "LD_LIBRARY_PATH": f"{broken}:{libdir}"}).get("sharedlibs:lazylib")
    assert bad.verdict != "ok" and f"{broken}/libwhgone.so: file too short" in bad.evidence, bad.evidence


def test_ld_library_path_the_manifest_gives_the_engine_counts(venv, wheels, tmp_path):
    from wheelhouse.manifest import parse_manifest

    libdir = tmp_path / "extra"
    libdir.mkdir()
    _lib(libdir, "whgone")
    manifest = parse_manifest(f'[serve]\ncommand = ["ft", "serve"]\nenv = {{ LD_LIBRARY_PATH = "{libdir}" }}\n')
    rep = run_doctor(str(venv), checks=["sharedlibs:lazylib"], timeout=30, manifest=manifest,
                     environ={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"})
    r = rep.get("sharedlibs:lazylib")
    assert r.verdict == "ok", r.evidence
    assert "via LD_LIBRARY_PATH" in r.evidence


def test_cli_exit_code_and_json(venv):
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(venv), "--check", "sharedlibs",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    verdicts = {r["id"]: r["verdict"] for r in data["results"]}
    assert verdicts["sharedlibs:lazylib"] == "fail" and verdicts["sharedlibs:healthy"] == "ok"


def test_the_optional_data_file_refuses_a_typo(tmp_path):
    from wheelhouse.doctor.checks.sharedlibs import load_optional

    bad = tmp_path / "sharedlibs.toml"
    bad.write_text('[[optional]]\ndistribution = "numba"\nobject = "numba/*"\nlibraries = ["libtbb.so*"]\n')
    with pytest.raises(Exception) as info:
        load_optional(bad)
    assert info.value.code == "sharedlibs-data" and "object" in str(info.value) and "objects" in str(info.value)
    assert load_optional()  # the bundled file reads


def test_ld_library_path_of_the_installed_wheelhouses_serve_env_counts(venv, wheels, tmp_path):
    # Installed from a wheelhouse: its wh.json carries the manifest's [serve] env, which wh serve gives the engine.
    from nvidia_fixtures import make_wheelhouse

    libdir = tmp_path / "extra"
    libdir.mkdir()
    _lib(libdir, "whgone")
    house = make_wheelhouse(tmp_path / "house", [], extra_meta={
        "serve": {"command": ["ft", "serve"], "env": {"LD_LIBRARY_PATH": str(libdir)}}})
    rep = run_doctor(str(venv), checks=["sharedlibs:lazylib"], timeout=30, wheelhouse=house,
                     environ={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"})
    r = rep.get("sharedlibs:lazylib")
    assert r.verdict == "ok", r.evidence


def test_many_plugins_whose_every_loader_chain_finds_the_library_are_ok(tmp_path):
    """65 plugins loaded by path (DT_RPATH to lib/ and cdir/) need libL (no RPATH), which needs libcc in cdir/: every
    chain finds it and every plugin loads. At a cap of 64 roots the 65th made it a warning --strict counted."""
    build = tmp_path / "build"
    build.mkdir()
    cc = _lib(build, "rcc")
    mid = _lib(build, "rmid", f"-L{build}", "-Wl,--no-as-needed", "-lrcc")
    (build / "op.c").write_text("extern int rmid_value(void);\nint op(void) { return rmid_value(); }\n")
    _gcc("-shared", "-fPIC", str(build / "op.c"), "-o", str(build / "op.so"), f"-L{build}", "-Wl,--no-as-needed",
         "-lrmid", "-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN/../lib:$ORIGIN/../cdir")
    op = (build / "op.so").read_bytes()
    files = {f"manyops/ops/op{i:02d}.so": op for i in range(65)}
    files.update({"manyops/lib/librmid.so": mid.read_bytes(), "manyops/cdir/librcc.so": cc.read_bytes()})
    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "manyops", "1.0", tags=_tags(), modules={"manyops/__init__.py": ""},
                                 files=files))
    r = run_doctor(str(py), checks=["sharedlibs"]).get("sharedlibs:manyops")
    assert r.verdict == "ok", r.evidence


@pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")
@pytest.mark.parametrize("gpu", [True, False])
def test_a_stub_libcuda_the_search_ends_at_shadows_the_driver(tmp_path, gpu):
    """A toolkit stub shipped in a package's own library folder (not an NVIDIA one, where links:stubs looks), found
    through its extension's RPATH: importing the package maps the stub as libcuda.so.1 and every later dlopen of that
    name gets it (cuInit: CUDA_ERROR_STUB_LIBRARY). Before: "found via RPATH", ok. With a GPU a fail; without one a
    warning --strict counts."""
    build = tmp_path / "build"
    build.mkdir()
    (build / "stub.c").write_text("int cuInit(unsigned f) { return 34; }\n")
    stub = build / "libcuda.so.1"
    _gcc("-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", str(build / "stub.c"), "-o", str(stub))
    core = _ext(build, "_C", extra=[f"-L{build}", "-Wl,--no-as-needed", "-l:libcuda.so.1", "-Wl,--disable-new-dtags,-rpath,$ORIGIN/../gpuext.libs"])
    wheel = make_wheel(tmp_path / "w", "gpuext", "1.0", tags=_tags(), modules={"gpuext/__init__.py": "from . import _C\n"},
                       files={f"gpuext/_C{sysconfig.get_config_var('EXT_SUFFIX')}": core,
                              "gpuext.libs/libcuda.so.1": stub.read_bytes()})
    py = make_venv(tmp_path / "venv")
    install_wheel(py, wheel)
    env = {k: v for k, v in os.environ.items() if k not in ("WH_DOCTOR_FAKE_GPUS", "LD_LIBRARY_PATH")}
    if gpu:
        fake = tmp_path / "gpus.json"
        fake.write_text(json.dumps({"driver_version": "580.1", "cuda_version": "13.0", "gpus": [
            {"index": 0, "name": "NVIDIA H100", "compute_capability": "9.0", "memory_total_mib": 81559,
             "memory_used_mib": 0}]}))
        env["WH_DOCTOR_FAKE_GPUS"] = str(fake)
    r = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--json",
                        "--check", "sharedlibs:gpuext"], capture_output=True, text=True, env=env, timeout=300)
    [res] = [x for x in json.loads(r.stdout)["results"] if x["id"] == "sharedlibs:gpuext"]
    assert "gpuext.libs/libcuda.so.1 (via RPATH), a stub libcuda" in res["evidence"], res
    assert (res["verdict"], r.returncode) == (("fail", 1) if gpu else ("warn", 0)) and (gpu or res["strict"])


def test_one_build_per_major_of_a_library_that_loads_excuses_the_others(tmp_path):
    """Hostile round 10 (torchcodec 0.17): libtorchcodec_core4..8.so, one per FFmpeg major, each linked by its
    custom_ops4..8.so; the package loads the first that works. A host has one FFmpeg, so every working install
    failed sharedlibs for the builds whose FFmpeg is absent. A build whose number-sibling finds all it needs is
    named in a note; with no build that does, it stays a fail."""
    build = tmp_path / "build"
    build.mkdir()
    gone = _lib(build, "avgone58")
    core4 = _lib(build, "vcodec_core4", f"-L{build}", "-Wl,--no-as-needed", "-lavgone58")
    core8 = _lib(build, "vcodec_core8")
    ops = {}
    for n, core in (("4", core4), ("8", core8)):
        src = build / f"ops{n}.c"
        src.write_text("int ops_value(void) { return 1; }\n")
        out = build / f"custom_ops{n}.so"
        _gcc("-shared", "-fPIC", str(src), "-o", str(out), f"-L{build}", "-Wl,--no-as-needed", f"-lvcodec_core{n}",
             "-Wl,-rpath,$ORIGIN")
        ops[n] = out
    gone.unlink()  # FFmpeg 4's library is not on this host
    py = make_venv(tmp_path / "venv")
    for name, files in (("vcodec", {"vcodec/libvcodec_core4.so": core4.read_bytes(),
                                    "vcodec/libvcodec_core8.so": core8.read_bytes(),
                                    "vcodec/custom_ops4.so": ops["4"].read_bytes(),
                                    "vcodec/custom_ops8.so": ops["8"].read_bytes()}),
                        ("vcodeclone", {"vcodeclone/libvcodec_core4.so": core4.read_bytes(),
                                        "vcodeclone/custom_ops4.so": ops["4"].read_bytes()})):
        install_wheel(py, make_wheel(tmp_path / "w", name, "1.0", tags=_tags(),
                                     modules={f"{name}/__init__.py": ""}, files=files))
    report = run_doctor(str(py), checks=["sharedlibs:vcodec"])
    r = report.get("sharedlibs:vcodec")
    assert r.verdict == "ok" or (r.verdict == "warn" and r.strict is False), r.evidence
    assert "an alternative build: vcodec/libvcodec_core8.so finds all it needs" in r.evidence, r.evidence
    assert run_doctor(str(py), checks=["sharedlibs:vcodeclone"]).get("sharedlibs:vcodeclone").verdict == "fail"


def test_a_plugin_needing_a_library_its_requirement_loads_finds_it_loaded(tmp_path):
    """Hostile round 10 (xgrammar 0.2): libxgrammar_bindings.so needs libtvm_ffi.so, which apache-tvm-ffi, a
    requirement of xgrammar, ships and loads at import, before xgrammar loads the bindings: a warning --strict
    counted ("loaded on demand"), though xgrammar runs. A library of its requirement's is found loaded as its own
    package's are; one of a distribution it does not require is not."""
    build = tmp_path / "build"
    build.mkdir()
    shim = _lib(build, "ffishim")
    core = _ext(build, "_core", extra=[f"-L{build}", "-Wl,--no-as-needed", "-lffishim", "-Wl,-rpath,$ORIGIN/lib"])
    plug = build / "libbindings.so"
    src = build / "bindings.c"
    src.write_text("int bindings_value(void) { return 1; }\n")
    _gcc("-shared", "-fPIC", str(src), "-o", str(plug), f"-L{build}", "-Wl,--no-as-needed", "-lffishim")
    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "ffilike", "1.0", tags=_tags(),
                                 modules={"ffilike/__init__.py": "from ._core import answer\n"},
                                 files={f"ffilike/_core{SUFFIX}": core, "ffilike/lib/libffishim.so": shim.read_bytes()}))
    for name, requires in (("grammarlike", ["ffilike"]), ("strangerlike", [])):
        install_wheel(py, make_wheel(tmp_path / "w", name, "1.0", tags=_tags(), requires=requires,
                                     modules={f"{name}/__init__.py": ""},
                                     files={f"{name}/libbindings.so": plug.read_bytes()}))
    report = run_doctor(str(py), checks=["sharedlibs"])
    r = report.get("sharedlibs:grammarlike")
    assert r.verdict == "ok", r.evidence
    assert "a requirement of grammarlike" in r.evidence, r.evidence
    assert report.get("sharedlibs:strangerlike").verdict == "warn"


def test_a_linker_script_nothing_needs_is_not_judged_as_a_shared_object(tmp_path):
    """Hostile round 10 (the mpich 5.0 wheel): lib/libmpi.so is a GNU ld script, `INPUT(libmpi.so.12)`, for `-lmpi`
    at build time; the loader never maps it. It failed sharedlibs as "not a loadable ELF file", though mpich runs.
    One a shipped object needs stays a fail (the loader stops at it)."""
    build = tmp_path / "build"
    build.mkdir()
    real = _lib(build, "mpilike")
    user = build / "libuser.so"
    src = build / "user.c"
    src.write_text("int user_value(void) { return 1; }\n")
    _gcc("-shared", "-fPIC", str(src), "-o", str(user), f"-L{build}", "-Wl,--no-as-needed", "-lmpilike",
         "-Wl,-rpath,$ORIGIN")
    script = b"/* GNU ld script */\nINPUT(libmpilike.so)\n"
    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "mpichlike", "1.0", tags=_tags(), modules={"mpichlike/__init__.py": ""},
                                 files={"mpichlike/lib/libmpilike.so": real.read_bytes(),
                                        "mpichlike/lib/libmpilike_abi.so": script}))
    install_wheel(py, make_wheel(tmp_path / "w", "scriptneeded", "1.0", tags=_tags(),
                                 modules={"scriptneeded/__init__.py": ""},
                                 files={"scriptneeded/libmpilike.so": script,
                                        "scriptneeded/_user.so": user.read_bytes()}))
    ok = run_doctor(str(py), checks=["sharedlibs:mpichlike"]).get("sharedlibs:mpichlike")
    assert ok.verdict == "ok" and "libmpilike_abi.so is a linker script" in ok.evidence, ok.evidence
    bad = run_doctor(str(py), checks=["sharedlibs:scriptneeded"]).get("sharedlibs:scriptneeded")
    assert bad.verdict == "fail", bad.evidence


def test_a_library_only_plugins_loaded_on_demand_need_is_loaded_on_demand_too(tmp_path):
    """Hostile round 10 (the mpich wheel's UCX): libuct_ib.so (InfiniBand, needs libibverbs) is needed only by
    UCX's other on-demand transports (libuct_ib_mlx5.so, ...), which nothing loads unless asked: it was judged
    linked, a fail on every host without rdma-core, though mpich runs. What an extension module needs stays
    linked: its miss is a fail."""
    build = tmp_path / "build"
    build.mkdir()
    verbs = _lib(build, "goneverbs")
    ib = _lib(build, "uct_ib", f"-L{build}", "-Wl,--no-as-needed", "-lgoneverbs")
    mlx5 = _lib(build, "uct_ib_mlx5", f"-L{build}", "-Wl,--no-as-needed", "-luct_ib", "-Wl,-rpath,$ORIGIN")
    used = _lib(build, "usedib", f"-L{build}", "-Wl,--no-as-needed", "-lgoneverbs")
    core = _ext(build, "_core", extra=[f"-L{build}", "-Wl,--no-as-needed", "-lusedib", "-Wl,-rpath,$ORIGIN/ucx"])
    verbs.unlink()
    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "ucxlike", "1.0", tags=_tags(), modules={"ucxlike/__init__.py": ""},
                                 files={"ucxlike/ucx/libuct_ib.so": ib.read_bytes(),
                                        "ucxlike/ucx/libuct_ib_mlx5.so": mlx5.read_bytes()}))
    install_wheel(py, make_wheel(tmp_path / "w", "ucxused", "1.0", tags=_tags(),
                                 modules={"ucxused/__init__.py": "from ._core import answer\n"},
                                 files={"ucxused/ucx/libusedib.so": used.read_bytes(), f"ucxused/_core{SUFFIX}": core}))
    r = run_doctor(str(py), checks=["sharedlibs:ucxlike"]).get("sharedlibs:ucxlike")
    assert r.verdict == "warn" and "loaded on demand" in r.evidence, r.evidence
    assert run_doctor(str(py), checks=["sharedlibs:ucxused"]).get("sharedlibs:ucxused").verdict == "fail"
