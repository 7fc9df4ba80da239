"""`wh install --reinstall`: a damaged install is installed again from the wheelhouse, even at the same version.

Before: with fastpack's ``_cmsgpack`` .so truncated, `wh install` (also `--only fastpack`) answered
"installed 0, already there 2" and left the file as it was; nothing could mend it short of a new venv.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import have_toolchain
from repair_fixtures import damage_so, fastpack_house, so_path

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def wh(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "COLUMNS": "300"})


def _imports(venv: Path, module: str) -> bool:
    return subprocess.run([str(venv / "bin" / "python"), "-c", f"import {module}"], capture_output=True,
                          cwd="/").returncode == 0


@pytest.fixture
def damaged(tmp_path):
    house = fastpack_house(tmp_path)
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv)
    assert r.returncode == 0, r.stderr
    site = venv / "lib" / PY / "site-packages"
    whole = damage_so(site)
    assert not _imports(venv, "fastpack")
    return house, venv, site, whole


def test_a_plain_install_leaves_the_damage_and_reinstall_restores_it_byte_identical(damaged):
    house, venv, site, whole = damaged
    plain = wh("install", house, "--venv", venv, "--only", "fastpack")
    assert plain.returncode == 0 and "already there 1" in plain.stderr  # the same version is there: skipped
    assert so_path(site).read_bytes() != whole
    r = wh("install", house, "--venv", venv, "--reinstall", "fastpack", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert [(d["name"], d["version"], d["replaced"]) for d in report["installed"]] == [("fastpack", "1.0", "1.0")]
    assert so_path(site).read_bytes() == whole and _imports(venv, "fastpack") and _imports(venv, "app")
    assert not (site / ".wh" / "journal.json").exists()  # committed


def test_reinstall_without_a_wheelhouse_takes_the_recorded_one(damaged, tmp_path):
    house, venv, site, whole = damaged
    r = wh("install", "--reinstall", "fastpack", "--venv", venv, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"reinstalling from the recorded wheelhouse {house}" in r.stderr and "installed 1" in r.stderr
    assert so_path(site).read_bytes() == whole


def test_reinstall_alone_reinstalls_every_distribution(damaged):
    house, venv, site, whole = damaged
    r = wh("install", house, "--venv", venv, "--reinstall", "--json")
    assert r.returncode == 0, r.stderr
    assert sorted(d["name"] for d in json.loads(r.stdout)["installed"]) == ["app", "fastpack"]
    assert so_path(site).read_bytes() == whole


def test_reinstall_verifies_the_wheel_before_touching_the_damaged_install(damaged):
    """A wheel in the wheelhouse that does not match its lock's sha256 is refused; the environment is as it was."""
    house, venv, site, whole = damaged
    wheel = next((house / "wheels").glob("fastpack-*.whl"))
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    before = so_path(site).read_bytes()
    r = wh("install", house, "--venv", venv, "--reinstall", "fastpack")
    assert r.returncode != 0 and "sha256" in r.stderr and "Traceback" not in r.stderr
    assert so_path(site).read_bytes() == before


def test_reinstall_of_a_name_wh_did_not_install_names_the_next_step(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    r = wh("install", "--reinstall", "fastpack", "--venv", venv, cwd=tmp_path)
    assert r.returncode == 2 and "no wheelhouse is recorded for it" in r.stderr
    assert "hint: name the wheelhouse: `wh install WHEELHOUSE --reinstall fastpack --venv" in r.stderr
