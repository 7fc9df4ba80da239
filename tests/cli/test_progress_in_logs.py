"""Progress that works in a log (issue 32.7): off a terminal (a CI log, a notebook cell) long work says
where it is with one plain line every WH_PROGRESS_INTERVAL seconds (10 by default), quick work says
nothing; and every `wh serve` run gets a log of its own.

Real `wh` processes with their stderr piped (not a terminal): `wh serve` against the fake engine's
loading /health (bytes done of total), `wh stage` downloading from a slow loopback index."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

FAKE = Path(__file__).parents[1] / "support" / "fake_engine.py"
PY = sys.executable
LOADING = re.compile(r"^loading: (weights|kv-cache): [\d.]+ (MB|GB) of 8\.0 GB \(\d+%\), [\d.]+ (B|KB|MB|GB)/s, \d+ s$")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path, **extra) -> dict:
    env = {**os.environ, "WH_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1", **extra}
    for k in ("WH_SERVE_URL", "WH_API_KEY", "CUDA_VISIBLE_DEVICES", "WH_PROGRESS_INTERVAL"):
        if k not in extra:
            env.pop(k, None)
    return env


def _serve(port, *engine, log=None, detach=False):
    return [PY, "-m", "wheelhouse", "serve", "--no-preflight", "--interval", "0.1", *(["--detach"] if detach else []),
            *(["--log", str(log)] if log else []), "--", PY, str(FAKE), "--port", str(port), *engine]


def _between(err: str, first: str, last: str) -> list[str]:
    lines = err.splitlines()
    a = next(i for i, ln in enumerate(lines) if ln.startswith(first))
    b = next(i for i, ln in enumerate(lines) if last in ln)
    return lines[a + 1:b]


def _stop(env) -> None:
    subprocess.run([PY, "-m", "wheelhouse", "stop", "--grace", "5"], env=env, capture_output=True, timeout=60)


def test_a_long_serve_load_prints_plain_progress_lines_with_the_bytes_done(tmp_path):
    env = _env(tmp_path, WH_PROGRESS_INTERVAL="1")
    try:
        r = subprocess.run(_serve(_port(), "--load-seconds", "5", log=tmp_path / "a.log", detach=True), env=env,
                           capture_output=True, text=True, timeout=120)
    finally:
        _stop(env)
    assert r.returncode == 0, r.stderr
    shown = _between(r.stderr, "log:", "ready in")
    progress = [ln for ln in shown if ln.startswith("loading")]
    assert len([ln for ln in progress if ln.startswith("loading: weights")]) >= 2, r.stderr  # ~3.5 s of weights
    assert all(LOADING.match(ln) for ln in progress), progress
    done = [float(ln.split(": ")[2].split()[0]) for ln in progress if ln.startswith("loading: weights")]
    assert done == sorted(done)  # the bytes done move forward
    assert "\x1b[" not in r.stderr and "\r" not in r.stderr  # plain lines: no bar, no cursor moves


def test_quick_work_prints_no_progress_line(tmp_path):
    env = _env(tmp_path)  # the default interval: 10 s
    try:
        r = subprocess.run(_serve(_port(), "--load-seconds", "1", log=tmp_path / "q.log", detach=True), env=env,
                           capture_output=True, text=True, timeout=120)
    finally:
        _stop(env)
    assert r.returncode == 0, r.stderr
    assert _between(r.stderr, "log:", "ready in") == [], r.stderr


def test_a_slow_download_off_a_terminal_says_how_far_it_got(pyindex, tmp_path):
    from wheelmaker import make_wheel

    wheel = make_wheel(tmp_path / "pub", "slow", "1.0", pad_bytes=3_000_000)
    idx = pyindex(tmp_path / "pub", serve_metadata=True)
    idx.rates[wheel.name] = 1_000_000
    r = subprocess.run([PY, "-m", "wheelhouse", "stage", "slow", "-i", idx.url, "-o", str(tmp_path / "out"),
                        "--cache-dir", str(tmp_path / "cache"), "--no-bootstrap", "-j", "1"],
                       env=_env(tmp_path, WH_PROGRESS_INTERVAL="0.5"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if re.search(r"MB of 3\.0 MB \(\d+%\), [\d.]+ \w+/s, \d+ s$", ln)]
    assert len(lines) >= 2, r.stderr


def test_two_serve_runs_started_in_the_same_second_write_two_logs(tmp_path):
    env = _env(tmp_path)
    while time.time() % 1 > 0.3:  # both start well inside one second
        time.sleep(0.05)
    procs = [subprocess.Popen(_serve(_port(), "--mode", "error", "--load-seconds", "1"), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errs = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [1, 1], errs
    named = [re.search(r"^log: (\S+)", e, re.M).group(1) for e in errs]
    assert named[0] != named[1], named
    logs = sorted((tmp_path / "state" / "logs").iterdir())
    assert len(logs) == 2 and sorted(map(str, logs)) == sorted(named)
    for log in logs:  # each run's engine wrote into its own file only
        assert log.read_text().count("fake-engine pid") == 1, log.read_text()
    for log in logs:
        for line in log.read_text().splitlines():
            if line.startswith(("fake-engine pid", "rank pid")):
                pid = int(line.split()[-1])
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
