"""`wh stage` output, as a user of uv and pip expects it (issue 12): the pins of a dry run on stdout
(text, --json, --format requirements/pylock), everything else on stderr; a requirements file given
without -r refused with the right command; yanked exact pins staged with a warning.

Real `wh stage` processes against a real index on 127.0.0.1; stdout and stderr captured apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.pylock import Pylock

from faults import wh_command
from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_wheel

PLATFORM = ["--python-version", "3.12", "--platform", "manylinux_2_35_x86_64", "--no-bootstrap"]


@pytest.fixture
def index(pyindex, tmp_path):
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["lib>=1"], modules={"app/__init__.py": "import lib\n"})
    make_wheel(d, "lib", "1.0", modules={"lib/__init__.py": "V = 1\n"})
    make_wheel(d, "lib", "1.1", modules={"lib/__init__.py": "V = 11\n"})
    return pyindex(d, yanked={"lib-1.1-py3-none-any.whl": "broken import"})


def wh(args, **kw):
    kw.setdefault("timeout", 300)
    return subprocess.run(wh_command(args), capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300", **kw.pop("env", {})}, **kw)


def dry(index, tmp_path, *more, reqs=("app==1.0",)):
    return wh(["stage", *reqs, "--dry-run", "--index-url", index.url, "--cache-dir", str(tmp_path / "cache"),
               *PLATFORM, *more])


def test_dry_run_pins_go_to_stdout_and_the_rest_to_stderr(index, tmp_path):
    r = dry(index, tmp_path)
    assert r.returncode == 0, r.stderr
    pins = [line.split()[0] for line in r.stdout.splitlines()]
    assert pins == ["app==1.0", "lib==1.0"]
    assert "2 wheels for" in r.stderr and "dry run" in r.stderr
    assert "==" not in r.stderr.replace("app==1.0", "")  # no pin lines on stderr


def test_dry_run_stdout_off_a_tty_is_a_requirements_file_wh_reads_back(index, tmp_path):
    # issue 32 (3): `wh stage ... --dry-run > pins.txt` is a file pip, uv and wh read (name==version lines)
    r = dry(index, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "app==1.0\nlib==1.0\n"
    pins = tmp_path / "pins.txt"
    pins.write_text(r.stdout)
    again = wh(["stage", "-r", str(pins), "--dry-run", "--index-url", index.url, "--cache-dir",
                str(tmp_path / "cache"), *PLATFORM])
    assert again.returncode == 0, again.stderr
    assert again.stdout == r.stdout


def test_dry_run_table_with_format_table_or_on_a_tty(index, tmp_path):
    import pty

    r = dry(index, tmp_path, "--format", "table")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["app-1.0-py3-none-any.whl", "lib-1.0-py3-none-any.whl"]
    main, child = pty.openpty()
    try:
        proc = subprocess.run(wh_command(["stage", "app==1.0", "--dry-run", "--index-url", index.url, "--cache-dir",
                                          str(tmp_path / "cache"), *PLATFORM]),
                              stdout=child, stderr=subprocess.PIPE, text=True, timeout=300,
                              env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300"})
        os.close(child)
        child = None
        out = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        if child is not None:
            os.close(child)
        os.close(main)
    assert proc.returncode == 0, proc.stderr
    assert "app-1.0-py3-none-any.whl" in out.decode()


def test_dry_run_never_needs_wh_own_dependencies(index, tmp_path):
    # the index has the stack and nothing of wh's own dependencies (click, rich, ...): bootstrap/ is not resolved
    r = wh(["stage", "app==1.0", "--dry-run", "--index-url", index.url, "--cache-dir", str(tmp_path / "cache"),
            "--python-version", "3.12", "--platform", "manylinux_2_35_x86_64"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "app==1.0\nlib==1.0\n"
    assert "bootstrap" not in r.stderr


def test_dry_run_of_one_wheel_says_wheel(index, tmp_path):
    r = dry(index, tmp_path, reqs=("lib==1.0",))
    assert r.returncode == 0, r.stderr
    assert "1 wheel for" in r.stderr and "1 wheels" not in r.stderr


def test_dry_run_json_is_stdout_alone_and_names_no_folder(index, tmp_path):
    r = dry(index, tmp_path, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["out"] is None
    assert [(p["name"], p["version"], p["yanked"]) for p in data["packages"]] == [("app", "1.0", False),
                                                                                 ("lib", "1.0", False)]


def test_exact_pin_on_a_yanked_release_is_staged_with_a_warning(index, tmp_path):
    r = dry(index, tmp_path, "--json", reqs=("app==1.0", "lib==1.1"))
    assert r.returncode == 0, r.stderr
    lib = {p["name"]: p for p in json.loads(r.stdout)["packages"]}["lib"]
    assert (lib["version"], lib["yanked"], lib["yanked_reason"]) == ("1.1", True, "broken import")
    assert "lib==1.1 is yanked (broken import)" in r.stderr


def test_format_requirements_feeds_pip_require_hashes(index, tmp_path):
    r = dry(index, tmp_path, "--format", "requirements")
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "app==1.0 \\\n    --hash=sha256:" in text
    assert "lib==1.0 \\\n    --hash=sha256:" in text and "    # via app\n" in text
    req = tmp_path / "pins.txt"
    req.write_text(text)
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    pip = subprocess.run([sys.executable, "-m", "pip", "--isolated", "install", "--no-deps", "--require-hashes",
                          "--no-cache-dir", "--disable-pip-version-check", "--target", str(target),
                          "--index-url", index.url, "-r", str(req)], capture_output=True, text=True, timeout=300,
                         env=env)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    assert (target / "lib" / "__init__.py").read_text() == "V = 1\n"


def test_format_pylock_to_a_file_validates_as_pep_751(index, tmp_path):
    lock = tmp_path / "pylock.toml"
    r = dry(index, tmp_path, "--format", "pylock", "-o", str(lock))
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    parsed = Pylock.from_dict(tomllib.loads(lock.read_text()))
    parsed.validate()
    assert {(p.name, str(p.version)) for p in parsed.packages} == {("app", "1.0"), ("lib", "1.0")}
    assert all(w.url and w.url.startswith(index.base) for p in parsed.packages for w in p.wheels)
    # -o - is stdout
    r2 = dry(index, tmp_path, "--format", "pylock", "-o", "-")
    assert r2.returncode == 0, r2.stderr
    assert r2.stdout == lock.read_text()


def test_format_without_dry_run_is_refused(index, tmp_path):
    r = wh(["stage", "app==1.0", "--format", "requirements", "-o", str(tmp_path / "w"), "--index-url", index.url,
            *PLATFORM])
    assert r.returncode == 2
    assert r.stdout == ""
    assert "--dry-run" in r.stderr and "hint:" in r.stderr
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("arg", ["requirements.txt", "reqs/dev.txt"])
def test_requirements_file_without_dash_r_is_refused_with_the_command(index, tmp_path, arg):
    r = wh(["stage", arg, "--dry-run", "--index-url", index.url, *PLATFORM], cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert f"wh stage -r {arg}" in r.stderr
    assert not any("requirements" in path or "dev-txt" in path for path in index.hits)  # nothing looked up


# --- wh build's default output folder ----------------------------------------------------------------

def test_build_refuses_a_source_package_named_like_its_default_output(tmp_path):
    pkg = tmp_path / "wheelhouse"  # a repository's own package, as in wh's checkout
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    # the installed `wh` script: `python -c` would import this folder as wh's own package
    script = Path(sys.executable).parent / "wh"
    if not script.exists():
        pytest.skip("no wh console script next to this interpreter")
    r = subprocess.run([str(script), "build", "freetoken-pr70", "--cache-dir", str(tmp_path / "cache")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert "holds Python sources" in r.stderr and "hint:" in r.stderr and "-o" in r.stderr.split("hint:")[1]
    assert sorted(p.name for p in pkg.iterdir()) == ["__init__.py"]
    assert not (tmp_path / "cache").exists()  # refused before any work


# --- small things in stage's stderr -------------------------------------------------------------------

def test_a_stage_error_comes_alone_no_failed_line_nor_blank_lines(index, tmp_path):
    r = dry(index, tmp_path, reqs=("nosuchpkg",))
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert "failed" not in lines and "" not in lines
    assert lines[-2].startswith("error: no project named nosuchpkg") and lines[-1].startswith("hint:")


def test_stage_stderr_has_no_blank_lines_no_byte_bar_for_the_resolve_and_one_cache_count(index, tmp_path):
    args = ["stage", "app==1.0", "--index-url", index.url, "--cache-dir", str(tmp_path / "cache"), *PLATFORM]
    assert wh([*args, "-o", str(tmp_path / "a")]).returncode == 0
    r = wh([*args, "-o", str(tmp_path / "b")])  # everything in the cache now
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert "" not in lines and "bytes" not in r.stderr and "1 packages" not in r.stderr
    assert "2 of 2 files taken from the cache" in r.stderr
    assert "2 of 2 files (wheels/ and bootstrap/) were not downloaded again" in r.stderr
    assert "staged 2 wheels" in r.stderr


def test_a_failed_resolution_with_json_prints_an_error_object_on_stdout(index, tmp_path):
    """--json: a failure is data too (issue 30): one JSON object on stdout, the red line still on stderr, exit 1."""
    r = dry(index, tmp_path, "--json", reqs=("lib>=5",))
    assert r.returncode == 1, r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["code"] == "no-matching-version" and "lib>=5" in err["message"] and err["hint"]
    assert "error: no version of lib matches lib>=5" in r.stderr


def test_the_resolution_warnings_reach_stderr(index, tmp_path):
    r = dry(index, tmp_path, reqs=("lib[nosuch]==1.0",))
    assert r.returncode == 0, r.stderr
    assert "warning: lib==1.0 declares no extra 'nosuch'" in r.stderr


def test_a_pin_where_wh_differs_from_uv_on_purpose_carries_a_note(pyindex, tmp_path):
    """docs/stage.md: Requires-Python upper bounds are honoured (uv reads only lower bounds). The pin that
    rule decided carries the note in --json (dry run, stage, and a stage answered from the stored
    resolution), no other pin does, and the human output says it once."""
    d = tmp_path / "pub"
    make_wheel(d, "tool", "1.5", requires=["lib"], requires_python=">=3.9,<3.12")
    make_wheel(d, "tool", "1.4", requires=["lib"])
    make_wheel(d, "lib", "1.0")
    make_wheel(d, "lib", "2.0", requires_python=">=3.13")  # a lower bound: uv skips it too
    index = pyindex(d, requires_python={"tool-1.5-py3-none-any.whl": ">=3.9,<3.12",
                                        "lib-2.0-py3-none-any.whl": ">=3.13"})
    runs = [dry(index, tmp_path, "--json", reqs=("tool",)), dry(index, tmp_path, reqs=("tool",))]
    args = ["stage", "tool", "--index-url", index.url, "--cache-dir", str(tmp_path / "cache"), *PLATFORM, "--json"]
    runs += [wh([*args, "-o", str(tmp_path / "a")]), wh([*args, "-o", str(tmp_path / "b")])]  # b: the stored one
    for r in runs:
        assert r.returncode == 0, r.stderr
        assert r.stderr.count("requires-python-upper-bound") == 1, r.stderr
        assert "note: tool==1.4: chosen where wh differs from uv on purpose (requires-python-upper-bound)" in r.stderr
    assert "from the stored resolution" in runs[-1].stderr
    for r in (runs[0], *runs[2:]):
        notes = {p["name"]: p["notes"] for p in json.loads(r.stdout)["packages"]}
        assert notes["lib"] == []
        [note] = notes["tool"]
        assert note["code"] == "requires-python-upper-bound"
        assert note["message"].startswith("tool 1.5 was skipped for Requires-Python <3.12: wh honours the upper bound")
