"""A start that fails: bounded readiness, a redacted log tail, and nothing left running.

Through the real `wh serve` against tests/support/fake_engine.py: a /health that streams forever must not
hang past --timeout; the log tail printed on failure never shows the API key (an engine echoing its argv);
a daemonizing engine that wh refused is not left on the port.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ports import free_port as _free_port, gone as _gone, port_free as _port_free

FAKE = Path(__file__).parents[1] / "support" / "fake_engine.py"
PY = sys.executable
KEY = "sk-planted-4f9a2c7e1b"


def _logged_pids(log: Path) -> list[int]:
    return [int(v) for v in re.findall(r"^(?:fake-engine|rank) pid (\d+)", log.read_text(), re.M)] if log.exists() else []


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "serve.log"
    yield path
    for pid in _logged_pids(path):  # whatever a failing test left behind
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _serve(env, log, port, *engine_args, flags=(), timeout=90):
    argv = [PY, "-m", "wheelhouse", "serve", "--no-preflight", "--interval", "0.1", "--grace", "1", "--log", str(log),
            *flags, "--", PY, str(FAKE), "--port", str(port), *engine_args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def test_an_endless_health_body_does_not_hang_past_the_timeout(env, log):
    port = _free_port()
    t0 = time.monotonic()
    r = _serve(env, log, port, "--endless-health", flags=("--timeout", "3", "--attempt-timeout", "1"))
    took = time.monotonic() - t0
    assert r.returncode == 1, r.stderr
    assert "was not ready after 3 s" in r.stderr, r.stderr
    assert took < 20, took
    assert all(_gone(p) for p in _logged_pids(log)) and _port_free(port)


@pytest.mark.parametrize("verbose", [False, True], ids=["tail", "verbose"])
def test_the_log_tail_never_shows_the_api_key(env, log, verbose):
    port = _free_port()
    env = {**env, "WH_API_KEY": KEY}
    r = _serve(env, log, port, "--mode", "die", "--echo-argv", "--api-key", "{api_key}",
               flags=("-v",) if verbose else ())
    assert r.returncode == 1, r.stderr
    assert "the engine exited with code 1" in r.stderr and "args: " in r.stderr, r.stderr
    assert KEY not in r.stderr and KEY not in r.stdout
    assert "--api-key ***" in r.stderr


def test_a_daemonizing_engine_that_was_refused_is_not_left_running(env, log):
    port = _free_port()
    r = _serve(env, log, port, "--daemonize", "--no-rank", "--listen-delay", "0")
    assert r.returncode == 1, r.stderr
    assert "the engine exited with code 0 before it was ready" in r.stderr, r.stderr
    deadline = time.monotonic() + 10
    while not _logged_pids(log) and time.monotonic() < deadline:
        time.sleep(0.1)
    daemons = _logged_pids(log)
    assert daemons, log.read_text()
    assert all(_gone(p) for p in daemons), r.stderr
    assert _port_free(port)
