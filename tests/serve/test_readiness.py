"""Readiness protocols over a scripted transport, and the wait loop over a scripted probe and clock."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from wheelhouse.progress import RecordingReporter
from wheelhouse.serve.readiness import (HttpReply, Readiness, UrllibTransport, check_generate, check_health, check_http,
                                        make_probe)
from wheelhouse.serve import EngineExited, EngineFailed, ReadyTimeout, wait_ready


class Scripted:
    """A Transport answering from a table: (method, path) -> HttpReply, or an exception to raise."""

    def __init__(self, table):
        self.table = table
        self.calls = []

    def request(self, method, url, *, body=None, headers=None, timeout=5.0):
        path = "/" + url.split("/", 3)[3]
        self.calls.append((method, path, body, dict(headers or {}), timeout))
        answer = self.table.get((method, path), ConnectionRefusedError(111, "Connection refused"))
        if isinstance(answer, BaseException):
            raise answer
        return answer


def j(status, data):
    return HttpReply(status, json.dumps(data).encode())


BASE = "http://127.0.0.1:1919"


def test_health_connection_refused_keeps_waiting():
    r = check_health(Scripted({}), BASE)
    assert r.state == "waiting" and "refused" in r.detail


def test_health_200_without_json_is_not_ready():
    # A port that answers is not a ready engine.
    r = check_health(Scripted({("GET", "/health"): HttpReply(200, b"starting up")}), BASE)
    assert r.state == "waiting" and not r.ready


def test_health_loading_carries_phase_and_bytes():
    tx = Scripted({("GET", "/health"): j(200, {"status": "loading", "phase": "weights",
                                               "progress": {"done_bytes": 250, "total_bytes": 1000}})})
    r = check_health(tx, BASE)
    assert (r.state, r.phase, r.done, r.total) == ("loading", "weights", 250.0, 1000.0)


def test_health_ok_is_ready_and_error_carries_the_engines_message():
    assert check_health(Scripted({("GET", "/health"): j(200, {"status": "ok"})}), BASE).ready
    r = check_health(Scripted({("GET", "/health"): j(200, {"status": "error", "message": "moe_cache_size=128 is too small"})}), BASE)
    assert r.state == "error" and r.detail == "moe_cache_size=128 is too small"


def test_http_mode_wants_200_from_the_path():
    assert check_http(Scripted({("GET", "/v1/models"): j(200, {})}), BASE, "/v1/models").ready
    assert check_http(Scripted({("GET", "/v1/models"): j(503, {})}), BASE, "/v1/models").state == "waiting"


MODELS = j(200, {"data": [{"id": "1"}]})


def test_generate_waits_for_a_model_id():
    r = check_generate(Scripted({("GET", "/v1/models"): j(503, {"error": "loading"})}), BASE)
    assert r.state == "waiting" and "model id" in r.detail


def test_generate_on_a_wedged_engine_is_not_ready_although_models_answers():
    tx = Scripted({("GET", "/v1/models"): MODELS, ("POST", "/v1/completions"): TimeoutError("timed out")})
    r = check_generate(tx, BASE, timeout=2)
    assert r.state == "waiting"
    assert "/v1/models answers" in r.detail and "did not finish within 2 s" in r.detail
    # the completion used the served id, one token, and the per-attempt timeout
    method, path, body, headers, timeout = tx.calls[-1]
    assert json.loads(body)["model"] == "1" and json.loads(body)["max_tokens"] == 1 and timeout == 2


def test_generate_falls_back_to_chat_and_sends_the_api_key():
    tx = Scripted({("GET", "/v1/models"): MODELS, ("POST", "/v1/completions"): j(404, {}),
                   ("POST", "/v1/chat/completions"): j(200, {"choices": [{"message": {"content": "Hi"}}]})})
    r = check_generate(tx, BASE, headers={"Authorization": "Bearer k"})
    assert r.ready and "/v1/chat/completions" in r.detail
    assert all(c[3].get("Authorization") == "Bearer k" for c in tx.calls)


def test_generate_unauthorized_is_an_error_not_a_wait():
    tx = Scripted({("GET", "/v1/models"): MODELS, ("POST", "/v1/completions"): j(401, {})})
    assert check_generate(tx, BASE).state == "error"


def test_make_probe_rejects_unknown_mode():
    with pytest.raises(ValueError):
        make_probe("port", BASE)


# --- the wait loop -----------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def _loop(states, tmp_path, *, exit_at=None, timeout=100.0):
    clock = Clock()
    seq = iter(states)
    last = [states[-1]]

    def probe():
        try:
            last[0] = next(seq)
        except StopIteration:
            pass
        return last[0]

    calls = [0]

    def exited():
        calls[0] += 1
        return 1 if exit_at is not None and calls[0] > exit_at else None

    log = tmp_path / "serve.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)) + "RuntimeError: CUDA out of memory\n")
    rep = RecordingReporter()
    seconds = wait_ready(probe, exited=exited, log=log, timeout=timeout, interval=1.0, reporter=rep,
                         clock=clock, sleep=clock.sleep)
    return seconds, rep


def test_loading_drives_a_progress_bar_per_phase(tmp_path):
    states = [
        Readiness("waiting", "refused"),
        Readiness("loading", phase="weights", done=100, total=1000),
        Readiness("loading", phase="weights", done=600, total=1000),
        Readiness("loading", phase="kv-cache", done=None, total=None),
        Readiness("ready"),
    ]
    seconds, rep = _loop(states, tmp_path)
    assert seconds == 4.0
    assert rep.events == [
        ("start", "loading: weights", 1000),
        ("advance", "loading: weights", 100),
        ("advance", "loading: weights", 500),
        ("finish", "loading: weights", ""),
        ("start", "loading: kv-cache", None),
        ("finish", "loading: kv-cache", ""),
    ]


def test_engine_exit_fails_with_the_log_tail(tmp_path):
    with pytest.raises(EngineExited) as info:
        _loop([Readiness("waiting", "refused")], tmp_path, exit_at=3)
    err = info.value
    assert err.returncode == 1 and "before it was ready" in err.message
    assert "CUDA out of memory" in err.detail and "line 99" in err.detail and "line 50\n" not in err.detail


def test_reported_error_fails_with_its_message(tmp_path):
    with pytest.raises(EngineFailed) as info:
        _loop([Readiness("loading", phase="weights"), Readiness("error", "need at least num_experts=256 slots")], tmp_path)
    assert "need at least num_experts=256 slots" in info.value.message


def test_timeout_names_the_last_check(tmp_path):
    with pytest.raises(ReadyTimeout) as info:
        _loop([Readiness("waiting", "GET /health: HTTP 200, no JSON status")], tmp_path, timeout=5)
    assert "after 5 s" in info.value.message and "no JSON status" in info.value.message
    assert isinstance(info.value.detail, str) and Path(tmp_path / "serve.log").exists()


# --- over real HTTP ------------------------------------------------------------------------------


@pytest.fixture
def redirecting():
    """127.0.0.1 where /health answers 302 to /, and / answers 200 with {"status": "ok"}: a page, not the engine."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path == "/health":
                self.send_response(302)
                self.send_header("Location", "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = b'{"status": "ok"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("check", [check_http, check_health], ids=["http", "health"])
def test_a_redirect_is_not_ready(redirecting, check):
    r = check(UrllibTransport(), redirecting, "/health")
    assert r.state == "waiting"
    assert r.detail == "GET /health: HTTP 302, a redirect to / (not followed: a redirect is not ready)"
