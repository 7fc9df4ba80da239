"""The verdict cache: a re-run reuses a passing import verdict only while everything it loaded is unchanged.

Through the real ``wh doctor`` (a subprocess, ``--json``), on a real venv with gcc-built extension modules.
Each test asserts by the report's evidence (``data.reused`` / ``data.executed``), never by timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _ext, have_toolchain, install_dist, make_venv

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
ALPHA = {"alpha", "alpha._core", "alpha.sub._ext"}  # every module native:alpha judges
BETA = {"beta", "beta._core", "beta.sub._ext"}


@pytest.fixture(scope="module")
def exts(tmp_path_factory) -> dict[str, bytes]:
    build = tmp_path_factory.mktemp("verdict-exts")
    return {"core": _ext(build, "_core"), "ext": _ext(build, "_ext")}


@pytest.fixture
def stack(tmp_path, exts) -> Path:
    """alpha (a top-level extension and a lazy one), beta (needs betadep, another distribution's module)."""
    py = make_venv(tmp_path / "venv")
    for name in ("alpha", "beta"):
        install_dist(py, tmp_path / "wheels", name,
                     {f"{name}/__init__.py": "from ._core import answer\n" + ("import betadep\n" if name == "beta" else ""),
                      f"{name}/sub/__init__.py": ""},
                     {f"{name}/_core{SUFFIX}": exts["core"], f"{name}/sub/_ext{SUFFIX}": exts["ext"]})
    install_dist(py, tmp_path / "wheels", "betadep", {"betadep.py": "VALUE = 1\n"}, {})
    return py


def _doctor(py: Path, tmp_path: Path, *args: str, env: dict | None = None) -> dict[str, dict]:
    env = {**os.environ, "WH_CACHE_DIR": str(tmp_path / "cache"), **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "native",
                           "--jobs", "4", "--json", *args], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return {r["id"]: r for r in json.loads(proc.stdout)["results"]}


def _executed(results: dict[str, dict], cid: str) -> set[str]:
    return set(results[cid]["data"]["executed"])


def _reused(results: dict[str, dict], cid: str) -> set[str]:
    return set(results[cid]["data"]["reused"])


def test_a_rerun_of_an_unchanged_stack_executes_nothing_and_says_so(stack, tmp_path):
    first = _doctor(stack, tmp_path)
    assert first["native:alpha"]["verdict"] == first["native:beta"]["verdict"] == "ok"
    assert _executed(first, "native:alpha") == ALPHA and not _reused(first, "native:alpha")
    again = _doctor(stack, tmp_path)
    for cid in ("native:alpha", "native:beta"):
        assert again[cid]["verdict"] == "ok"
        assert _executed(again, cid) == set(), again[cid]
        assert _reused(again, cid) == _executed(first, cid)
        assert "ok (unchanged since " in again[cid]["evidence"]


def test_a_rewritten_extension_is_executed_again_and_turns_red(stack, tmp_path):
    _doctor(stack, tmp_path)
    site = Path(next((stack.parent.parent / "lib").glob("python*/site-packages")))
    (site / "alpha" / "sub" / f"_ext{SUFFIX}").write_bytes(b"\x7fELF but not really a shared object")
    after = _doctor(stack, tmp_path)
    assert after["native:alpha"]["verdict"] == "fail"
    assert "alpha.sub._ext" in _executed(after, "native:alpha")
    assert _reused(after, "native:beta") == BETA  # it never loaded alpha's file


def test_an_edited_dependency_file_re_executes_what_loaded_it(stack, tmp_path):
    _doctor(stack, tmp_path)
    site = Path(next((stack.parent.parent / "lib").glob("python*/site-packages")))
    (site / "betadep.py").write_text("raise ImportError('betadep was edited into a broken state')\n")
    after = _doctor(stack, tmp_path)
    assert after["native:beta"]["verdict"] == "fail"
    assert "betadep was edited" in after["native:beta"]["evidence"]
    assert "beta" in _executed(after, "native:beta")
    assert _reused(after, "native:alpha") == ALPHA


def test_an_edited_py_file_of_the_package_itself_is_executed_again(stack, tmp_path):
    _doctor(stack, tmp_path)
    site = Path(next((stack.parent.parent / "lib").glob("python*/site-packages")))
    init = site / "alpha" / "__init__.py"
    init.write_text(init.read_text() + "X = 2\n")  # still fine: executed again, still green
    after = _doctor(stack, tmp_path)
    assert after["native:alpha"]["verdict"] == "ok"
    assert _executed(after, "native:alpha") == ALPHA


def test_a_changed_library_path_executes_every_probe_again(stack, tmp_path):
    _doctor(stack, tmp_path)
    after = _doctor(stack, tmp_path, env={"LD_LIBRARY_PATH": str(tmp_path)})
    for cid in ("native:alpha", "native:beta"):
        assert _reused(after, cid) == set() and _executed(after, cid), after[cid]


def test_thorough_executes_every_probe_again(stack, tmp_path):
    _doctor(stack, tmp_path)
    after = _doctor(stack, tmp_path, "--thorough")
    for cid in ("native:alpha", "native:beta"):
        assert _reused(after, cid) == set() and "unchanged since" not in after[cid]["evidence"]
    assert _executed(after, "native:alpha") == ALPHA


def test_a_crash_in_a_shared_worker_changes_no_other_verdict_and_is_never_reused(stack, tmp_path):
    """--jobs 1: every module shares one worker; the crash is confirmed alone, the others stay ok."""
    site = Path(next((stack.parent.parent / "lib").glob("python*/site-packages")))
    install_dist(stack, tmp_path / "wheels", "crashy",
                 {"crashy/__init__.py": "X = 1\n", "crashy/sub/__init__.py": "import ctypes\nctypes.string_at(0)\n"},
                 {f"crashy/sub/_ext{SUFFIX}": (site / "alpha" / "sub" / f"_ext{SUFFIX}").read_bytes()})
    for _ in range(2):
        env = {**os.environ, "WH_CACHE_DIR": str(tmp_path / "cache")}
        proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(stack), "--check",
                               "native", "--jobs", "1", "--json"], capture_output=True, text=True, env=env, timeout=300)
        results = {r["id"]: r for r in json.loads(proc.stdout)["results"]}
        assert results["native:alpha"]["verdict"] == results["native:beta"]["verdict"] == "ok"
        assert results["native:crashy"]["verdict"] == "fail" and "SIGSEGV" in results["native:crashy"]["evidence"]
        assert "crashy.sub._ext" in _executed(results, "native:crashy")  # a failure is executed every run
    assert _reused(results, "native:alpha") == ALPHA


def test_the_loader_facts_are_reused_only_while_unchanged_and_the_evidence_says_so(stack, tmp_path):
    def sharedlibs(*extra: str) -> dict:
        env = {**os.environ, "WH_CACHE_DIR": str(tmp_path / "cache")}
        proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(stack), "--check",
                               "sharedlibs:alpha", "--json", *extra], capture_output=True, text=True, env=env, timeout=300)
        return {r["id"]: r for r in json.loads(proc.stdout)["results"]}["sharedlibs:alpha"]

    first = sharedlibs()
    assert first["verdict"] == "ok" and "unchanged since" not in first["evidence"]
    again = sharedlibs()
    assert again["verdict"] == "ok" and "the loader's facts are unchanged since" in again["evidence"]
    assert "unchanged since" not in sharedlibs("--thorough")["evidence"]


_EVIDENCE_OF_A_PROCESS = r"""
import json, mmap, os, sys, tempfile
sys.path.insert(0, sys.argv[1])
from _probe_channel import Evidence
shared = mmap.mmap(-1, 1 << 16, flags=mmap.MAP_SHARED)  # shows in /proc/self/maps as "/dev/zero (deleted)", as
# the CUDA driver's shared memory does in every GPU probe
fd, path = tempfile.mkstemp(suffix=".bin")
os.write(fd, b"x" * 4096)
kept = mmap.mmap(fd, 4096, flags=mmap.MAP_SHARED)  # a real file, mapped and then deleted: a replaced file
os.unlink(path)
print(json.dumps({"deps": Evidence().new(), "deleted": path}))
"""


def test_shared_anonymous_memory_is_no_evidence_but_a_deleted_mapped_file_is(tmp_path):
    """A GPU probe maps "/dev/zero (deleted)": read as a replaced file, no GPU probe's pass was ever reused (seen
    on the H100 box: jit:triton executed on every re-run). A really deleted file still keeps a verdict fresh."""
    probes = Path(__file__).resolve().parents[2] / "doctor" / "probes"
    out = subprocess.run([sys.executable, "-c", _EVIDENCE_OF_A_PROCESS, str(probes)], capture_output=True, text=True,
                         check=True)
    record = json.loads(out.stdout)
    paths = {entry[0]: entry for entry in record["deps"]}
    assert not [p for p in paths if p.startswith("/dev/")]
    assert paths[record["deleted"]][1:] == [-1, -1, -1, -1, -1]


def test_byte_code_written_after_a_pass_is_a_change_even_where_none_was_read(stack, tmp_path):
    """No byte code was there when beta passed (PYTHONDONTWRITEBYTECODE): betadep's import compiled its source.
    A .pyc that appears later at betadep's cache path is what the next import reads (its header matches the
    source, so the source's identity is unchanged): the pass must not be reused over it."""
    import importlib._bootstrap_external as bx
    import marshal  # noqa: F401 - the pyc's body is marshalled code

    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    site = Path(next((stack.parent.parent / "lib").glob("python*/site-packages")))
    (site / "__pycache__").mkdir(exist_ok=True)  # the folder is there already: only a file appears in it
    (site / "__pycache__" / "other.txt").write_text("x")
    first = _doctor(stack, tmp_path, env=env)
    assert first["native:beta"]["verdict"] == "ok"
    source = site / "betadep.py"
    st = source.stat()
    code = compile("raise ImportError('planted byte code')\n", str(source), "exec")
    pyc = Path(bx.cache_from_source(str(source)))
    pyc.write_bytes(bytes(bx._code_to_timestamp_pyc(code, st.st_mtime, st.st_size)))
    after = _doctor(stack, tmp_path, env=env)
    assert after["native:beta"]["verdict"] == "fail", after["native:beta"]
    assert "planted byte code" in after["native:beta"]["evidence"]
    assert "beta" in _executed(after, "native:beta")
