"""Hostile wheels, round 9: a zip archive that holds one name twice.

Readers disagree on which entry of a duplicated name wins, and RECORD vouches for one digest only: the
installed file's bytes could be the entry no scanner looked at. Refused before the first write."""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import zipfile
from pathlib import Path

import pytest

from faults import wh_command
from nvidia_fixtures import make_wheelhouse, tree_listing
from wheelmaker import make_wheel

from wheelhouse.install.wheel.plan import plan_wheel
from wheelhouse.install.wheel.record import UnpackError


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _twice(wheel: Path, name: str, first: bytes, second: bytes) -> Path:
    """``wheel`` with ``name`` written twice (same length, other bytes); RECORD vouches for the first."""
    with zipfile.ZipFile(wheel) as zf:
        items = {n: zf.read(n) for n in zf.namelist()}
    record = next(n for n in items if n.endswith(".dist-info/RECORD"))
    items[record] += f"{name},sha256={_b64(first)},{len(first)}\n".encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(name, first)
        for n, d in items.items():
            zf.writestr(n, d)
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr(name, second)
    wheel.write_bytes(buf.getvalue())
    return wheel


def test_a_name_in_the_archive_twice_is_refused_before_any_write(tmp_path, scheme):
    w = _twice(make_wheel(tmp_path, "dup", "1.0", modules={"dup/__init__.py": ""}), "dup/x.py",
               b"SAFE = 1\n", b"EVIL = 1\n")
    with pytest.raises(UnpackError, match=r"dup/x\.py is in the archive twice"):
        plan_wheel(w, scheme)


def test_wh_install_of_a_wheelhouse_holding_it_fails_in_one_line_and_leaves_the_venv_as_it_was(tmp_path):
    base = make_wheelhouse(tmp_path / "base", [make_wheel(tmp_path / "w0", "ok", "1.0", modules={"ok.py": ""})])
    venv = tmp_path / "venv"
    assert subprocess.run(wh_command(["install", base, "--venv", venv]), capture_output=True).returncode == 0
    before = tree_listing(venv)
    bad = _twice(make_wheel(tmp_path / "w1", "dup", "1.0", modules={"dup/__init__.py": ""}), "dup/x.py",
                 b"SAFE = 1\n", b"EVIL = 1\n")
    house = make_wheelhouse(tmp_path / "house", [make_wheel(tmp_path / "w2", "ok", "1.0", modules={"ok.py": ""}), bad])
    r = subprocess.run(wh_command(["install", house, "--venv", venv]), capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "in the archive twice" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert tree_listing(venv) == before


def test_the_record_of_a_script_whose_python_line_was_rewritten_matches_the_file_on_disk(tmp_path):
    # `#!python` in a wheel's .data/scripts is rewritten to this venv's interpreter, so the file differs
    # from the wheel's: its RECORD row carried the wheel's hash and size, which no file on disk had.
    import csv

    w = make_wheel(tmp_path / "w", "tooly", "1.0", modules={"tooly/__init__.py": ""},
                   files={"tooly-1.0.data/scripts/tooly-run": "#!python\nprint('hi')\n"})
    house = make_wheelhouse(tmp_path / "house", [w])
    venv = tmp_path / "venv"
    r = subprocess.run(wh_command(["install", house, "--venv", venv]), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    script = venv / "bin" / "tooly-run"
    data = script.read_bytes()
    assert not data.startswith(b"#!python\n")  # (rewritten)
    (record,) = venv.glob("lib/python*/site-packages/tooly-1.0.dist-info/RECORD")
    rows = {Path(row[0]).name: row for row in csv.reader(record.read_text().splitlines())}
    assert rows["tooly-run"][1:] == [f"sha256={_b64(data)}", str(len(data))]
