"""`wh serve` / `wh stop` end to end against tests/support/fake_engine.py, plus lint and preflight.

Every launch runs the real CLI in a subprocess; the fake engine runs as a real process
group with a child "rank" that inherits the listening socket, so "no process of the group
remains and the port is free" is checked on real pids and a real port.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from wheelhouse import serve as srv
from wheelhouse.serve import preflight as pre
from wheelhouse.serve.lint import ForbiddenFlag, MissingPlaceholder, fill_placeholders, lint_command, port_from_command
from wheelhouse.target.gpu import Gpu

from ports import free_port, gone, port_free

FAKE = Path(__file__).parents[1] / "support" / "fake_engine.py"
PY = sys.executable


def pids(log: Path) -> dict[str, int]:
    text = log.read_text()
    found = {k: int(v) for k, v in re.findall(r"^(fake-engine|rank) pid (\d+)", text, re.M)}
    return found


def _wait(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


@pytest.fixture
def logs(tmp_path):
    """Log paths for launches; at teardown any process a failed test left behind is killed."""
    made: list[Path] = []

    def new(name="serve.log") -> Path:
        p = tmp_path / name
        made.append(p)
        return p

    yield new
    for log in made:
        if log.exists():
            for pid in pids(log).values():
                if not gone(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass


def wh(args, env, timeout=60):
    return subprocess.run([PY, "-m", "wheelhouse", *args], env=env, capture_output=True, text=True, timeout=timeout)


def fake(port, *extra):
    return ["--", PY, str(FAKE), "--port", str(port), *extra]


def assert_group_gone(log: Path, port: int):
    p = pids(log)
    assert set(p) == {"fake-engine", "rank"}, log.read_text()
    assert _wait(lambda: gone(p["fake-engine"]) and gone(p["rank"])), f"survivors: {p}"
    assert port_free(port)


# --- launch, detach, stop ----------------------------------------------------------------------


def test_detach_then_stop_kills_the_whole_group_and_frees_the_port(env, logs, tmp_path):
    port, log = free_port(), logs()
    r = wh(["serve", "--no-preflight", "--detach", "--json", "--interval", "0.1", "--log", str(log), *fake(port)], env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["url"] == f"http://127.0.0.1:{port}"  # from the command's --port
    assert out["detached"] is True and out["ready"] == "health" and out["pid"] == out["pgid"]
    assert "ready in" in r.stderr
    state = json.loads((tmp_path / "state" / "serve.json").read_text())
    assert {"pid", "pgid", "url", "log", "command", "started"} <= set(state) and state["log"] == str(log)
    # it is really up, after wh exited: the engine's own health says ok
    from urllib.request import urlopen
    assert json.loads(urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read())["status"] == "ok"
    p = pids(log)
    assert not gone(p["rank"])

    r = wh(["stop", "--json", "--grace", "5"], env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stop"]["was_running"] is True
    assert_group_gone(log, port)
    assert not (tmp_path / "state" / "serve.json").exists()

    r = wh(["stop"], env)
    assert r.returncode == 1 and "no detached engine" in r.stderr and "hint:" in r.stderr


def test_foreground_ctrl_c_after_ready_sigkills_a_stubborn_rank(env, logs):
    port, log = free_port(), logs()
    proc = subprocess.Popen([PY, "-m", "wheelhouse", "serve", "--no-preflight", "--json", "--interval", "0.1", "--grace", "0.5",
                             "--log", str(log), *fake(port, "--stubborn-rank")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    while True:  # --json is printed once ready; then wh stays attached
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line == "}\n":
            break
    assert json.loads("".join(lines))["pid"] > 0
    assert proc.poll() is None and not port_free(port)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "SIGKILL needed" in err and "port is free" in err
    assert_group_gone(log, port)


def test_engine_crashing_after_ready_fails_attached_serve_and_kills_the_rank(env, logs):
    port, log = free_port(), logs()
    r = wh(["serve", "--no-preflight", "--interval", "0.1", "--log", str(log), *fake(port, "--exit-after", "2.5")], env)
    assert r.returncode == 1
    assert "ready in" in r.stderr and "the engine exited with code 3 after it was ready" in r.stderr
    assert "NCCL watchdog" in r.stderr
    assert_group_gone(log, port)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupt_while_loading_stops_the_group(env, logs, sig):
    port, log = free_port(), logs()
    proc = subprocess.Popen([PY, "-m", "wheelhouse", "serve", "--no-preflight", "--interval", "0.1", "--log", str(log),
                             *fake(port, "--load-seconds", "60")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert _wait(lambda: log.exists() and "rank" in pids(log) and not port_free(port), timeout=15)
    time.sleep(0.3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted before the engine was ready" in err
    assert_group_gone(log, port)


def test_engine_dying_while_loading_fails_with_the_log_tail_and_kills_its_rank(env, logs):
    port, log = free_port(), logs()
    r = wh(["serve", "--no-preflight", "--interval", "0.1", "--log", str(log), *fake(port, "--mode", "die")], env)
    assert r.returncode == 1
    assert "the engine exited with code 1 before it was ready" in r.stderr
    assert "torch.OutOfMemoryError: CUDA out of memory" in r.stderr  # the tail, printed
    assert "hint:" in r.stderr
    # the leader died on its own; its rank held the port until wh stopped the group
    assert_group_gone(log, port)


def test_health_error_fails_with_the_engines_message(env, logs):
    port, log = free_port(), logs()
    r = wh(["-v", "serve", "--no-preflight", "--interval", "0.1", "--log", str(log), *fake(port, "--mode", "error")], env)
    assert r.returncode == 1
    assert "the engine reported an error while loading: moe_cache_size=128 is too small" in r.stderr
    assert "| rank pid" in r.stderr and "| GET /health" in r.stderr  # -v tails the engine's log
    assert_group_gone(log, port)


def test_serve_own_verbose_flag_tails_the_log_like_the_global_one(env, logs):
    # `wh serve -v` was "No such option '-v'": only `wh -v serve` tailed the log.
    port, log = free_port(), logs()
    r = wh(["serve", "-v", "--no-preflight", "--interval", "0.1", "--log", str(log), *fake(port, "--mode", "error")], env)
    assert r.returncode == 1 and "No such option" not in r.stderr
    assert "| rank pid" in r.stderr and "| GET /health" in r.stderr
    assert_group_gone(log, port)


def test_generate_readiness_times_out_on_a_wedged_engine(env, logs):
    port, log = free_port(), logs()
    r = wh(["serve", "--no-preflight", "--ready", "generate", "--timeout", "4", "--attempt-timeout", "1", "--interval", "0.1",
            "--log", str(log), *fake(port, "--mode", "wedged", "--listen-delay", "0")], env)
    assert r.returncode == 1
    assert "not ready after 4 s" in r.stderr
    assert "/v1/models answers (model '1') but a 1-token completion did not finish within 1 s" in r.stderr
    assert_group_gone(log, port)


def test_health_readiness_on_an_engine_without_health_hints_generate(env, logs):
    port, log = free_port(), logs()
    r = wh(["serve", "--no-preflight", "--timeout", "1", "--interval", "0.1", "--log", str(log),
            *fake(port, "--mode", "wedged")], env)
    assert r.returncode == 1 and "GET /health: HTTP 404" in r.stderr and "--ready generate" in r.stderr
    assert_group_gone(log, port)


def test_http_readiness_on_models_would_call_the_wedged_engine_ready(env, logs):
    # The pitfall generate exists for: the same wedged engine passes an HTTP-200 check.
    port, log = free_port(), logs()
    r = wh(["serve", "--no-preflight", "--ready", "http", "--path", "/v1/models", "--detach", "--interval", "0.1",
            "--log", str(log), *fake(port, "--mode", "wedged")], env)
    assert r.returncode == 0, r.stderr
    assert wh(["stop", "--grace", "2"], env).returncode == 0
    assert_group_gone(log, port)


def test_timeout_while_loading_stops_the_group(env, logs):
    port, log = free_port(), logs()
    r = wh(["serve", "--no-preflight", "--timeout", "1.5", "--interval", "0.1", "--log", str(log),
            *fake(port, "--load-seconds", "60")], env)
    assert r.returncode == 1
    assert "not ready after 1.5 s" in r.stderr and "status loading, phase weights" in r.stderr
    assert_group_gone(log, port)


def test_smoke_after_ready_counts_reasoning_only_stream(env, logs):
    port, log = free_port(), logs()
    r = wh(["serve", "--no-preflight", "--detach", "--smoke", "--json", "--interval", "0.1", "--log", str(log),
            *fake(port, "--mode", "reasoning", "--token-interval", "0.002")], env)
    try:
        assert r.returncode == 0, r.stderr
        sm = json.loads(r.stdout)["smoke"]
        assert sm["model"] == "1" and sm["tokens"] == sm["reasoning_tokens"] == 256 and sm["content_tokens"] == 0
        # `wh smoke` with no --url finds the detached engine's URL
        r2 = wh(["smoke", "--json", "--max-tokens", "10"], env)
        assert r2.returncode == 0, r2.stderr
        assert json.loads(r2.stdout)["url"] == f"http://127.0.0.1:{port}"
    finally:
        wh(["stop", "--grace", "2"], env)
    assert_group_gone(log, port)


def test_api_key_reaches_readiness_and_smoke_but_is_never_printed_or_recorded(env, logs, tmp_path):
    port, log = free_port(), logs()
    env = {**env, "WH_API_KEY": "sekret-123"}
    r = wh(["serve", "--no-preflight", "--ready", "generate", "--detach", "--smoke", "--json", "--interval", "0.1",
            "--log", str(log), *fake(port, "--api-key", "{api_key}", "--token-interval", "0.002")], env)
    try:
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert "***" in out["command"] and out["smoke"]["tokens"] == 256
        assert "sekret-123" not in r.stdout + r.stderr + log.read_text()
        assert "sekret-123" not in (tmp_path / "state" / "serve.json").read_text()
        # the engine really wants the key: without it there is no model id to read
        r2 = wh(["smoke", "--max-tokens", "2"], {**env, "WH_API_KEY": ""})
        assert r2.returncode == 1 and "no model id" in r2.stderr
    finally:
        wh(["stop", "--grace", "2"], env)
    assert_group_gone(log, port)


def test_busy_port_refuses_before_starting_anything(env, logs):
    log = logs()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = wh(["serve", "--no-preflight", "--log", str(log), *fake(port)], env)
    assert r.returncode == 1
    assert f"port {port} on 127.0.0.1 is already in use" in r.stderr and "ss -ltnp" in r.stderr
    assert not log.exists()


def test_engine_not_found_is_a_usage_error(env, logs):
    log = logs()
    r = wh(["serve", "--no-preflight", "--log", str(log), "--url", f"http://127.0.0.1:{free_port()}", "--",
            "no-such-engine-binary", "serve"], env)
    assert r.returncode == 2 and "'no-such-engine-binary' not found" in r.stderr
    assert not log.exists()


# --- lint and placeholders ---------------------------------------------------------------------


MANIFEST = """
[stack]
name = "t"
[doctor]
gpus = 2
max-used-mib = 1000
[serve]
command = ["{python}", "{fake}", "--port", "{port}", "--model-id", "{model}", "--token-interval", "0.002"]
url = "http://127.0.0.1:PORT"
[serve.forbid-flags]
"--num-tokens" = "overrides the memory solver instead of constraining it"
"""


def _manifest(tmp_path, port):
    m = tmp_path / "stack.toml"
    m.write_text(MANIFEST.replace("PORT", str(port)).replace("{python}", PY).replace("{fake}", str(FAKE)))
    return m


def test_forbidden_flag_from_the_manifest_is_refused_with_its_reason(env, logs, tmp_path):
    port, log = free_port(), logs()
    r = wh(["serve", str(_manifest(tmp_path, port)), "--model", "x", "--no-preflight", "--log", str(log),
            "--", "--num-tokens=32768"], env)
    assert r.returncode == 2
    assert "--num-tokens is forbidden" in r.stderr and "overrides the memory solver" in r.stderr
    assert not log.exists()  # refused before anything started


def test_builtin_lint_refuses_num_pages_for_ft_serve_without_a_manifest(env):
    r = wh(["serve", "--no-preflight", "--", "ft", "serve", "--model-path", "/m", "--num-pages", "500"], env)
    assert r.returncode == 2 and "--num-pages is forbidden" in r.stderr and "memory solver" in r.stderr


def test_missing_model_for_the_manifest_command_is_a_usage_error(env, tmp_path):
    r = wh(["serve", str(_manifest(tmp_path, free_port())), "--no-preflight"], env)
    assert r.returncode == 2 and "{model}" in r.stderr and "--model" in r.stderr


def test_manifest_command_with_placeholders_serves(env, logs, tmp_path):
    port, log = free_port(), logs()
    r = wh(["serve", str(_manifest(tmp_path, port)), "--model", "served-id", "--no-preflight", "--detach", "--smoke",
            "--json", "--interval", "0.1", "--log", str(log)], env)
    try:
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["command"][2:6] == ["--port", str(port), "--model-id", "served-id"]
        assert out["smoke"]["model"] == "served-id"
    finally:
        wh(["stop", "--grace", "2"], env)
    assert_group_gone(log, port)


def test_lint_units():
    with pytest.raises(ForbiddenFlag) as info:
        lint_command(["ft", "serve", "--num-tokens", "1", "--num-pages=2"])
    assert set(info.value.found) == {"--num-tokens", "--num-pages"}
    lint_command(["vllm", "serve", "--num-tokens", "1"])  # the built-in rule is FreeToken's only
    with pytest.raises(MissingPlaceholder):
        fill_placeholders(["x", "{model}"], {"model": ""})
    assert fill_placeholders(["--cfg", '{"cpu_offload":true}', "{model}"], {"model": "/m"}) == ("--cfg", '{"cpu_offload":true}', "/m")
    assert port_from_command(["x", "--port=9004"]) == 9004 and port_from_command(["x", "--port", "8000"]) == 8000


def test_bundled_manifests_serve_sections():
    from wheelhouse.manifest import load_manifest

    v = load_manifest("vllm-dsv41-pp5-5x170hx")
    assert v.serve.ready == "generate" and v.doctor.gpus == 5 and v.doctor.max_used_mib == 4096
    assert v.serve.env["VLLM_PP_LAYER_PARTITION"] == "8,8,8,8,8" and "--pipeline-parallel-size" in v.serve.command
    ft = load_manifest("freetoken-dsv4-kaggle-4xl4")
    argv = fill_placeholders(ft.serve.command, {"model": "/kaggle/input/m/1"})
    lint_command(argv, ft.serve.forbid_flags)  # the bundled command itself is clean
    with pytest.raises(ForbiddenFlag):
        lint_command(argv + ("--num-tokens", "32768"), ft.serve.forbid_flags)


# --- preflight -----------------------------------------------------------------------------------


def gpu(i, used, total=65536):
    return Gpu(index=i, name="A100-64G", compute_capability="8.0", memory_total_mib=total, memory_used_mib=used)


def test_preflight_busy_card_and_wrong_count_block_before_any_patch():
    applied = []
    with pytest.raises(pre.PreflightFailed) as info:
        pre.run_preflight(gpus=[gpu(0, 100), gpu(1, 5000), gpu(2, 100), gpu(3, 0)], expected_gpus=5, max_used_mib=None,
                          patches=[Path("p.toml")], apply_patch=applied.append, doctor=lambda: [])
    problems = info.value.problems
    assert any("expected exactly 5 GPU(s), found 4" in p for p in problems)
    assert any("GPU 1 (A100-64G) already has 5000 MiB in use (limit 4096 MiB)" in p for p in problems)
    assert applied == []  # nothing changed


def test_preflight_visible_devices_and_threshold():
    cards = [gpu(0, 9000), gpu(1, 10), gpu(2, 10)]
    assert pre.check_gpus(cards, expected=2, max_used_mib=4096, visible="1,2") == []
    assert pre.check_gpus(cards, expected=None, max_used_mib=10000, visible=None) == []
    assert "found none" in pre.check_gpus([], expected=4, max_used_mib=None)[0]


def test_preflight_applies_patches_then_runs_the_doctor():
    order = []
    failing = SimpleNamespace(id="sm89-rowwise", title="FP8 rowwise hang", evidence="torch 2.11 on sm_89", hint="wh patch apply x")
    with pytest.raises(pre.PreflightFailed) as info:
        pre.run_preflight(gpus=[gpu(0, 0)], expected_gpus=1, max_used_mib=None, patches=[Path("a.toml")],
                          apply_patch=lambda p: order.append(("patch", p.name)),
                          doctor=lambda: order.append(("doctor",)) or [failing])
    assert order == [("patch", "a.toml"), ("doctor",)]
    assert "doctor sm89-rowwise: FP8 rowwise hang -- torch 2.11 on sm_89" in info.value.problems[0]
    assert info.value.hint == "wh patch apply x"


def test_cli_preflight_with_injected_gpus_blocks_the_launch(monkeypatch, tmp_path):
    import wheelhouse.doctor
    import wheelhouse.target.gpu
    from wheelhouse.cli import cli

    monkeypatch.setenv("WH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(wheelhouse.target.gpu, "query_gpus", lambda *a, **k: [gpu(0, 0), gpu(1, 3000)])
    monkeypatch.setattr(wheelhouse.doctor, "run_doctor", lambda *a, **k: SimpleNamespace(failed=[]))
    port = free_port()
    log = tmp_path / "serve.log"
    # manifest: exactly 2 GPUs, max-used-mib 1000 -> card 1 (3000 MiB used) blocks
    res = CliRunner().invoke(cli, ["serve", str(_manifest(tmp_path, port)), "--model", "m", "--log", str(log)])
    assert isinstance(res.exception, pre.PreflightFailed), res.output
    assert "GPU 1 (A100-64G) already has 3000 MiB in use (limit 1000 MiB)" in res.exception.detail
    assert not log.exists()
    # --gpus overrides the manifest's count; --max-used-mib its threshold
    res = CliRunner().invoke(cli, ["serve", str(_manifest(tmp_path, port)), "--model", "m", "--gpus", "3",
                                   "--max-used-mib", "4096", "--log", str(log)])
    assert isinstance(res.exception, pre.PreflightFailed)
    assert res.exception.problems == ("expected exactly 3 GPU(s), found 2",)
    assert not log.exists()


# --- stopping: stale state, a port someone else holds ----------------------------------------------


def test_stop_with_a_stale_state_file_removes_it(tmp_path):
    dead = subprocess.Popen([PY, "-c", "pass"], start_new_session=True)
    from wheelhouse.procgroup import start_ticks
    ticks = start_ticks(dead.pid)  # (a zombie until reaped: its start time is still there)
    dead.wait()
    state = tmp_path / "serve.json"
    engine = srv.Engine(dead.pid, dead.pid, f"http://127.0.0.1:{free_port()}", str(tmp_path / "x.log"), ("x",), time.time(),
                        ticks)
    srv.write_state(engine, state)
    got, report = srv.stop_detached(state, grace=1)
    assert got.pid == dead.pid and report.was_running is False
    assert not state.exists()


def test_port_still_held_after_the_group_is_gone_is_a_clear_error(tmp_path):
    dead = subprocess.Popen([PY, "-c", "pass"], start_new_session=True)
    dead.wait()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        engine = srv.Engine(dead.pid, dead.pid, url, str(tmp_path / "x.log"), ("x",), time.time())
        with pytest.raises(srv.PortBusy) as info:
            srv.shutdown(engine, grace=1)
    assert "still held by another process" in info.value.message and "ss -ltnp" in info.value.hint


def test_engine_python_from_the_command(tmp_path):
    script = tmp_path / "ft"
    script.write_text(f"#!{PY}\nprint('engine')\n")
    script.chmod(0o755)
    assert pre.engine_python([str(script), "serve"]) == PY
    assert pre.engine_python([PY, "-m", "vllm.entrypoints.openai.api_server"]) == PY
    assert pre.engine_python(["no-such-engine-binary"]) is None


def test_a_bare_program_runs_from_the_python_environment_not_from_path(tmp_path, monkeypatch):
    """Hostile round 10: `wh serve --python serve/bin/python -- engine-serve` from a shell with another venv's
    bin/ first on PATH: the preflight judged serve/, the engine that answered was the other venv's. The program is
    taken from --python's scripts folder; one only another interpreter's folder holds is refused."""
    from wheelhouse.errors import UsageError

    mine, other = tmp_path / "serve" / "bin", tmp_path / "other" / "bin"
    for folder in (mine, other):
        folder.mkdir(parents=True)
        (folder / "python").symlink_to(PY)
        launcher = folder / "engine-serve"
        launcher.write_text(f"#!{folder / 'python'}\nprint('engine')\n")
        launcher.chmod(0o755)
    (other / "only-there").write_text(f"#!{other / 'python'}\nprint('engine')\n")
    (other / "only-there").chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}{os.pathsep}{os.environ['PATH']}")
    assert pre.in_environment(["engine-serve", "--port", "1"], str(mine / "python")) == (
        str(mine / "engine-serve"), "--port", "1")
    assert pre.in_environment(["python", "-m", "x"], str(mine / "python"))[0] == str(mine / "python")
    with pytest.raises(UsageError) as info:
        pre.in_environment(["only-there"], str(mine / "python"))
    assert f"runs {other / 'python'}, not the --python interpreter" in info.value.message
