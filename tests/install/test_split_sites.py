"""A target whose platlib is not its purelib (Fedora, RHEL, SUSE: ``lib64/`` for compiled code, ``lib/`` for the
rest). Everything wh installs must land where the interpreter's scheme says, be importable, be found again by
the next install, and every extension module there must be loaded by the doctor: one it skipped because it
looked in ``lib/`` only would be a false green.

The venv is made so with a ``sitecustomize`` that sets ``sys.platlibdir`` to ``lib64`` and adds that folder to
``sys.path``, as such a distribution's own build does; ``sysconfig`` then reports the two folders apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import build_broken_wheels, have_toolchain
from nvidia_fixtures import make_wheelhouse
from split_sites import PY, split_venv as make_split_venv
from wheelmaker import make_wheel


pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")


def wh(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(params=["apart", "linked"])
def split_venv(request, tmp_path) -> Path:
    """apart: two folders (a distribution's system site: /usr/lib and /usr/lib64); linked: ``lib64`` a link to
    ``lib`` (a venv there: two names for one folder)."""
    venv = make_split_venv(tmp_path, None if request.param == "apart" else "lib")
    paths = json.loads(subprocess.run([venv / "bin" / "python", "-c", "import json, sysconfig; "
                                       "print(json.dumps(sysconfig.get_paths()))"],
                                      capture_output=True, text=True, check=True).stdout)
    assert paths["purelib"] == str(venv / "lib" / PY / "site-packages")
    assert paths["platlib"] == str(venv / "lib64" / PY / "site-packages")
    return venv


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    w = tmp_path_factory.mktemp("wheels")
    built = build_broken_wheels(w)
    return {
        "healthy": built["healthy"],  # a compiled extension, Root-Is-Purelib: false
        "undefsym": built["undefsym"],  # the same, whose .so does not load
        "purepkg": make_wheel(w, "purepkg", "1.0", modules={"purepkg/__init__.py": "VALUE = 'pure'\n"}),
        # a pure wheel that also ships a module for platlib and one for purelib through .data
        "mixed": make_wheel(w, "mixed", "1.0", modules={"mixed/__init__.py": "X = 1\n"},
                            files={"mixed-1.0.data/platlib/mixed_native.py": "WHERE = 'platlib'\n",
                                   "mixed-1.0.data/purelib/mixed_pure.py": "WHERE = 'purelib'\n"}),
    }


def _site(venv: Path, lib: str) -> Path:
    return venv / lib / PY / "site-packages"


def test_each_file_lands_where_the_scheme_says_and_imports(split_venv, wheels, tmp_path):
    venv = split_venv
    house = make_wheelhouse(tmp_path / "house", [wheels[n] for n in ("healthy", "purepkg", "mixed")])
    r = wh("install", house, "--venv", venv, "--json")
    assert r.returncode == 0, r.stderr
    pure, plat = _site(venv, "lib"), _site(venv, "lib64")
    apart = not (venv / "lib64").is_symlink()
    assert (plat / "healthy" / "__init__.py").is_file() and (plat / "healthy-1.0.dist-info").is_dir()
    assert (pure / "purepkg" / "__init__.py").is_file()
    if apart:
        assert not (pure / "healthy").exists() and not (plat / "purepkg").exists()
    assert (pure / "mixed" / "__init__.py").is_file() and (pure / "mixed-1.0.dist-info").is_dir()
    assert (plat / "mixed_native.py").is_file() and (pure / "mixed_pure.py").is_file()
    out = subprocess.run([venv / "bin" / "python", "-c",
                          "import healthy, purepkg, mixed_native, mixed_pure; "
                          "print(healthy.answer(), purepkg.VALUE, mixed_native.WHERE, mixed_pure.WHERE)"],
                         capture_output=True, text=True)
    assert out.stdout.split() == ["42", "pure", "platlib", "purelib"], out.stderr
    # The RECORD of the platlib dist names its files where they are: pip lists it and could remove it.
    record = (plat / "healthy-1.0.dist-info" / "RECORD").read_text()
    assert "healthy/__init__.py," in record

    again = wh("install", house, "--venv", venv, "--json")  # found again in both folders: nothing to do
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["installed"] == []


def test_an_upgrade_removes_the_old_version_from_lib64(split_venv, tmp_path):
    venv = split_venv
    w = tmp_path / "w"
    tags = "py3-none-" + ("manylinux_2_17_x86_64" if sys.platform == "linux" else "any")
    old = make_wheel(w, "platonly", "1.0", tags=tags, modules={"platonly/__init__.py": "V = 1\n",
                                                                 "platonly/old_only.py": "X = 1\n"})
    new = make_wheel(tmp_path / "w2", "platonly", "2.0", tags=tags, modules={"platonly/__init__.py": "V = 2\n"})
    assert wh("install", make_wheelhouse(tmp_path / "h1", [old]), "--venv", venv).returncode == 0
    plat = _site(venv, "lib64")
    assert (plat / "platonly" / "old_only.py").is_file()
    r = wh("install", make_wheelhouse(tmp_path / "h2", [new]), "--venv", venv, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["installed"][0]["replaced"] == "1.0"
    assert not (plat / "platonly" / "old_only.py").exists() and not (plat / "platonly-1.0.dist-info").exists()
    assert (plat / "platonly-2.0.dist-info").is_dir()
    out = subprocess.run([venv / "bin" / "python", "-c", "import platonly; print(platonly.V)"], capture_output=True,
                         text=True)
    assert out.stdout.strip() == "2", out.stderr


def test_the_doctor_loads_the_extensions_in_lib64_and_a_broken_one_is_red(split_venv, wheels, tmp_path):
    venv = split_venv
    # The manifest lets the stack do without undefsym ([[drop]]): once dropped, stack:distributions is ok with it.
    house = make_wheelhouse(tmp_path / "house", [wheels[n] for n in ("healthy", "undefsym", "purepkg")],
                            extra_meta={"drops": [{"distribution": "undefsym", "module": None, "reason": "optional",
                                                   "force": False}]})
    r = wh("install", house, "--venv", venv)
    assert r.returncode == 0, r.stderr
    doc = wh("doctor", "--python", venv / "bin" / "python", "--json")
    assert doc.returncode == 1, (doc.returncode, doc.stderr[-2000:])  # red: undefsym's .so does not load
    text = doc.stdout
    assert "undefsym" in text and "wh_missing_symbol" in text, text[-3000:]
    report = json.loads(text)
    failed = [c for c in report["results"] if c["verdict"] == "fail"]
    assert [c["id"] for c in failed] == ["native:undefsym"], failed
    assert f"/{PY}/site-packages/undefsym/_core" in failed[0]["evidence"]
    # healthy's extension, in lib64 too, was loaded (not skipped) and passed.
    assert any(c["id"] == "sharedlibs:healthy" and c["verdict"] == "ok" for c in report["results"])
    assert report["counts"]["fail"] == 1

    # wh drop removes it from lib64 (find_spec is None there after), records it, and the doctor is green;
    # --restore brings it back from the wheelhouse into the same folder.
    dropped = wh("drop", "--python", venv / "bin" / "python")
    assert dropped.returncode == 0, dropped.stderr[-2000:]
    assert not (_site(venv, "lib64") / "undefsym").exists() and (_site(venv, "lib64") / "healthy").is_dir()
    green = wh("doctor", "--python", venv / "bin" / "python")
    assert green.returncode == 0, green.stdout[-2000:]
    back = wh("drop", "--python", venv / "bin" / "python", "--restore", "undefsym")
    assert back.returncode == 0, back.stderr[-2000:]
    assert (_site(venv, "lib64") / "undefsym" / "__init__.py").is_file()
