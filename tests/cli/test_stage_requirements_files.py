"""`wh stage -r/-c` reads requirements files as pip writes them (issue 30, finding 6): real `wh stage`
processes against real indexes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess

from faults import wh_command
from wheelmaker import make_wheel

PLATFORM = ["--platform", "manylinux_2_35_x86_64", "--no-bootstrap"]


def wh(args, tmp_path):
    return subprocess.run(wh_command([*args, "--cache-dir", str(tmp_path / "cache")]), capture_output=True, text=True,
                          timeout=300, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300"})


def test_nested_files_and_their_index_options_are_followed(pyindex, tmp_path):
    make_wheel(tmp_path / "main", "app", "1.0", requires=["lib", "extra-only"])
    for v in ("1.0", "2.0"):
        make_wheel(tmp_path / "main", "lib", v)
    make_wheel(tmp_path / "second", "extra-only", "0.5")
    main, second = pyindex(tmp_path / "main"), pyindex(tmp_path / "second")
    (tmp_path / "reqs").mkdir()
    (tmp_path / "reqs" / "pins.txt").write_text("lib<2\n")
    (tmp_path / "reqs" / "base.txt").write_text(f"--extra-index-url {second.url}\napp\n-c pins.txt\n")
    top = tmp_path / "requirements.txt"
    top.write_text("-r reqs/base.txt\n")
    r = wh(["stage", "-r", str(top), "--dry-run", "--json", "--index-url", main.url, "--python-version", "3.12",
            *PLATFORM], tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {p["name"]: p["version"] for p in data["packages"]} == {"app": "1.0", "lib": "1.0", "extra-only": "0.5"}
    assert second.url.rstrip("/") + "/" in data["indexes"]


def test_an_editable_line_is_refused_with_the_reason(pyindex, tmp_path):
    f = tmp_path / "r.txt"
    f.write_text("-e ./src\n")
    r = wh(["stage", "-r", str(f), "--dry-run", "--index-url", "http://127.0.0.1:9/simple", "--python-version", "3.12",
            *PLATFORM], tmp_path)
    assert r.returncode == 2 and "-e is not supported: an editable install is a source tree" in r.stderr, r.stderr


def test_an_empty_file_is_an_empty_request_with_a_note(pyindex, tmp_path):
    f = tmp_path / "empty.txt"
    f.write_text("\n# later\n")
    idx = pyindex(tmp_path)
    r = wh(["stage", "-r", str(f), "--dry-run", "--index-url", idx.url, "--python-version", "3.12", *PLATFORM], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "lists no requirements" in r.stderr and "0 wheels for" in r.stderr and r.stdout == ""


def test_a_free_threaded_3_12_is_refused(tmp_path):
    r = wh(["stage", "app", "--dry-run", "--index-url", "http://127.0.0.1:9/simple", "--python-version", "3.12t",
            *PLATFORM], tmp_path)
    assert r.returncode == 2 and "no free-threaded CPython 3.12" in r.stderr, r.stderr
