"""`wh stop` signals only the engine it started: pid, pgid and start time must all match a live process.

A damaged or hand-edited state file (no start time, pid 0 or 1, wh's own or its parent's process, a live
leader recorded with another group's pgid) is a one-line error naming the file, never a signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wheelhouse.procgroup import start_ticks

PY = sys.executable


def _alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


@pytest.fixture
def sleepers():
    made: list[subprocess.Popen] = []

    def new() -> subprocess.Popen:
        p = subprocess.Popen(["sleep", "60"], start_new_session=True)
        made.append(p)
        return p

    yield new
    for p in made:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _state(tmp_path: Path, **fields) -> tuple[dict, Path]:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    body = {"pid": 0, "pgid": 0, "url": "http://127.0.0.1:9", "log": str(tmp_path / "x.log"), "command": ["x"],
            "started": time.time(), **fields}
    body = {k: v for k, v in body.items() if v is not ...}
    (state / "serve.json").write_text(json.dumps(body))
    env = {**os.environ, "WH_STATE_DIR": str(state), "NO_COLOR": "1"}
    return env, state / "serve.json"


def _stop(env) -> subprocess.CompletedProcess:
    # In a session of its own: a wh that signalled its own group would end only itself.
    return subprocess.run([PY, "-m", "wheelhouse", "stop", "--grace", "1"], env=env, capture_output=True, text=True,
                          timeout=60, start_new_session=True)


def _refused(r: subprocess.CompletedProcess, path: Path) -> None:
    assert r.returncode in (1, 2), (r.returncode, r.stderr)
    assert str(path) in r.stderr and "hint:" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("ticks", [..., None], ids=["no-start-ticks", "null-start-ticks"])
def test_a_state_file_without_a_start_time_never_signals_the_pid(tmp_path, sleepers, ticks):
    other = sleepers()
    env, path = _state(tmp_path, pid=other.pid, pgid=other.pid, start_ticks=ticks)
    r = _stop(env)
    _refused(r, path)
    time.sleep(0.2)
    assert _alive(other)


def test_a_reused_pid_with_another_start_time_is_not_signalled(tmp_path, sleepers):
    other = sleepers()
    env, path = _state(tmp_path, pid=other.pid, pgid=other.pid, start_ticks=start_ticks(other.pid) - 1)
    r = _stop(env)
    assert r.returncode == 0, r.stderr  # the recorded engine is gone: nothing to stop, the record goes
    assert _alive(other) and not path.exists()


@pytest.mark.parametrize("pid", [0, 1, -1], ids=["pid-0", "pid-1", "negative"])
def test_pid_0_or_1_is_refused(tmp_path, pid):
    env, path = _state(tmp_path, pid=pid, pgid=pid, start_ticks=start_ticks(1) if pid == 1 else 0)
    r = _stop(env)
    _refused(r, path)
    assert r.returncode > 0


def test_a_live_leader_recorded_with_another_groups_pgid_is_refused(tmp_path, sleepers):
    leader, victim = sleepers(), sleepers()
    env, path = _state(tmp_path, pid=leader.pid, pgid=victim.pid, start_ticks=start_ticks(leader.pid))
    r = _stop(env)
    _refused(r, path)
    time.sleep(0.2)
    assert _alive(leader) and _alive(victim)


def test_wh_stop_never_signals_its_own_parent(tmp_path):
    """The state names the process that runs `wh stop` (its pid, group and true start time)."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, subprocess, sys
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from wheelhouse.procgroup import start_ticks
        state = {str(tmp_path / "state")!r}
        os.makedirs(state, exist_ok=True)
        with open(os.path.join(state, "serve.json"), "w") as fh:
            json.dump({{"pid": os.getpid(), "pgid": os.getpgrp(), "url": "http://127.0.0.1:9", "log": "x",
                       "command": ["x"], "started": 0, "start_ticks": start_ticks(os.getpid())}}, fh)
        r = subprocess.run([sys.executable, "-m", "wheelhouse", "stop", "--grace", "1"], capture_output=True,
                           text=True, env={{**os.environ, "WH_STATE_DIR": state, "NO_COLOR": "1"}})
        print(r.returncode)
        print(r.stderr)
    """))
    r = subprocess.run([PY, script], capture_output=True, text=True, timeout=60, start_new_session=True)
    assert r.returncode == 0, (r.returncode, r.stderr)  # the parent was not signalled
    rc, _, err = r.stdout.partition("\n")
    assert int(rc) == 2 and "serve.json" in err and "hint:" in err, r.stdout


def test_a_damaged_state_file_is_an_error_naming_it(tmp_path):
    env, path = _state(tmp_path)
    path.write_text('{"pid": "12x", "pgid": true}')
    r = _stop(env)
    _refused(r, path)
    assert path.exists()  # kept for the user to look at


def test_wh_stop_also_stops_a_worker_that_left_the_group_but_carries_the_launch(tmp_path):
    """A worker started with setsid is in no group wh can signal; it carries WH_SERVE_LAUNCH, so it is the
    launch's: `wh stop` stops it too and the port is free."""
    import re
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fake = Path(__file__).parents[1] / "support" / "fake_engine.py"
    log = tmp_path / "serve.log"
    env = {**os.environ, "WH_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1"}
    for k in ("WH_SERVE_URL", "WH_API_KEY"):
        env.pop(k, None)
    worker = None
    try:
        r = subprocess.run([PY, "-m", "wheelhouse", "serve", "--no-preflight", "--detach", "--interval", "0.1",
                            "--timeout", "30", "--url", f"http://127.0.0.1:{port}", "--log", str(log), "--",
                            "sh", "-c", f"setsid {PY} {fake} --port {port} --no-rank & wait"],
                           env=env, capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stderr
        worker = int(re.search(r"^fake-engine pid (\d+)", log.read_text(), re.M).group(1))
        s = subprocess.run([PY, "-m", "wheelhouse", "stop", "--grace", "2"], env=env, capture_output=True, text=True,
                           timeout=90)
        assert s.returncode == 0, s.stderr
        deadline = time.monotonic() + 10
        while start_ticks(worker) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert start_ticks(worker) is None or Path(f"/proc/{worker}/stat").read_text().split(") ")[1][0] in "ZX"
    finally:
        if worker is not None:
            try:
                os.kill(worker, signal.SIGKILL)
            except ProcessLookupError:
                pass
