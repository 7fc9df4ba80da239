"""Hostile review of the delta contract: what `wh install` itself writes must not break what a delta assumed.

The image is a real venv (tests/install/test_assumed.py's fixtures): torchy 2.11.0+cu130 and numpyish 2.0.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from broken_packages import install_wheel, make_venv
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel

_spec = importlib.util.spec_from_file_location("_assumed_cases", Path(__file__).with_name("test_assumed.py"))
_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cases)
TORCH, _dist, _delta = _cases.TORCH, _cases._dist, _cases._delta


def wh(*args):
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          timeout=180)


def test_a_second_wheelhouse_replacing_what_a_delta_assumed_is_refused(tmp_path):
    # The delta assumes the image's numpyish 2.0; installed together with a full wheelhouse that holds
    # numpyish 2.5, the box passes the check before the install and no longer provides 2.0 after it.
    image = make_venv(tmp_path / "image")
    install_wheel(image, _dist(tmp_path / "w", "torchy", TORCH))
    install_wheel(image, _dist(tmp_path / "w", "numpyish", "2.0"))
    other = make_wheelhouse(tmp_path / "full", [make_wheel(tmp_path / "wn", "numpyish", "2.5",
                                                           modules={"numpyish/__init__.py": "VERSION = '2.5'\n"})])
    venv = tmp_path / "venv"
    r = wh("install", _delta(tmp_path), other, "--python", image, "--venv", venv, "--system-site-packages")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "numpyish" in r.stderr and "2.0" in r.stderr and "2.5" in r.stderr, r.stderr
    assert not venv.exists()
