"""Console-script launchers and shebangs for the receiving interpreter."""

from __future__ import annotations

import subprocess

from faults import wh_command
from nvidia_fixtures import make_wheelhouse, tree_listing
from wheelmaker import make_wheel

from wheelhouse.install.wheel.launchers import console_launchers, shebang


def test_launchers_skip_bad_references_and_long_interpreters_go_through_sh():
    eps = "[console_scripts]\ngood = pkg.cli:main.run [extra]\nbad = pkg\n"
    [(name, body)] = console_launchers(eps)
    assert name == "good" and "from pkg.cli import main" in body and "sys.exit(main.run())" in body
    assert console_launchers("not ini") == []
    assert shebang("/usr/bin/python3") == b"#!/usr/bin/python3\n"
    assert shebang("/a b/python").startswith(b"#!/bin/sh\n")


def test_an_entry_point_name_with_a_slash_is_refused_not_skipped(tmp_path):
    """``../evil = pkg:main`` (or ``sub/dir``) names no file in bin/: the wheel is refused before any write."""
    venv = tmp_path / "venv"
    base = make_wheelhouse(tmp_path / "base", [make_wheel(tmp_path / "w0", "ok", "1.0", modules={"ok.py": ""})])
    assert subprocess.run(wh_command(["install", base, "--venv", venv]), capture_output=True).returncode == 0
    before = tree_listing(venv)
    for i, script in enumerate(("sub/dir", "../evil")):
        bad = make_wheel(tmp_path / f"w{i + 1}", "slashy", "1.0", modules={"slashy.py": "def main(): pass\n"},
                         entry_points={"console_scripts": {script: "slashy:main"}})
        house = make_wheelhouse(tmp_path / f"h{i}", [bad])
        r = subprocess.run(wh_command(["install", house, "--venv", venv]), capture_output=True, text=True, timeout=300)
        assert r.returncode != 0 and f"script {script!r} is not a file name" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and tree_listing(venv) == before
