"""lock.writer: pylock.toml, simple/ and wh.json written together; the owned-paths rules."""

from __future__ import annotations

import json
import subprocess
import sys
import venv

from wheelmaker import make_wheel, sha256_file
from wheelhouse.lock import Lock, LockedFile, read_pylock, read_wh_json
from wheelhouse.lock.writer import STANDARD_LAYOUT, is_owned, owned_paths, with_owned, write_index_files


def _locked(wheel) -> LockedFile:
    name, version = wheel.name.split("-")[:2]
    return LockedFile(name, version, wheel.name, f"wheels/{wheel.name}", sha256_file(wheel), wheel.stat().st_size)


def test_index_files_agree_and_a_stale_project_page_goes(tmp_path):
    a = make_wheel(tmp_path / "wheels", "a", "1.0")
    b = make_wheel(tmp_path / "wheels", "b", "1.0")
    write_index_files(tmp_path, Lock(files=(_locked(a), _locked(b))), {"target": {}, "owned": []})
    assert (tmp_path / "simple" / "b" / "index.html").is_file()
    write_index_files(tmp_path, Lock(files=(_locked(a),)), {"target": {}, "owned": []})
    assert not (tmp_path / "simple" / "b").exists()  # b is no longer locked: pip must not see it
    assert "b/" not in (tmp_path / "simple" / "index.html").read_text()
    assert [f.name for f in read_pylock(tmp_path).files] == ["a"]
    assert set(read_wh_json(tmp_path)["owned"]) == {"wh.json", "pylock.toml", "simple"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]

    env = tmp_path / "venv"
    venv.create(env, with_pip=False)
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "-q",
                           "--disable-pip-version-check", "--index-url", (tmp_path / "simple").as_uri(), "a"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_ownership_rules():
    owned = ("wheels", "logs/build-x.log", "pylock.toml")
    assert is_owned("wheels/a.whl", owned) and is_owned("logs/build-x.log", owned)
    assert not is_owned("logs/run.txt", owned) and not is_owned("wheelsx", owned) and not is_owned("NOTES.md", owned)
    assert owned_paths(None) == () and owned_paths({"owned": ["a"]}) == ("a",)
    assert owned_paths({"schema": "wh-wheelhouse/1", "target": {}}) == STANDARD_LAYOUT  # before wh listed them
    got = with_owned({"owned": ["wheels"]}, ["wheels/e.whl", "logs/build.log"])
    assert got["owned"] == sorted(["wheels", "logs/build.log", "wh.json", "pylock.toml", "simple"])
    assert json.dumps(got)  # plain data
