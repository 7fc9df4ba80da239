"""faults: WH_FAULT=<point>[:action] stops a real process at a chosen point, and nothing else."""

from __future__ import annotations

import errno
import signal
import subprocess
import os
import sys

import pytest

from wheelhouse.faults import checkpoint

_PROG = "import sys; from wheelhouse.faults import checkpoint; checkpoint('a.point'); print('after')"


def _run(env_value):
    env = {"WH_FAULT": env_value} if env_value is not None else {}
    full = {k: v for k, v in os.environ.items() if k != "WH_FAULT"} | env
    return subprocess.run([sys.executable, "-c", _PROG], capture_output=True, text=True, env=full)


def test_kill_at_the_named_point_and_nowhere_else():
    assert _run("a.point").returncode == -signal.SIGKILL
    assert _run("a.point:kill").returncode == -signal.SIGKILL
    other = _run("another.point")
    assert other.returncode == 0 and other.stdout == "after\n"
    assert _run(None).stdout == "after\n"


@pytest.mark.parametrize("action, code", [("enospc", errno.ENOSPC), ("eio", errno.EIO)])
def test_disk_errors_are_raised_as_oserror(monkeypatch, action, code):
    monkeypatch.setenv("WH_FAULT", f"x.y:{action}")
    with pytest.raises(OSError) as info:
        checkpoint("x.y")
    assert info.value.errno == code
    checkpoint("x.z")  # another point: nothing


def test_unknown_action_is_loud(monkeypatch):
    monkeypatch.setenv("WH_FAULT", "x.y:explode")
    with pytest.raises(ValueError, match="explode"):
        checkpoint("x.y")


def test_run_with_fault_helper_runs_wh(tmp_path):
    from faults import run_with_fault
    proc = run_with_fault(["wh", "--version"], "never.reached")
    assert proc.returncode == 0, proc.stderr
