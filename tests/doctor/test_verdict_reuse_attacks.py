"""Scratch: attacks on verdict reuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _ext, _gcc, have_toolchain, install_dist, make_venv, site_packages

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
SONAME = "libwhdep.so.1"


def _doctor(py: Path, tmp_path: Path, env: dict | None = None, *args: str) -> dict[str, dict]:
    env = {**{k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}, "WH_CACHE_DIR": str(tmp_path / "cache"),
           **(env or {})}
    env = {k: v for k, v in env.items() if v is not None}
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "native",
                           "--jobs", "2", "--json", *args], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return {r["id"]: r for r in json.loads(proc.stdout)["results"]}


def _lib(folder: Path, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "dep.c"
    src.write_text(body)
    _gcc(["-shared", "-fPIC", f"-Wl,-soname,{SONAME}", str(src), "-o", str(folder / SONAME)])
    src.unlink()


@pytest.mark.parametrize("how", ["runpath", "ld_library_path"])
def test_a_same_soname_library_appearing_earlier_on_the_search_path(tmp_path, how):
    early, late, build = tmp_path / "early", tmp_path / "late", tmp_path / "build"
    early.mkdir()
    build.mkdir()
    _lib(late, "int whgone_value(void) { return 7; }\n")
    extra = [f"-L{late}", f"-l:{SONAME}"]
    if how == "runpath":
        extra += [f"-Wl,-rpath,{early}:{late}", "-Wl,--enable-new-dtags"]
    ext = _ext(build, "_core", "WH_NEEDLIB", extra=extra)
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": "from ._core import answer\n"},
                 {f"omega/_core{SUFFIX}": ext})
    env = {"LD_LIBRARY_PATH": f"{early}:{late}"} if how == "ld_library_path" else {}
    first = _doctor(py, tmp_path, env)
    assert first["native:omega"]["verdict"] == "ok", first["native:omega"]
    _lib(early, "int other_value(void) { return 1; }\n")  # the same soname, without whgone_value
    assert _doctor(py, tmp_path, env, "--thorough")["native:omega"]["verdict"] == "fail"
    after = _doctor(py, tmp_path, env)
    assert after["native:omega"]["verdict"] == "fail", after["native:omega"]


def test_a_pth_file_rewritten_in_place(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    (good / "omegadep.py").write_text("VALUE = 1\n")
    (bad / "omegadep.py").write_text("raise ImportError('the other checkout')\n")
    py = make_venv(tmp_path / "venv")
    site = install_dist(py, tmp_path / "wheels", "omega", {"omega/__init__.py": "import omegadep\nfrom ._core import answer\n"},
                        {f"omega/_core{SUFFIX}": _ext(tmp_path, "_core")})
    pth = site / "__editable__.omegadep-1.0.pth"
    pth.write_text(f"{good}\n")
    first = _doctor(py, tmp_path)
    assert first["native:omega"]["verdict"] == "ok", first["native:omega"]
    with open(pth, "w") as fh:  # in place, as an editor or a re-install does
        fh.write(f"{bad}\n")
    assert _doctor(py, tmp_path, None, "--thorough")["native:omega"]["verdict"] == "fail"
    after = _doctor(py, tmp_path)
    assert after["native:omega"]["verdict"] == "fail", after["native:omega"]
