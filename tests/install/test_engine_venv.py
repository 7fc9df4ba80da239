"""The engine's venv is the engine's: `wh install --venv V --system-site-packages` never ties V to wh's own
environment (issue 29.10).

Before: made with wh's own interpreter (the default, or named), the venv got ``_wh_parent_venv.pth`` pointing
into wh's venv: the wheelhouse's own distributions that wh's environment holds (rich, click, packaging) were
skipped as "already there" and loaded from there, and moving wh's venv broke the engine's imports.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"
BASE = os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def wh(*args, path: str | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")} | {"NO_COLOR": "1", "COLUMNS": "300"}
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


def _wh_only() -> tuple[str, str]:
    """A distribution wh's own environment holds that the base interpreter does not hold at that version."""
    for name in ("resolvelib", "packaging", "rich", "click"):
        version = importlib.metadata.version(name)
        base = subprocess.run([BASE, "-c", f"import importlib.metadata as m; print(m.version({name!r}))"],
                              capture_output=True, text=True, cwd="/")
        if base.stdout.strip() != version:
            return name, version
    pytest.skip("the base interpreter holds every one of wh's requirements at wh's versions")


def _house(tmp_path: Path) -> tuple[Path, str, str]:
    """A wheelhouse holding one of wh's own requirements at the very version wh's environment has (a stand-in)."""
    name, version = _wh_only()
    wheel = make_wheel(tmp_path / "w", name, version, modules={f"{name}/__init__.py": "ENGINE_COPY = 1\n"})
    return make_wheelhouse(tmp_path / "house", [wheel]), name, version


def _check_own(venv: Path, name: str, version: str) -> None:
    site = venv / "lib" / PY / "site-packages"
    assert not list(site.glob("*.pth")), [p.read_text() for p in site.glob("*.pth")]  # no link into wh's env
    assert (site / f"{name}-{version}.dist-info").is_dir()  # installed here, not left to wh's copy
    where = subprocess.run([str(venv / "bin" / "python"), "-c", f"import {name}; print({name}.__file__)"],
                           capture_output=True, text=True, cwd="/", check=True).stdout.strip()
    assert where.startswith(str(site)), where
    assert str(Path(sys.prefix).resolve()) not in (venv / "pyvenv.cfg").read_text()


def test_named_wh_interpreter_makes_a_venv_from_its_base_not_tied_to_wh(tmp_path):
    house, name, version = _house(tmp_path)
    venv = tmp_path / "engine"
    r = wh("install", house, "--venv", venv, "--system-site-packages", "--python", sys.executable, "--json")
    assert r.returncode == 0, r.stderr
    assert [d["name"] for d in json.loads(r.stdout)["installed"]] == [name]
    assert f"is wh's own environment: the venv is made with its base {getattr(sys, '_base_executable', '')}" in r.stderr
    _check_own(venv, name, version)


def test_by_default_the_python3_on_path_that_is_not_whs_own_makes_the_venv_and_is_named(tmp_path):
    house, name, version = _house(tmp_path)
    other = tmp_path / "other-bin"
    other.mkdir()
    (other / "python3").symlink_to(BASE)
    own_bin = str(Path(sys.executable).parent)  # wh's own venv first on PATH (as after `source wh-venv/bin/activate`)
    venv = tmp_path / "engine"
    r = wh("install", house, "--venv", venv, "--system-site-packages", path=f"{own_bin}:{other}:/usr/bin:/bin")
    assert r.returncode == 0, r.stderr
    assert f"note: the venv is made with {other / 'python3'} (the python3 on PATH, not wh's own interpreter)" in r.stderr
    _check_own(venv, name, version)
