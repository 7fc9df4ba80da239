"""The drop record under a kill: `wh drop` records before it uninstalls, so no kill loses a drop (issue 29.5).

Before: ``dropped.json`` was written after the uninstall committed; a SIGKILL between the two left the
distribution gone and no record: `wh drop --restore` said "was not dropped", `--list` showed nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import have_toolchain
from faults import run_with_fault
from repair_fixtures import raiser_house
from wheelhouse.doctor.drop import read_dropped

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"
_ENV = {"NO_COLOR": "1", "COLUMNS": "300"}


def wh(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")} | _ENV
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.fixture
def installed(tmp_path):
    house = raiser_house(tmp_path, modules=20)
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv)
    assert r.returncode == 0, r.stderr
    return venv / "bin" / "python", venv / "lib" / PY / "site-packages"


def _there(site: Path) -> bool:
    return any(site.glob("raiser-*.dist-info"))


@pytest.mark.parametrize("point", ["drop.recorded", "install.backed-up", "install.committed", "drop.uninstalled"])
def test_a_kill_anywhere_in_a_drop_never_loses_it(installed, point):
    py, site = installed
    killed = run_with_fault(["drop", "--python", py], point, env=_ENV)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    listed = wh("drop", "--python", py, "--list", "--json")
    assert listed.returncode == 0, listed.stderr
    names = [e["name"] for e in json.loads(listed.stdout)]
    # Either the uninstall did not happen (or was rolled back) and raiser is installed, not recorded; or it is gone
    # and recorded, and comes back.
    if _there(site):
        assert names == [] and read_dropped(site) == []
    else:
        assert names == ["raiser"]
        r = wh("drop", "--python", py, "--restore", "raiser")
        assert r.returncode == 0, r.stderr
        assert _there(site) and read_dropped(site) == []
    assert not (site / ".wh" / "journal.json").exists()


def test_a_kill_after_the_uninstall_committed_still_restores(installed):
    """The finding itself: killed just after the uninstall's commit, --restore brings it back."""
    py, site = installed
    killed = run_with_fault(["drop", "--python", py], "install.committed", env=_ENV)
    assert killed.returncode == -signal.SIGKILL
    assert not _there(site) and [e["name"] for e in read_dropped(site)] == ["raiser"]
    r = wh("drop", "--python", py, "--restore", "raiser")
    assert r.returncode == 0 and "restored raiser 1.0" in r.stderr, r.stderr


@pytest.mark.parametrize("point", ["install.backed-up", "install.committed", "drop.restored"])
def test_a_kill_during_restore_leaves_it_restorable_or_restored(installed, point):
    py, site = installed
    assert wh("drop", "--python", py).returncode == 0 and not _there(site)
    killed = run_with_fault(["drop", "--python", py, "--restore", "raiser"], point, env=_ENV)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    listed = json.loads(wh("drop", "--python", py, "--list", "--json").stdout)
    if not _there(site):
        assert [e["name"] for e in listed] == ["raiser"]
        assert wh("drop", "--python", py, "--restore", "raiser").returncode == 0
    assert _there(site) and read_dropped(site) == []
