import json
import subprocess
import sys

WH = [sys.executable, "-m", "wheelhouse.cli"]


def run(*args, **kw):
    return subprocess.run([*WH, *args], capture_output=True, text=True, **kw)


def test_help_lists_every_command_and_exit_codes():
    r = run("--help")
    assert r.returncode == 0
    for name in ("stage", "install", "links", "env", "doctor", "drop", "build", "patch", "serve", "stop", "smoke"):
        assert name in r.stdout
    assert "Exit codes" in r.stdout


def test_target_capture_prints_json_on_stdout_only():
    r = run("target", "capture", "--no-gpus")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["python_version"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert data["compatible_tags"]


def test_bad_target_flags_are_one_line_errors_with_a_hint(tmp_path):
    r = run("target", "show", "--python-version", "three", "--platform", "manylinux_2_35_x86_64")
    assert r.returncode == 2
    assert "error:" in r.stderr and "hint:" in r.stderr
    r = run("target", "show", "--target", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_ctx_exit_code_from_a_command_reaches_the_shell(monkeypatch):
    import click
    import pytest

    from wheelhouse import cli as cli_mod

    @click.command()
    @click.pass_context
    def failing(ctx):
        ctx.exit(7)

    monkeypatch.setitem(cli_mod._COMMANDS, "failing", ("target", "target", "test"))
    monkeypatch.setattr(cli_mod._LazyGroup, "get_command", lambda self, ctx, name: failing if name == "failing" else None)
    with pytest.raises(SystemExit) as exc:
        cli_mod.main(["failing"])
    assert exc.value.code == 7
