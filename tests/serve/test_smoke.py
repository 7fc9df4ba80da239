"""`wh smoke` against tests/support/fake_engine.py, whose pacing is known: first token after 0.3 s, then one per 20 ms."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


# --- engines that misbehave mid-stream: a scripted server on 127.0.0.1 -------------------------------


def _chunk(delta, finish=None) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).encode() + b"\n\n"


@pytest.fixture
def scripted():
    """Start an engine whose /v1/models says "m" and whose chat stream is ``script(send)`` -> URL. ``chunked``:
    HTTP/1.1 chunked transfer (each send one chunk), else HTTP/1.0 with the body ending at the close."""
    servers = []

    def start(script, chunked=False):
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if chunked else "HTTP/1.0"

            def log_message(self, *args):
                pass

            def do_GET(self):
                body = json.dumps({"data": [{"id": "m"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def send(data: bytes) -> None:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                    self.wfile.flush()
                try:
                    script(send)
                except OSError:  # the client gave up and closed
                    pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_stream_cut_short_is_a_failure(scripted):
    # Tokens, then the engine dies: no finish_reason, no [DONE]. Two tokens are not an answer.
    url = scripted(lambda send: send(_chunk({"role": "assistant"}) + _chunk({"content": "The"}) + _chunk({"content": " answer"})))
    with pytest.raises(SmokeError) as info:
        run_smoke(url, max_tokens=8, timeout=10)
    assert "the stream ended without [DONE] / a finish_reason" in info.value.message


def test_an_aborted_request_is_a_failure(scripted):
    url = scripted(lambda send: send(_chunk({"content": "The"}) + _chunk({}, finish="abort") + b"data: [DONE]\n\n"))
    with pytest.raises(SmokeError) as info:
        run_smoke(url, max_tokens=8, timeout=10)
    assert "the engine aborted the request" in info.value.message


@pytest.mark.parametrize("error", [
    {"object": "error", "message": "CUDA error: an illegal memory access was encountered", "code": 500},  # vLLM's shape
    {"error": {"message": "CUDA error: an illegal memory access was encountered"}},  # OpenAI's
])
def test_an_error_mid_stream_is_a_failure_with_its_message(scripted, error):
    event = b"data: " + json.dumps(error).encode() + b"\n\n"
    url = scripted(lambda send: send(_chunk({"content": "The"}) + _chunk({"content": " answer"}) + event + b"data: [DONE]\n\n"))
    with pytest.raises(SmokeError) as info:
        run_smoke(url, max_tokens=8, timeout=10)
    assert info.value.message == "the engine sent an error mid-stream: CUDA error: an illegal memory access was encountered"


@pytest.mark.parametrize("chunked", [False, True], ids=["plain", "chunked"])
def test_a_line_trickled_forever_cannot_outlast_the_timeout(scripted, chunked):
    # One byte every 0.2 s and never a newline: every socket read succeeds, only the deadline ends it.
    def trickle(send):
        send(_chunk({"content": "hi"}) + b"data: ")
        for _ in range(200):
            send(b"x")
            time.sleep(0.2)

    url = scripted(trickle, chunked=chunked)
    t0 = time.monotonic()
    with pytest.raises(SmokeError) as info:
        run_smoke(url, max_tokens=8, timeout=1.5)
    assert time.monotonic() - t0 < 1.5 + 1.0
    assert info.value.message == "the stream did not finish within 1.5 s (1 tokens so far)"


@pytest.mark.parametrize("payload", [
    b'{"choices": "oops"}',
    b'{"choices": [{"delta": "oops"}]}',
    b'{"choices": ["oops"]}',
    b'{"choices": [{"delta": {"content": 5}}]}',
    b'[1, 2]',
])
def test_a_malformed_chunk_is_named(scripted, payload):
    url = scripted(lambda send: send(b"data: " + payload + b"\n\n" + b"data: [DONE]\n\n"))
    with pytest.raises(SmokeError) as info:
        run_smoke(url, max_tokens=8, timeout=10)
    assert info.value.message == f"the stream sent a malformed chunk: {payload!r}"
