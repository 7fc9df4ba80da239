"""One environment for the engine: what `wh serve` starts it with is what `wh doctor` judges.

The engine's environment is the caller's, `wh env`'s variables over it (stub folders off LD_LIBRARY_PATH, the
NVIDIA wheels' folders appended) and the manifest's `[serve] env` over that. Before: the import probes ran in the
caller's environment without `[serve] env`, so a package whose library only `[serve] env` makes findable failed
`native` while `sharedlibs` found it, and `wh drop` / `--fix` uninstalled it although it loads under `wh serve`;
and `wh serve` gave the engine neither `wh env`'s variables nor the stub-free LD_LIBRARY_PATH the doctor judged.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _ext, _gcc, _tags, have_toolchain, make_venv, site_packages
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
FAKE = Path(__file__).parents[1] / "support" / "fake_engine.py"


def wh(*args, env=None, timeout=600):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("WH_", "PYTHONPATH", "LD_LIBRARY_PATH"))}
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**base, "NO_COLOR": "1", "COLUMNS": "400", **(env or {})})


def _results(stdout: str) -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(stdout)["results"]}


@pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")
def test_a_library_only_serve_env_makes_findable_is_judged_there_and_never_dropped(tmp_path):
    build, vendor = tmp_path / "build", tmp_path / "opt-vendor" / "lib"
    build.mkdir()
    vendor.mkdir(parents=True)
    (build / "v.c").write_text("int whgone_value(void) { return 7; }\n")
    _gcc(["-shared", "-fPIC", "-Wl,-soname,libwhgone.so.1", str(build / "v.c"), "-o", str(vendor / "libwhgone.so.1")])
    (build / "libwhgone.so").symlink_to(vendor / "libwhgone.so.1")
    core = _ext(build, "_core", "WH_NEEDLIB", extra=[f"-L{build}", "-lwhgone"])  # no RPATH: LD_LIBRARY_PATH finds it
    wheels = [make_wheel(tmp_path / "w", "vendpkg", "1.0", tags=_tags(), files={f"vendpkg/_core{SUFFIX}": core},
                         modules={"vendpkg/__init__.py": "from ._core import answer\n"})]
    house = make_wheelhouse(tmp_path / "house", wheels, extra_meta={
        "inputs": {"requirements": ["vendpkg"]},
        "serve": {"command": ["python", "-m", "http.server"], "env": {"LD_LIBRARY_PATH": str(vendor)}}})
    py = make_venv(tmp_path / "venv")
    assert wh("install", house, "--python", py).returncode == 0
    r = wh("doctor", "--python", py, "--json", "--check", "native", "--check", "sharedlibs")
    assert r.returncode == 0, r.stdout[-3000:]
    res = _results(r.stdout)
    assert res["native:vendpkg"]["verdict"] == "ok" and res["sharedlibs:vendpkg"]["verdict"] == "ok"
    dry = wh("drop", "--python", py, "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["dropped"] == [], dry.stdout
    assert list(site_packages(py).glob("vendpkg-1.0.dist-info"))


def test_an_entry_module_is_imported_when_nothing_ships_an_extension_module(tmp_path):
    """Before: native returned "nothing to import" before the entries, so a pure-Python engine that cannot start
    passed --strict."""
    eng = make_wheel(tmp_path / "w", "myengine", "1.0",
                     modules={"myengine/__init__.py": "raise ImportError('myengine cannot start')\n"})
    house = make_wheelhouse(tmp_path / "house", [eng], extra_meta={
        "inputs": {"requirements": ["myengine"]}, "doctor": {"entry": ["myengine"]}})
    py = make_venv(tmp_path / "venv")
    assert wh("install", house, "--python", py).returncode == 0
    r = wh("doctor", "--python", py, "--json", "--strict", "--check", "native")
    assert r.returncode == 1, r.stdout[-3000:]
    entry = _results(r.stdout)["native:entry:myengine"]
    assert entry["verdict"] == "fail" and "myengine cannot start" in entry["evidence"]


def test_the_doctors_engine_environment_has_serve_env_over_wh_env(tmp_path):
    """links:libcuda, the JIT probes and the toolchain run in ctx.engine_env: [serve] env is part of it (before: it
    was not, and a driver only [serve] env's LD_LIBRARY_PATH names failed links:libcuda)."""
    from wheelhouse.doctor.run import gather_context
    from wheelhouse.manifest import load_manifest

    py = make_venv(tmp_path / "venv")
    lib = site_packages(py) / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudart.so.13").write_bytes(b"\x7fELF")
    (tmp_path / "m.toml").write_text('[stack]\nname = "x"\nrequirements = []\n'
                                     '[serve]\ncommand = ["true"]\n[serve.env]\nLD_LIBRARY_PATH = "/opt/driver/lib"\n'
                                     'OMP_NUM_THREADS = "4"\n')
    ctx = gather_context(str(py), manifest=load_manifest(tmp_path / "m.toml", read_files=False), checks=["native"])
    assert ctx.engine_env["LD_LIBRARY_PATH"] == "/opt/driver/lib" and ctx.engine_env["OMP_NUM_THREADS"] == "4"
    (tmp_path / "m.toml").write_text('[stack]\nname = "x"\nrequirements = []\n[serve]\ncommand = ["true"]\n')
    ctx = gather_context(str(py), manifest=load_manifest(tmp_path / "m.toml", read_files=False), checks=["native"])
    assert str(lib) in ctx.engine_env["LD_LIBRARY_PATH"].split(":")


def test_wh_serve_starts_the_engine_in_the_environment_the_doctor_judged(tmp_path):
    """The engine gets wh env's variables for its interpreter (a stubs folder of the caller's LD_LIBRARY_PATH gone,
    the caller's other entries first, the NVIDIA wheels' folder appended) and [serve] env over them."""
    import socket

    py = make_venv(tmp_path / "venv")
    lib = site_packages(py) / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudart.so.13").write_bytes(b"\x7fELF")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "m.toml").write_text(f'[serve]\ncommand = ["{sys.executable}", "{FAKE}", "--port", "{port}"]\n'
                                     f'url = "http://127.0.0.1:{port}"\n[serve.env]\nOMP_NUM_THREADS = "4"\n')
    env = {"WH_STATE_DIR": str(tmp_path / "state"), "LD_LIBRARY_PATH": "/keep/me:/usr/local/cuda/lib64/stubs"}
    log = tmp_path / "serve.log"
    r = wh("serve", tmp_path / "m.toml", "--python", py, "--no-preflight", "--detach", "--interval", "0.2",
           "--log", log, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    try:
        pid = int(re.search(r"^fake-engine pid (\d+)", log.read_text(), re.M).group(1))
        raw = Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace")
        engine = dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)
    finally:
        assert wh("stop", env=env).returncode == 0
    ld = engine["LD_LIBRARY_PATH"].split(":")
    assert ld[0] == "/keep/me" and str(lib) in ld and not any("stubs" in p for p in ld)
    assert engine["OMP_NUM_THREADS"] == "4"


def test_a_stubs_folder_on_the_callers_ld_library_path_is_a_note_the_engine_never_gets_it(tmp_path):
    """wh serve and `wh env` take it off, so the engine's environment has none: ok; the shell that has it is said."""
    py = make_venv(tmp_path / "venv")
    stubs = tmp_path / "cuda" / "lib64" / "stubs"
    stubs.mkdir(parents=True)
    r = wh("doctor", "--python", py, "--json", "--check", "links:ld-library-path",
           env={"LD_LIBRARY_PATH": f"{stubs}:{tmp_path}"})
    res = _results(r.stdout)["links:ld-library-path"]
    assert res["verdict"] == "ok" and f"the caller's LD_LIBRARY_PATH has {stubs}, taken off for the engine" in res["evidence"]


def test_a_checkout_in_the_folder_python_m_searches_first_fails(tmp_path):
    """Hostile round 9: `[serve] command = [python, "-m", "app.server"]` run from a checkout of the source (mypkg/
    beside the command) imports that copy; the doctor, importing with no working folder on sys.path, was green, and
    so was `wh serve`'s preflight."""
    from wheelhouse.doctor.workingfolder import first_path_entry

    app = make_wheel(tmp_path / "w", "mypkg", "1.0", modules={"mypkg/__init__.py": "WHO = 'installed'\n",
                                                               "mypkg/server.py": "import mypkg\n"})
    py = make_venv(tmp_path / "venv")
    house = make_wheelhouse(tmp_path / "house", [app], extra_meta={
        "inputs": {"requirements": ["mypkg"]}, "serve": {"command": [str(py), "-m", "mypkg.server"]}})
    assert wh("install", house, "--python", py).returncode == 0
    checkout, elsewhere = tmp_path / "checkout", tmp_path / "elsewhere"
    (checkout / "mypkg").mkdir(parents=True)
    (checkout / "mypkg" / "__init__.py").write_text("WHO = 'checkout'\n")
    elsewhere.mkdir()
    (elsewhere / "mypkg").mkdir()  # no __init__: a namespace portion, which the installed package wins over
    engine = subprocess.run([py, "-c", "import mypkg; print(mypkg.WHO)"], cwd=checkout, capture_output=True, text=True)
    assert engine.stdout.strip() == "checkout"  # what the engine started there imports

    def doctor(cwd):
        base = {k: v for k, v in os.environ.items() if not k.startswith(("WH_", "PYTHONPATH"))}
        r = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--json", "--check",
                            "native"], cwd=cwd, capture_output=True, text=True, timeout=300,
                           env={**base, "NO_COLOR": "1"})
        return r.returncode, _results(r.stdout)

    code, res = doctor(checkout)
    assert code == 1 and res["native:working-folder"]["verdict"] == "fail", res
    assert f"{checkout} comes first" in res["native:working-folder"]["evidence"]
    assert "mypkg/" in res["native:working-folder"]["evidence"] and "python -P" in res["native:working-folder"]["hint"]
    code, res = doctor(elsewhere)
    assert code == 0 and res["native:working-folder"]["verdict"] == "ok", res
    # what the command line says about that folder
    assert first_path_entry(["python3.12", "-m", "x"], {}, "/w") == ("/w", "runs `python -m`")
    assert first_path_entry(["python", "-X", "dev", "-c", "pass"], {}, "/w") == ("/w", "runs `python -c`")
    assert first_path_entry(["python", "-u", "tools/run.py"], {}, "/w") == ("/w/tools", "runs the script tools/run.py")
    assert first_path_entry(["python", "-P", "-m", "x"], {}, "/w") is None
    assert first_path_entry(["python", "-Im", "x"], {}, "/w") is None
    assert first_path_entry(["python", "-m", "x"], {"PYTHONSAFEPATH": "1"}, "/w") is None
    assert first_path_entry(["ft", "serve"], {}, "/w") is None


@pytest.mark.parametrize("how", ["python -m", "console script"])
def test_the_module_the_serve_command_starts_must_import(tmp_path, how):
    """Hostile round 10: the doctor imported the top-level names only, so `[serve] command = [python, "-m",
    "engine.server"]` (or a console script whose entry point is engine.server:main) was green while the server
    module could not import (it needs an API the locked helperlib lacks): the engine died at start."""
    helper = make_wheel(tmp_path / "w", "helperlib", "1.0", modules={"helperlib/__init__.py": "def old_api():\n"
                                                                                                 "    return 1\n"})
    engine = make_wheel(tmp_path / "w", "engine", "1.0", requires=["helperlib"],
                        modules={"engine/__init__.py": "",
                                 "engine/server.py": "from helperlib import new_api\ndef main():\n    pass\n"},
                        entry_points={"console_scripts": {"engine-serve": "engine.server:main"}})
    py = make_venv(tmp_path / "venv")
    command = [str(py), "-m", "engine.server"] if how == "python -m" else [str(py.parent / "engine-serve")]
    house = make_wheelhouse(tmp_path / "house", [engine, helper], extra_meta={
        "inputs": {"requirements": ["engine"]}, "serve": {"command": command}})
    assert wh("install", house, "--python", py).returncode == 0
    r = wh("doctor", "--python", py, "--json", "--check", "native")
    res = _results(r.stdout)
    assert r.returncode == 1, res
    assert res["native:entry:engine.server"]["verdict"] == "fail"
    assert "cannot import name 'new_api'" in res["native:entry:engine.server"]["evidence"]


def test_python_m_of_a_package_imports_the_package_not_its_main(tmp_path):
    """`python -m engine` runs engine/__main__.py, the server itself: the doctor imports the package (its
    entry), never the __main__ module, which would start serving inside the probe."""
    marker = tmp_path / "served"
    engine = make_wheel(tmp_path / "w", "engine", "1.0", modules={
        "engine/__init__.py": "", "engine/__main__.py": f"open({str(marker)!r}, 'w').close()\n"})
    py = make_venv(tmp_path / "venv")
    house = make_wheelhouse(tmp_path / "house", [engine], extra_meta={
        "inputs": {"requirements": ["engine"]}, "serve": {"command": [str(py), "-m", "engine"]}})
    assert wh("install", house, "--python", py).returncode == 0
    r = wh("doctor", "--python", py, "--json", "--check", "native")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert not marker.exists()


def test_the_imports_run_under_the_interpreter_options_of_the_serve_command(tmp_path):
    """Hostile round 10: `[serve] command = [python, "-OO", "-m", "engine"]` strips docstrings, which the engine's
    import reads: it died at start while the doctor, importing without -OO, was green; a pass stored by a run
    under other options is not reused."""
    engine = make_wheel(tmp_path / "w", "engine", "1.0", modules={
        "engine/__init__.py": "def generate():\n    '''Generate tokens.'''\nHELP = generate.__doc__.strip()\n"})
    py = make_venv(tmp_path / "venv")
    house = make_wheelhouse(tmp_path / "house", [engine], extra_meta={"inputs": {"requirements": ["engine"]}})
    assert wh("install", house, "--python", py).returncode == 0

    def doctor(*flags):
        manifest = tmp_path / f"m{len(flags)}.toml"
        command = ", ".join(f'"{w}"' for w in [py, *flags, "-m", "engine"])
        manifest.write_text(f'[stack]\nname = "t"\nrequirements = ["engine"]\n[serve]\ncommand = [{command}]\n')
        r = wh("doctor", "--python", py, "--manifest", manifest, "--json", "--check", "native")
        return r.returncode, _results(r.stdout)

    code, res = doctor()
    assert code == 0, res
    code, res = doctor("-OO")
    assert code == 1 and "'NoneType' object has no attribute 'strip'" in res["native:entry:engine"]["evidence"], res
    engine_run = subprocess.run([py, "-OO", "-m", "engine"], capture_output=True, text=True)
    assert engine_run.returncode == 1 and "strip" in engine_run.stderr  # what the engine's start does
