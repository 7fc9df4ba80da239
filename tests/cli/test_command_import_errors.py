"""A command whose module fails to import says why: the error names the import error (a typo in wh's own
code reads as one, not as a packaging problem), and under WH_DEBUG=1 it surfaces with its traceback."""

from __future__ import annotations

import os
import subprocess
import sys

# `wh doctor` run through wh's real entry point, with wheelhouse.cli.doctor failing to import the way a typo
# in it would (a name that is not there).
BROKEN = """
import importlib, sys
real = importlib.import_module
def import_module(name, *a, **k):
    if name == "wheelhouse.cli.doctor":
        raise ImportError("cannot import name 'run_doctr' from 'wheelhouse.doctor'")
    return real(name, *a, **k)
importlib.import_module = import_module
from wheelhouse.cli import main
sys.argv = ["wh", "doctor", "--json"]
main()
"""


def _run(**env):
    full = {k: v for k, v in os.environ.items() if k != "WH_DEBUG"} | env
    return subprocess.run([sys.executable, "-c", BROKEN], capture_output=True, text=True, env=full, timeout=60)


def test_an_import_error_names_itself_not_a_build_without_the_command():
    r = _run()
    assert r.returncode != 0
    assert "not available in this build" not in r.stderr
    assert "cannot import name 'run_doctr'" in r.stderr, r.stderr
    assert "WH_DEBUG=1" in r.stderr
    assert "Traceback" not in r.stderr


def test_under_wh_debug_the_import_error_surfaces_with_its_traceback():
    r = _run(WH_DEBUG="1")
    assert r.returncode != 0
    assert "Traceback (most recent call last)" in r.stderr, r.stderr
    assert "ImportError: cannot import name 'run_doctr'" in r.stderr
