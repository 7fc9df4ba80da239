"""wh doctor's static link check where the loader's search ends at a library it cannot use: a stray unloadable file
ahead of the real library, and a library that lacks a symbol version the object requires. Real gcc-built objects in
a wheel, installed into a real venv; the real import fails the same way."""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _ext, _tags, have_toolchain, install_wheel, make_venv, site_packages
from wheelhouse.doctor import run_doctor
from wheelmaker import make_wheel

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


def _whgone(folder: Path, script: str | None = None) -> Path:
    """libwhgone.so.1 defining whgone_old and whgone_value (what ``_ext(..., "WH_NEEDLIB")`` calls), under the
    version script ``script``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "whgone.c").write_text("int whgone_old(void) { return 1; }\nint whgone_value(void) { return 7; }\n")
    args = ["gcc", "-shared", "-fPIC", str(folder / "whgone.c"), "-o", str(folder / "libwhgone.so.1"),
            "-Wl,-soname,libwhgone.so.1"]
    if script is not None:
        (folder / "whgone.map").write_text(script)
        args.append(f"-Wl,--version-script={folder / 'whgone.map'}")
    subprocess.run(args, check=True, capture_output=True)
    return folder / "libwhgone.so.1"


def _import_error(python: Path, module: str) -> str:
    proc = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, text=True)
    return "" if proc.returncode == 0 else proc.stderr.strip().splitlines()[-1]


def test_a_stray_unloadable_file_ahead_of_the_library_fails_naming_that_file(tmp_path):
    """An empty libwhgone.so.1 in the first RPATH folder (an interrupted copy, in no RECORD): the loader stops
    there ("file too short") though the next folder has the library; before, the doctor said "found via RPATH"."""
    build = tmp_path / "build"
    lib = _whgone(build)
    core = _ext(build, "_core", "WH_NEEDLIB", extra=[f"-L{build}", "-l:libwhgone.so.1", "-Wl,--disable-new-dtags",
                                                     "-Wl,-rpath,$ORIGIN/site.libs:$ORIGIN/../straypkg.libs"])
    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "straypkg", "1.0", tags=_tags(),
                                 modules={"straypkg/__init__.py": ""},
                                 files={f"straypkg/_core{SUFFIX}": core,
                                        "straypkg.libs/libwhgone.so.1": lib.read_bytes()}))
    assert run_doctor(str(py), checks=["sharedlibs"]).get("sharedlibs:straypkg").verdict == "ok"
    stray = site_packages(py) / "straypkg" / "site.libs" / "libwhgone.so.1"
    stray.parent.mkdir()
    stray.write_bytes(b"")
    r = run_doctor(str(py), checks=["sharedlibs"]).get("sharedlibs:straypkg")
    assert r.verdict == "fail", r.evidence
    assert (f"straypkg/_core{SUFFIX} needs libwhgone.so.1: {stray}: file too short (the loader stops there)"
            in r.evidence.splitlines())
    assert r.data["missing"] == {"libwhgone.so.1": [f"straypkg/_core{SUFFIX}"]}
    assert _import_error(py, "straypkg._core").endswith(f"{stray}: file too short")


def test_a_library_lacking_a_version_the_object_requires_fails_naming_the_version(tmp_path):
    """The extension was built against a libwhgone whose whgone_value is WHGONE_2; the wheel ships an older one
    that defines WHGONE_1 only (the everyday ``version `GLIBCXX_3.4.30' not found``)."""
    build = tmp_path / "build"
    new = _whgone(build / "new", "WHGONE_1 { global: whgone_old; local: *; };\n"
                                 "WHGONE_2 { global: whgone_value; } WHGONE_1;\n")
    old = _whgone(build / "old", "WHGONE_1 { global: whgone_old; local: *; };\n")
    core = _ext(build, "_core", "WH_NEEDLIB", extra=[f"-L{new.parent}", "-l:libwhgone.so.1",
                                                     "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN/../verpkg.libs"])
    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "verpkg", "1.0", tags=_tags(), modules={"verpkg/__init__.py": ""},
                                 files={f"verpkg/_core{SUFFIX}": core, "verpkg.libs/libwhgone.so.1": old.read_bytes()}))
    shipped = site_packages(py) / "verpkg.libs" / "libwhgone.so.1"
    r = run_doctor(str(py), checks=["sharedlibs"]).get("sharedlibs:verpkg")
    assert r.verdict == "fail", r.evidence
    assert f"verpkg/_core{SUFFIX} needs libwhgone.so.1: {shipped} lacks version WHGONE_2" in r.evidence.splitlines()
    assert "version `WHGONE_2' not found" in _import_error(py, "verpkg._core")
    shipped.write_bytes(new.read_bytes())
    assert run_doctor(str(py), checks=["sharedlibs"]).get("sharedlibs:verpkg").verdict == "ok"


def test_a_library_whose_other_copy_the_process_maps_first_defines_the_version_is_no_fail(tmp_path):
    """_core needs libwhgone.so.1 (found through its RPATH in pkg.libs/, the new one: WHGONE_2) and libmid.so, which
    requires WHGONE_2 and whose own RUNPATH holds an older libwhgone.so.1 (WHGONE_1 only). glibc maps the name once,
    for _core, and binds libmid to that copy: `import pkg._core` works. libmid was judged against its own search's
    copy: a fail on a stack that runs. Which copy loads first decides: a warning --strict counts."""
    new = _whgone(tmp_path / "new", "WHGONE_1 { global: whgone_old; local: *; };\n"
                                     "WHGONE_2 { global: whgone_value; } WHGONE_1;\n")
    old = _whgone(tmp_path / "old", "WHGONE_1 { global: whgone_old; local: *; };\n")
    (tmp_path / "mid.c").write_text("int whgone_value(void);\nint mid_value(void) { return whgone_value(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", str(tmp_path / "mid.c"), "-o", str(tmp_path / "libmid.so"),
                    "-Wl,-soname,libmid.so", f"-L{new.parent}", "-l:libwhgone.so.1", "-Wl,--enable-new-dtags",
                    "-Wl,-rpath,$ORIGIN/midlibs"], check=True, capture_output=True)
    core = _ext(tmp_path, "_core", extra=[f"-L{new.parent}", f"-L{tmp_path}", "-Wl,--no-as-needed", "-l:libwhgone.so.1",
                                          "-l:libmid.so", "-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN/../pkg.libs"])
    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "pkg", "1.0", tags=_tags(), modules={"pkg/__init__.py": ""},
                                 files={f"pkg/_core{SUFFIX}": core, "pkg.libs/libwhgone.so.1": new.read_bytes(),
                                        "pkg.libs/libmid.so": (tmp_path / "libmid.so").read_bytes(),
                                        "pkg.libs/midlibs/libwhgone.so.1": old.read_bytes()}))
    assert _import_error(py, "pkg._core") == ""
    r = run_doctor(str(py), checks=["sharedlibs"]).get("sharedlibs:pkg")
    assert r.verdict == "warn" and r.strict is not False, r
    assert "midlibs/libwhgone.so.1 lacks version WHGONE_2, but " in r.evidence and "defines it" in r.evidence, r


@pytest.mark.parametrize("with_beta", [False, True], ids=["alone", "beside-an-unrelated-copy"])
def test_a_plugin_whose_own_copy_lacks_the_version_is_never_vouched_for(tmp_path, with_beta):
    """alpha's plugin libplug (loaded by ctypes) needs libfoo.so.1 at FOO_2; alpha's own libfoo defines FOO_1 only.
    Alone, it was ok: "already loaded when its package loads this plugin", vouched for by the plugin itself (the only
    object linking libfoo) and never asked for the version. Beside an unrelated beta shipping a libfoo with FOO_2,
    that copy excused it, though alpha's process never maps beta's. Both: the plugin's miss, named as the loader's."""
    b = tmp_path / "build"
    b.mkdir()
    (b / "foo.c").write_text("int foo_one(void){return 1;}\n#ifdef V2\nint foo_two(void){return 2;}\n#endif\n")
    (b / "v1.map").write_text("FOO_1 { global: foo_one; local: *; };\n")
    (b / "v2.map").write_text("FOO_1 { global: foo_one; local: *; };\nFOO_2 { global: foo_two; } FOO_1;\n")

    def gcc(*args: str) -> None:
        subprocess.run(["gcc", *args], check=True, capture_output=True, cwd=b)

    gcc("-shared", "-fPIC", "-o", "libfoo_old.so", "foo.c", "-Wl,-soname,libfoo.so.1", "-Wl,--version-script=v1.map")
    gcc("-shared", "-fPIC", "-DV2", "-o", "libfoo_new.so", "foo.c", "-Wl,-soname,libfoo.so.1",
        "-Wl,--version-script=v2.map")
    (b / "link").mkdir()
    (b / "link" / "libfoo.so").write_bytes((b / "libfoo_new.so").read_bytes())
    (b / "plug.c").write_text("int foo_two(void);\nint plug(void){return foo_two();}\n")
    gcc("-shared", "-fPIC", "-o", "libplug.so", "plug.c", "-Llink", "-lfoo", "-Wl,-rpath,$ORIGIN", "-Wl,-soname,libplug.so")
    py = make_venv(tmp_path / "venv")
    loader = "import ctypes, os\ndef plug():\n    return ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'lib', 'libplug.so')).plug()\n"
    install_wheel(py, make_wheel(tmp_path / "w", "alpha", "1.0", tags=_tags(), modules={"alpha/__init__.py": loader},
                                 files={"alpha/lib/libplug.so": (b / "libplug.so").read_bytes(),
                                        "alpha/lib/libfoo.so.1": (b / "libfoo_old.so").read_bytes()}))
    if with_beta:
        install_wheel(py, make_wheel(tmp_path / "w", "beta", "1.0", tags=_tags(), modules={"beta/__init__.py": ""},
                                     files={"beta/lib/libfoo.so.1": (b / "libfoo_new.so").read_bytes()}))
    proc = subprocess.run([str(py), "-c", "import alpha; alpha.plug()"], capture_output=True, text=True)
    assert "version `FOO_2' not found" in proc.stderr
    r = run_doctor(str(py), checks=["sharedlibs"]).get("sharedlibs:alpha")
    assert r.verdict == "warn" and r.strict is not False, r
    assert "alpha/lib/libfoo.so.1 lacks version FOO_2 -- loaded on demand" in r.evidence, r
    assert "beta" not in r.evidence


def test_a_plugins_package_excuses_a_miss_only_with_what_is_really_in_its_process(tmp_path):
    """Two plugins judged "already loaded when its package loads this plugin by name" while their load failed after
    the import: (1) the package's extension module libtriton.so (PyInit_libtriton) had no SONAME, and the loader
    matches a need to an object mapped by its path through its SONAME only, never its file name; (2) libfoo.so.1 was
    linked only by another plugin, itself loaded on demand: nothing imported had it in the process."""
    from broken_packages import _gcc

    b = tmp_path / "build"
    b.mkdir()

    def so(name: str, src: str, *extra: str) -> bytes:
        (b / f"{name}.c").write_text(src)
        _gcc(["-shared", "-fPIC", str(b / f"{name}.c"), "-o", str(b / name), "-Wl,--no-as-needed", *extra])
        return (b / name).read_bytes()

    tri = _ext(b, "libtriton")
    (b / "libtriton.so").write_bytes(tri)
    plug = so("libplug.so", "int plug(void){return 1;}\n", f"-L{b}", "-l:libtriton.so")
    foo = so("libfoo.so.1", "int foo(void){return 2;}\n", "-Wl,-soname,libfoo.so.1")
    plug_a = so("libplugA.so", "extern int foo(void); int a(void){return foo();}\n", f"-L{b}", "-l:libfoo.so.1",
                "-Wl,-rpath,$ORIGIN", "-Wl,--disable-new-dtags")
    plug_b = so("libplugB.so", "extern int foo(void); int bb(void){return foo();}\n", f"-L{b}", "-l:libfoo.so.1")
    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "tritonx", "1.0", tags=_tags(), modules={
        "tritonx/__init__.py": "from tritonx._C import libtriton\n", "tritonx/_C/__init__.py": ""},
        files={"tritonx/_C/libtriton.so": tri, "tritonx/plugins/libplug.so": plug}))
    install_wheel(py, make_wheel(tmp_path / "w", "pkgb", "1.0", tags=_tags(), modules={"pkgb/__init__.py": ""},
                                 files={"pkgb/lib/libfoo.so.1": foo, "pkgb/lib/libplugA.so": plug_a,
                                        "pkgb/lib/libplugB.so": plug_b}))
    for pkg, plugin, lib in (("tritonx", "tritonx/plugins/libplug.so", "libtriton.so"),
                             ("pkgb", "pkgb/lib/libplugB.so", "libfoo.so.1")):
        load = (f"import ctypes, os, {pkg}; ctypes.CDLL(os.path.join(os.path.dirname(os.path.dirname("
                f"{pkg}.__file__)), {plugin!r}))")
        assert f"{lib}: cannot open shared object file" in subprocess.run(
            [str(py), "-c", load], capture_output=True, text=True).stderr
        r = run_doctor(str(py), checks=["sharedlibs"]).get(f"sharedlibs:{pkg}")
        assert r.verdict == "warn" and r.strict is not False, r
        assert f"{plugin} needs {lib}: not found -- loaded on demand" in r.evidence, r
        assert "already loaded when its package" not in r.evidence
