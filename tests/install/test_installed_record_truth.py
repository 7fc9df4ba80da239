"""The installed RECORD is "a RECORD of what was really installed" (docs/install.md), whatever the wheel's says.

A wheel's RECORD is checked against its files where it enters a wheelhouse (`wh stage`, `wh build`:
wheelhouse.lock.records), and wh.json lists those wheels (``record_checked``). `wh install` copies the
RECORD rows of those alone; any other wheel (a wheelhouse staged before the check, one assembled by
hand) has every member hashed against RECORD as it is extracted, and one that differs is refused before
the commit: nothing lands, nothing half-installed.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from nvidia_fixtures import make_wheelhouse, tree_listing
from wheelmaker import make_wheel

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def wh(*args, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")} | {"NO_COLOR": "1", "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def lying_wheel(folder: Path) -> Path:
    """liar 1.0, crafted by hand: its RECORD gives liar/__init__.py the sha256 of other bytes (same size)."""
    w = make_wheel(folder, "liar", "1.0", modules={"liar/__init__.py": "X = 1\n"})
    with zipfile.ZipFile(w) as zf:
        items = {n: zf.read(n) for n in zf.namelist()}
    rec = "liar-1.0.dist-info/RECORD"
    wrong = base64.urlsafe_b64encode(hashlib.sha256(b"X = 2\n").digest()).rstrip(b"=").decode()
    items[rec] = b"".join((f"liar/__init__.py,sha256={wrong},6" if r.startswith("liar/__init__.py,") else r)
                          .encode() + b"\n" for r in items[rec].decode().splitlines())
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in items.items():
            zf.writestr(n, d)
    w.write_bytes(buf.getvalue())
    return w


def installed_rows_are_true(site: Path, dist_info: str) -> None:
    for line in (site / dist_info / "RECORD").read_text().splitlines():
        path, digest, size = line.split(",")
        if digest:
            data = (site / path).read_bytes()
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data), path


@pytest.mark.parametrize("into", ["a new venv", "a venv that holds distributions"])
def test_a_lying_wheel_no_stage_checked_is_refused_before_anything_lands(tmp_path, into):
    """Before: a wheel whose whole sha256 was the lock's had its RECORD rows copied unchecked, and the
    installed RECORD carried the false sha256 (the doctor then blamed the installed file)."""
    house = make_wheelhouse(tmp_path / "house", [lying_wheel(tmp_path / "w")])
    assert json.loads((house / "wh.json").read_text())["record_checked"] == []  # a stage would have refused it
    venv = tmp_path / "venv"
    if into == "a venv that holds distributions":
        base = make_wheelhouse(tmp_path / "base", [make_wheel(tmp_path / "w0", "ok", "1.0", modules={"ok.py": ""})])
        assert wh("install", base, "--venv", venv).returncode == 0
    before = tree_listing(venv) if venv.exists() else None
    r = wh("install", house, "--venv", venv)
    assert r.returncode == 1, r.stderr
    assert "liar-1.0-py3-none-any.whl: liar/__init__.py does not match its RECORD hash" in r.stderr
    assert "hint:" in r.stderr and "Traceback" not in r.stderr
    assert (tree_listing(venv) if venv.exists() else None) == before


def test_the_fast_path_is_kept_for_stage_checked_wheels_only(tmp_path):
    wheel = make_wheel(tmp_path / "w", "fine", "1.0", modules={"fine/__init__.py": "X = 1\n", "fine/a.py": "A = 2\n"},
                       entry_points={"console_scripts": {"fine-tool": "fine:main"}})
    checked = make_wheelhouse(tmp_path / "checked", [wheel])
    older = make_wheelhouse(tmp_path / "older", [wheel], record_checked=False)  # staged before the check
    for house, hashed in ((checked, False), (older, True)):
        venv = tmp_path / f"venv-{house.name}"
        r = wh("install", house, "--venv", venv, "--json")
        assert r.returncode == 0, r.stderr
        [dist] = json.loads(r.stdout)["installed"]
        assert dist["members_hashed"] is hashed, house
        site = venv / "lib" / PY / "site-packages"
        installed_rows_are_true(site, "fine-1.0.dist-info")
        doctor = wh("doctor", "--python", venv / "bin" / "python", "--check", "stack", "--json", "--thorough")
        files = {c["id"]: c for c in json.loads(doctor.stdout)["results"]}["stack:files"]
        assert files["verdict"] == "ok", files
