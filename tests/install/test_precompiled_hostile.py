"""Stage-time bytecode under attack: hostile packs, odd wheels, dying compilers, kills and races.

The promise under test (see test_precompiled.py and docs/bytecode.md): a .pyc written from a pack
always holds the code of the source installed beside it, or the module is compiled on the box; a
`wh bytecode` run that fails says so in one line, exits non-zero and leaves wh.json and the packs
it lists as they were. Real wheels, real venvs, the real CLI in a subprocess.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from faults import run_with_fault
from index_fixtures import pyindex  # noqa: F401  (fixture)
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel

from pyc_helpers import TAG, install, loaded_from_pyc, site, wh





def bytecode(house: Path, *extra, env=None) -> dict:
    r = wh("bytecode", house, "--json", *extra, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def run_py(venv: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([venv / "bin" / "python", "-B", "-c", code], capture_output=True, text=True)



def code_matches_source(venv: Path, module: str) -> None:
    """The code the interpreter runs for ``module`` (from its .pyc) is the installed source's, compiled now."""
    probe = (f"import importlib, importlib.util, marshal, sys\n"
             f"m = importlib.import_module({module!r})\n"
             f"src = open(m.__file__, 'rb').read()\n"
             f"pyc = importlib.util.cache_from_source(m.__file__)\n"
             f"data = open(pyc, 'rb').read()\n"
             f"ran = marshal.loads(data[16:])\n"
             f"fresh = compile(src, m.__file__, 'exec', dont_inherit=True)\n"
             f"def flat(c):\n"
             f"    out = [c.co_code, c.co_names, c.co_varnames, c.co_firstlineno]\n"
             f"    for k in c.co_consts:\n"
             f"        out += flat(k) if hasattr(k, 'co_code') else [repr(k)]\n"
             f"    return out\n"
             f"print(flat(ran) == flat(fresh))\n")
    r = run_py(venv, probe)
    assert r.stdout.strip() == "True", (module, r.stdout, r.stderr)
    assert loaded_from_pyc(venv / "bin" / "python", module), module


def rewrite_lock(house: Path, wheels: list[Path]) -> None:
    """The lock rewritten for ``wheels``, wh.json's bytecode record and owned list kept (a wheel replaced in place)."""
    meta = json.loads((house / "wh.json").read_text())
    make_wheelhouse(house, wheels, extra_meta={k: meta[k] for k in ("bytecode", "owned") if k in meta})


def record(house: Path) -> dict:
    return json.loads((house / "wh.json").read_text())["bytecode"]


def files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} if folder.exists() else set()


# --- two wheels, one module path ------------------------------------------------------------------------------

@pytest.mark.parametrize("stale", ["aaa", "zzz"])
def test_a_module_two_wheels_ship_never_gets_the_other_wheels_bytecode(tmp_path, stale):
    """aaa and zzz both ship common/ver.py (same size, other content); zzz is installed last, so its file
    is the one on disk. One wheel is rebuilt after `wh bytecode`, so only the other has a usable pack:
    whichever it is, the code that runs must be the source on disk."""
    w = tmp_path / "w"
    a = make_wheel(w, "aaa", "1.0", modules={"aaa/__init__.py": "A = 1\n", "common/ver.py": "V = 'from-aaa'\n"})
    z = make_wheel(w, "zzz", "1.0", modules={"zzz/__init__.py": "Z = 1\n", "common/ver.py": "V = 'from-zzz'\n"})
    house = make_wheelhouse(tmp_path / "house", [a, z])
    bytecode(house)
    other = {"aaa": a, "zzz": z}
    rebuilt = make_wheel(tmp_path / "w2", stale, "1.0",
                         modules={f"{stale}/__init__.py": "CHANGED = 2\n", "common/ver.py": f"V = 'from-{stale}'\n"})
    other[stale] = rebuilt
    rewrite_lock(house, [other["aaa"], other["zzz"]])
    venv = tmp_path / "v"
    install(house, venv)
    out = run_py(venv, "import common.ver as v; print(v.V, open(v.__file__).read().split()[-1])")
    shown, on_disk = out.stdout.split()
    assert shown == on_disk.strip("'"), out.stdout
    code_matches_source(venv, "common.ver")


def _forge_pack(house: Path, wheel: str, members: dict[str, bytes], sizes: dict[str, int]) -> None:
    """Replace ``wheel``'s pack with one holding ``members`` (its index listing ``sizes``), and record its
    sha256 in wh.json: a producer that wrote nonsense, consistently."""
    rec = record(house)["packs"][wheel]
    path = house / rec["path"]
    index, _ = json.loads(zipfile.ZipFile(path).read("wh-bytecode.json")), None
    index["files"] = sizes
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("wh-bytecode.json", json.dumps(index))
        for n, data in members.items():
            z.writestr(n, data)
    path.write_bytes(buf.getvalue())
    meta = json.loads((house / "wh.json").read_text())
    meta["bytecode"]["packs"][wheel].update(sha256=hashlib.sha256(buf.getvalue()).hexdigest(),
                                            size=len(buf.getvalue()), files=len(members))
    (house / "wh.json").write_text(json.dumps(meta))


def test_a_pack_member_for_another_wheels_module_is_never_used(tmp_path):
    """A pack (recorded consistently in wh.json) that carries code for a path its wheel does not ship:
    lib's module, same size, other code. lib's own pack is gone from the record (lib rebuilt), so only
    the foreign member names that path. It must not be written there."""
    w = tmp_path / "w"
    app = make_wheel(w, "app", "1.0", modules={"app/__init__.py": "A = 1\n"})
    lib = make_wheel(w, "lib", "1.0", modules={"lib/__init__.py": "V = 'real'\n"})
    house = make_wheelhouse(tmp_path / "house", [app, lib])
    bytecode(house)
    evil = marshal_of("V = 'evil'\n")
    _forge_pack(house, app.name, {"purelib/app/__init__.py": marshal_of("A = 1\n"),
                                  "purelib/lib/__init__.py": evil,
                                  "purelib/../../../escaped.py": evil},
                {"purelib/app/__init__.py": 6, "purelib/lib/__init__.py": len("V = 'real'\n"),
                 "purelib/../../../escaped.py": 11})
    meta = json.loads((house / "wh.json").read_text())
    del meta["bytecode"]["packs"][lib.name]
    (house / "wh.json").write_text(json.dumps(meta))
    (house / "bytecode" / TAG / (lib.name[:-4] + ".zip")).unlink()
    venv = tmp_path / "v"
    install(house, venv)
    assert run_py(venv, "import lib; print(lib.V)").stdout.strip() == "real"
    code_matches_source(venv, "lib")
    assert not list(tmp_path.rglob(f"escaped.{TAG}.pyc"))
    assert not list(venv.rglob("*escaped*"))


def marshal_of(src: str) -> bytes:
    import marshal

    return marshal.dumps(compile(src, "x.py", "exec", dont_inherit=True))


# --- odd sources ----------------------------------------------------------------------------------------------

def test_odd_sources_get_the_code_the_box_would_compile(tmp_path):
    """latin-1 coding line, a BOM, CRLF line endings, a SyntaxWarning, a namespace package, .data/platlib
    and .data/purelib members, a platform wheel (Root-Is-Purelib: false)."""
    w = tmp_path / "w"
    latin = "# -*- coding: latin-1 -*-\nS = 'caf\xe9'\n".encode("latin-1")
    bom = b"\xef\xbb\xbfS = 'bom'\n"
    crlf = b"S = 'crlf'\r\ndef f():\r\n    return 1\r\n"
    warn = b"S = '\\d'\nOK = 1 is 1\n"
    app = make_wheel(w, "app", "1.0", modules={"app/__init__.py": "", "app/latin.py": latin, "app/bom.py": bom,
                                              "app/crlf.py": crlf, "app/warn.py": warn,
                                              "nspkg/part/mod.py": "S = 'ns'\n"},
                     files={"app-1.0.data/platlib/platmod.py": "S = 'plat'\n",
                            "app-1.0.data/purelib/puremod.py": "S = 'pure'\n"})
    native = make_wheel(w, "native", "1.0", tags=f"cp{sys.version_info[0]}{sys.version_info[1]}-"
                        f"cp{sys.version_info[0]}{sys.version_info[1]}-linux_x86_64",
                        modules={"native/__init__.py": "S = 'native'\n"})
    house = make_wheelhouse(tmp_path / "house", [app, native])
    bytecode(house)
    venv = tmp_path / "v"
    report = install(house, venv)
    assert report["precompiled"] == 9, report
    out = run_py(venv, "import app.latin, app.bom, app.crlf, app.warn, nspkg.part.mod, platmod, puremod, native\n"
                       "print(app.latin.S == 'caf\\xe9', app.bom.S, app.crlf.S, app.warn.S, nspkg.part.mod.S,"
                       " platmod.S, puremod.S, native.S)")
    assert out.stdout.split() == ["True", "bom", "crlf", "\\d", "ns", "plat", "pure", "native"], out
    for m in ("app.latin", "app.bom", "app.crlf", "app.warn", "nspkg.part.mod", "platmod", "puremod", "native"):
        code_matches_source(venv, m)


# --- upgrades and rollback in an existing venv ----------------------------------------------------------------

def _versions(tmp_path: Path):
    w = tmp_path / "w"
    v1 = make_wheel(w, "app", "1.0", modules={"app/__init__.py": "X = 41\n", "app/gone.py": "G = 1\n",
                                             "app/py2.py": "P = 'v1 ok'\n"})
    v2 = make_wheel(w, "app", "2.0", modules={"app/__init__.py": "X = 99\n", "app/new.py": "N = 1\n",
                                             "app/py2.py": "print 'v2'\n"})  # v2's py2.py compiles nowhere
    h1 = make_wheelhouse(tmp_path / "h1", [v1])
    h2 = make_wheelhouse(tmp_path / "h2", [v2])
    bytecode(h1)
    bytecode(h2)
    return h1, h2


def test_an_upgrade_leaves_no_old_bytecode_for_changed_or_removed_modules(tmp_path):
    h1, h2 = _versions(tmp_path)
    venv = tmp_path / "v"
    install(h1, venv)
    assert run_py(venv, "import app.py2 as p; print(p.P)").stdout.strip() == "v1 ok"
    install(h2, venv)
    assert run_py(venv, "import app; print(app.X)").stdout.strip() == "99"
    code_matches_source(venv, "app")
    pycache = site(venv) / "app" / "__pycache__"
    assert not list(pycache.glob("gone.*.pyc"))
    assert not list(pycache.glob("py2.*.pyc"))  # v1's bytecode must not pass for v2's file
    r = run_py(venv, "import app.py2")
    assert r.returncode != 0 and "SyntaxError" in r.stderr


def test_a_failed_upgrade_rolls_back_the_bytecode_it_wrote(tmp_path):
    h1, h2 = _versions(tmp_path)
    venv = tmp_path / "v"
    install(h1, venv)
    before = {p: (site(venv) / p).read_bytes() for p in files_under(site(venv)) if p.endswith(".pyc")}
    r = run_with_fault(["install", h2, "--venv", venv, "--compile"], "install.before-commit", "enospc")
    assert r.returncode != 0
    after = {p: (site(venv) / p).read_bytes() for p in files_under(site(venv)) if p.endswith(".pyc")}
    assert after == before
    assert run_py(venv, "import app; print(app.X)").stdout.strip() == "41"
    code_matches_source(venv, "app")


# --- the environment on the box and on the staging host -------------------------------------------------------

@pytest.mark.parametrize("var,value", [("PYTHONOPTIMIZE", "2"), ("PYTHONPYCACHEPREFIX", "cache")])
def test_the_box_environment_that_changes_pycs_makes_packs_stand_aside(tmp_path, var, value):
    w = tmp_path / "w"
    house = make_wheelhouse(tmp_path / "house", [make_wheel(w, "lib", "1.0", modules={
        "lib/__init__.py": '"""doc"""\nassert True\nV = 1\n'})])
    bytecode(house)
    if var == "PYTHONPYCACHEPREFIX":
        value = str(tmp_path / value)
    report = install(house, tmp_path / "v", env={var: value})
    assert report["precompiled"] == 0 and any(var in n for n in report["notes"])


def test_packs_made_under_pythonoptimize_keep_asserts_and_docstrings(tmp_path):
    w = tmp_path / "w"
    house = make_wheelhouse(tmp_path / "house", [make_wheel(w, "lib", "1.0", modules={
        "lib/__init__.py": '"""the doc"""\ndef f():\n    assert False, "asserted"\n'})])
    bytecode(house, env={"PYTHONOPTIMIZE": "2", "SOURCE_DATE_EPOCH": "1"})
    venv = tmp_path / "v"
    assert install(house, venv)["precompiled"] == 1
    out = run_py(venv, "import lib\nprint(lib.__doc__)\ntry:\n    lib.f()\nexcept AssertionError as e:\n    print(e)")
    assert out.stdout.split("\n")[:2] == ["the doc", "asserted"], out
    code_matches_source(venv, "lib")


# --- the compiling interpreter misbehaves ---------------------------------------------------------------------

def _two_wheel_house(tmp_path: Path) -> Path:
    w = tmp_path / "w"
    return make_wheelhouse(tmp_path / "house", [
        make_wheel(w, "app", "1.0", modules={"app/__init__.py": "X = 1\n", "app/more.py": "Y = 2\n"}),
        make_wheel(w, "lib", "2.0", modules={"lib/__init__.py": "V = 42\n"})])


def _wrapper(tmp_path: Path, worker_prefix: str) -> Path:
    """A --python that answers wh's question truthfully, then runs the worker behind ``worker_prefix``."""
    script = tmp_path / "fakepy"
    script.write_text(f"#!/bin/sh\ncase \"$*\" in\n  *struct*) {worker_prefix} ;;\n"
                      f"  *) exec {sys.executable} \"$@\" ;;\nesac\n")
    script.chmod(0o755)
    return script


def _untouched(house: Path, before: bytes) -> None:
    assert (house / "wh.json").read_bytes() == before
    assert not files_under(house / "bytecode"), files_under(house / "bytecode")


def _running(marker: str) -> list[str]:
    """Command lines of live processes that contain ``marker`` (read from /proc: ps cuts long ones)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                line = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker in line and state != "Z":
                out.append(line)
    return out


def _no_orphans(marker: str) -> None:
    assert not _running(marker)


@pytest.mark.parametrize("how,prefix", [
    # (garbage before the worker's first line is an interpreter's banner, read past: see the banner test)
    ("garbage", "{py} \"$@\" | {{ IFS= read -r a; IFS= read -r b; printf '%s\\n%s\\nGARBAGE!GARBAGE!' \"$a\" \"$b\"; cat; }}"),
    ("dies-after-one-task", "head -n 1 | {py} \"$@\""),
    ("dies-at-once", "echo 'Fatal Python error: init_fs_encoding' >&2; exit 1"),
    ("short-frame", "exec {py} -c 'import sys; sys.stdout.buffer.write(bytes([64, 0, 0, 0, 0, 0, 0, 0]) + b\"abcd\")'"),
    ("wrong-answer", "exec {py} -c 'import marshal, struct, sys; b = marshal.dumps({{\"x\": 1}}); "
                     "sys.stdin.readline(); sys.stdout.buffer.write(struct.pack(\"<Q\", len(b)) + b)'"),
])
def test_a_compiling_interpreter_that_misbehaves_fails_the_run_cleanly(tmp_path, how, prefix):
    house = _two_wheel_house(tmp_path)
    before = (house / "wh.json").read_bytes()
    py = _wrapper(tmp_path, prefix.format(py=sys.executable))
    r = wh("bytecode", house, "--python", py, "-j", "1", timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "Exception in thread" not in r.stderr, r.stderr
    assert f"the compiling interpreter {py} failed" in r.stderr
    _untouched(house, before)
    _no_orphans(str(py))
    assert wh("verify", house).returncode == 0


@pytest.mark.parametrize("what", ["other-version", "pypy", "not-executable", "a-folder", "prints-garbage", "only-garbage"])
def test_a_python_that_cannot_compile_for_the_target_is_refused_before_anything_is_written(tmp_path, what):
    house = _two_wheel_house(tmp_path)
    before = (house / "wh.json").read_bytes()
    fake = tmp_path / "python-fake"
    answers = {"other-version": {"magic": "0d0d0d0a", "cache_tag": "cpython-399", "version": "3.99.0",
                                 "implementation": "cpython"},
               "pypy": {"magic": importlib_magic(), "cache_tag": "pypy39", "version":
                        ".".join(map(str, sys.version_info[:3])), "implementation": "pypy"}}
    if what in answers:
        fake.write_text(f"#!/bin/sh\necho '{json.dumps(answers[what])}'\n")
        fake.chmod(0o755)
    elif what == "not-executable":
        fake.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
        fake.chmod(0o644)
    elif what == "a-folder":
        fake.mkdir()
    elif what == "only-garbage":
        fake.write_text("#!/bin/sh\necho 'hello from a login banner'\n")
        fake.chmod(0o755)
    else:  # a banner that ends in no newline, then nothing a CPython would say
        fake.write_text("#!/bin/sh\nprintf 'hello from a login banner {\"magic\": 1}'\n")
        fake.chmod(0o755)
    r = wh("bytecode", house, "--python", fake, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "no CPython" in r.stderr and str(fake) in r.stderr and "Traceback" not in r.stderr
    _untouched(house, before)


def test_a_compiling_python_that_prints_a_banner_at_start_writes_the_same_packs(tmp_path):
    # A .pth or a wrapper that greets on every start: its words come before the worker's frames and are read
    # past (wheelhouse.script_answer), so the packs are those a quiet interpreter writes.
    quiet, noisy = _two_wheel_house(tmp_path / "q"), _two_wheel_house(tmp_path / "n")
    fake = tmp_path / "python-banner"
    fake.write_text(f"#!/bin/sh\nprintf 'hello from a login banner'\nexec {sys.executable} \"$@\"\n")
    fake.chmod(0o755)
    assert wh("bytecode", quiet, "--python", sys.executable, timeout=120).returncode == 0
    r = wh("bytecode", noisy, "--python", fake, timeout=120)
    assert r.returncode == 0, r.stderr
    packs = lambda h: {p.name: p.read_bytes() for p in (h / "bytecode").rglob("*") if p.is_file()}
    assert packs(noisy) and packs(noisy).keys() == packs(quiet).keys()
    assert wh("verify", noisy).returncode == 0


def importlib_magic() -> str:
    import importlib.util

    return importlib.util.MAGIC_NUMBER.hex()


# --- kills, full disks, races ---------------------------------------------------------------------------------

@pytest.mark.parametrize("point,action", [("bytecode.write", "kill"), ("bytecode.pack", "kill"),
                                          ("bytecode.before-record", "kill"), ("bytecode.pack", "enospc"),
                                          ("bytecode.before-record", "enospc")])
def test_a_rerun_cut_short_after_a_wheel_changed_leaves_the_previous_packs_usable(tmp_path, point, action):
    """Packs made, then app rebuilt under the same filename (`wh build`), then `wh bytecode` again, cut
    short. wh.json still lists the old packs: they must still be there, byte for byte, so the wheelhouse
    verifies and installs (lib from its pack, app compiled), and the next run finishes the job."""
    w = tmp_path / "w"
    app = make_wheel(w, "app", "1.0", modules={"app/__init__.py": "X = 1\n"})
    lib = make_wheel(w, "lib", "2.0", modules={"lib/__init__.py": "V = 42\n"})
    house = make_wheelhouse(tmp_path / "house", [app, lib])
    bytecode(house)
    rebuilt = make_wheel(tmp_path / "w2", "app", "1.0", modules={"app/__init__.py": "X = 'rebuilt, longer'\n",
                                                                 "app/extra.py": "E = 1\n"})
    rewrite_lock(house, [rebuilt, lib])
    before = (house / "wh.json").read_bytes()
    r = run_with_fault(["bytecode", house], point, action)
    assert r.returncode != 0
    if action == "enospc":
        assert r.returncode == 1 and "Traceback" not in r.stderr and "re-run `wh bytecode" in r.stderr, r.stderr
    assert (house / "wh.json").read_bytes() == before
    v = wh("verify", house)
    assert v.returncode == 0, v.stdout + v.stderr
    venv = tmp_path / "v"
    report = install(house, venv)
    assert report["precompiled"] == 1  # lib's; app changed since its pack
    assert run_py(venv, "import app; print(app.X)").stdout.strip() == "rebuilt, longer"
    code_matches_source(venv, "app")
    assert bytecode(house)["compiled"] == 2
    listed = {p["path"] for p in record(house)["packs"].values()}
    assert {f"bytecode/{p}" for p in files_under(house / "bytecode")} == listed
    assert install(house, tmp_path / "v2")["precompiled"] == 3


def test_two_bytecode_runs_at_once_both_finish_and_leave_one_consistent_record(tmp_path):
    house = _two_wheel_house(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-m", "wheelhouse", "bytecode", house, "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    listed = {p["path"] for p in record(house)["packs"].values()}
    assert {f"bytecode/{p}" for p in files_under(house / "bytecode")} == listed
    assert wh("verify", house).returncode == 0
    assert install(house, tmp_path / "v")["precompiled"] == 3


@pytest.mark.parametrize("body", [b"not marshal at all", b"\xe3", b"N", b""])
def test_a_pack_member_that_is_not_code_is_compiled_on_the_box_instead(tmp_path, body):
    """A pack recorded consistently whose member for lib/__init__.py is not a marshalled code object
    (garbage, truncated, None, empty): writing it would make `import lib` fail after a green install."""
    w = tmp_path / "w"
    lib = make_wheel(w, "lib", "1.0", modules={"lib/__init__.py": "V = 'real'\n", "lib/ok.py": "K = 1\n"})
    house = make_wheelhouse(tmp_path / "house", [lib])
    bytecode(house)
    _forge_pack(house, lib.name, {"purelib/lib/__init__.py": body, "purelib/lib/ok.py": marshal_of("K = 1\n")},
                {"purelib/lib/__init__.py": len("V = 'real'\n"), "purelib/lib/ok.py": len("K = 1\n")})
    venv = tmp_path / "v"
    report = install(house, venv)
    assert report["precompiled"] == 1
    r = run_py(venv, "import lib, lib.ok; print(lib.V, lib.ok.K)")
    assert r.stdout.split() == ["real", "1"], r.stderr
    code_matches_source(venv, "lib")


def test_a_pack_that_is_not_a_zip_or_lies_in_its_index_is_compiled_on_the_box(tmp_path):
    w = tmp_path / "w"
    app = make_wheel(w, "app", "1.0", modules={"app/__init__.py": "A = 'app'\n"})
    lib = make_wheel(w, "lib", "1.0", modules={"lib/__init__.py": "V = 'real'\n"})
    house = make_wheelhouse(tmp_path / "house", [app, lib])
    bytecode(house)
    # app: the index lists a member that is not there; lib: a "pack" that is no zip at all
    _forge_pack(house, app.name, {"purelib/app/__init__.py": marshal_of("A = 'evil'\n")},
                {"purelib/app/__init__.py": 10, "purelib/app/missing.py": 3})
    meta = json.loads((house / "wh.json").read_text())
    junk = b"PK\x03\x04" + b"\0" * 100
    (house / meta["bytecode"]["packs"][lib.name]["path"]).write_bytes(junk)
    meta["bytecode"]["packs"][lib.name].update(sha256=hashlib.sha256(junk).hexdigest(), size=len(junk))
    (house / "wh.json").write_text(json.dumps(meta))
    venv = tmp_path / "v"
    r = wh("install", house, "--venv", venv, "--compile", "--json")
    assert r.returncode == 0 and "Traceback" not in r.stderr and "Exception in thread" not in r.stderr, r.stderr
    report = json.loads(r.stdout)
    assert report["precompiled"] == 0 and len([n for n in report["notes"] if "compiled here" in n]) == 2, report
    assert run_py(venv, "import app, lib; print(app.A, lib.V)").stdout.split() == ["app", "real"]
    code_matches_source(venv, "app")
    code_matches_source(venv, "lib")


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_hung_compiler_is_stopped_by_an_interrupt_with_nothing_written_and_no_orphans(tmp_path, sig):
    import signal

    house = _two_wheel_house(tmp_path)
    before = (house / "wh.json").read_bytes()
    marker = f"hung-{sig}-{os.getpid()}"
    py = _wrapper(tmp_path, f"exec {sys.executable} -c 'import sys, time; sys.stdin.readline(); time.sleep(600)' "
                            f"{marker}")
    proc = subprocess.Popen([sys.executable, "-m", "wheelhouse", "bytecode", house, "--python", py],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not _running(marker):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"the hung worker never started: {proc.communicate()}")
        time.sleep(0.1)
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert "Traceback" not in err, err
    time.sleep(0.5)
    _no_orphans(marker)
    _untouched(house, before)


def test_an_upgrade_killed_before_its_commit_is_recovered_with_no_stale_bytecode(tmp_path):
    h1, h2 = _versions(tmp_path)
    venv = tmp_path / "v"
    install(h1, venv)
    r = run_with_fault(["install", h2, "--venv", venv, "--compile"], "install.before-commit", "kill")
    assert r.returncode == -9
    install(h1, venv)  # recovers the journal first, then reinstalls 1.0
    assert run_py(venv, "import app, app.py2; print(app.X, app.py2.P)").stdout.split() == ["41", "v1", "ok"]
    for m in ("app", "app.gone", "app.py2"):
        code_matches_source(venv, m)
    assert not list((site(venv) / "app" / "__pycache__").glob("new.*.pyc"))


def test_bytecode_and_a_restage_of_the_same_folder_at_once(pyindex, tmp_path):
    """`wh bytecode OUT` while `wh stage -o OUT --bytecode` restages it without one wheel: both finish,
    one after the other, and the packs are exactly the ones the final wh.json lists."""
    pub = tmp_path / "pub"
    make_wheel(pub, "web", "1.0", requires=["core>=2"], modules={"web/__init__.py": "import core\nV = core.V\n"})
    make_wheel(pub, "web", "1.1", modules={"web/__init__.py": "V = 'alone'\n"})
    make_wheel(pub, "core", "2.0", modules={"core/__init__.py": "V = 2\n"})
    idx = pyindex(pub)
    out = tmp_path / "staged"
    common = ["-i", idx.url, "-o", out, "--no-bootstrap", "--cache-dir", tmp_path / "cache", "--bytecode"]
    r = wh("stage", "web==1.0", *common)
    assert r.returncode == 0, r.stderr
    procs = [subprocess.Popen([sys.executable, "-m", "wheelhouse", *map(str, args)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for args in (["stage", "web==1.1", *common], ["bytecode", out])]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    packs = record(out)["packs"]
    assert set(packs) == {"web-1.1-py3-none-any.whl"}
    assert {f"bytecode/{p}" for p in files_under(out / "bytecode")} == {p["path"] for p in packs.values()}
    assert wh("verify", out).returncode == 0
    venv = tmp_path / "v"
    assert install(out, venv)["precompiled"] == 1
    assert run_py(venv, "import web; print(web.V)").stdout.strip() == "alone"


def test_a_wheel_listed_twice_is_compiled_once_and_its_pack_used(tmp_path):
    app = make_wheel(tmp_path / "w", "app", "1.0", modules={"app/__init__.py": "X = 1\n"})
    house = make_wheelhouse(tmp_path / "house", [app, app])
    result = bytecode(house)
    assert (result["compiled"], result["files"], result["wheels"]) == (1, 1, 1)
    assert install(house, tmp_path / "v")["precompiled"] == 1
    code_matches_source(tmp_path / "v", "app")


def test_a_rerun_removes_only_what_wh_wrote_under_bytecode(tmp_path):
    """bytecode/ symlinked to a bigger disk that holds other things too: a rerun removes stale packs and a
    killed run's temp files, never someone else's files."""
    house = _two_wheel_house(tmp_path)
    elsewhere = tmp_path / "bigdisk"
    (elsewhere / TAG).mkdir(parents=True)
    (elsewhere / "README.txt").write_text("mine\n")
    (elsewhere / TAG / "notes.md").write_text("mine too\n")
    (house / "bytecode").symlink_to(elsewhere)
    bytecode(house)
    (elsewhere / TAG / ".lib-2.0-py3-none-any.zip.x1y2.tmp").write_bytes(b"killed run")
    (elsewhere / "cpython-30").mkdir()
    (elsewhere / "cpython-30" / "old-1.0-py3-none-any.zip").write_bytes(b"another python's pack")
    bytecode(house)
    assert (elsewhere / "README.txt").read_text() == "mine\n"
    assert (elsewhere / TAG / "notes.md").read_text() == "mine too\n"
    assert not (elsewhere / TAG / ".lib-2.0-py3-none-any.zip.x1y2.tmp").exists()
    assert not (elsewhere / "cpython-30").exists()
    assert install(house, tmp_path / "v")["precompiled"] == 3


def test_an_upgrade_killed_while_writing_a_pyc_leaves_no_junk_after_recovery(tmp_path):
    h1, h2 = _versions(tmp_path)
    venv = tmp_path / "v"
    install(h1, venv)
    r = run_with_fault(["install", h2, "--venv", venv, "--compile"], "install.pyc-from-pack", "kill")
    assert r.returncode == -9
    install(h1, venv)  # recovers, then installs 1.0 again
    names = [p.name for p in (site(venv) / "app" / "__pycache__").iterdir()]
    assert sorted(names) == sorted(f"{m}.{TAG}.pyc" for m in ("__init__", "gone", "py2")), names
    code_matches_source(venv, "app")


def test_a_module_that_moves_to_another_wheel_in_an_upgrade_keeps_its_file_and_right_bytecode(tmp_path):
    """app 1.0 ships common/x.py; in the upgrade app 2.0 drops it and base 1.0 (new) ships it, other code,
    same size. After the upgrade the file is there, and its bytecode is base's."""
    w = tmp_path / "w"
    old = make_wheel(w, "app", "1.0", modules={"app/__init__.py": "A = 1\n", "common/x.py": "X = 'old'\n"})
    new = make_wheel(w, "app", "2.0", requires=["base"], modules={"app/__init__.py": "A = 2\n"})
    base = make_wheel(w, "base", "1.0", modules={"base/__init__.py": "B = 1\n", "common/x.py": "X = 'new'\n"})
    h1 = make_wheelhouse(tmp_path / "h1", [old])
    h2 = make_wheelhouse(tmp_path / "h2", [new, base])
    bytecode(h1)
    bytecode(h2)
    venv = tmp_path / "v"
    install(h1, venv)
    install(h2, venv)
    r = run_py(venv, "import common.x as m; print(m.X)")
    assert r.stdout.strip() == "new", r.stderr
    code_matches_source(venv, "common.x")


def test_a_compiler_that_hangs_fails_the_run_after_the_silence_limit(tmp_path):
    house = _two_wheel_house(tmp_path)
    before = (house / "wh.json").read_bytes()
    marker = f"hangs-{os.getpid()}"
    py = _wrapper(tmp_path, f"exec {sys.executable} -c 'import sys, time; sys.stdin.readline(); time.sleep(600)' "
                            f"{marker}")
    r = wh("bytecode", house, "--python", py, env={"WH_BYTECODE_TIMEOUT": "2"}, timeout=60)
    assert r.returncode == 1 and "answered nothing for 2 s" in r.stderr and "Traceback" not in r.stderr, r.stderr
    _no_orphans(marker)
    _untouched(house, before)


def test_a_source_over_the_size_cap_is_compiled_on_the_box_not_at_stage_time(tmp_path):
    """A wheel's "module" of more than MAX_SOURCE_BYTES is not read into a compile worker on the staging
    host (a hostile wheel could declare gigabytes); it is compiled on the box like any module without a pack."""
    from wheelhouse.stage.bytecode import MAX_SOURCE_BYTES

    big = "# filler line to make the source big\n" * (MAX_SOURCE_BYTES // 37 + 1000) + "BIG = 'big'\n"
    assert len(big) > MAX_SOURCE_BYTES
    lib = make_wheel(tmp_path / "w", "lib", "1.0", modules={"lib/__init__.py": "V = 'small'\n", "lib/big.py": big})
    house = make_wheelhouse(tmp_path / "house", [lib])
    bytecode(house)
    packed = record(house)["packs"]["lib-1.0-py3-none-any.whl"]
    assert packed["files"] == 1, packed  # lib/__init__.py only
    venv = tmp_path / "v"
    assert install(house, venv)["precompiled"] == 1
    r = run_py(venv, "import lib, lib.big; print(lib.V, lib.big.BIG)")
    assert r.stdout.split() == ["small", "big"], r.stderr
    assert loaded_from_pyc(venv / "bin" / "python", "lib.big")  # compiled there, and used
