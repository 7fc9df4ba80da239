"""Hostile round 9: the doctor's false greens and lost reports.

Real gcc-built extension modules in real venvs, a second copy of a package earlier on sys.path, and a
report file that cannot be written. Each was a false green (the doctor said ok about a module the
engine cannot load) or a doctor run that lost its JSON.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

from broken_packages import have_toolchain, install_dist, make_venv
from wheelhouse.doctor import run_doctor

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


def _shadowed_install(tmp_path: Path, exts: dict[str, bytes], stray_ext: bytes | None) -> tuple[Path, dict]:
    """``shadowed`` 1.0 installed healthy in a venv, and a stray copy of its package (no .dist-info, as a
    source checkout or a ``--target`` folder) first on sys.path through PYTHONPATH; ``stray_ext``: the
    copy's build of the lazily loaded ``shadowed.sub._ext`` (None: the copy has none)."""
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "shadowed", {"shadowed/__init__.py": "X = 1\n", "shadowed/sub/__init__.py": ""},
                 {f"shadowed/sub/_ext{SUFFIX}": exts["ok"]})
    stray = tmp_path / "checkout"
    (stray / "shadowed" / "sub").mkdir(parents=True)
    (stray / "shadowed" / "__init__.py").write_text("X = 2\n")
    (stray / "shadowed" / "sub" / "__init__.py").write_text("")
    if stray_ext is not None:
        (stray / "shadowed" / "sub" / f"_ext{SUFFIX}").write_bytes(stray_ext)
    return py, {**os.environ, "PYTHONPATH": str(stray)}


def test_a_lazy_extension_a_shadowing_copy_of_its_package_serves_broken_is_a_fail(tmp_path, exts):
    # `import shadowed.sub._ext` loads the checkout's build (an undefined symbol): the installed copy's
    # healthy file is never loaded. The doctor said "loaded by its package, not by name": ok.
    py, env = _shadowed_install(tmp_path, exts, exts["undef"])
    r = run_doctor(str(py), checks=["native"], timeout=20, environ=env).get("native:shadowed")
    assert r is not None and r.verdict == "fail", r
    assert "wh_missing_symbol" in r.evidence and str(tmp_path / "checkout") in r.evidence


def test_a_lazy_extension_missing_from_a_shadowing_copy_of_its_package_is_a_fail(tmp_path, exts):
    # The checkout has no build of the extension: the engine's `import shadowed.sub._ext` raises
    # ModuleNotFoundError. The doctor said "find_spec is None: never loaded by that name": ok.
    py, env = _shadowed_install(tmp_path, exts, None)
    r = run_doctor(str(py), checks=["native"], timeout=20, environ=env).get("native:shadowed")
    assert r is not None and r.verdict == "fail", r
    assert "No module named 'shadowed.sub._ext'" in r.evidence


def test_a_healthy_shadowing_copy_outside_the_site_folders_is_a_warning_that_the_installed_copy_was_not_judged(
        tmp_path, exts):
    # The package's own choice of file is taken (no fail), but what was loaded is the checkout's, not the installed
    # files: the caller's PYTHONPATH hid a broken installed build (ok, a false green). Without it, judged again.
    py, env = _shadowed_install(tmp_path, exts, exts["ok"])
    site = next((py.parent.parent / "lib").glob("python*/site-packages"))
    (site / "shadowed" / "sub" / f"_ext{SUFFIX}").write_bytes(exts["undef"])
    r = run_doctor(str(py), checks=["native"], timeout=20, environ=env).get("native:shadowed")
    assert r is not None and r.verdict == "warn", r
    assert "the installed copy was not loaded" in r.evidence and str(tmp_path / "checkout") in r.evidence
    assert r.strict is not False and "unset PYTHONPATH" in r.hint
    bare = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    r = run_doctor(str(py), checks=["native"], timeout=20, environ=bare).get("native:shadowed")
    assert r.verdict == "fail" and "wh_missing_symbol" in r.evidence, r


def test_a_broken_shadowing_copy_is_not_mended_by_dropping_the_healthy_one(tmp_path, exts):
    # `wh drop shadowed` would uninstall the venv's healthy copy and leave the broken checkout in the
    # engine's way: the hint names the checkout instead, and --fix has nothing to run.
    py, env = _shadowed_install(tmp_path, exts, exts["undef"])
    r = run_doctor(str(py), checks=["native"], timeout=20, environ=env).get("native:shadowed")
    assert r is not None and r.verdict == "fail", r
    assert r.fix is None and "drop" not in (r.data or {})
    assert str(tmp_path / "checkout") in (r.hint or "") and "sys.path" in r.hint


def test_a_junit_file_that_cannot_be_written_does_not_cost_the_json(tmp_path, exts):
    # A disk that fills during the run: the JUnit write fails at the end. The JSON on stdout (the report
    # CI parses) was never printed, as the error was raised first; now it is, then the error, exit 2.
    import json
    import subprocess
    import sys

    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "fine", {"fine/__init__.py": "X = 1\n"}, {f"fine/_ext{SUFFIX}": exts["ok"]})
    junit = tmp_path / "reports" / "doctor.xml"
    junit.parent.mkdir()
    env = {**os.environ, "WH_FAULT": "doctor.junit:enospc"}
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "native",
                           "--json", "--junit", str(junit), "--timeout", "20"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    report = json.loads(proc.stdout)
    assert any(r["id"] == "native:fine" and r["verdict"] == "ok" for r in report["results"])
    assert "--junit" in proc.stderr and "Traceback" not in proc.stderr
    assert not junit.exists() and not list(junit.parent.iterdir())  # no temp file, no half a JUnit


@pytest.fixture(scope="module")
def cores(tmp_path_factory) -> dict[str, bytes]:
    """Builds of an extension named ``_core``: one that loads, one with an undefined symbol, and one built under
    another name (its init function PyInit_core)."""
    from broken_packages import _ext

    build = tmp_path_factory.mktemp("cores")
    return {"ok": _ext(build, "_core"), "undef": _ext(build, "_core", "WH_UNDEF"), "renamed": _ext(build, "core")}


def _lazy_core(tmp_path: Path, core: bytes) -> tuple[Path, Path]:
    """``lazy`` 1.0 whose ``lazy/_core.abi3.so`` (healthy, in RECORD) is loaded only when ``lazy.answer()`` runs."""
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "lazy", {"lazy/__init__.py": "def answer():\n    from ._core import answer\n"
                                                                  "    return answer()\n"},
                 {"lazy/_core.abi3.so": core})
    return py, py.parent.parent / "lib" / f"python{sysconfig.get_python_version()}" / "site-packages" / "lazy"


def test_a_stale_build_outside_record_that_the_import_system_prefers_is_imported_and_fails(tmp_path, cores):
    # A left-over build beside the healthy file (cryptography's `_rust`): its suffix comes first in the import
    # system's order, so `lazy.answer()` loads it and dies of an undefined symbol. Not in RECORD, it was never
    # planned; the probe said "find_spec resolves to ..., not this file": ok.
    py, pkg = _lazy_core(tmp_path, cores["ok"])
    (pkg / f"_core{SUFFIX}").write_bytes(cores["undef"])
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:lazy")
    assert r is not None and r.verdict == "fail", r
    assert "wh_missing_symbol" in r.evidence and f"_core{SUFFIX}" in r.evidence


def test_a_left_over_package_folder_of_the_same_name_is_imported_and_fails(tmp_path, cores):
    # `lazy/_core/__init__.py` beside `lazy/_core.abi3.so`: the folder wins, and it raises.
    py, pkg = _lazy_core(tmp_path, cores["ok"])
    (pkg / "_core").mkdir()
    (pkg / "_core" / "__init__.py").write_text("raise ImportError('a stale left-over package')\n")
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:lazy")
    assert r is not None and r.verdict == "fail", r
    assert "a stale left-over package" in r.evidence


def test_the_healthy_file_alone_stays_green(tmp_path, cores):
    py, _ = _lazy_core(tmp_path, cores["ok"])
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:lazy")
    assert r is not None and r.verdict == "ok", r


def test_an_extension_built_under_another_name_is_imported_and_fails_not_called_a_library(tmp_path, cores):
    # `_core.abi3.so` whose init function is PyInit_core (a renamed build): the import system asks for
    # PyInit__core and refuses it. Called "a library, link-checked" (no PyInit__core), it was never imported.
    py, _ = _lazy_core(tmp_path, cores["renamed"])
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:lazy")
    assert r is not None and r.verdict == "fail", r
    assert "does not define module export function (PyInit__core)" in r.evidence
    assert not r.data["libraries"]


def test_a_library_with_no_init_function_at_all_is_still_a_library(tmp_path):
    # torchvision's `_C.so`: loaded by path (torch.ops.load_library), no PyInit_ of any name: not imported.
    build = tmp_path / "build"
    build.mkdir()
    src = build / "lib.c"
    src.write_text("int answer(void) { return 42; }\n")
    from broken_packages import _gcc

    _gcc(["-shared", "-fPIC", str(src), "-o", str(build / "plain.so")])
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "plainlib", {"plainlib/__init__.py": "X = 1\n"},
                 {"plainlib/_C.so": (build / "plain.so").read_bytes()})
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:plainlib")
    assert r is not None and r.verdict == "ok", r
    assert r.data["libraries"] == ["plainlib/_C.so"]


@pytest.mark.parametrize("where", ["a folder named site-packages on PYTHONPATH", "a .pth's folder in site-packages",
                                   "a stray build beside the listed one"])
def test_a_copy_no_record_lists_is_a_warning_wherever_it_sits(tmp_path, exts, where):
    """Hostile round 9: a copy served from inside a folder merely named site-packages, from a folder a .pth puts
    first, or a build outside RECORD beside the listed `_ext.abi3.so`, was ok: the prefix test took any folder
    named site-packages for a site folder, and a stray build was "the name imported". What was loaded is no
    RECORD's: a warning (`--strict` counts it), as for a copy outside every site folder."""
    from broken_packages import site_packages

    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "shadowed", {"shadowed/__init__.py": "X = 1\n"},
                 {"shadowed/_ext.abi3.so": exts["ok"]})
    site, env = site_packages(py), dict(os.environ)
    if where == "a stray build beside the listed one":
        (site / "shadowed" / f"_ext{SUFFIX}").write_bytes(exts["ok"])
        seen = str(site / "shadowed" / f"_ext{SUFFIX}")
    else:
        base = tmp_path / "x" / "site-packages" if where.startswith("a folder") else site / "vendored"
        (base / "shadowed").mkdir(parents=True)
        (base / "shadowed" / "__init__.py").write_text("X = 666\n")
        (base / "shadowed" / "_ext.abi3.so").write_bytes(exts["ok"])
        if where.startswith("a folder"):
            env["PYTHONPATH"] = str(base)
        else:
            (site / "aaa-vendored.pth").write_text(f"import sys; sys.path.insert(0, {str(base)!r})\n")
        seen = str(base / "shadowed" / "__init__.py")
    r = run_doctor(str(py), checks=["native"], timeout=20, environ=env).get("native:shadowed")
    assert r is not None and r.verdict == "warn", r
    assert "no installed RECORD lists" in r.evidence and seen in r.evidence, r.evidence


@pytest.mark.parametrize("where", ["a .pth puts a copy first", "PYTHONPATH", "a file beside the listed ones"])
def test_pure_python_code_no_record_lists_that_the_stack_loads_is_a_warning(tmp_path, where):
    """Hostile round 9: the engine (`app`, pure Python) imports `mypkg`; a copy a .pth or PYTHONPATH puts first, or a
    `mypkg/core/__init__.py` added beside the listed `mypkg/core.py` (the package folder wins), was never noticed:
    only extension modules were compared with what RECORD lists. What the entry's import loads now is."""
    from broken_packages import site_packages
    from nvidia_fixtures import make_wheelhouse
    from wheelhouse.install import InstallOptions, install_wheelhouses
    from wheelmaker import make_wheel

    w = tmp_path / "w"
    wheels = [make_wheel(w, "mypkg", "1.0", modules={"mypkg/__init__.py": "from .core import answer\n",
                                                      "mypkg/core.py": "def answer():\n    return 42\n"}),
              make_wheel(w, "app", "1.0", modules={"app/__init__.py": "import mypkg\n"}, requires=["mypkg"])]
    house = make_wheelhouse(tmp_path / "house", wheels, extra_meta={"inputs": {"requirements": ["app"]}})
    install_wheelhouses([house], InstallOptions(venv=tmp_path / "venv"))
    py = tmp_path / "venv" / "bin" / "python"
    site, env = site_packages(py), dict(os.environ)
    env.pop("PYTHONPATH", None)
    r = run_doctor(str(py), checks=["native"], timeout=20, environ=env)
    assert r.get("native:unlisted-code") is None and r.get("native:entry:app").verdict == "ok"
    shadow = tmp_path / "shadow"
    if where == "a file beside the listed ones":
        (site / "mypkg" / "core").mkdir()
        seen = site / "mypkg" / "core" / "__init__.py"
        seen.write_text("def answer():\n    return 666\n")
    else:
        (shadow / "mypkg").mkdir(parents=True)
        seen = shadow / "mypkg" / "__init__.py"
        seen.write_text("def answer():\n    return 666\n")
        if where == "PYTHONPATH":
            env["PYTHONPATH"] = str(shadow)
        else:
            (site / "aaa-shadow.pth").write_text(f"import sys; sys.path.insert(0, {str(shadow)!r})\n")
    r = run_doctor(str(py), checks=["native"], timeout=20, environ=env).get("native:unlisted-code")
    assert r is not None and r.verdict == "warn", r
    assert str(seen) in r.evidence and "(importing app loads it)" in r.evidence, r.evidence


@pytest.mark.parametrize("bundle", ["legacy_bundle", "engine_legacy"])
@pytest.mark.parametrize("served", ["the entry itself", "a requirement of the entry"])
def test_another_distributions_vendored_copy_a_pth_puts_first_is_found(tmp_path, served, bundle):
    """Hostile round 10: legacy-bundle ships a vendored `engine/` (0.7) under legacy_bundle/vendor/ and a .pth hook
    that puts that folder first: `import engine` ran the vendored copy, never the locked engine 1.0, and the doctor
    (--strict) was green: the file was one SOME RECORD lists. A module under a name a RECORD ships in the site
    folder, loaded from another distribution's file at another place, is such a copy: the stack's own entry served
    so fails, a module it loads warns. A bundle folder whose name starts as the name's (engine_legacy/ for engine)
    is no place of that name either: the real-path comparison had no separator."""
    from broken_packages import site_packages
    from nvidia_fixtures import make_wheelhouse
    from wheelhouse.install import InstallOptions, install_wheelhouses
    from wheelmaker import make_wheel

    w = tmp_path / "w"
    name = "engine" if served == "the entry itself" else "mypkg"
    wheels = [make_wheel(w, "engine", "1.0", modules={"engine/__init__.py": "import mypkg\nWHO = 'locked'\n"},
                         requires=["mypkg"]),
              make_wheel(w, "mypkg", "1.0", modules={"mypkg/__init__.py": "WHO = 'locked'\n"}),
              make_wheel(w, "legacy-bundle", "1.0", modules={
                  f"{bundle}/__init__.py": "", f"{bundle}/vendor/{name}/__init__.py": "WHO = 'vendored'\n",
                  "legacy_bundle_boot.py": "import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), "
                                           f"'{bundle}', 'vendor'))\n",
                  "legacy_bundle.pth": "import legacy_bundle_boot\n"})]
    house = make_wheelhouse(tmp_path / "house", wheels, extra_meta={"inputs": {"requirements": ["engine"]}})
    install_wheelhouses([house], InstallOptions(venv=tmp_path / "venv"))
    py = tmp_path / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran = subprocess.run([py, "-c", f"import {name}; print({name}.WHO)"], capture_output=True, text=True, env=env)
    assert ran.stdout.strip() == "vendored"
    r = run_doctor(str(py), checks=["native"], timeout=20, environ=env).get("native:unlisted-code")
    assert r is not None and r.verdict == ("fail" if name == "engine" else "warn"), r
    assert f"{bundle}/vendor/{name}/__init__.py, another distribution's file at another place" in r.evidence


def test_a_name_its_own_distribution_serves_from_another_of_its_files_is_no_copy(tmp_path):
    """The box's stock image: pytest ships `py.py` and registers `py.error` from its own `_pytest/_py/error.py`;
    judged a copy at another place, native:unlisted-code warned on the image (and --strict counted it)."""
    from nvidia_fixtures import make_wheelhouse
    from wheelhouse.install import InstallOptions, install_wheelhouses
    from wheelmaker import make_wheel

    w = tmp_path / "w"
    shim = "import sys\nfrom _shimpkg import error\nsys.modules['shimname.error'] = error\n"
    wheels = [make_wheel(w, "shimpkg", "1.0", modules={"shimname.py": shim, "_shimpkg/__init__.py": "",
                                                        "_shimpkg/error.py": "X = 1\n"}),
              make_wheel(w, "app", "1.0", modules={"app/__init__.py": "import shimname\nimport shimname.error\n"},
                         requires=["shimpkg"])]
    house = make_wheelhouse(tmp_path / "house", wheels, extra_meta={"inputs": {"requirements": ["app"]}})
    install_wheelhouses([house], InstallOptions(venv=tmp_path / "venv"))
    py = tmp_path / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = run_doctor(str(py), checks=["native"], timeout=20, environ=env)
    assert r.get("native:unlisted-code") is None, r.get("native:unlisted-code")
    assert r.get("native:entry:app").verdict == "ok"
