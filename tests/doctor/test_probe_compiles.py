"""Probe processes share the code they compiled when the target writes no byte code (PYTHONDONTWRITEBYTECODE).

Through the real ``wh doctor`` (a subprocess), a real venv, a gcc-built extension module. Which sources were
compiled is read from the interpreter's own ``compile`` audit event (a ``sitecustomize`` on PYTHONPATH logs it),
never from timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _ext, have_toolchain, install_dist, make_venv, site_packages

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
_LOG_COMPILES = """import os, sys
def _hook(event, args):
    if event == "compile" and isinstance(args[1], str) and args[1].endswith("shareddep.py"):
        with open(os.environ["COMPILE_LOG"], "a") as fh:
            fh.write("%d %s\\n" % (os.getpid(), args[1]))
sys.addaudithook(_hook)
"""


def test_a_source_two_probe_processes_import_is_compiled_once_and_nothing_is_written(tmp_path):
    """failer imports shareddep, then raises: it fails in its batch and is confirmed in a process of its own, which
    imports shareddep again. With no byte code written, that process compiled it again (numpy's sources, once per
    batch that imports numpy, were 5 s of CPU of a first run on the bench venv); it now loads the code the first
    one compiled. The verdict is the same, and nothing is written into the target."""
    build = tmp_path / "build"
    build.mkdir()
    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "wheels", "failer",
                 {"failer/__init__.py": "import shareddep\nraise ImportError('failer is broken')\n"},
                 {f"failer/_core{SUFFIX}": _ext(build, "_core")})
    install_dist(py, tmp_path / "wheels", "shareddep", {"shareddep.py": "VALUE = 1\n"}, {})
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(_LOG_COMPILES)
    log = tmp_path / "compiles.log"
    env = {**os.environ, "WH_CACHE_DIR": str(tmp_path / "cache"), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": str(hooks), "COMPILE_LOG": str(log)}
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "native:failer",
                           "--jobs", "1", "--json"], capture_output=True, text=True, env=env, timeout=300)
    result = {r["id"]: r for r in json.loads(proc.stdout)["results"]}["native:failer"]
    assert result["verdict"] == "fail" and "failer is broken" in result["evidence"]
    pids = {line.split()[0] for line in log.read_text().splitlines()}
    assert len(pids) == 1, log.read_text()  # compiled by one probe process, loaded by the other
    assert not list(site_packages(py).rglob("*.pyc"))


_SEES_NO_CODE_FOLDER = """import os, subprocess, sys
assert "WH_PROBE_CODE_CACHE" not in os.environ, "the code under test sees the doctor's code folder"
subprocess.run([sys.executable, "-c", "import os; assert 'WH_PROBE_CODE_CACHE' not in os.environ"], check=True)
import time
time.sleep(float(os.environ.get("SLOW_IMPORT", "0")))
from ._core import answer
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_the_code_folder_is_no_part_of_the_target_and_goes_when_the_doctor_is_stopped(tmp_path, sig):
    """Neither the module under test nor a process it starts finds the folder in its environment; a doctor stopped
    (Ctrl-C, SIGTERM) while a probe runs removes it."""
    import signal
    import time

    py = make_venv(tmp_path / "venv")
    install_dist(py, tmp_path / "wheels", "looker", {"looker/__init__.py": _SEES_NO_CODE_FOLDER},
                 {f"looker/_core{SUFFIX}": _ext(tmp_path, "_core")})
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "WH_CACHE_DIR": str(tmp_path / "cache"), "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(tmp)}
    args = [sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "native:looker", "--json"]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    result = {r["id"]: r for r in json.loads(proc.stdout)["results"]}["native:looker"]
    assert result["verdict"] == "ok", result["evidence"]
    assert not list(tmp.iterdir())
    stopped = subprocess.Popen([*args, "--thorough"], env={**env, "SLOW_IMPORT": "60"}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(tmp.glob("wh-probe-code-*/*")) and time.monotonic() < deadline:  # a probe compiled something
        time.sleep(0.1)
    assert list(tmp.glob("wh-probe-code-*/*"))
    stopped.send_signal(getattr(signal, sig))
    stopped.wait(timeout=60)
    assert not list(tmp.iterdir())
