"""Every JSON/TOML file wh reads is parsed with a bound on nesting and size: a deeply nested one (wh.json from a
registry, pylock.toml, a manifest, a profile, a compare report, the install/links/drop records, the serve state
file) is a one-line error naming the file, exit 2, never exit 3 (RecursionError)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import make_venv, site_packages
from faults import wh_command
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel

DEEP_JSON = "[" * 100_000 + "]" * 100_000
DEEP_TOML = "[" * 5_000 + "]" * 5_000


def _wh(args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "NO_COLOR": "1", **(env or {})})


def _verify_problem(r: subprocess.CompletedProcess, path: Path) -> None:
    """`wh verify` lists what is wrong with a wheelhouse (exit 1), each problem one line naming its file."""
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "Traceback" not in out and "RecursionError" not in out, (r.returncode, out[-3000:])
    assert any(str(path) in line and len(line) < 600 for line in out.splitlines()), out[-3000:]


def _one_line_error(r: subprocess.CompletedProcess, path: Path, codes=(2,)) -> None:
    assert r.returncode in codes, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr, r.stderr[-3000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert errors and str(path) in errors[0], r.stderr[-3000:]
    assert len(errors[0]) < 600, errors[0][:600]


@pytest.fixture
def house(tmp_path):
    return make_wheelhouse(tmp_path / "house", [make_wheel(tmp_path / "w", "pkg", "1.0", modules={"pkg/__init__.py": ""})])


def _deep_wh_json(house: Path) -> Path:
    path = house / "wh.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps(data)[:-1] + ', "deep": ' + DEEP_JSON + "}")
    return path


@pytest.mark.parametrize("command", ["verify", "install"])
def test_a_deep_wh_json(tmp_path, house, command):
    path = _deep_wh_json(house)
    args = [command, house] + (["--venv", tmp_path / "venv"] if command == "install" else [])
    (_one_line_error if command == "install" else _verify_problem)(_wh(args), path)


@pytest.mark.parametrize("command", ["verify", "install"])
def test_a_deep_pylock(tmp_path, house, command):
    path = house / "pylock.toml"
    path.write_text(f"deep = {DEEP_TOML}\n" + path.read_text())
    args = [command, house] + (["--venv", tmp_path / "venv"] if command == "install" else [])
    (_one_line_error if command == "install" else _verify_problem)(_wh(args), path)


def test_a_deep_manifest(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(f'[stack]\nname = "x"\ndeep = {DEEP_TOML}\n')
    _one_line_error(_wh(["stage", path, "-o", tmp_path / "out"]), path)


def test_a_deep_profile(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"deep": ' + DEEP_JSON + "}")
    _one_line_error(_wh(["target", "show", "--target", path]), path)


def test_a_deep_compare_report(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"deep": ' + DEEP_JSON + "}")
    other = tmp_path / "b.json"
    other.write_text("{}")
    r = _wh(["doctor", "compare", path, other])
    assert r.returncode == 2 and "Traceback" not in r.stderr and str(path) in r.stderr, r.stderr[-3000:]


def test_a_deep_install_record_reads_as_damaged(tmp_path, house):
    """installed.json is a cache of what wh did: damaged (deep included) it reads as missing and is rewritten."""
    venv = tmp_path / "venv"
    assert _wh(["install", house, "--venv", venv]).returncode == 0
    path = site_packages(venv / "bin" / "python") / ".wh" / "installed.json"
    path.write_text('{"deep": ' + DEEP_JSON + "}")
    r = _wh(["install", house, "--venv", venv])
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "pkg" in json.loads(path.read_text())["packages"]


def test_a_deep_install_journal_is_not_a_crash(tmp_path, house):
    venv = tmp_path / "venv"
    assert _wh(["install", house, "--venv", venv]).returncode == 0
    path = site_packages(venv / "bin" / "python") / ".wh" / "journal.json"
    path.write_text('{"deep": ' + DEEP_JSON + "}")
    r = _wh(["install", house, "--venv", venv])
    assert r.returncode in (0, 2) and "Traceback" not in r.stderr, r.stderr[-3000:]


def test_a_deep_links_record(tmp_path):
    py = make_venv(tmp_path / "venv")
    site = site_packages(py)
    path = site / ".wh" / "links.json"
    path.parent.mkdir()
    path.write_text(DEEP_JSON)
    _one_line_error(_wh(["links", "--undo", "--python", py]), path, codes=(1, 2))  # links' damaged-record exit


def test_a_deep_drop_record(tmp_path):
    py = make_venv(tmp_path / "venv")
    path = site_packages(py) / ".wh" / "dropped.json"
    path.parent.mkdir()
    path.write_text(DEEP_JSON)
    _one_line_error(_wh(["drop", "--list", "--python", py]), path, codes=(1, 2))  # drop's damaged-record exit


def test_a_deep_serve_state_file(tmp_path):
    path = tmp_path / "state" / "serve.json"
    path.parent.mkdir()
    path.write_text('{"pid": ' + DEEP_JSON + "}")
    _one_line_error(_wh(["stop"], env={"WH_STATE_DIR": str(path.parent)}), path)
