"""native: what to import comes from the files and the target interpreter's import rules (issue 28, findings 4-6).

Real venvs, gcc-built extension modules, and files for another target made from them: another CPython by
the file name, another architecture by a crafted ELF header (``e_machine``). Each was a false green: the
doctor never imported what the engine's import would die on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _ext, have_toolchain, install_dist, make_venv
from wheelhouse.doctor import run_doctor

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")  # .cpython-311-x86_64-linux-gnu.so
HERE = f"cp{sys.version_info[0]}{sys.version_info[1]}"
MACHINE = __import__("platform").machine()
OTHER = f"cp{sys.version_info[0]}{sys.version_info[1] + 1}"
EM_AARCH64 = 183


def _as_aarch64(so: bytes) -> bytes:
    """The same shared object with its ELF header saying aarch64 (e_machine at offset 18)."""
    return so[:18] + EM_AARCH64.to_bytes(2, "little") + so[20:]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, bytes]:
    build = tmp_path_factory.mktemp("discovery-build")
    return {"ok": _ext(build, "_ext"), "undef": _ext(build, "_ext", "WH_UNDEF"), "rust": _ext(build, "_rust"),
            "libpy_undef": _ext(build, "libpyext", "WH_UNDEF"), "libpy_ok": _ext(build, "libpyext")}


def _doctor(py: Path, *checks: str):
    return run_doctor(str(py), checks=list(checks) or ["native"], timeout=20)


def test_a_package_in_record_that_top_level_txt_leaves_out_is_imported(tmp_path, built):
    # An incomplete top_level.txt (seen on the H200 image): `bad` is in RECORD, importable, and raises.
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "partial", {"good/__init__.py": "from ._ext import answer\n",
                                                 "bad/__init__.py": "raise ImportError('bad needs a missing piece')\n"},
                 {f"good/_ext{SUFFIX}": built["ok"], "partial-1.0.dist-info/top_level.txt": "good\n"})
    r = _doctor(py).get("native:partial")
    assert r.verdict == "fail", r.evidence
    assert "import bad: ImportError: bad needs a missing piece" in r.evidence
    assert r.data["modules"][:2] == ["good", "bad"]  # top_level.txt orders, RECORD decides


def test_an_extension_built_for_another_cpython_is_a_fail_naming_both_targets(tmp_path, built):
    py = make_venv(tmp_path / "venv")
    other = SUFFIX.replace(HERE[2:], OTHER[2:], 1)  # .cpython-312-x86_64-linux-gnu.so
    install_dist(py, tmp_path / "w", "wrongpy", {"wrongpy/__init__.py": "X = 1\n"},
                 {f"wrongpy/_ext{other}": built["ok"]})
    report = _doctor(py)
    r = report.get("native:wrongpy")
    assert r.verdict == "fail", r.evidence
    assert (f"wrongpy/_ext{other}: built for {OTHER}/{MACHINE}; this interpreter is {HERE}/{MACHINE}: "
            "the wheelhouse was staged for another target") in r.evidence
    assert r.data["foreign"][0]["module"] == "wrongpy._ext" and "drop" not in r.data  # re-stage, not drop
    assert "wh stage" in r.hint
    assert report.exit_code() == 1


def test_an_extension_built_for_another_architecture_is_a_fail_in_native_and_sharedlibs(tmp_path, built):
    py = make_venv(tmp_path / "venv")
    # By its ELF header: this interpreter's own suffix, an aarch64 object.
    install_dist(py, tmp_path / "w", "wrongarch", {"wrongarch/__init__.py": "X = 1\n"},
                 {f"wrongarch/_ext{SUFFIX}": _as_aarch64(built["ok"])})
    # By its name: an x86_64 object named for aarch64.
    install_dist(py, tmp_path / "w2", "namedarch", {"namedarch/__init__.py": "X = 1\n"},
                 {f"namedarch/_ext{SUFFIX.replace(MACHINE, 'aarch64')}": built["ok"]})
    report = _doctor(py, "native", "sharedlibs")
    r = report.get("native:wrongarch")
    assert r.verdict == "fail", r.evidence
    assert f"built for {HERE}/aarch64; this interpreter is {HERE}/{MACHINE}: the wheelhouse was staged" in r.evidence
    assert report.get("native:namedarch").verdict == "fail"
    assert f"built for {HERE}/aarch64; this interpreter is {HERE}/{MACHINE}" in report.get("native:namedarch").evidence
    # sharedlibs no longer says "built for another machine, not checked: ok" about a Python extension.
    s = report.get("sharedlibs:wrongarch")
    assert s.verdict == "fail", s.evidence
    assert "built for another machine" in s.evidence and "Python extension" in s.evidence


def test_another_targets_build_beside_this_ones_is_only_named(tmp_path, built):
    # A wheel that carries builds for two CPythons: the import system loads this one's; the other is never loaded.
    py = make_venv(tmp_path / "venv")
    other = SUFFIX.replace(HERE[2:], OTHER[2:], 1)
    install_dist(py, tmp_path / "w", "twobuilds", {"twobuilds/__init__.py": "from ._ext import answer\n"},
                 {f"twobuilds/_ext{SUFFIX}": built["ok"], f"twobuilds/_ext{other}": built["undef"]})
    r = _doctor(py).get("native:twobuilds")
    assert r.verdict == "ok", r.evidence
    assert f"another target's build, never loaded here: twobuilds/_ext{other}" in r.evidence


def test_a_stale_file_the_import_system_picks_first_is_imported_by_name(tmp_path, built):
    # A broken _rust.cpython-311-x86_64-linux-gnu.so beside a healthy _rust.abi3.so: the first suffix wins.
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "stalerust", {"stalerust/__init__.py": "X = 1\n",
                                                   "stalerust/bindings/__init__.py": ""},
                 {"stalerust/bindings/_rust.abi3.so": built["rust"], f"stalerust/bindings/_rust{SUFFIX}": b"\0" * 64})
    r = _doctor(py).get("native:stalerust")
    assert r.verdict == "fail", r.evidence
    assert "import stalerust.bindings._rust:" in r.evidence
    assert f"stalerust/bindings/_rust{SUFFIX}" in r.evidence  # the file that failed
    assert "never loaded: the import system takes" in r.evidence and "_rust.abi3.so" in r.evidence


def test_a_lib_so_that_exports_pyinit_is_an_extension_module_and_is_imported(tmp_path, built):
    # triton's libtriton.so exports PyInit_libtriton: a module, though named like a library.
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "tritonlike", {"tritonlike/__init__.py": "X = 1\n",
                                                    "tritonlike/_C/__init__.py": ""},
                 {"tritonlike/_C/libpyext.so": built["libpy_undef"]})
    install_dist(py, tmp_path / "w2", "tritonok", {"tritonok/__init__.py": "X = 1\n", "tritonok/_C/__init__.py": ""},
                 {"tritonok/_C/libpyext.so": built["libpy_ok"]})
    report = _doctor(py)
    bad = report.get("native:tritonlike")
    assert bad.verdict == "fail", bad.evidence
    assert "import tritonlike._C.libpyext:" in bad.evidence and "undefined symbol: wh_missing_symbol" in bad.evidence
    ok = report.get("native:tritonok")
    assert ok.verdict == "ok", ok.evidence
    assert "tritonok._C.libpyext" in ok.data["modules"] and ok.data["libraries"] == []


def test_wh_doctor_json_exits_1_for_a_wheelhouse_staged_for_another_target(tmp_path, built):
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "w", "wrongarch", {"wrongarch/__init__.py": "X = 1\n"},
                 {f"wrongarch/_ext{SUFFIX}": _as_aarch64(built["ok"])})
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "native",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    (r,) = [c for c in json.loads(proc.stdout)["results"] if c["id"] == "native:wrongarch"]
    assert r["verdict"] == "fail" and "staged for another target" in r["evidence"]


@pytest.mark.parametrize("tag, built_for", [
    ("cpython-312-aarch64-linux-gnu.so", "cp312/aarch64"),
    ("cpython-311-x86_64-linux-musl.so", "cp311/x86_64/musl"),
    ("cpython-313t-x86_64-linux-gnu.so", "cp313t/x86_64"),
    ("pypy310-pp73-x86_64-linux-gnu.so", "pp310/x86_64"),
    ("cp312-win_amd64.pyd", "cp312/win_amd64"),
])
def test_the_target_a_file_name_was_built_for_is_named_as_wheel_tags_name_it(tag, built_for):
    from wheelhouse.doctor.extensions import describe_tag

    assert describe_tag(tag) == built_for


@pytest.mark.parametrize("style", ["pep420", "pkgutil"])
def test_a_package_under_a_namespace_whose_init_raises_fails_though_its_extension_loaded_first(tmp_path, style):
    """Hostile round 9: acme/broken/__init__.py imports ._core, then raises; the failed import left acme.broken._core
    in sys.modules, so importing it by name "succeeded" and native was ok (exit 0) while `import acme.broken` and
    `import acme.broken._core` both raise in a fresh process."""
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    mods = {"acme/broken/__init__.py": "from ._core import answer\nraise RuntimeError('acme.broken is broken')\n"}
    if style == "pkgutil":
        mods["acme/__init__.py"] = "__path__ = __import__('pkgutil').extend_path(__path__, __name__)\n"
    install_dist(py, tmp_path / "w", "acme-broken", mods, {f"acme/broken/_core{SUFFIX}": _ext(build, "_core")})
    r = run_doctor(str(py), checks=["native"]).get("native:acme-broken")
    assert r.verdict == "fail", r.evidence
    assert "its package acme.broken failed to import: RuntimeError: acme.broken is broken" in r.evidence
