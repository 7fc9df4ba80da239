"""The verdict cache keeps a warning, never a fail: a lazily loaded module whose failure the data names optional.

CuPy's ``cupyx._cutensor`` without libcutensor (doctor/optional.toml, sharedlibs.toml: an optional backend) is a
warning the stock image shows every run; executing it again each run was most of an unchanged re-run there. It is
stored keyed by its process's evidence plus what could change its cause (its own file, which a failed dlopen does
not map; the loader's configuration; the folders of LD_LIBRARY_PATH and of the module's RUNPATH); each test
changes one of them and sees the module executed again. Through the real ``wh doctor`` (a subprocess,
``--json``), a real venv, gcc-built extension modules; asserted by the report's evidence, never by timing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _ext, _gcc, have_toolchain, install_dist, make_venv, site_packages

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
MOD = "cupyx._cutensor"
CID = "native:cupy-cuda13x"
SONAME = "libcutensor.so.2"


def _cutensor(build: Path, runpath: str) -> tuple[Path, bytes]:
    """libcutensor.so.2 built in ``build``, and the bytes of a ``_cutensor`` extension module that needs it, its
    RUNPATH ``runpath``."""
    lib = build / SONAME
    src = build / "cutensor.c"
    src.write_text("int whgone_value(void) { return 7; }\n")
    _gcc(["-shared", "-fPIC", f"-Wl,-soname,{SONAME}", str(src), "-o", str(lib)])
    return lib, _ext(build, "_cutensor", "WH_NEEDLIB",
                     extra=[f"-L{build}", f"-l:{SONAME}", f"-Wl,-rpath,{runpath}", "-Wl,--enable-new-dtags"])


@pytest.fixture
def image(tmp_path) -> dict[str, Path]:
    """cupy-cuda13x whose ``cupyx/_cutensor`` needs libcutensor.so.2 (built, kept aside, absent) and has a RUNPATH
    folder that exists and is empty."""
    build = tmp_path / "build"
    build.mkdir()
    runpath = tmp_path / "runpath"
    runpath.mkdir()
    lib, ext = _cutensor(build, str(runpath))
    kept = tmp_path / "kept" / SONAME
    kept.parent.mkdir()
    lib.rename(kept)
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "wheels", "cupy-cuda13x", {"cupy/__init__.py": "X = 1\n", "cupyx/__init__.py": "X = 1\n"},
                 {f"cupyx/_cutensor{SUFFIX}": ext})
    return {"python": py, "lib": kept, "runpath": runpath, "site": site_packages(py), "build": build}


def _doctor(image: dict[str, Path], tmp_path: Path, *args: str, env: dict | None = None) -> dict:
    env = {**{k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}, "WH_CACHE_DIR": str(tmp_path / "cache"),
           **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(image["python"]), "--check",
                           "native", "--jobs", "2", "--json", *args], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return {r["id"]: r for r in json.loads(proc.stdout)["results"]}[CID]


def _warned_then_reused(image, tmp_path, env: dict | None = None) -> None:
    first = _doctor(image, tmp_path, env=env)
    assert first["verdict"] == "warn" and first["strict"] is False, first["evidence"]
    assert MOD in first["data"]["executed"] and SONAME in first["evidence"]
    again = _doctor(image, tmp_path, env=env)
    assert again["verdict"] == "warn" and again["strict"] is False, again["evidence"]
    assert MOD in again["data"]["reused"] and MOD not in again["data"]["executed"]
    assert "a warning stored" in again["evidence"] and "reused" in again["evidence"]


def test_an_optional_warning_is_reused_while_nothing_changed_and_says_so(image, tmp_path):
    _warned_then_reused(image, tmp_path)
    thorough = _doctor(image, tmp_path, "--thorough")
    assert thorough["verdict"] == "warn" and MOD in thorough["data"]["executed"]
    assert "a warning stored" not in thorough["evidence"]


def test_the_library_appearing_in_a_folder_of_ld_library_path_executes_it_again(image, tmp_path):
    folder = tmp_path / "ldpath"
    folder.mkdir()
    env = {"LD_LIBRARY_PATH": str(folder)}
    _warned_then_reused(image, tmp_path, env)
    shutil.copy(image["lib"], folder / SONAME)
    after = _doctor(image, tmp_path, env=env)
    assert after["verdict"] == "ok", after["evidence"]
    assert MOD in after["data"]["executed"]


def test_the_library_appearing_in_the_modules_runpath_executes_it_again(image, tmp_path):
    _warned_then_reused(image, tmp_path)
    shutil.copy(image["lib"], image["runpath"] / SONAME)
    after = _doctor(image, tmp_path)
    assert after["verdict"] == "ok", after["evidence"]
    assert MOD in after["data"]["executed"]


def test_the_modules_own_file_replaced_executes_it_again(image, tmp_path):
    """A failed dlopen maps nothing: the module's file is keyed apart (here rebuilt without the need, same path)."""
    _warned_then_reused(image, tmp_path)
    path = image["site"] / "cupyx" / f"_cutensor{SUFFIX}"
    path.write_bytes(_ext(image["build"], "_cutensor"))
    after = _doctor(image, tmp_path)
    assert MOD in after["data"]["executed"]
    assert after["verdict"] in ("ok", "fail")  # RECORD's sha256 differs now; the import itself loads


def test_a_stored_warning_that_would_now_be_a_fail_is_executed_again(image, tmp_path):
    """The manifest names it an entry module: reached by the stack, its failure is a fail, which is never reused."""
    _warned_then_reused(image, tmp_path)
    manifest = tmp_path / "wh.toml"
    manifest.write_text(f'[stack]\nname = "cupy"\nrequirements = ["cupy-cuda13x"]\n\n[doctor]\nentry = ["{MOD}"]\n')
    after = _doctor(image, tmp_path, "--manifest", str(manifest))
    assert after["verdict"] == "fail", after["evidence"]
    assert MOD in after["data"]["executed"] and MOD not in after["data"]["reused"]
    assert "a warning stored" not in after["evidence"]


_MAPPED_COPY = """import ctypes, sys
ctypes.CDLL(sys.argv[1])
print(next(line.split(None, 5)[5].strip() for line in open("/proc/self/maps") if line.rstrip().endswith(sys.argv[2])))
"""


def test_the_library_appearing_in_a_runpath_folder_named_with_lib_executes_it_again(tmp_path):
    """RUNPATH ``/deps/$LIB``: the loader expands ``$LIB`` to its own folder name (Debian's ``lib/x86_64-linux-gnu``,
    elsewhere ``lib64``), which the loader probe reads from the target's ``ld.so``; the witness searches where
    that loader searches (wheelhouse.elf's resolution), so the library appearing there executes it again."""
    build = tmp_path / "build"
    build.mkdir()
    deps = tmp_path / "deps"
    lib, ext_bytes = _cutensor(build, f"{deps}/$LIB")
    lib = lib.rename(tmp_path / SONAME)  # not in build/: nothing but the RUNPATH may find it
    # Which folder the real loader takes for $LIB here: a copy in each candidate, load once, see which is mapped.
    candidates = [deps / "lib64", deps / "lib", deps / "lib" / f"{os.uname().machine}-linux-gnu"]
    for folder in candidates:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(lib, folder / SONAME)
    (build / f"probe{SUFFIX}").write_bytes(ext_bytes)
    mapped = subprocess.run([sys.executable, "-c", _MAPPED_COPY, str(build / f"probe{SUFFIX}"), SONAME],
                            capture_output=True, text=True, check=True).stdout.strip()
    for folder in candidates:
        (folder / SONAME).unlink()
    searched = Path(mapped).parent
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "wheels", "cupy-cuda13x", {"cupy/__init__.py": "X = 1\n", "cupyx/__init__.py": "X = 1\n"},
                 {f"cupyx/_cutensor{SUFFIX}": ext_bytes})
    image = {"python": py}
    _warned_then_reused(image, tmp_path)
    shutil.copy(lib, searched / SONAME)
    after = _doctor(image, tmp_path)
    assert after["verdict"] == "ok", after["evidence"]
    assert MOD in after["data"]["executed"]
