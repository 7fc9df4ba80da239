"""Hostile round 8 for `wh serve`: another process that starts answering /health ok on the engine's
port after wh checked the port was free (the engine is still loading and has not bound it yet)."""

from __future__ import annotations

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

from wheelhouse import serve as srv
from wheelhouse.serve.listener import listening_pids

PY = sys.executable


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def impostor():
    servers = []

    def start(port):
        s = ThreadingHTTPServer(("127.0.0.1", port), _Ok)
        threading.Thread(target=s.serve_forever, daemon=True).start()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_listening_pids_names_the_process_that_holds_the_port(impostor):
    port = _free_port()
    assert listening_pids(port) == set()
    impostor(port)
    assert os.getpid() in (listening_pids(port) or set())


def test_a_port_answered_by_another_process_is_not_the_engine_being_ready(tmp_path, impostor):
    """The engine never binds; something else starts answering {"status": "ok"} once wh has started it."""
    port, log = _free_port(), tmp_path / "serve.log"
    marker = tmp_path / "engine.pid"
    engine = tmp_path / "engine.py"
    engine.write_text(f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    env = {**os.environ, "WH_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1"}
    env.pop("WH_SERVE_URL", None)
    proc = subprocess.Popen([PY, "-m", "wheelhouse", "serve", "--no-preflight", "--detach", "--interval", "0.1",
                             "--timeout", "20", "--grace", "1", "--url", f"http://127.0.0.1:{port}", "--log", str(log),
                             "--", PY, str(engine)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:  # the engine runs: wh found the port free
            time.sleep(0.05)
        assert marker.exists()
        impostor(port)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        if marker.exists() and marker.read_text():
            try:
                os.kill(int(marker.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert proc.returncode == 1, (out, err)
    assert f"port {port}" in err and "not the engine" in err, err
    assert not (tmp_path / "state" / "serve.json").exists()
    pid = int(marker.read_text())
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX"


def _health_ok_server(port: int, pid_file: Path | None = None) -> str:
    """A server script answering every GET with {"status": "ok"} on ``port`` (writing its pid first, if asked)."""
    return ("import os\nfrom http.server import BaseHTTPRequestHandler, HTTPServer\n"
            + (f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n" if pid_file else "")
            + "class H(BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n"
            "        b = b'{\"status\": \"ok\"}'\n"
            "        self.send_response(200); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)\n"
            "    def log_message(self, *a): pass\n"
            f"HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n")


def test_the_engine_itself_listening_is_ready(tmp_path):
    """The check must not refuse the engine's own listener, even when a worker outside the group holds it."""
    port = _free_port()
    script = tmp_path / "e.py"
    script.write_text(_health_ok_server(port))
    # the listener is a grandchild in a session of its own (setsid): still the engine's descendant
    launcher = ["setsid", PY, str(script)]
    spec = srv.LaunchSpec(command=tuple(["sh", "-c", " ".join(launcher) + " & wait"]), url=f"http://127.0.0.1:{port}",
                          log=tmp_path / "s.log")
    from wheelhouse.serve.readiness import make_probe
    engine, proc, _ = srv.launch(spec, make_probe("health", spec.url), timeout=20, interval=0.1, grace=1)
    try:
        assert proc.poll() is None
    finally:
        owners = listening_pids(port) or set()
        srv.stop_engine(engine.pgid, leader=proc, grace=1)
        for pid in owners:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_stop_says_so_when_a_worker_that_escaped_the_group_keeps_the_port(tmp_path):
    """A worker started with setsid outlives the group's SIGKILL: `wh stop` must not claim the port is free.
    (It drops the launch's tag from its environment: one that keeps it is stopped too.)"""
    port = _free_port()
    script = tmp_path / "srv.py"
    script.write_text(_health_ok_server(port, pid_file=tmp_path / "srv.pid"))
    env = {**os.environ, "WH_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1"}
    env.pop("WH_SERVE_URL", None)
    wh = [PY, "-m", "wheelhouse"]
    try:
        r = subprocess.run([*wh, "serve", "--no-preflight", "--detach", "--interval", "0.1", "--timeout", "20",
                            "--url", f"http://127.0.0.1:{port}", "--log", str(tmp_path / "s.log"), "--",
                            "sh", "-c", f"setsid env -u WH_SERVE_LAUNCH {PY} {script} & wait"], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        s = subprocess.run([*wh, "stop", "--grace", "1"], env=env, capture_output=True, text=True, timeout=60)
        assert s.returncode == 1 and f"port {port}" in s.stderr and "still held" in s.stderr, s.stderr
    finally:
        pidfile = tmp_path / "srv.pid"
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
