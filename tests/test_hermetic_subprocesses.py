"""Subprocesses in tests are as hermetic as the tests themselves: uv, run as a peer, is given its
interpreter, downloads none, reads no configuration of the machine, and reaches nothing but loopback
(before, the uv-parity scenarios searched for, and tried to download, a CPython from the internet:
8.9 s each instead of 1.6 s)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from uv_tool import run_uv, uv_binary

TESTS = Path(__file__).resolve().parent
# what starting uv by hand looks like: its path beside the interpreter, on PATH, or a WH_UV override
_BY_HAND = re.compile(r'''/ "uv"|which\("uv"\)|\["uv",|"WH_UV"''')


def test_every_uv_call_in_tests_goes_through_the_hermetic_runner():
    offenders = [f"{p.relative_to(TESTS)}:{n}" for p in sorted(TESTS.rglob("*.py")) if p.name != "uv_tool.py"
                 and p != Path(__file__).resolve()
                 for n, line in enumerate(p.read_text().splitlines(), 1) if _BY_HAND.search(line)]
    assert offenders == [], "start uv with tests/support/uv_tool.run_uv: " + ", ".join(offenders)


needs_uv = pytest.mark.skipif(uv_binary() is None, reason="uv is not installed (pip install uv, or set WH_UV)")


@needs_uv
def test_uv_gets_the_test_interpreter_and_downloads_none(pyindex, wheel_factory, tmp_path):
    """A resolve for another Python version than the interpreter's is answered at once, by the
    interpreter it was given (no search, no download of a CPython that matches the version)."""
    wheel_factory("one", "1.0")
    idx = pyindex(wheel_factory.folder)
    (tmp_path / "r.in").write_text("one\n")
    other = "3.12" if sys.version_info[:2] != (3, 12) else "3.11"
    t0 = time.monotonic()
    r = run_uv("pip", "compile", str(tmp_path / "r.in"), "--index-url", idx.url, "--python-version", other,
               "--no-cache", "--quiet", "--no-header", "--no-annotate")
    assert r.returncode == 0, r.stderr
    assert "one==1.0" in r.stdout
    assert time.monotonic() - t0 < 5


@needs_uv
def test_uv_reaches_nothing_beyond_loopback(tmp_path):
    """Without an index of the test's own, uv's request for the registry fails fast instead of leaving."""
    (tmp_path / "r.in").write_text("six\n")
    r = run_uv("pip", "compile", str(tmp_path / "r.in"), "--no-cache", "--quiet", timeout=30)
    assert r.returncode != 0
    assert "tunnel error" in r.stderr or "Connection refused" in r.stderr, r.stderr
