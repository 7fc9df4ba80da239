"""ELF reading and ld.so's search order: gcc-built libraries and real extension modules, checked against ldd."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from wheelhouse.doctor.checks.sharedlibs import loader_facts
from wheelhouse.elf import BadElf, LoaderFacts, expand_dst, exports_pyinit, find_needed, read_elf
from wheelhouse.doctor.probes import probe_script, run_probe

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("ldd") is None, reason="needs gcc and ldd")


def gcc_lib(out: Path, *, needs: tuple[str, ...] = (), libdirs: tuple[Path, ...] = (), rpath: str | None = None,
            runpath: str | None = None, soname: str | None = None, symbol: str = "f") -> Path:
    """A shared library defining ``symbol`` that links against ``needs`` (libNAME.so names, found in ``libdirs``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / f"{out.name}.c"
    calls = "".join(f"extern int {n}_value(void);\n" for n in needs)
    body = " + ".join([f"{n}_value()" for n in needs] or ["1"])
    src.write_text(f"{calls}int {symbol}(void) {{ return {body}; }}\n")
    args = ["gcc", "-shared", "-fPIC", str(src), "-o", str(out)]
    args += [f"-L{d}" for d in libdirs] + [f"-l{n}" for n in needs]
    if soname:
        args.append(f"-Wl,-soname,{soname}")
    if rpath is not None:
        args += ["-Wl,--disable-new-dtags", f"-Wl,-rpath,{rpath}"]
    if runpath is not None:
        args += ["-Wl,--enable-new-dtags", f"-Wl,-rpath,{runpath}"]
    subprocess.run(args, check=True, capture_output=True)
    return out


def dep(folder: Path, name: str) -> Path:
    """libNAME.so defining NAME_value (what gcc_lib(needs=(NAME,)) links against)."""
    return gcc_lib(folder / f"lib{name}.so", symbol=f"{name}_value", soname=f"lib{name}.so")


def ldd(path: Path, env: dict[str, str] | None = None) -> dict[str, str | None]:
    """name -> resolved path (None: not found), as ldd prints it (direct and indirect needs)."""
    proc = subprocess.run(["ldd", str(path)], capture_output=True, text=True, env=env)
    out: dict[str, str | None] = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*(\S+) => (not found|(\S+) \(0x[0-9a-f]+\))", line)
        if m:
            out[m.group(1)] = m.group(3)
    return out


@pytest.fixture(scope="module")
def host_facts() -> LoaderFacts:
    """The loader facts of this machine, from the doctor's own probe, without the interpreter's mapped libraries
    (ldd loads the library as the main program: nothing is loaded before it)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    res = run_probe(sys.executable, probe_script("loader"), timeout=60, env=env, name="loader")
    facts = loader_facts(res.data)
    return LoaderFacts(ld_library_path=(), cache=facts.cache, default_dirs=facts.default_dirs, loaded={},
                       executable=None, lib=facts.lib, platform=facts.platform)


def same(a: str | None, b: str | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and os.path.realpath(a) == os.path.realpath(b))


def assert_agrees_with_ldd(path: Path, facts: LoaderFacts, env=None, inherited=()) -> None:
    seen = ldd(path, env)
    mine = {f.name: f.path for f in find_needed(read_elf(path), facts, inherited)}
    assert mine, f"{path} needs nothing?"
    for name, where in mine.items():
        assert name in seen, f"ldd does not list {name} for {path}: {seen}"
        assert same(where, seen[name]), f"{path}: {name} -> {where}, ldd says {seen[name]}"


def test_needs_runpath_and_soname_are_read(tmp_path):
    dep(tmp_path / "lib", "dep")
    lib = gcc_lib(tmp_path / "libuser.so", needs=("dep",), libdirs=(tmp_path / "lib",), runpath="$ORIGIN/lib",
                  soname="libuser.so.1")
    info = read_elf(lib)
    assert "libdep.so" in info.needed
    assert info.runpath == ("$ORIGIN/lib",) and info.rpath == ()
    assert info.soname == "libuser.so.1"
    assert info.elf_class == 64 or sys.maxsize < 2 ** 32


def test_origin_expansion():
    assert expand_dst("$ORIGIN/../lib", "/x/pkg") == "/x/pkg/../lib"
    assert expand_dst("${ORIGIN}/a:$LIB", "/o", lib="lib64") == "/o/a:lib64"


@pytest.mark.parametrize("flavour", ["runpath", "rpath"])
def test_origin_relative_search_path_agrees_with_ldd(tmp_path, host_facts, flavour):
    dep(tmp_path / "pkg" / "libs", "dep")
    lib = gcc_lib(tmp_path / "pkg" / "_ext.so", needs=("dep",), libdirs=(tmp_path / "pkg" / "libs",),
                  **{flavour: "$ORIGIN/libs"})
    found = {f.name: f for f in find_needed(read_elf(lib), host_facts)}
    assert found["libdep.so"].path == str(tmp_path / "pkg" / "libs" / "libdep.so")
    assert found["libdep.so"].via == flavour
    assert_agrees_with_ldd(lib, host_facts)


def test_missing_library_agrees_with_ldd_and_says_where_it_looked(tmp_path, host_facts):
    gone = dep(tmp_path / "build", "gone")
    lib = gcc_lib(tmp_path / "pkg" / "_ext.so", needs=("gone",), libdirs=(tmp_path / "build",), runpath="$ORIGIN")
    gone.unlink()
    miss = [f for f in find_needed(read_elf(lib), host_facts) if f.path is None]
    assert [f.name for f in miss] == ["libgone.so"]
    assert str(tmp_path / "pkg") in miss[0].searched and "ldconfig cache" in miss[0].searched
    assert_agrees_with_ldd(lib, host_facts)


def test_order_rpath_then_ld_library_path_then_runpath(tmp_path, host_facts):
    a, b = tmp_path / "a", tmp_path / "b"
    dep(a, "dep"), dep(b, "dep")
    with_rpath = gcc_lib(tmp_path / "r" / "librp.so", needs=("dep",), libdirs=(a,), rpath=str(a))
    with_runpath = gcc_lib(tmp_path / "u" / "librun.so", needs=("dep",), libdirs=(a,), runpath=str(a))
    env = {**os.environ, "LD_LIBRARY_PATH": str(b)}
    facts = LoaderFacts(**{**host_facts.__dict__, "ld_library_path": (str(b),)})
    assert {f.name: f.path for f in find_needed(read_elf(with_rpath), facts)}["libdep.so"] == str(a / "libdep.so")
    assert {f.name: f.path for f in find_needed(read_elf(with_runpath), facts)}["libdep.so"] == str(b / "libdep.so")
    assert_agrees_with_ldd(with_rpath, facts, env)
    assert_agrees_with_ldd(with_runpath, facts, env)


@pytest.mark.parametrize("flavour, leaf_found", [("rpath", True), ("runpath", False)])
def test_runpath_serves_direct_needs_only_rpath_is_inherited(tmp_path, host_facts, flavour, leaf_found):
    deps = tmp_path / "deps"
    dep(deps, "leaf")
    mid = gcc_lib(deps / "libmid.so", needs=("leaf",), libdirs=(deps,), soname="libmid.so", symbol="mid_value")
    top = gcc_lib(tmp_path / "libtop.so", needs=("mid",), libdirs=(deps,), **{flavour: "$ORIGIN/deps"})
    assert ldd(top)["libleaf.so"] is not None if leaf_found else ldd(top)["libleaf.so"] is None
    leaf = {f.name: f.path for f in find_needed(read_elf(mid), host_facts, inherited=[read_elf(top)])}["libleaf.so"]
    assert (leaf is not None) is leaf_found
    assert same(leaf, ldd(top)["libleaf.so"])


def test_real_extension_modules_agree_with_ldd(host_facts):
    dynload = Path(sysconfig.get_config_var("DESTSHARED") or sysconfig.get_paths()["platstdlib"])
    mods = sorted(dynload.glob("*.so"))
    if not mods:
        pytest.skip(f"no extension modules in {dynload}")
    with_system_needs = [m for m in mods if any(not n.startswith(("libc.so", "libm.so", "libpthread"))
                                                for n in read_elf(m).needed)]
    for mod in mods:
        if read_elf(mod).needed:
            assert_agrees_with_ldd(mod, host_facts)
    assert with_system_needs, "expected _ssl/_ctypes-like modules that need system libraries"


def test_a_library_already_loaded_counts_before_any_search(tmp_path, host_facts):
    gone = dep(tmp_path / "build", "gone")
    lib = gcc_lib(tmp_path / "_ext.so", needs=("gone",), libdirs=(tmp_path / "build",))
    facts = LoaderFacts(**{**host_facts.__dict__, "loaded": {"libgone.so": str(gone)}})
    found = {f.name: f for f in find_needed(read_elf(lib), facts)}["libgone.so"]
    assert (found.path, found.via) == (str(gone), "loaded")


def test_a_candidate_for_another_machine_is_skipped_as_the_loader_skips_it(tmp_path, host_facts):
    foreign = dep(tmp_path / "other", "dep")
    data = bytearray(foreign.read_bytes())
    data[18:20] = (183 if data[18:20] != (183).to_bytes(2, "little") else 62).to_bytes(2, "little")  # e_machine
    foreign.write_bytes(bytes(data))
    assert read_elf(foreign).machine != read_elf(dep(tmp_path / "b", "dep")).machine
    lib = gcc_lib(tmp_path / "_ext.so", needs=("dep",), libdirs=(tmp_path / "b",),
                  runpath=f"{tmp_path / 'other'}:{tmp_path / 'b'}")
    assert {f.name: f.path for f in find_needed(read_elf(lib), host_facts)}["libdep.so"] == str(tmp_path / "b" / "libdep.so")
    assert_agrees_with_ldd(lib, host_facts)


@pytest.mark.parametrize("content, reason", [(b"", "empty file"), (b"\x7fELF\x02\x01\x01" + b"\0" * 20, "not a loadable"),
                                             (b"/* GNU ld script */", "not a loadable")])
def test_what_the_loader_cannot_map_is_bad_elf(tmp_path, content, reason):
    (tmp_path / "x.so").write_bytes(content)
    with pytest.raises(BadElf) as info:
        read_elf(tmp_path / "x.so")
    assert reason in info.value.reason and info.value.code == "bad-elf"


def test_a_need_named_by_absolute_path_is_that_file(tmp_path, host_facts):
    absolute = tmp_path / "abs" / "libdep.so"
    gcc_lib(absolute, symbol="dep_value", soname=str(absolute))  # DT_NEEDED takes the soname: a path
    lib = gcc_lib(tmp_path / "_ext.so", needs=("dep",), libdirs=(tmp_path / "abs",))
    assert read_elf(lib).needed == (str(absolute),)
    found = find_needed(read_elf(lib), host_facts)[0]
    assert (found.path, found.via) == (str(absolute), "path")
    assert f"\t{absolute} (0x" in subprocess.run(["ldd", str(lib)], capture_output=True, text=True).stdout
    absolute.unlink()
    assert find_needed(read_elf(lib), host_facts)[0].path is None


def load_error(lib: Path, *preloaded: Path) -> str:
    """What the real loader says of ``lib`` (ctypes in a fresh interpreter, after loading ``preloaded`` globally):
    "" when it loads, else the last line of its error."""
    code = "import ctypes, sys\nfor p in sys.argv[2:]: ctypes.CDLL(p, ctypes.RTLD_GLOBAL)\nctypes.CDLL(sys.argv[1])"
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    proc = subprocess.run([sys.executable, "-c", code, str(lib), *map(str, preloaded)], capture_output=True,
                          text=True, env=env)
    return "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]


def _unusable(kind: str, path: Path, real: Path) -> None:
    """At ``path``, a file of the library's name that glibc's open_verify refuses (``real``: the library to copy)."""
    if kind == "folder":
        path.mkdir()
        return
    if kind == "relocatable":  # gcc -c output named like the library
        subprocess.run(["gcc", "-c", "-fPIC", f"{real}.c", "-o", str(path)], check=True, capture_output=True)
        return
    if kind in ("executable", "pie"):  # a program named like the library
        main = path.parent / "main.c"
        main.write_text("int main(void) { return 0; }\n")
        flags = ["-no-pie"] if kind == "executable" else ["-fPIE", "-pie"]
        subprocess.run(["gcc", *flags, str(main), "-o", str(path)], check=True, capture_output=True)
        return
    data = bytearray(real.read_bytes())
    if kind == "other byte order":
        data[5] = 2 if sys.byteorder == "little" else 1  # EI_DATA
    content = {"empty": b"", "short text": b"INPUT(-ldep)\n", "cut": bytes(data[:80]),
               "linker script": b"/* GNU ld script */\nINPUT(AS_NEEDED(/usr/lib/x86_64-linux-gnu/libdep.so.1))\n",
               "other byte order": bytes(data)}
    path.write_bytes(content[kind])


@pytest.mark.parametrize("kind, glibc_says, ours", [
    ("empty", "file too short", "file too short"),
    ("short text", "file too short", "file too short"),
    ("linker script", "invalid ELF header", "invalid ELF header"),
    ("folder", "cannot read file data: Is a directory", "cannot read file data: Is a directory"),
    ("other byte order", f"ELF file data encoding not {sys.byteorder}-endian",
     f"ELF file data encoding not {sys.byteorder}-endian"),
    ("cut", "cannot read file data", "not a loadable ELF file (80 bytes)"),
    ("relocatable", "only ET_DYN and ET_EXEC can be loaded", "only ET_DYN and ET_EXEC can be loaded"),
    ("executable", "cannot dynamically load executable", "cannot dynamically load executable"),
    ("pie", "cannot dynamically load position-independent executable",
     "cannot dynamically load position-independent executable"),
])
def test_a_file_the_loader_cannot_map_ends_the_search_and_the_load(tmp_path, host_facts, kind, glibc_says, ours):
    """glibc's open_verify passes over a file of another ELF class or machine only: an empty, cut or non-ELF file
    of the needed name, ahead of the real library, fails the whole load there ("file too short"), and the miss
    names that file and why."""
    real = dep(tmp_path / "b", "dep")
    (tmp_path / "a").mkdir()
    bad = tmp_path / "a" / "libdep.so"
    _unusable(kind, bad, real)
    lib = gcc_lib(tmp_path / "_ext.so", needs=("dep",), libdirs=(tmp_path / "b",),
                  runpath=f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    found = {f.name: f for f in find_needed(read_elf(lib), host_facts)}["libdep.so"]
    assert (found.path, found.via) == (None, "runpath")
    assert found.error.startswith(f"{bad}: {ours}") and found.error.endswith("(the loader stops there)")
    assert str(bad) in found.searched
    said = load_error(lib)
    assert said.endswith((f"{bad}: {glibc_says}", f"{bad.name}: {glibc_says}")), said  # (a program: by its name)


@pytest.mark.parametrize("kind", ["class", "machine"])
def test_a_file_of_another_class_or_machine_is_passed_over_as_the_loader_passes_it(tmp_path, host_facts, kind):
    real = dep(tmp_path / "b", "dep")
    data = bytearray(real.read_bytes())
    if kind == "class":
        data[4] = 1 if data[4] == 2 else 2  # EI_CLASS: checked before anything but the magic, a silent skip
    else:
        data[18:20] = (183 if data[18:20] != (183).to_bytes(2, "little") else 62).to_bytes(2, "little")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "libdep.so").write_bytes(bytes(data))
    lib = gcc_lib(tmp_path / "_ext.so", needs=("dep",), libdirs=(tmp_path / "b",),
                  runpath=f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    found = {f.name: f for f in find_needed(read_elf(lib), host_facts)}["libdep.so"]
    assert (found.path, found.error) == (str(real), "")
    assert load_error(lib) == ""


def test_the_ldconfig_cache_entry_is_judged_as_a_folders_file_is(tmp_path, host_facts):
    """The cache names a file of another class (passed over), then an empty one: the search ends there, before the
    default folders that have the real library."""
    real = dep(tmp_path / "b", "dep")
    other = tmp_path / "c" / "libdep.so"
    other.parent.mkdir()
    data = bytearray(real.read_bytes())
    data[4] = 1 if data[4] == 2 else 2
    other.write_bytes(bytes(data))
    empty = tmp_path / "d" / "libdep.so"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    lib = gcc_lib(tmp_path / "_ext.so", needs=("dep",), libdirs=(tmp_path / "b",))
    facts = LoaderFacts(**{**host_facts.__dict__, "cache": {"libdep.so": (str(other), str(empty))},
                           "default_dirs": (str(tmp_path / "b"),)})
    found = find_needed(read_elf(lib), facts)[0]
    assert (found.path, found.via) == (None, "cache")
    assert found.error == f"{empty}: file too short (the loader stops there)"
    found = find_needed(read_elf(lib), LoaderFacts(**{**facts.__dict__, "cache": {"libdep.so": (str(other),)}}))[0]
    assert (found.path, found.via) == (str(real), "default")


_DEP_2 = "DEP_1 { global: dep; local: *; };\nDEP_2 { global: dep2; } DEP_1;\n"
_DEP_1 = "DEP_1 { global: dep; local: *; };\n"


def versioned_dep(folder: Path, script: str | None) -> Path:
    """libdep.so defining dep and dep2 under the version script ``script``; None: no version definitions (its
    getpid call still gives it a DT_VERSYM table, as any library that calls into libc has)."""
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "dep.c"
    src.write_text("#include <unistd.h>\nint dep(void) { return 7; }\nint dep2(void) { return (int)getpid(); }\n")
    args = ["gcc", "-shared", "-fPIC", str(src), "-o", str(folder / "libdep.so"), "-Wl,-soname,libdep.so"]
    if script is not None:
        (folder / "dep.map").write_text(script)
        args.append(f"-Wl,--version-script={folder / 'dep.map'}")
    subprocess.run(args, check=True, capture_output=True)
    return folder / "libdep.so"


def needs_dep_2(tmp_path: Path, runpath: str, weak: bool = False) -> Path:
    """An object built against the libdep that defines DEP_2, calling dep2 (so it requires DEP_2 of libdep.so);
    ``weak``: a weak reference to dep2, and VER_FLG_WEAK on the versions it requires (as a weak reference makes
    sense: without dep2 it still loads)."""
    new = versioned_dep(tmp_path / "new", _DEP_2)
    src = tmp_path / "user.c"
    src.write_text("extern int dep(void);\nextern int dep2(void) __attribute__((weak));\n"
                   "int f(void) { return dep() + (dep2 ? dep2() : 0); }\n"
                   if weak else "extern int dep2(void);\nint f(void) { return dep2(); }\n")
    out = tmp_path / "_user.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(out), f"-L{new.parent}", "-ldep",
                    "-Wl,--enable-new-dtags", f"-Wl,-rpath,{runpath}"], check=True, capture_output=True)
    if weak:
        _weaken(out, "DEP_2")
    return out


def _weaken(lib: Path, version: str) -> None:
    """Set VER_FLG_WEAK on ``version`` among those ``lib`` requires (GNU ld sets it on no version a gcc-built object
    requires): its Vernaux entry is where `readelf -V` says, in the section where it says."""
    out = subprocess.run(["readelf", "-VW", str(lib)], capture_output=True, text=True, check=True).stdout
    section = int(re.search(r"'\.gnu\.version_r'.*?Offset: (0x[0-9a-f]+)", out, re.S).group(1), 16)
    entry = section + int(re.search(rf"(0x[0-9a-f]+):\s+Name: {re.escape(version)}\s+Flags", out).group(1), 16)
    data = bytearray(lib.read_bytes())
    struct.pack_into("<H", data, entry + 4, struct.unpack_from("<H", data, entry + 4)[0] | 2)  # vna_flags
    lib.write_bytes(bytes(data))


@pytest.mark.parametrize("first, weak, lacking", [("defines DEP_1 only", False, "DEP_2"),
                                                  ("defines DEP_1 only", True, ""),
                                                  ("unversioned", False, ""), ("defines DEP_2", False, "")])
def test_the_library_the_search_ends_at_must_define_the_versions_required_of_it(tmp_path, host_facts, first, weak,
                                                                                 lacking):
    """glibc checks the versions an object requires (``.gnu.version_r``) against the library it loaded for that
    name and fails the load on a missing one (``version `DEP_2' not found``) without searching on, though the next
    folder has a libdep that defines it; a weak reference may be missing, and a library with no version
    definitions at all is not checked (glibc only warns)."""
    script = {"defines DEP_1 only": _DEP_1, "unversioned": None, "defines DEP_2": _DEP_2}[first]
    there = versioned_dep(tmp_path / "first", script)
    lib = needs_dep_2(tmp_path, runpath=f"{tmp_path / 'first'}:{tmp_path / 'new'}", weak=weak)
    assert dict(read_elf(lib).version_needs)["libdep.so"] == (("DEP_1",) if weak else ("DEP_2",))
    found = {f.name: f for f in find_needed(read_elf(lib), host_facts)}["libdep.so"]
    said = load_error(lib)
    if lacking:
        assert (found.path, found.via, found.error) == (None, "runpath", f"{there} lacks version {lacking}")
        assert f"{there}: version `{lacking}' not found (required by {lib})" in said, said
    else:
        assert (found.path, found.error) == (str(there), "")
        assert said == ""


def test_a_library_already_loaded_must_define_the_versions_required_of_it_too(tmp_path, host_facts):
    old = versioned_dep(tmp_path / "old", _DEP_1)
    lib = needs_dep_2(tmp_path, runpath=str(tmp_path / "new"))
    facts = LoaderFacts(**{**host_facts.__dict__, "loaded": {"libdep.so": str(old)}})
    found = find_needed(read_elf(lib), facts)[0]
    assert (found.path, found.via, found.error) == (None, "loaded", f"{old} lacks version DEP_2")
    assert f"{old}: version `DEP_2' not found" in load_error(lib, old)
    assert load_error(lib) == "" and find_needed(read_elf(lib), host_facts)[0].error == ""


def test_a_glibc_version_the_system_libc_lacks_is_a_miss(tmp_path, host_facts):
    """The everyday case: an object built against a newer glibc (here GLIBC_2.2.5 renamed GLIBC_9.9.9) finds
    the system's libc.so.6, which lacks that version; the same object as built finds everything."""
    src = tmp_path / "pid.c"
    src.write_text("#include <unistd.h>\nint f(void) { return (int)getpid(); }\n")
    built = tmp_path / "_built.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(built)], check=True, capture_output=True)
    assert all(f.path and not f.error for f in find_needed(read_elf(built), host_facts))
    newer = tmp_path / "_newer.so"
    newer.write_bytes(built.read_bytes().replace(b"GLIBC_2.2.5\0", b"GLIBC_9.9.9\0"))
    libc = {f.name: f for f in find_needed(read_elf(newer), host_facts)}["libc.so.6"]
    assert libc.path is None and re.fullmatch(r"/\S+/libc\.so\.6 lacks version GLIBC_9\.9\.9", libc.error)
    assert "version `GLIBC_9.9.9' not found" in load_error(newer)


def _elf_objects(paths):
    """(path, read_elf of it) of each of ``paths`` wh reads as ELF (a linker script named like a library is not)."""
    for path in paths:
        try:
            yield path, read_elf(path)
        except BadElf:
            continue


def test_version_tables_agree_with_readelf_and_a_normal_system_lacks_none(host_facts) -> None:
    """Every 4th shared object of the system's library folder and the interpreter's lib-dynload: the versions each
    requires (weak ones aside) and defines as `readelf -V` prints them, and none of their needs lacks a version."""
    if shutil.which("readelf") is None:
        pytest.skip("needs readelf (binutils)")
    libdir = Path("/usr/lib") / (sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu")
    dynload = Path(os.__file__).parent / "lib-dynload"
    files = [*sorted({os.path.realpath(p) for p in libdir.glob("*.so*") if p.is_file()})[::4],
             *sorted(str(p) for p in dynload.glob("*.so"))]
    compared = 0
    for path, info in _elf_objects(files):
        out = subprocess.run(["readelf", "-VW", path], capture_output=True, text=True).stdout
        defs = re.findall(r"Rev: \d+\s+Flags: .*?Index: \d+\s+Cnt: \d+\s+Name: (\S+)",
                          out.split("Version definition section")[1].split("Version needs section")[0]) \
            if "Version definition section" in out else None
        needs: list[tuple[str, list[str]]] = []
        for line in out.split("Version needs section")[1].splitlines() if "Version needs section" in out else ():
            if m := re.search(r"File: (\S+)\s+Cnt", line):
                needs.append((m.group(1), []))
            elif (m := re.search(r"Name: (\S+)\s+Flags: (\S+)", line)) and "WEAK" not in m.group(2):
                needs[-1][1].append(m.group(1))
        assert info.version_defs == (tuple(defs) if defs is not None else None), path
        assert info.version_needs == tuple((f, tuple(v)) for f, v in needs), path
        assert not [f.error for f in find_needed(info, host_facts) if f.error], path
        compared += 1
    assert compared >= 20


_INITS = r"""
int PyInit__m(void) { return 0; }
int PyInitU_caf_dma(void) { return 0; }  /* PEP 489: a module named 'café' (punycode 'caf-dma') */
__attribute__((visibility("hidden"))) int PyInit__hidden(void) { return 0; }
extern int PyInit__elsewhere(void);  /* referenced, not defined here */
int use(void) { return PyInit__elsewhere(); }
int tail_PyInit__tail(void) { return 0; }  /* '.dynstr' may hold PyInit__tail only as this name's tail */
"""


@pytest.mark.parametrize("hash_style", ["gnu", "sysv", "both"])
def test_exports_pyinit_finds_only_a_defined_visible_init_function(tmp_path, hash_style):
    src = tmp_path / "m.c"
    src.write_text(_INITS)
    so = tmp_path / "m.so"
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,--hash-style={hash_style}", str(src), "-o", str(so)],
                   check=True, capture_output=True)
    assert exports_pyinit(so, "_m") and exports_pyinit(so, "café")
    assert not exports_pyinit(so, "_hidden") and not exports_pyinit(so, "_elsewhere")
    assert not exports_pyinit(so, "_tail") and not exports_pyinit(so, "m")
    lib = gcc_lib(tmp_path / "libplain.so")  # a plain library: loaded by path, never by a module name
    assert not exports_pyinit(lib, "libplain")
    (tmp_path / "empty.so").write_bytes(b"")
    with pytest.raises(BadElf):
        exports_pyinit(tmp_path / "empty.so", "empty")



@pytest.mark.parametrize("style", ["gnu", "sysv"])
def test_exports_pyinit_walks_long_hash_chains_and_needs_no_section_headers(tmp_path: Path, style: str) -> None:
    """Among 600 exported names (hash chains longer than one), a weak definition counts and every absent name
    is absent; with the section headers gone (an sstripped file), the lookup and the needs still come from
    PT_DYNAMIC, as the loader reads them."""
    src = tmp_path / "m.c"
    src.write_text("__attribute__((weak)) int PyInit_weak(void) { return 2; }\n"
                   + "".join(f"int PyInit_f{i}(void) {{ return {i}; }}\n" for i in range(600)))
    lib = tmp_path / f"m-{style}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(lib), f"-Wl,--hash-style={style}",
                    "-Wl,--no-as-needed", "-lm"], check=True, capture_output=True)
    assert exports_pyinit(lib, "weak") and all(exports_pyinit(lib, f"f{i}") for i in range(600))
    assert not any(exports_pyinit(lib, f"g{i}") for i in range(600))
    stripped = tmp_path / f"stripped-{style}.so"
    data = bytearray(lib.read_bytes())
    data[0x28:0x30] = bytes(8)  # e_shoff
    data[0x3C:0x40] = bytes(4)  # e_shnum, e_shstrndx
    stripped.write_bytes(bytes(data))
    assert read_elf(stripped).needed == read_elf(lib).needed and "libm.so.6" in read_elf(lib).needed
    assert read_elf(stripped).fatbin_sections == ()
    assert exports_pyinit(stripped, "f599") and not exports_pyinit(stripped, "g1")


def test_a_file_cut_inside_its_headers_is_a_bad_elf(tmp_path: Path) -> None:
    """Cut inside its program headers: BadElf naming its size, for the link check and the extension check alike."""
    cut = tmp_path / "libcut.so"
    cut.write_bytes(gcc_lib(tmp_path / "libfull.so").read_bytes()[:80])
    with pytest.raises(BadElf, match=r"not a loadable ELF file \(80 bytes\)"):
        read_elf(cut)
    with pytest.raises(BadElf, match=r"not a loadable ELF file \(80 bytes\)"):
        exports_pyinit(cut, "libcut")



def _endless_chain_elf(path: Path, size: int) -> None:
    """A 64-bit little-endian ELF file of ``size`` bytes (sparse) whose one GNU hash bucket starts a chain that
    never ends (every value 0: no end bit, no match) and runs to the end of the file."""
    dyn_at, hash_at = 64 + 2 * 56, 64 + 2 * 56 + 5 * 16
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 0, 0, 64, 56, 2,
                                                               64, 0, 0)
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, size, size, 0x1000)
    dynamic = struct.pack("<IIQQQQQQ", 2, 6, dyn_at, dyn_at, dyn_at, 5 * 16, 5 * 16, 8)
    entries = struct.pack("<qQqQqQqQqQ", 0x6FFFFEF5, hash_at, 6, hash_at + 64, 5, hash_at + 128, 10, 64, 0, 0)
    table = struct.pack("<IIII", 1, 1, 1, 0) + b"\xff" * 8 + struct.pack("<I", 1)  # bucket 0 -> symbol 1
    path.write_bytes(header + load + dynamic + entries + table)
    os.truncate(path, size)


def test_a_crafted_hash_chain_costs_a_bounded_walk(tmp_path: Path) -> None:
    """A GNU hash chain that never ends, in a 1 GiB (sparse) file: refused after a bounded walk (as a file the
    loader cannot use), in well under a second's worth of reads, never 268 million of them."""
    path = tmp_path / "libendless.so"
    _endless_chain_elf(path, 1 << 30)
    t0 = time.monotonic()
    with pytest.raises(BadElf, match="without an end"):
        exports_pyinit(path, "endless")
    assert time.monotonic() - t0 < 5


def test_read_elf_and_exports_pyinit_agree_with_readelf_and_nm_on_this_system() -> None:
    """Every 8th shared object of the system's library folder and every extension module of the interpreter's
    lib-dynload: the needs, soname, RPATH and RUNPATH as `readelf -d` prints them, and `PyInit_<stem>` exported
    exactly where `nm -D --defined-only` lists it."""
    if shutil.which("readelf") is None or shutil.which("nm") is None:
        pytest.skip("needs readelf and nm (binutils)")
    libdirs = [Path("/usr/lib") / (sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"),
               Path(sysconfig.get_config_var("LIBDIR") or "/usr/lib")]
    dynload = Path(os.__file__).parent / "lib-dynload"  # the base interpreter's, also from a venv
    system = sorted({os.path.realpath(p) for d in libdirs for p in d.glob("**/*.so*") if p.is_file()})[::8]
    files = [*system[:150], *sorted(str(p) for p in dynload.glob("*.so"))]
    compared = 0
    for path, info in _elf_objects(files):
        out = subprocess.run(["readelf", "-dW", path], capture_output=True, text=True).stdout
        rpath = [e for v in re.findall(r"\(RPATH\)\s+Library rpath: \[(.*)\]", out) for e in v.split(":") if e]
        runpath = [e for v in re.findall(r"\(RUNPATH\)\s+Library runpath: \[(.*)\]", out) for e in v.split(":") if e]
        soname = re.findall(r"\(SONAME\)\s+Library soname: \[(.*)\]", out)
        assert (info.needed, info.soname, info.rpath, info.runpath) == (
            tuple(re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", out)), soname[0] if soname else None,
            tuple(rpath), tuple(runpath)), path
        stem = os.path.basename(path).split(".", 1)[0]
        symbols = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True).stdout
        listed = re.search(rf" [TtWwi] PyInit_{re.escape(stem)}$", symbols, re.M)
        assert exports_pyinit(path, stem) == bool(listed), path
        compared += 1
    assert compared >= 20, f"only {compared} shared objects found under {libdirs} and {dynload}"


def _tiny_elf(bits: int, end: str, machine: int, needed: str, symbol: str, *, style: str = "gnu", info: int = 0x12,
              value: int = 0x100, bloom_words: int = 1, decoy: bool = False) -> bytes:
    """A minimal shared object of either ELF class and byte order: one PT_LOAD mapping the whole file at address
    0, a PT_DYNAMIC naming ``needed`` and a GNU hash table (one bucket, ``bloom_words`` bloom words, the bit set in
    the one glibc reads) or with ``style="sysv"`` a DT_HASH table (8-byte words on 64-bit S/390, as there) over
    ``.dynsym``'s one defined symbol ``symbol`` (st_info ``info``: a global function; st_value ``value``); no
    section headers (as sstrip leaves a file). ``decoy``: a first PT_DYNAMIC before the real one, naming an empty
    dynamic table (ld.so keeps the last)."""
    word = "Q" if bits == 64 else "I"
    ehsize, phsize, dynsize = (64, 56, 16) if bits == 64 else (52, 32, 8)
    symsize = 24 if bits == 64 else 16
    strtab = b"\0" + needed.encode() + b"\0" + symbol.encode() + b"\0"
    nph = 3 if decoy else 2
    dyn_at = ehsize + nph * phsize
    hash_at = dyn_at + 6 * dynsize
    h = 5381
    for c in symbol.encode():
        h = (h * 33 + c) & 0xFFFFFFFF
    bloom = (1 << (h % bits)) | (1 << ((h >> 5) % bits))
    words = [bloom if i == (h // bits) & (bloom_words - 1) else 0 for i in range(bloom_words)]
    table = struct.pack(f"{end}IIII", 1, 1, bloom_words, 5) + b"".join(struct.pack(f"{end}{word}", w) for w in words) \
        + struct.pack(f"{end}I", 1) + struct.pack(f"{end}I", h | 1)  # bucket 0 -> symbol 1, the chain's end
    if style == "sysv":  # nbucket 1, nchain 2, bucket 0 -> symbol 1, chain[1] = 0: the end
        table = struct.pack(end + ("Q" if bits == 64 and machine == 22 else "I") * 5, 1, 2, 1, 0, 0)
    sym_at = hash_at + len(table)
    str_at = sym_at + 2 * symsize
    if bits == 64:
        syms = bytes(symsize) + struct.pack(f"{end}IBBHQQ", 1 + len(needed) + 1, info, 0, 7, value, 8)
    else:
        syms = bytes(symsize) + struct.pack(f"{end}IIIBBH", 1 + len(needed) + 1, value, 8, info, 0, 7)
    decoy_at = str_at + len(strtab)  # an empty dynamic table (DT_NULL alone)
    size = decoy_at + (2 * dynsize if decoy else 0)
    tags = [(0x6FFFFEF5 if style == "gnu" else 4, hash_at), (6, sym_at), (5, str_at), (10, len(strtab)), (1, 1), (0, 0)]
    dynamic = b"".join(struct.pack(f"{end}q{word}" if bits == 64 else f"{end}iI", t, v) for t, v in tags)
    if bits == 64:
        header = struct.pack(f"{end}HHIQQQIHHHHHH", 3, machine, 1, 0, ehsize, 0, 0, ehsize, phsize, nph, 64, 0, 0)
        phdrs = struct.pack(f"{end}IIQQQQQQ", 1, 5, 0, 0, 0, size, size, 0x1000) \
            + (struct.pack(f"{end}IIQQQQQQ", 2, 6, decoy_at, decoy_at, decoy_at, 32, 32, 8) if decoy else b"") \
            + struct.pack(f"{end}IIQQQQQQ", 2, 6, dyn_at, dyn_at, dyn_at, len(dynamic), len(dynamic), 8)
    else:
        header = struct.pack(f"{end}HHIIIIIHHHHHH", 3, machine, 1, 0, ehsize, 0, 0, ehsize, phsize, nph, 40, 0, 0)
        phdrs = struct.pack(f"{end}IIIIIIII", 1, 0, 0, 0, size, size, 5, 0x1000) \
            + (struct.pack(f"{end}IIIIIIII", 2, decoy_at, decoy_at, decoy_at, 16, 16, 6, 4) if decoy else b"") \
            + struct.pack(f"{end}IIIIIIII", 2, dyn_at, dyn_at, dyn_at, len(dynamic), len(dynamic), 6, 4)
    ident = b"\x7fELF" + bytes([2 if bits == 64 else 1, 1 if end == "<" else 2, 1]) + bytes(9)
    return ident + header + phdrs + dynamic + table + syms + strtab + (bytes(2 * dynsize) if decoy else b"")


@pytest.mark.parametrize("bits, end, machine, name", [(64, ">", 22, "EM_S390"), (32, "<", 40, "EM_ARM"),
                                                      (32, ">", 20, "EM_PPC"), (64, "<", 183, "EM_AARCH64")])
def test_either_class_and_byte_order_is_read(tmp_path: Path, bits: int, end: str, machine: int, name: str) -> None:
    """A shared object of another machine (s390x is 64-bit big-endian, 32-bit ARM little, PowerPC big): its class,
    machine and needs are read, and its init function found through its GNU hash table, as its own loader would."""
    path = tmp_path / "_mod.so"
    path.write_bytes(_tiny_elf(bits, end, machine, "libc.so.6", "PyInit__mod"))
    info = read_elf(path)
    assert (info.elf_class, info.machine, info.needed, info.fatbin_sections) == (bits, name, ("libc.so.6",), ())
    assert exports_pyinit(path, "_mod") and not exports_pyinit(path, "_other")


@pytest.mark.parametrize("bits, end, machine", [(64, ">", 22), (32, ">", 22), (64, "<", 62), (32, "<", 40)])
def test_a_sysv_hash_table_is_read_with_the_word_size_of_its_machine(tmp_path: Path, bits: int, end: str,
                                                                     machine: int) -> None:
    """DT_HASH words are 4 bytes, except on 64-bit S/390 (and Alpha, IA-64), where glibc's Elf_Symndx and
    binutils' hash entries are 8 bytes: read as 4-byte words, an s390x module's nbucket is the zero high half of
    its 8-byte one, and its init function would not be found."""
    path = tmp_path / "_mod.so"
    path.write_bytes(_tiny_elf(bits, end, machine, "libc.so.6", "PyInit__mod", style="sysv"))
    assert exports_pyinit(path, "_mod") and not exports_pyinit(path, "_other")


@pytest.mark.parametrize("info, value, found", [
    (0x12, 0x100, True),  # GLOBAL FUNC
    (0x1A, 0x100, True),  # GLOBAL GNU_IFUNC: dlsym runs its resolver
    (0xA1, 0x100, True),  # GNU_UNIQUE OBJECT: dlsym returns it (do_lookup_unique)
    (0x13, 0x100, False),  # GLOBAL SECTION: no code or data definition, check_match skips it
    (0x14, 0x100, False),  # GLOBAL FILE: likewise
    (0x12, 0, False),  # no value (and not SHN_ABS, not TLS): check_match skips it
])
def test_the_init_function_is_what_glibcs_check_match_would_return(tmp_path: Path, info: int, value: int,
                                                                  found: bool) -> None:
    path = tmp_path / "_mod.so"
    for style in ("gnu", "sysv"):
        path.write_bytes(_tiny_elf(64, "<", 62, "libc.so.6", "PyInit__mod", style=style, info=info, value=value))
        assert exports_pyinit(path, "_mod") is found, style


def test_the_bloom_word_is_picked_as_glibc_picks_it(tmp_path: Path) -> None:
    """glibc indexes the bloom filter with ``(hash / ELFCLASS) & (nwords - 1)``: with a word count no linker
    writes (3), that is not ``% nwords``, and the loader finds the symbol only through the word it reads."""
    h = 5381
    for c in b"PyInit__mod":
        h = (h * 33 + c) & 0xFFFFFFFF
    assert (h // 64) & 2 != (h // 64) % 3  # the two picks differ for this name
    path = tmp_path / "_mod.so"
    path.write_bytes(_tiny_elf(64, "<", 62, "libc.so.6", "PyInit__mod", bloom_words=3))
    assert exports_pyinit(path, "_mod")


_VERSIONED = r"""
int impl_hidden(void) { return 1; }
int impl_default(void) { return 2; }
int impl_old(void) { return 3; }
int impl_new(void) { return 4; }
__asm__(".symver impl_hidden, PyInit__hidden@V1");
__asm__(".symver impl_default, PyInit__default@@V1");
__asm__(".symver impl_old, PyInit__both@V1");
__asm__(".symver impl_new, PyInit__both@@V2");
"""


@pytest.mark.parametrize("hash_style", ["gnu", "sysv"])
def test_a_symbol_of_a_hidden_version_only_is_not_what_dlsym_returns(tmp_path: Path, hash_style: str) -> None:
    """dlsym (no version asked) skips a definition of a hidden version (``name@V1``, no ``@@``): a module whose
    init function has only such a definition fails to import ("does not define module export function"). ctypes,
    which looks names up with dlsym, is the judge."""
    src, script, so = tmp_path / "v.c", tmp_path / "v.map", tmp_path / f"v-{hash_style}.so"
    src.write_text(_VERSIONED)
    script.write_text("V1 { global: PyInit_*; local: *; };\nV2 { global: PyInit_*; } V1;\n")
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,--hash-style={hash_style}", f"-Wl,--version-script={script}",
                    str(src), "-o", str(so)], check=True, capture_output=True)
    lib = ctypes.CDLL(str(so))
    for leaf in ("_hidden", "_default", "_both", "_absent"):
        assert exports_pyinit(so, leaf) is hasattr(lib, f"PyInit_{leaf}"), leaf
    assert not exports_pyinit(so, "_hidden") and exports_pyinit(so, "_default") and exports_pyinit(so, "_both")


def test_a_relocatable_object_named_like_a_library_is_a_bad_elf(tmp_path: Path) -> None:
    """`gcc -c` output renamed `libfoo.so` (or `_mod.so`): the loader maps only ET_DYN and ET_EXEC, so it is a
    BadElf for the link check and an extension module whose import shows the error, never a healthy library."""
    src = tmp_path / "m.c"
    src.write_text("int PyInit__mod(void) { return 0; }\n")
    obj = tmp_path / "_mod.so"
    subprocess.run(["gcc", "-c", "-fPIC", str(src), "-o", str(obj)], check=True, capture_output=True)
    with pytest.raises(BadElf, match="relocatable object"):
        read_elf(obj)
    with pytest.raises(BadElf, match="relocatable object"):
        exports_pyinit(obj, "_mod")


@pytest.mark.parametrize("bits", [64, 32])
def test_of_two_pt_dynamic_headers_the_last_is_the_one_read(tmp_path: Path, bits: int) -> None:
    """ld.so keeps the last PT_DYNAMIC it sees: a first one naming an empty table hides nothing the loader reads."""
    path = tmp_path / "_mod.so"
    path.write_bytes(_tiny_elf(bits, "<", 62 if bits == 64 else 3, "libc.so.6", "PyInit__mod", decoy=True))
    assert read_elf(path).needed == ("libc.so.6",)
    assert exports_pyinit(path, "_mod")


def test_a_symlink_loop_ends_that_step_of_the_search_as_glibc_ends_it(tmp_path, host_facts):
    """glibc's open_path gives up a step's remaining folders at an error other than "no such file" or "no
    permission" in a folder that exists: a symlink loop named libdep.so in the first RUNPATH folder hides the real one
    in the second, and the load fails. Before: the loop read as "no such file", the next folder found it: ok."""
    real = dep(tmp_path / "b", "dep")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").symlink_to("y")
    (tmp_path / "a" / "y").symlink_to("x")
    (tmp_path / "a" / "libdep.so").symlink_to("x")
    lib = gcc_lib(tmp_path / "_ext.so", needs=("dep",), libdirs=(real.parent,),
                  runpath=f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    found = {f.name: f for f in find_needed(read_elf(lib), host_facts)}["libdep.so"]
    assert found.path is None and "the loader ends this step of its search there" in " ".join(found.searched)
    assert "cannot open shared object file" in load_error(lib)
    # A loop in a folder of a later step does not hide what an earlier step finds.
    first = gcc_lib(tmp_path / "_ok.so", needs=("dep",), libdirs=(real.parent,),
                    runpath=f"{tmp_path / 'b'}:{tmp_path / 'a'}")
    assert {f.name: f.path for f in find_needed(read_elf(first), host_facts)}["libdep.so"] == str(real)
