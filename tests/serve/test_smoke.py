"""`wh smoke` against tests/support/fake_engine.py, whose pacing is known: first token after 0.3 s, then one per 20 ms."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from wheelhouse.serve.readiness import UrllibTransport, check_health
from wheelhouse.serve.smoke import SmokeError, run_smoke

FAKE = Path(__file__).parents[1] / "support" / "fake_engine.py"
TTFT, INTERVAL = 0.3, 0.02  # the fake's defaults


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """Start fake engines on demand (mode, extra args) -> URL; all stopped at the end of the module."""
    procs = []

    def start(mode="ok", *extra, wait=True):
        port = _free_port()
        log = open(tmp_path_factory.mktemp("smoke") / "engine.log", "w")
        proc = subprocess.Popen([sys.executable, str(FAKE), "--mode", mode, "--port", str(port), "--no-rank",
                                 "--load-seconds", "0.2", *extra], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append((proc, log))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        while wait and not check_health(UrllibTransport(), url).ready:
            assert proc.poll() is None and time.monotonic() < deadline, "fake engine did not come up"
            time.sleep(0.05)
        return url

    yield start
    for proc, log in procs:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()


def test_counts_both_channels_and_times_against_the_known_pacing(engine):
    r = run_smoke(engine("ok"), max_tokens=60, timeout=30)
    assert r.model == "1"
    assert (r.tokens, r.reasoning_tokens, r.content_tokens) == (60, 5, 55)
    assert r.reasoning.startswith("think0 think1") and r.text.startswith("word5 word6")
    # first token after 0.3 s server-side; then 59 intervals of 20 ms = 50 tok/s at most
    assert TTFT * 0.9 <= r.ttft_s < TTFT + 1.5
    assert 10 <= r.decode_tok_s <= 60  # generous: a loaded CI box only slows it down
    assert r.total_s >= r.ttft_s + 59 * INTERVAL * 0.9
    assert r.engine_completion_tokens == 60 and r.finish_reason == "length"


def test_reasoning_only_stream_is_not_empty(engine):
    # A client that watched only delta.content would see nothing here.
    r = run_smoke(engine("reasoning"), max_tokens=30, timeout=30)
    assert r.tokens == r.reasoning_tokens == 30 and r.content_tokens == 0
    assert r.text == "" and r.reasoning.startswith("think0")


def test_model_id_is_read_never_guessed(engine):
    r = run_smoke(engine("ok", "--model-id", "DeepSeek-V4.1-Flash"), max_tokens=3, timeout=30)
    assert r.model == "DeepSeek-V4.1-Flash" and r.tokens == 3


def test_one_token_has_no_decode_rate(engine):
    r = run_smoke(engine("ok"), max_tokens=1, timeout=30)
    assert r.tokens == 1 and r.decode_tok_s is None and r.ttft_s is not None


def test_engine_still_loading_is_a_clear_error(engine):
    url = engine("ok", "--load-seconds", "60", "--listen-delay", "0", wait=False)
    time.sleep(0.3)
    with pytest.raises(SmokeError) as info:
        run_smoke(url, max_tokens=3, timeout=5)
    assert "/v1/models gave no model id" in info.value.message and "wh serve" in info.value.hint


def test_stream_slower_than_timeout_fails_cleanly(engine):
    url = engine("ok", "--token-interval", "0.5")
    with pytest.raises(SmokeError) as info:
        run_smoke(url, max_tokens=50, timeout=1.5)
    assert "1.5 s" in info.value.message or "failed after" in info.value.message


def test_cli_json_on_stdout(engine):
    from wheelhouse.cli import cli

    url = engine("ok")
    res = CliRunner().invoke(cli, ["smoke", "--url", url, "--max-tokens", "20", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert {"model", "tokens", "content_tokens", "reasoning_tokens", "ttft_s", "decode_tok_s", "total_s", "text"} <= set(data)
    assert data["tokens"] == 20 and data["model"] == "1"


def test_cli_nothing_listening(tmp_path, monkeypatch):
    from wheelhouse.cli import cli

    monkeypatch.setenv("WH_STATE_DIR", str(tmp_path))
    res = CliRunner().invoke(cli, ["smoke", "--url", f"http://127.0.0.1:{_free_port()}", "--max-tokens", "2"])
    assert isinstance(res.exception, SmokeError)
