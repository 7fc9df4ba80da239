"""The CLI conventions the README states (issue 12): data on stdout, notes on stderr, -v/-q after any command,
no hard wrapping off a terminal, one exit code for a missing --python. Through the real entry point, with
stdout and stderr captured separately."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import make_venv, site_packages

WH = [sys.executable, "-m", "wheelhouse"]


def wh(*args, env=None, **kw) -> subprocess.CompletedProcess:
    full = {**os.environ, "COLUMNS": "80", **(env or {})}
    return subprocess.run([*WH, *map(str, args)], capture_output=True, text=True, env=full, timeout=300, **kw)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    return make_venv(tmp_path_factory.mktemp("conv") / "venv")


@pytest.fixture
def dropped(tmp_path) -> Path:
    """A venv whose drop record names one distribution (not installed)."""
    py = make_venv(tmp_path / "venv")
    record = site_packages(py) / ".wh" / "dropped.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"schema": "wh-dropped/1", "dropped": [
        {"name": "ghostpkg", "version": "1.0", "time": "2026-01-01T00:00:00Z", "reason": "import failed",
         "wheelhouse": None}]}))
    return py


@pytest.fixture
def nvidia_site(tmp_path) -> Path:
    lib = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudart.so.13").write_bytes(b"")
    return tmp_path / "site"


# ---- the data asked for goes to stdout; progress, notes and hints to stderr ----------------------------


def test_target_show_prints_the_profile_on_stdout():
    r = wh("target", "show", "--python-version", "3.12")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("cp312") and "tags: " in r.stdout
    assert "tags: " not in r.stderr and "note: --python-version 3.12 without --platform" in r.stderr
    js = wh("target", "show", "--python-version", "3.12", "--platform", "manylinux_2_35_x86_64", "--json")
    assert json.loads(js.stdout)["python_version"] == "3.12"


def test_drop_list_prints_the_list_on_stdout_and_json_alone_with_json(dropped):
    r = wh("drop", "--list", "--python", dropped)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ghostpkg 1.0") and "ghostpkg" not in r.stderr
    js = wh("drop", "--list", "--python", dropped, "--json")
    assert [e["name"] for e in json.loads(js.stdout)] == ["ghostpkg"]  # stdout is the JSON, alone
    quiet = wh("drop", "--list", "--python", dropped, "-q")
    assert quiet.stdout == r.stdout and quiet.stderr == ""  # -q silences notes, never the data


def test_doctor_report_goes_to_stdout_one_line_per_check_and_to_stderr_with_json(venv):
    r = wh("doctor", "--python", venv, "--check", "platform")
    assert r.returncode in (0, 1), r.stderr
    lines = r.stdout.splitlines()
    assert any(ln.split()[1].startswith("platform:") for ln in lines[:-1]) and " in " in lines[-1]
    assert "platform:" not in r.stderr and "gathering facts from" in r.stderr
    js = wh("doctor", "--python", venv, "--check", "platform", "--json")
    report = json.loads(js.stdout)
    assert report["results"] and "platform:" in js.stderr  # the report for the log, the JSON for the machine


def test_links_check_prints_its_plan_on_stdout(nvidia_site):
    r = wh("links", "--check", "--path", nvidia_site)
    assert r.returncode == 1
    assert "would symlink: " in r.stdout and "libcudart.so -> libcudart.so.13" in r.stdout
    assert "would" not in r.stderr and "error: 2 link changes needed" in r.stderr and "hint: " in r.stderr
    js = wh("links", "--check", "--path", nvidia_site, "--json")
    assert len(json.loads(js.stdout)["changes"]) == 2
    fixed = wh("links", "--fix", "--path", nvidia_site)
    assert fixed.returncode == 0 and fixed.stdout == "" and "did symlink: " in fixed.stderr  # what it did: progress


def test_one_link_change_is_singular(nvidia_site):
    (nvidia_site / "nvidia" / "cu13" / "lib64").symlink_to("lib")
    r = wh("links", "--check", "--path", nvidia_site)
    assert r.returncode == 1 and "error: 1 link change needed under " in r.stderr, r.stderr


# ---- -v/-q before or after the command -------------------------------------------------------------------


def _commands() -> list[list[str]]:
    import click

    from wheelhouse.cli import _COMMANDS, cli

    out = []
    ctx = click.Context(cli)
    for name in _COMMANDS:
        cmd = cli.get_command(ctx, name)
        out.append([name])
        if isinstance(cmd, click.Group):
            out.extend([name, sub] for sub in cmd.commands)
    return out


@pytest.mark.parametrize("argv", _commands(), ids=" ".join)
def test_every_command_accepts_v_and_q(argv):
    r = wh(*argv, "--help")
    assert r.returncode == 0, r.stderr
    assert "-v, --verbose" in r.stdout and "-q, --quiet" in r.stdout


def test_v_after_the_command_is_the_same_as_before(dropped):
    after = wh("doctor", "--python", dropped, "--check", "platform", "-v", "-v")
    before = wh("-v", "-v", "doctor", "--python", dropped, "--check", "platform")
    assert after.returncode == before.returncode and "No such option" not in after.stderr
    assert [ln.split()[:2] for ln in after.stdout.splitlines()[:-1]] == \
           [ln.split()[:2] for ln in before.stdout.splitlines()[:-1]]
    assert wh("target", "show", "--python-version", "3.12", "-q").stderr == ""  # the note silenced
    assert wh("-q", "target", "show", "--python-version", "3.12", "-v").stderr == ""  # a -q anywhere wins


# ---- off a terminal, nothing is hard-wrapped ----------------------------------------------------------------


def test_off_a_terminal_long_lines_are_not_wrapped(tmp_path):
    deep = tmp_path.joinpath(*["a-rather-long-folder-name"] * 5)
    py = make_venv(deep / "venv")
    r = wh("doctor", "--python", py, "--check", "platform", env={"COLUMNS": "80"})
    assert len(str(py)) > 80
    assert f"gathering facts from {py}" in r.stderr.splitlines()
    missing = deep / "nope" / "python"
    r = wh("links", "--python", missing)
    assert f"error: interpreter {missing} does not exist" in r.stderr.splitlines()[0]


# ---- one exit code for a --python that does not exist ----------------------------------------------------


@pytest.mark.parametrize("argv, command", [
    (["doctor"], "wh doctor"),
    (["drop"], "wh drop"),
    (["drop", "--dry-run"], "wh drop --dry-run"),
    (["drop", "--list"], "wh drop --list"),
    (["drop", "--restore", "x"], "wh drop --restore x"),
    (["env"], None),
    (["links"], None),
    (["patch", "verify", "freetoken-fp8-rowwise.toml"], None),
])
def test_a_python_that_does_not_exist_is_exit_2_everywhere(tmp_path, argv, command):
    r = wh(*argv, "--python", tmp_path / "nope" / "python")
    assert r.returncode == 2, r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("error: ") and "interpreter" in first and "hint: " in r.stderr and r.stdout == ""
    if command:
        assert f"`{command} --python " in r.stderr


def test_install_with_a_python_that_does_not_exist_is_exit_2(tmp_path):
    (tmp_path / "house").mkdir()
    r = wh("install", tmp_path / "house", "--python", tmp_path / "nope" / "python")
    assert r.returncode == 2, r.stderr


def test_drop_restore_of_a_name_never_dropped_hints_with_the_python(dropped):
    r = wh("drop", "--restore", "nosuch", "--python", dropped)
    assert r.returncode == 2
    assert f"hint: list drops with `wh drop --list --python {dropped}`" in r.stderr


# ---- NO_COLOR, and the README saying all this ---------------------------------------------------------------


def _stderr_on_a_terminal(argv, env) -> bytes:
    import pty

    master, slave = pty.openpty()
    try:
        subprocess.run([*WH, *argv], stdout=subprocess.PIPE, stderr=slave, env={**os.environ, **env}, timeout=60)
    finally:
        os.close(slave)
    out = b""
    try:
        while chunk := os.read(master, 4096):
            out += chunk
    except OSError:  # EIO once the slave is closed and drained
        pass
    os.close(master)
    return out


def test_no_color_turns_colour_off_and_the_words_stay(tmp_path, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    argv = ["links", "--python", str(tmp_path / "nope" / "python")]
    coloured = _stderr_on_a_terminal(argv, {})
    plain = _stderr_on_a_terminal(argv, {"NO_COLOR": "1"})
    assert b"\x1b[1;31m" in coloured  # the terminal gets red...
    assert b"31m" not in plain and b"33m" not in plain  # ...unless NO_COLOR
    assert b"error" in plain and b"hint" in plain


def test_readme_states_the_conventions_in_little_space():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert len(readme.encode()) < 10_000
    conventions = readme.split("## Conventions", 1)[1].split("\n## ", 1)[0]
    assert readme.index("## Exit codes") < readme.index("## Conventions")
    for needle in ("stdout", "stderr", "`-v` / `-q`", "NO_COLOR", "exit code", "wh doctor -v", "hint:"):
        assert needle in conventions, needle
