"""Helpers of the stage-time bytecode tests (tests/install/test_precompiled*.py): the real CLI, a venv's
site folder, an install that must pass, and whether a module was loaded from its .pyc as it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["PY", "TAG", "wh", "site", "install", "loaded_from_pyc"]

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"
TAG = sys.implementation.cache_tag


def wh(*args, env=None, timeout=180) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, ``env`` merged over this environment."""
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          env=full, timeout=timeout)


def site(venv: Path) -> Path:
    return venv / "lib" / PY / "site-packages"


def install(house: Path, venv: Path, *extra, env=None) -> dict:
    """`wh install --compile --json`, which must pass; its report."""
    r = wh("install", house, "--venv", venv, "--compile", "--json", *extra, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def loaded_from_pyc(python: Path, module: str) -> bool:
    """Whether the interpreter took ``module`` from its .pyc as it is (python -v says "matches")."""
    r = subprocess.run([python, "-B", "-v", "-c", f"import {module}"], capture_output=True, text=True)
    return any(line.startswith("# ") and " matches " in line and f"/{module.replace('.', '/')}" in line
               for line in r.stderr.splitlines())
