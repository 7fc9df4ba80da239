"""The one guarded uninstaller never follows a symlink out of the environment.

A RECORD row is resolved with the real path of its parent folder and the leaf itself not followed:
``pkg/sub -> /elsewhere`` with a row ``pkg/sub/victim.txt`` must not delete ``/elsewhere/victim.txt``
(upgrade, drop and rollback alike); a row naming the link itself removes the link, never what it
points to. A planted journal never makes a rollback touch the venv's own files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from broken_packages import install_dist, make_venv, site_packages
from faults import wh_command
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel


def _plant_links(site: Path, elsewhere: Path, dist: str) -> None:
    """``<dist>/sub -> elsewhere/a``, ``toplink -> elsewhere/b``, ``leaflink -> elsewhere/c.txt`` and RECORD
    rows through them (and naming the links themselves)."""
    for d in ("a", "b"):
        (elsewhere / d).mkdir(parents=True)
        (elsewhere / d / "victim.txt").write_text("not wh's\n")
    (elsewhere / "c.txt").write_text("not wh's either\n")
    (site / dist / "sub").symlink_to(elsewhere / "a")
    (site / "toplink").symlink_to(elsewhere / "b")
    (site / "leaflink").symlink_to(elsewhere / "c.txt")
    record = next(site.glob(f"{dist}-*.dist-info")) / "RECORD"
    record.write_text(record.read_text() + f"{dist}/sub/victim.txt,,\ntoplink/victim.txt,,\nleaflink,,\n{dist}/sub,,\n")


def _untouched(elsewhere: Path) -> None:
    assert (elsewhere / "a" / "victim.txt").read_text() == "not wh's\n"
    assert (elsewhere / "b" / "victim.txt").read_text() == "not wh's\n"
    assert (elsewhere / "c.txt").read_text() == "not wh's either\n"


def test_an_upgrade_never_deletes_through_a_link_out_of_the_environment(tmp_path):
    venv = tmp_path / "venv"
    one = make_wheelhouse(tmp_path / "h1", [make_wheel(tmp_path / "w1", "pkg", "1.0", modules={"pkg/__init__.py": ""})])
    two = make_wheelhouse(tmp_path / "h2", [make_wheel(tmp_path / "w2", "pkg", "2.0", modules={"pkg/__init__.py": ""})])
    r = subprocess.run(wh_command(["install", one, "--venv", venv]), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    site = site_packages(venv / "bin" / "python")
    elsewhere = tmp_path / "elsewhere"
    _plant_links(site, elsewhere, "pkg")
    r = subprocess.run(wh_command(["install", two, "--venv", venv]), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    _untouched(elsewhere)
    assert not os.path.lexists(site / "leaflink")  # the link itself was the distribution's: removed as a link
    assert list(site.glob("pkg-2.0.dist-info")) and not list(site.glob("pkg-1.0.dist-info"))


def test_drop_by_record_never_deletes_through_a_link_out_of_the_environment(tmp_path):
    py = make_venv(tmp_path / "venv")  # no pip: wh drop uses the RECORD method
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    site = install_dist(py, tmp_path / "w", "brok", {"brok/__init__.py": "raise ImportError('broken on purpose')\n"},
                        {f"brok/_x.{sys.implementation.cache_tag}-x86_64-linux-gnu.so": b"not really an ELF"})
    elsewhere = tmp_path / "elsewhere"
    _plant_links(site, elsewhere, "brok")
    r = subprocess.run(wh_command(["drop", "--python", py, "--timeout", "20"]), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    _untouched(elsewhere)
    assert not list(site.glob("brok-*.dist-info")) and not os.path.lexists(site / "leaflink")
    assert not os.path.lexists(site / "brok")  # its link removed as a link, then its emptied folder


def test_a_planted_journal_never_makes_a_rollback_touch_outside_or_the_venvs_own_files(tmp_path):
    venv = tmp_path / "venv"
    house = make_wheelhouse(tmp_path / "h", [make_wheel(tmp_path / "w", "pkg", "1.0", modules={"pkg/__init__.py": ""})])
    r = subprocess.run(wh_command(["install", house, "--venv", venv]), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    site = site_packages(venv / "bin" / "python")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "a").mkdir(parents=True)
    (elsewhere / "a" / "victim.txt").write_text("not wh's\n")
    (site / "pkg" / "sub").symlink_to(elsewhere / "a")
    # "did not exist" entries: a rollback removes them (they are what the killed run wrote).
    named = [str(site / "pkg" / "sub" / "victim.txt"), str(venv / "bin" / "python"), str(venv / "pyvenv.cfg"),
             str(venv / "bin" / "activate"), str(venv / "bin" / "python3")]
    (site / ".wh").mkdir(exist_ok=True)
    (site / ".wh" / "journal.json").write_text(json.dumps({
        "schema": "wh-install-journal/1", "id": "1-1", "pid": 1, "started": "x", "wheels": ["planted"],
        "dirs": [str(venv / "bin")], "entries": [[p, False, None] for p in named]}))
    r = subprocess.run(wh_command(["install", house, "--venv", venv]), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (elsewhere / "a" / "victim.txt").read_text() == "not wh's\n"
    for p in named[1:]:
        assert os.path.lexists(p), p
    ok = subprocess.run([venv / "bin" / "python", "-c", "print('alive')"], capture_output=True, text=True)
    assert ok.stdout.strip() == "alive"
