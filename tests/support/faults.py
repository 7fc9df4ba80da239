"""Run a real wh command with a fault injected at a named point (see wheelhouse/faults.py).

    proc = run_with_fault(["stage", "-o", out, ...], "stage.swap.between-renames")
    assert proc.returncode == -signal.SIGKILL

``cmd`` is the list of arguments after ``wh`` (a leading "wh" is accepted and dropped).
Keyword arguments go to subprocess.run (env is merged over os.environ; text and
capture_output default to True).
"""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["run_with_fault", "wh_command"]


def wh_command(cmd) -> list[str]:
    """The argv that runs ``wh <cmd...>`` with this interpreter."""
    args = [str(c) for c in cmd]
    if args and args[0] == "wh":
        args = args[1:]
    return [sys.executable, "-c", "import sys; from wheelhouse.cli import main; main(sys.argv[1:])", *args]


def run_with_fault(cmd, point: str, action: str = "kill", **kw) -> subprocess.CompletedProcess:
    """Run ``wh cmd`` with WH_FAULT=point:action; returns the CompletedProcess (SIGKILL: returncode -9)."""
    env = dict(os.environ)
    env.update(kw.pop("env", None) or {})
    env["WH_FAULT"] = f"{point}:{action}"
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 300)
    return subprocess.run(wh_command(cmd), env=env, **kw)
