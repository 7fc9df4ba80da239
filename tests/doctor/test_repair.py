"""`wh doctor --fix` and `wh drop` repair before they drop, and drop the right distribution (issue 29.8, 29.9).

Before: a truncated ``.so`` was "fixed" by dropping its distribution (or not at all); torch was dropped when
nvidia-cublas's library was gone, scikit-learn when threadpoolctl was uninstalled, every dependent of a broken
numpy with it, and the healthy installed copy when a shadowing copy on PYTHONPATH crashed with a signal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import have_toolchain
from repair_fixtures import damage_so, fastpack_house, so_path, stack_house
from wheelhouse.doctor.drop import read_dropped

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def wh(*args, env=None):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("WH_", "PYTHONPATH"))}
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          timeout=600, env={**base, "NO_COLOR": "1", "COLUMNS": "400", **(env or {})})


def _installed(venv: Path) -> set[str]:
    site = venv / "lib" / PY / "site-packages"
    return {p.name.split("-", 1)[0] for p in site.glob("*.dist-info")}


def _setup(tmp_path, house):
    """A venv wh's install (in this process: the doctor and its --fix are what run as `wh`) put ``house`` in."""
    from wheelhouse.install import InstallOptions, install_wheelhouses

    venv = tmp_path / "venv"
    install_wheelhouses([house], InstallOptions(venv=venv))
    return venv, venv / "lib" / PY / "site-packages", venv / "bin" / "python"


def _fixes(stdout: str) -> list[dict]:
    return json.loads(stdout)["fixes"]


def test_fix_reinstalls_a_truncated_extension_byte_identical(tmp_path):
    venv, site, py = _setup(tmp_path, fastpack_house(tmp_path))
    whole = damage_so(site)
    before = wh("doctor", "--python", py)
    assert before.returncode == 1
    assert f"wh install --reinstall fastpack --python {py}" in before.stdout  # the hint is the repair
    r = wh("doctor", "--python", py, "--fix", "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert so_path(site).read_bytes() == whole
    actions = {(f["action"], f["what"]) for f in _fixes(r.stdout)}
    assert ("reinstall", "fastpack 1.0") in actions and not any(a == "drop" for a, _ in actions)
    assert "fastpack" in _installed(venv) and read_dropped(site) == []


def test_the_owner_of_a_missing_library_is_reinstalled_not_its_consumer_dropped(tmp_path):
    venv, site, py = _setup(tmp_path, stack_house(tmp_path))
    lib = site / "ownerlib" / "lib" / "libwhgone.so.1"
    whole = lib.read_bytes()
    lib.unlink()
    dry = wh("drop", "--python", py, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    out = json.loads(dry.stdout)
    assert "consumer" not in [d["name"] for d in out["dropped"]]
    assert any(k["name"] == "consumer" and "ownerlib" in k["reason"] for k in out["not_dropped"])
    assert any(r["name"] == "ownerlib" for r in out["reinstall"])
    r = wh("doctor", "--python", py, "--fix", "--json", "--check", "native:consumer", "--check", "native:ownerlib")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert lib.read_bytes() == whole and {"consumer", "ownerlib"} <= _installed(venv)
    assert ("reinstall", "ownerlib 1.0") in {(f["action"], f["what"]) for f in _fixes(r.stdout)}


def test_a_missing_requirement_is_installed_not_its_consumer_dropped(tmp_path):
    venv, site, py = _setup(tmp_path, stack_house(tmp_path))
    subprocess.run([str(py), "-c", "import shutil, glob, sys; [shutil.rmtree(p) for p in "
                    f"glob.glob({str(site)!r} + '/reqlib*')]"], check=True)
    assert "reqlib" not in _installed(venv)
    r = wh("doctor", "--python", py, "--fix", "--json", "--check", "native:needsreq", "--check", "deps")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert {"needsreq", "reqlib"} <= _installed(venv)
    assert ("reinstall", "reqlib 1.0") in {(f["action"], f["what"]) for f in _fixes(r.stdout)}


def test_a_requirement_that_fails_is_dropped_with_its_dependents_named_and_they_are_kept(tmp_path):
    venv, site, py = _setup(tmp_path, stack_house(tmp_path))
    r = wh("drop", "--python", py, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [(d["name"], d["dependents"]) for d in out["dropped"]] == [("basepkg", ["midpkg"])]
    assert any(k["name"] == "midpkg" and "basepkg" in k["reason"] for k in out["not_dropped"])
    assert "basepkg" not in _installed(venv) and "midpkg" in _installed(venv)
    assert "required by midpkg" in r.stderr
    assert [e["name"] for e in read_dropped(site)] == ["basepkg"]
    assert read_dropped(site)[0]["dependents"] == ["midpkg"]


def test_fix_keeps_what_the_wheelhouse_requested_unless_told(tmp_path):
    venv, site, py = _setup(tmp_path, stack_house(tmp_path, requested=("midpkg",)))
    r = wh("doctor", "--python", py, "--fix", "--json", "--check", "native:basepkg", "--check", "native:midpkg")
    assert r.returncode == 1
    kept = {f["what"]: f["reason"] for f in _fixes(r.stdout) if f["action"] == "not-dropped"}
    assert "requested by the wheelhouse" in kept["basepkg 1.0"] and "basepkg" in _installed(venv)
    assert not any(f["action"] == "drop" for f in _fixes(r.stdout))
    r = wh("doctor", "--python", py, "--fix", "--include-requested", "--json", "--check", "native:basepkg")
    assert ("drop", "basepkg 1.0") in {(f["action"], f["what"]) for f in _fixes(r.stdout)}
    assert "basepkg" not in _installed(venv)


def test_fix_keeps_what_a_wheelhouse_installed_from_an_archive_requested(tmp_path):
    """Before: the requested names were read from <recorded source>/wh.json, which a `wh pack` archive is not, so
    --fix dropped basepkg, the closure of the stack's request, once the install came from the archive."""
    archive = tmp_path / "carried" / "wh.tar"
    packed = wh("pack", stack_house(tmp_path, requested=("midpkg",)), "-o", archive)
    assert packed.returncode == 0, packed.stderr
    venv = tmp_path / "venv"
    installed = wh("install", archive, "--venv", venv)
    assert installed.returncode == 0, installed.stderr
    r = wh("doctor", "--python", venv / "bin" / "python", "--fix", "--json",
           "--check", "native:basepkg", "--check", "native:midpkg")
    assert r.returncode == 1
    kept = {f["what"]: f["reason"] for f in _fixes(r.stdout) if f["action"] == "not-dropped"}
    assert "requested by the wheelhouse" in kept["basepkg 1.0"] and "basepkg" in _installed(venv)
    assert not any(f["action"] == "drop" for f in _fixes(r.stdout))


@pytest.mark.parametrize("how", ["raise", "signal"])
def test_a_broken_shadow_copy_never_drops_the_installed_one(tmp_path, how):
    venv, site, py = _setup(tmp_path, fastpack_house(tmp_path))
    shadow = tmp_path / "checkout"
    (shadow / "fastpack").mkdir(parents=True)
    body = "raise ImportError('the checkout is broken')\n" if how == "raise" else "import os\nos.kill(os.getpid(), 11)\n"
    (shadow / "fastpack" / "__init__.py").write_text(body)
    env = {"PYTHONPATH": str(shadow)}
    r = wh("drop", "--python", py, "--json", env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["dropped"] == [] and "fastpack" in _installed(venv)
    assert any(k["name"] == "fastpack" and str(shadow) in k["reason"] for k in out["not_dropped"])
    fix = wh("doctor", "--python", py, "--fix", "--json", "--check", "native:fastpack", env=env)
    assert not any(f["action"] == "drop" for f in _fixes(fix.stdout)) and "fastpack" in _installed(venv)


def _consumer_of(tmp_path, helper_init: str) -> Path:
    """``nativeapp`` (a healthy gcc-built extension) that requires and imports the pure-Python ``purehelper``,
    whose ``__init__`` is ``helper_init``; installed by pip-like unpacking (no wh record: judged whole)."""
    from broken_packages import _ext, install_dist, make_venv

    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "purehelper", {"purehelper/__init__.py": helper_init}, {})
    install_dist(py, tmp_path / "w", "nativeapp",
                 {"nativeapp/__init__.py": "import purehelper\npurehelper.setup()\nfrom ._core import answer\n"},
                 {f"nativeapp/_core{sysconfig.get_config_var('EXT_SUFFIX')}": _ext(build, "_core")},
                 requires=["purehelper"])
    return py


def test_a_healthy_importer_of_a_broken_pure_python_requirement_is_not_dropped(tmp_path):
    # purehelper raises on import; it has no extension, so no probe of its own fails: only nativeapp's does, with
    # a traceback that ends in purehelper's file. Dropping nativeapp would remove working code and keep the fault.
    py = _consumer_of(tmp_path, "raise RuntimeError('purehelper is broken')\ndef setup():\n    pass\n")
    r = wh("drop", "--dry-run", "--python", py, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert not out["dropped"], out
    kept = [k for k in out["not_dropped"] if k["name"] == "nativeapp"]
    assert kept and "its requirement purehelper" in kept[0]["reason"], out


def test_an_importer_whose_call_fails_inside_a_requirement_that_imports_alone_is_still_dropped(tmp_path):
    # The traceback ends in purehelper's file too, but purehelper imports on its own (as torch does when
    # torch.ops.load_library raises for a broken extension's library): the importer is what fails, and is dropped.
    py = _consumer_of(tmp_path, "def setup():\n    raise RuntimeError('nativeapp called setup wrongly')\n")
    r = wh("drop", "--dry-run", "--python", py, "--json")
    assert r.returncode == 0, r.stderr
    assert [d["name"] for d in json.loads(r.stdout)["dropped"]] == ["nativeapp"], r.stdout


def test_a_broken_plugin_a_framework_imports_is_dropped_and_the_healthy_plugin_kept(tmp_path):
    # fw (pure Python) imports every registered plugin at import: badplug's undefined symbol breaks `import fw`,
    # and so every plugin's import. The one to drop is badplug; fw only fails through it, goodplug through fw.
    from broken_packages import _ext, install_dist, make_venv

    build = tmp_path / "build"
    build.mkdir()
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    py = make_venv(tmp_path / "venv")
    fw = ("from importlib.metadata import entry_points\nfor ep in entry_points(group='fw.plugins'):\n"
          "    __import__(ep.value)\n")
    install_dist(py, tmp_path / "w", "fw", {"fw/__init__.py": fw}, {})
    for name, core in (("goodplug", _ext(build, "_core")), ("badplug", _ext(build, "_core", "WH_UNDEF"))):
        install_dist(py, tmp_path / "w", name, {f"{name}/__init__.py": "import fw\nfrom ._core import answer\n"},
                     {f"{name}/_core{suffix}": core}, requires=["fw"],
                     entry_points={"fw.plugins": {name: f"{name}._core"}})
    r = wh("drop", "--dry-run", "--python", py, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [d["name"] for d in out["dropped"]] == ["badplug"], out
    assert any(k["name"] == "goodplug" and "badplug" in k["reason"] for k in out["not_dropped"]), out


def test_fix_keeps_what_an_extra_the_wheelhouse_asked_for_requires(tmp_path):
    """wh.json's inputs ask for app[gpu], whose gpu extra requires gpukern: --fix dropped gpukern as if nothing had
    asked for it (the requested closure followed requirements without their extras); app requiring it directly
    kept it."""
    from broken_packages import _ext, _tags
    from nvidia_fixtures import make_wheelhouse
    from wheelmaker import make_wheel

    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    w = tmp_path / "w"
    kern = make_wheel(w, "gpukern", "1.0", tags=_tags(), modules={"gpukern/__init__.py": "from ._core import answer\n"},
                      files={f"gpukern/_core{suffix}": _ext(tmp_path, "_core", "WH_UNDEF")})
    app = make_wheel(w, "app", "1.0", extras={"gpu": ["gpukern"]}, modules={"app/__init__.py": "X = 1\n"})
    venv, site, py = _setup(tmp_path, make_wheelhouse(tmp_path / "house", [app, kern],
                                                      extra_meta={"inputs": {"requirements": ["app[gpu]"]}}))
    r = wh("doctor", "--python", py, "--fix", "--json", "--check", "native:gpukern")
    assert r.returncode == 1
    kept = {f["what"]: f["reason"] for f in _fixes(r.stdout) if f["action"] == "not-dropped"}
    assert "requested by the wheelhouse" in kept["gpukern 1.0"], _fixes(r.stdout)
    assert "gpukern" in _installed(venv)


def test_fix_keeps_what_an_extra_asked_by_a_plain_requirement_requires(tmp_path):
    """The wheelhouse asks for app, which requires lib[fast]; lib's fast extra requires gpukern: --fix dropped gpukern
    (the requested closure kept the names of plain requirements and lost the extras they ask), then deps was red."""
    from broken_packages import _ext, _tags
    from nvidia_fixtures import make_wheelhouse
    from wheelmaker import make_wheel

    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    w = tmp_path / "w"
    kern = make_wheel(w, "gpukern", "1.0", tags=_tags(), modules={"gpukern/__init__.py": "from ._core import answer\n"},
                      files={f"gpukern/_core{suffix}": _ext(tmp_path, "_core", "WH_UNDEF")})
    lib = make_wheel(w, "lib", "1.0", extras={"fast": ["gpukern"]}, modules={"lib/__init__.py": ""})
    app = make_wheel(w, "app", "1.0", requires=["lib[fast]"], modules={"app/__init__.py": ""})
    venv, site, py = _setup(tmp_path, make_wheelhouse(tmp_path / "house", [app, lib, kern],
                                                      extra_meta={"inputs": {"requirements": ["app"]}}))
    r = wh("doctor", "--python", py, "--fix", "--json", "--check", "native:gpukern")
    kept = {f["what"]: f["reason"] for f in _fixes(r.stdout) if f["action"] == "not-dropped"}
    assert "requested by the wheelhouse" in kept.get("gpukern 1.0", ""), _fixes(r.stdout)
    assert "gpukern" in _installed(venv)


def test_damage_of_counts_a_sourceless_module_and_not_the_byte_code_cache(tmp_path):
    """An emptied sourceless core.pyc is damage (code: a reinstall mends it), as stack:files judges it; a .pyc under
    __pycache__/ is the interpreter's to rewrite."""
    import importlib.util
    import marshal
    from broken_packages import install_wheel, make_venv, site_packages
    from wheelhouse.doctor.repair import damage_of
    from wheelmaker import make_wheel

    code = importlib.util.MAGIC_NUMBER + b"\0" * 12 + marshal.dumps(compile("X = 1\n", "core.py", "exec"))
    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "srcless", "1.0", files={
        "srcless/__init__.pyc": code, "srcless/core.pyc": code, "srcless/__pycache__/x.cpython-311.pyc": code}))
    site = site_packages(py)
    info = next(site.glob("srcless-1.0.dist-info"))
    assert damage_of(info) == []
    (site / "srcless" / "core.pyc").write_bytes(b"")
    (site / "srcless" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")
    assert damage_of(info) == ["srcless/core.pyc does not match its RECORD sha256"]


def test_damage_of_is_no_damage_where_another_build_of_the_release_wrote_the_file(tmp_path):
    """Two builds of one release both ship vis/ (opencv-python and -headless): the one installed last wrote its
    bytes over the other's copy. stack:files calls that no change; the repair planner judges it the same (before:
    "a damaged install: reinstalled instead", where only its own RECORD was read)."""
    from broken_packages import install_wheel, make_venv, site_packages
    from wheelhouse.doctor.repair import _graph, damage_of
    from wheelhouse.target.interpreter import inspect_interpreter
    from wheelmaker import make_wheel

    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "w", "vis-gui", "1.0",
                                 modules={"vis/__init__.py": "", "vis/core.py": "A = 1\n"}))
    install_wheel(py, make_wheel(tmp_path / "w", "vis-headless", "1.0",
                                 modules={"vis/__init__.py": "", "vis/core.py": "A = 2\n"}))
    info = next(site_packages(py).glob("vis_gui-1.0.dist-info"))
    assert damage_of(info) == ["vis/core.py does not match its RECORD sha256"]  # its own RECORD alone
    assert damage_of(info, _graph(inspect_interpreter(str(py)))) == []
    (site_packages(py) / "vis" / "core.py").write_text("A = 3\n")  # neither's bytes: damage
    assert damage_of(info, _graph(inspect_interpreter(str(py)))) == ["vis/core.py does not match its RECORD sha256"]


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_damaged_file_the_wheel_placed_outside_site_packages_is_mended_not_dropped(tmp_path, damage):
    """Hostile round 9: a file a wheel's ``.data/`` put in the environment (RECORD row ``../../../share/...``) was
    not judged by the repair: its package, failing to import for want of it, was dropped by `wh drop` (and by
    `--fix` where pip had installed it) instead of reinstalled."""
    from broken_packages import _ext, _tags
    from nvidia_fixtures import make_wheelhouse
    from wheelmaker import make_wheel

    build = tmp_path / "build"
    build.mkdir()
    init = ("import os, sys\nfrom ._core import answer\n"
            "path = os.path.join(sys.prefix, 'share', 'datapkg', 'table.txt')\n"
            "if open(path).read() != 'rows\\n' * 50:\n    raise RuntimeError('table damaged')\n")
    wheel = make_wheel(tmp_path / "w", "datapkg", "1.0", tags=_tags(), modules={"datapkg/__init__.py": init},
                       files={f"datapkg/_core{sysconfig.get_config_var('EXT_SUFFIX')}": _ext(build, "_core"),
                              "datapkg-1.0.data/data/share/datapkg/table.txt": "rows\n" * 50})
    venv, site, py = _setup(tmp_path, make_wheelhouse(tmp_path / "house", [wheel]))
    table = venv / "share" / "datapkg" / "table.txt"
    if damage == "deleted":
        table.unlink()
    else:
        table.write_text("rows\n")
    dry = wh("drop", "--dry-run", "--python", py, "--json")
    out = json.loads(dry.stdout)
    assert not out["dropped"], out
    [kept] = [k for k in out["not_dropped"] if k["name"] == "datapkg"]
    assert "a damaged install" in kept["reason"] and "share/datapkg/table.txt" in kept["reason"], kept
    fix = wh("doctor", "--fix", "--python", py, "--json")
    assert [(f["action"], f["what"]) for f in _fixes(fix.stdout) if f["action"] in ("drop", "reinstall")] == [
        ("reinstall", "datapkg 1.0")], fix.stdout
    assert table.read_text() == "rows\n" * 50 and "datapkg" in _installed(venv)
    assert wh("doctor", "--python", py).returncode == 0


def test_a_failing_stray_build_no_record_lists_is_named_and_its_distribution_kept(tmp_path):
    """Hostile round 9: a broken `lazy/_core.cpython-311-*.so`, listed by no RECORD, beside the healthy listed
    `_core.abi3.so` wins the import; `--fix` dropped lazy (every file of it healthy) and left the stray file failing."""
    from broken_packages import _ext, _tags
    from nvidia_fixtures import make_wheelhouse
    from wheelmaker import make_wheel

    build = tmp_path / "build"
    build.mkdir()
    ok, undef = _ext(build, "_core"), _ext(build, "_core", "WH_UNDEF")
    wheels = [make_wheel(tmp_path / "w", "lazy", "1.0", tags=_tags(), files={"lazy/_core.abi3.so": ok},
                         modules={"lazy/__init__.py": "def answer():\n    from ._core import answer\n    return answer()\n"}),
              make_wheel(tmp_path / "w", "app", "1.0", modules={"app/__init__.py": "X = 1\n"})]
    house = make_wheelhouse(tmp_path / "house", wheels, extra_meta={"inputs": {"requirements": ["app"]}})
    venv, site, py = _setup(tmp_path, house)
    stray = site / "lazy" / f"_core{sysconfig.get_config_var('EXT_SUFFIX')}"
    stray.write_bytes(undef)
    fix = wh("doctor", "--fix", "--python", py, "--json")
    fixes = _fixes(fix.stdout)
    assert not any(f["action"] == "drop" for f in fixes), fixes
    [kept] = [f for f in fixes if f["action"] == "not-dropped"]
    assert str(stray) in kept["reason"] and "listed by no installed distribution's RECORD" in kept["reason"], kept
    assert "lazy" in _installed(venv) and (site / "lazy" / "_core.abi3.so").is_file()


def test_a_requirement_declared_under_an_extra_is_upstream_too(tmp_path):
    """Hostile round 9: midpkg imports basepkg, which it requires under `extra == "fast"`; basepkg raises. The
    upstream rule read plain requirements only: midpkg was dropped with basepkg, and not named as its dependent."""
    from broken_packages import _ext, _tags
    from nvidia_fixtures import make_wheelhouse
    from wheelmaker import make_wheel

    build = tmp_path / "build"
    build.mkdir()
    ok, core = _ext(build, "_core"), f"_core{sysconfig.get_config_var('EXT_SUFFIX')}"
    w = tmp_path / "w"
    wheels = [make_wheel(w, "basepkg", "1.0", tags=_tags(), files={f"basepkg/{core}": ok},
                         modules={"basepkg/__init__.py": "from ._core import answer\nraise RuntimeError('broken')\n"}),
              make_wheel(w, "midpkg", "1.0", tags=_tags(), extras={"fast": ["basepkg"]}, files={f"midpkg/{core}": ok},
                         modules={"midpkg/__init__.py": "from ._core import answer\nimport basepkg\n"})]
    venv, site, py = _setup(tmp_path, make_wheelhouse(tmp_path / "house", wheels))
    r = wh("drop", "--dry-run", "--python", py, "--json")
    out = json.loads(r.stdout)
    assert [(d["name"], d["dependents"]) for d in out["dropped"]] == [("basepkg", ["midpkg"])], out
    assert any(k["name"] == "midpkg" and "its requirement basepkg fails" in k["reason"] for k in out["not_dropped"])


@pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")
def test_a_stale_copy_of_a_requirement_first_on_sys_path_drops_nothing(tmp_path):
    """Hostile round 10: an old checkout of helperlib on the caller's PYTHONPATH (no dist-info) made plugin's
    import fail (`cannot import name 'new_api' from 'helperlib' (/dev/src/helperlib/__init__.py)`); --fix and
    `wh drop` uninstalled plugin, which works, and left the copy. The guard against another copy covered only the
    dropped distribution's own names."""
    from nvidia_fixtures import make_wheelhouse
    from wheelmaker import make_wheel

    helper = make_wheel(tmp_path / "w", "helperlib", "2.0", modules={"helperlib/__init__.py": "def new_api():\n"
                                                                                                 "    return 2\n"})
    from broken_packages import _ext, _tags

    build = tmp_path / "build"
    build.mkdir()
    plugin = make_wheel(tmp_path / "w", "plugin", "1.0", requires=["helperlib>=2"], tags=_tags(),
                        modules={"plugin/__init__.py": "from helperlib import new_api\nfrom ._core import answer\n"},
                        files={f"plugin/_core{sysconfig.get_config_var('EXT_SUFFIX')}": _ext(build, "_core")})
    venv, site, py = _setup(tmp_path, make_wheelhouse(tmp_path / "house", [plugin, helper]))
    dev = tmp_path / "devsrc" / "helperlib"
    dev.mkdir(parents=True)
    (dev / "__init__.py").write_text("def old_api():\n    return 1\n")
    env = {"PYTHONPATH": str(dev.parent)}
    dry = wh("drop", "--python", py, "--dry-run", "--json", env=env)
    assert not json.loads(dry.stdout).get("dropped"), dry.stdout
    r = wh("doctor", "--python", py, "--fix", "--json", "--include-requested", env=env)
    kept = [f for f in _fixes(r.stdout) if f["action"] == "not-dropped" and f["what"].startswith("plugin")]
    assert kept and "a copy no installed distribution's RECORD lists" in kept[0]["reason"], _fixes(r.stdout)
    assert (site / "plugin" / "__init__.py").exists()
    assert subprocess.run([py, "-c", "import plugin"], env={k: v for k, v in os.environ.items()
                                                            if k != "PYTHONPATH"}).returncode == 0


_LOADS_ITS_PLUGINS = """from ._core import answer
def _load_backends():
    from importlib.metadata import entry_points
    for ext in entry_points(group="fw.backends"):
        try:
            ext.load()()
        except Exception as err:
            raise RuntimeError(f"Failed to load the backend extension: {ext.name}") from err
_load_backends()
"""


@pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")
@pytest.mark.parametrize("plugin", ["raises", "names a module it does not ship"])
def test_a_broken_plugin_a_framework_loads_at_import_drops_the_plugin_not_the_framework(tmp_path, plugin):
    """Hostile round 10: a framework that loads its entry-point plugins at import and re-raises their failure (torch
    >= 2.5 does so for `torch.backends`): a pure-Python plugin that fails made `wh drop` uninstall the intact
    framework, and its dependents lost it, while the broken plugin stayed."""
    from broken_packages import _ext, _tags
    from nvidia_fixtures import make_wheelhouse
    from wheelmaker import make_wheel

    build = tmp_path / "build"
    build.mkdir()
    fw = make_wheel(tmp_path / "w", "fw", "2.5.0", tags=_tags(), modules={"fw/__init__.py": _LOADS_ITS_PLUGINS},
                    files={f"fw/_core{sysconfig.get_config_var('EXT_SUFFIX')}": _ext(build, "_core")})
    body = "import fwplug_missing_dep\ndef autoload():\n    pass\n" if plugin == "raises" else "def autoload():\n    pass\n"
    target = "fwplug.backend:autoload" if plugin == "raises" else "fwplug.gone:autoload"
    plug = make_wheel(tmp_path / "w", "fwplug", "1.0", requires=["fw"], entry_points={"fw.backends": {"plug": target}},
                      modules={"fwplug/__init__.py": "", "fwplug/backend.py": body})
    venv, site, py = _setup(tmp_path, make_wheelhouse(tmp_path / "house", [fw, plug]))
    r = wh("drop", "--python", py)
    assert (site / "fw" / "__init__.py").exists(), r.stdout + r.stderr
    assert "its import fails in fwplug, which requires it" in r.stdout + r.stderr
