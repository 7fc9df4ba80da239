"""Libraries a package loads by path (``torch.ops.load_library``: torchvision's, torchaudio's, xformers' ``_C.so``).

No Python init function, so no import by name; their failure shows only when they are loaded, and the package's
own import swallows it (torchvision: "operator torchvision::nms does not exist" later, mid-request). Real gcc-built
libraries in real venvs, loaded the way the package loads them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import _ext, _gcc, have_toolchain, install_dist, make_venv
from wheelhouse.doctor import run_doctor

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

_LOADS_AT_IMPORT = '''import ctypes, os
HAS_OPS = False
try:  # as torchvision/extension.py: the ops library is optional at import
    ctypes.CDLL(os.path.join(os.path.dirname(__file__), "_C.so"))
    HAS_OPS = True
except OSError:
    pass
'''


def _lib(build: Path, name: str, source: str, *args: str) -> bytes:
    (build / f"{name}.c").write_text(source)
    _gcc(["-shared", "-fPIC", str(build / f"{name}.c"), "-o", str(build / f"{name}.so"), *args])
    return (build / f"{name}.so").read_bytes()


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict[str, bytes]:
    build = tmp_path_factory.mktemp("libs")
    (build / "libdep.c").write_text("int dep(void) { return 1; }\n")
    _gcc(["-shared", "-fPIC", str(build / "libdep.c"), "-o", str(build / "libwhgone.so")])
    # a stand-in libc10.so, found through the library's RUNPATH: what makes a library a torch op library
    (build / "c10").mkdir()
    _gcc(["-shared", "-fPIC", str(build / "libdep.c"), "-o", str(build / "c10" / "libc10.so")])
    torch_op = ("extern int dep(void);\nextern int abi_v2_symbol(void);\n"
                "int nms(void) { return dep() + abi_v2_symbol(); }\n")
    return {
        "torch_undef": _lib(build, "torch_undef", torch_op, f"-L{build / 'c10'}", "-lc10",
                            f"-Wl,-rpath,{build / 'c10'}", "-Wl,--no-as-needed"),
        "ok": _lib(build, "ok", "int nms(void) { return 42; }\n"),
        # built against another ABI: a symbol nothing defines (an undefined torch symbol)
        "undef": _lib(build, "undef", "extern int abi_v2_symbol(void);\nint nms(void) { return abi_v2_symbol(); }\n"),
        # a needed library that is not there: the sharedlibs check's to judge
        "gone": _lib(build, "gone", "extern int dep(void);\nint nms(void) { return dep(); }\n",
                     f"-L{build}", "-lwhgone"),
        "core": _ext(build, "_core"),
        "c10_dir": str(build / "c10"),
    }


def _venv(tmp_path: Path, libs: dict[str, bytes], lib: str, init: str) -> Path:
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "tvlike", {"tvlike/__init__.py": init + "from ._core import answer\n"},
                 {"tvlike/_C.so": libs[lib], f"tvlike/_core{__import__('sysconfig').get_config_var('EXT_SUFFIX')}":
                  libs["core"]})
    return py


def test_a_library_its_package_asks_for_at_import_that_does_not_load_is_a_fail(tmp_path, libs):
    py = _venv(tmp_path, libs, "undef", _LOADS_AT_IMPORT)
    real = subprocess.run([str(py), "-c", "import tvlike; print(tvlike.HAS_OPS)"], capture_output=True, text=True)
    assert real.stdout.strip() == "False"  # the import passes; the ops are gone
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:tvlike")
    assert r is not None and r.verdict == "fail", r
    assert "library tvlike/_C.so does not load" in r.evidence and "abi_v2_symbol" in r.evidence
    assert "asked for by its package's import" in r.evidence
    assert r.data["library_failures"][0]["path"] == "tvlike/_C.so"
    assert "drop" not in r.data and r.fix is None  # an uninstall would not bring the ops back: a matching build does
    assert "matches them" in r.hint


def test_a_torch_op_library_loaded_only_on_demand_that_does_not_load_is_a_warning_strict_counts(tmp_path, libs):
    # It links libc10: made to be loaded into a torch process (torch.ops.load_library), so wh loads it there.
    py = _venv(tmp_path, libs, "torch_undef", "")
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:tvlike")
    assert r is not None and r.verdict == "warn" and r.strict, r
    assert "loaded on demand" in r.evidence and "abi_v2_symbol" in r.evidence


def test_another_library_loaded_only_on_demand_is_not_loaded_into_the_probe(tmp_path, libs):
    # No torch op library (a plugin of some other program, say): not loaded where nothing asked for it.
    py = _venv(tmp_path, libs, "undef", "")
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:tvlike")
    assert r is not None and r.verdict == "ok", r
    assert "libraries loaded only on demand, not loaded here" in r.evidence and "tvlike/_C.so" in r.evidence


def test_a_library_that_loads_is_ok_and_said_so(tmp_path, libs):
    for how, init in (("at import", _LOADS_AT_IMPORT), ("on demand", "")):
        py = _venv(tmp_path / how.replace(" ", "-"), libs, "ok", init)
        r = run_doctor(str(py), checks=["native"], timeout=20).get("native:tvlike")
        assert r is not None and r.verdict == "ok", (how, r)
        if how == "at import":
            assert "libraries loaded after its package's import (1): tvlike/_C.so" in r.evidence
        else:
            assert "libraries loaded only on demand, not loaded here" in r.evidence


def test_a_library_missing_a_needed_library_is_left_to_sharedlibs(tmp_path, libs):
    py = _venv(tmp_path, libs, "gone", "")
    report = run_doctor(str(py), checks=["native", "sharedlibs"], timeout=20)
    assert report.get("native:tvlike").verdict == "ok", report.get("native:tvlike")
    shared = report.get("sharedlibs:tvlike")
    assert shared is not None and shared.verdict in ("warn", "fail") and "libwhgone.so" in shared.evidence


def test_a_check_id_with_colons_prints_as_written(tmp_path, libs):
    """`native:tv:` is no emoji code: the human report prints check ids as they are."""
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "tv", {"tv/__init__.py": "from ._core import answer\n"},
                 {f"tv/_core{__import__('sysconfig').get_config_var('EXT_SUFFIX')}": libs["core"]})
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    out = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "native", "-v"],
                         capture_output=True, text=True, env={**env, "WH_CACHE_DIR": str(tmp_path / "c")})
    assert "native:tv:" in out.stdout + out.stderr, out.stdout + out.stderr
    assert "\N{TELEVISION}" not in out.stdout + out.stderr


def test_a_torch_op_library_whose_load_crashes_the_process_is_not_judged(tmp_path, libs):
    # Loaded beside what its package loaded, a second library registering the same op namespace makes torch
    # abort: that says nothing of the library, so no warning; the evidence says it was not judged.
    build = tmp_path / "build"
    build.mkdir()
    crash = _lib(build, "crash", "#include <stdlib.h>\nextern int dep(void);\n"
                 "__attribute__((constructor)) static void init(void) { abort(); }\nint nms(void) { return dep(); }\n",
                 f"-L{Path(libs['c10_dir'])}", "-lc10", f"-Wl,-rpath,{libs['c10_dir']}", "-Wl,--no-as-needed")
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "tvlike", {"tvlike/__init__.py": "from ._core import answer\n"},
                 {"tvlike/_C.so": crash,
                  f"tvlike/_core{__import__('sysconfig').get_config_var('EXT_SUFFIX')}": libs["core"]})
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:tvlike")
    assert r is not None and r.verdict == "ok", r
    assert "libraries not judged here" in r.evidence and "tvlike/_C.so" in r.evidence


def test_a_build_its_package_tried_and_passed_over_for_another_is_no_failure(tmp_path, libs):
    # One build per ABI: the package tries the newer one, falls back to the older, which loads. Nothing is missing.
    init = ('import ctypes, os\nLOADED = None\nfor cand in ("_C_v2.so", "_C_v1.so"):\n    try:\n'
            '        ctypes.CDLL(os.path.join(os.path.dirname(__file__), cand))\n        LOADED = cand\n        break\n'
            '    except OSError:\n        pass\nassert LOADED\nfrom ._core import answer\n')
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "fb", {"fb/__init__.py": init},
                 {"fb/_C_v1.so": libs["ok"], "fb/_C_v2.so": libs["undef"],
                  f"fb/_core{__import__('sysconfig').get_config_var('EXT_SUFFIX')}": libs["core"]})
    r = run_doctor(str(py), checks=["native"], timeout=20).get("native:fb")
    assert r is not None and r.verdict == "ok", r
    assert "passed over, loading another" in r.evidence and "fb/_C_v2.so" in r.evidence
