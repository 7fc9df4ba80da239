"""Hostile review of carrying: inputs a careless copy or an attacker would make, each a false green before.

The wheelhouse is the real small one of tests/support/carry_fixtures.py; each test changes a copy
and runs the real CLI.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from carry_fixtures import staged_wheelhouse
from faults import wh_command
from wheelmaker import make_wheel


def wh(*args, cwd=None):
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture
def house(tmp_path, pyindex):
    return staged_wheelhouse(tmp_path, pyindex)


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_a_file_in_bootstrap_that_its_lock_does_not_list_fails_verify(house, kind):
    # The bootstrap command is `pip install --no-index --find-links bootstrap/ wh`: pip takes the highest
    # version it finds there, lock or not, so a stray wh 99 (or an sdist) would be what the box runs.
    if kind == "wheel":
        stray = make_wheel(house / "bootstrap", "wh", "99.0", modules={"evil/__init__.py": ""}).name
    else:
        stray = "wh-99.0.tar.gz"
        (house / "bootstrap" / stray).write_bytes(b"\x1f\x8b not really")
    r = wh("verify", house, "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert data["ok"] is False
    assert any(f"bootstrap/{stray}" in p for p in data["problems"]), data["problems"]
