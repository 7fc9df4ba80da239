"""A small OpenAI-compatible engine for tests: `python tests/support/fake_engine.py --mode M --port P`.

Stdlib only. It behaves like the engines of the reference deployments, on a known clock:

- It does not listen for ``--listen-delay`` seconds (connection refused), then answers
  /health with a body that is NOT JSON for a moment (a port that answers is not ready).
- ``ok``: /health reports ``loading`` with a phase and done/total bytes for
  ``--load-seconds``, then ``{"status": "ok"}``; chat streams reasoning_content for the
  first ``--reasoning-tokens`` tokens, then content.
- ``reasoning``: like ok, but every token arrives as reasoning_content (content is null).
- ``die``: halfway through loading, prints an OOM traceback and exits 1 (its rank lives on).
- ``wedged``: no /health (404); /v1/models answers at once; completions never finish.
- ``error``: halfway through loading, /health reports ``status: error`` with a message.
- any mode with ``--exit-after S``: the leader crashes (exit 3) S seconds after listening.
- ``--endless-health``: /health answers 200 and streams its body forever (never a whole reply).
- ``--echo-argv``: the first log line is the command line, as engines that print their arguments do.
- ``--daemonize``: the leader forks a child that leaves the session (``setsid``) and serves; the leader
  exits 0 at once, as a server that daemonizes does.

Pacing of a streamed chat: a role-only chunk at once, the first token after ``--ttft``
seconds, then one token every ``--token-interval`` seconds.

It starts a child "rank" process that inherits the listening socket, as tensor-parallel
workers do, so killing only the leader leaves the port held; ``--stubborn-rank`` makes the
rank ignore SIGTERM so only SIGKILL ends it; ``--rank-gpu-mib N`` makes it hold N MiB of GPU
memory through torch, as a real rank does. The log gets "fake-engine pid N" and
"rank pid N" lines so tests can check both are gone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOTAL_BYTES = 8_000_000_000
ARGS: argparse.Namespace
T0 = 0.0


def log(msg: str) -> None:
    print(msg, flush=True)


def elapsed() -> float:
    return time.monotonic() - T0


def health() -> tuple[int, bytes]:
    """(status code, body) for /health at this moment."""
    mode, load = ARGS.mode, ARGS.load_seconds
    if mode == "wedged":
        return 404, b'{"detail":"Not Found"}'
    if elapsed() < ARGS.warmup:
        return 200, b"starting up"  # an answering port, not a ready engine
    if mode == "error" and elapsed() >= load / 2:
        return 200, json.dumps({"status": "error", "message": "moe_cache_size=128 is too small: need at least num_experts=256 slots"}).encode()
    if elapsed() < load:
        frac = elapsed() / load
        if frac < 0.7:
            phase, done = "weights", int(TOTAL_BYTES * frac / 0.7)
        else:
            phase, done = "kv-cache", TOTAL_BYTES
        return 200, json.dumps({"status": "loading", "phase": phase, "progress": {"done_bytes": done, "total_bytes": TOTAL_BYTES}}).encode()
    return 200, b'{"status": "ok"}'


def loaded() -> bool:
    return ARGS.mode == "wedged" or (ARGS.mode in ("ok", "reasoning") and elapsed() >= ARGS.load_seconds)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):  # keep the log readable: one short line per request
        sys.stderr.write("%s %s\n" % (self.command, self.path))

    def _json(self, code: int, data) -> None:
        body = data if isinstance(data, bytes) else json.dumps(data).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _unauthorized(self) -> bool:
        if ARGS.api_key and self.path.startswith("/v1/") and self.headers.get("Authorization") != f"Bearer {ARGS.api_key}":
            self._json(401, {"error": {"message": "Unauthorized"}})
            return True
        return False

    def do_GET(self):
        if self._unauthorized():
            return
        if self.path == "/health" and ARGS.endless_health:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"status": "loading", "pad": "')
            while True:
                self.wfile.write(b"x" * 512)
                self.wfile.flush()
                time.sleep(0.01)
        if self.path == "/health":
            code, body = health()
            self._json(code, body)
        elif self.path == "/v1/models":
            if loaded():
                self._json(200, {"object": "list", "data": [{"id": ARGS.model_id, "object": "model", "owned_by": "fake"}]})
            else:
                self._json(503, {"error": "loading"})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(length) or b"{}")
        if self._unauthorized():
            return
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self._json(404, {"detail": "Not Found"})
        if not loaded():
            return self._json(503, {"error": "loading"})
        if ARGS.mode == "wedged":
            log("request accepted; the pipeline is out of sync and it will never finish")
            time.sleep(3600)
            return
        if req.get("model") != ARGS.model_id:
            return self._json(404, {"error": {"message": f"The model `{req.get('model')}` does not exist."}})
        n = max(1, min(int(req.get("max_tokens") or 16), 4096))
        if req.get("stream"):
            return self._stream(n)
        time.sleep(ARGS.ttft)
        text = "".join(f"tok{i} " for i in range(n))
        choice = {"index": 0, "finish_reason": "length"}
        choice.update({"text": text} if self.path == "/v1/completions" else {"message": {"role": "assistant", "content": text}})
        self._json(200, {"id": "cmpl-1", "object": "completion", "model": ARGS.model_id, "choices": [choice],
                         "usage": {"completion_tokens": n}})

    def _stream(self, n: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def send(delta, finish=None, usage=None):
            event = {"id": "chat-1", "object": "chat.completion.chunk", "model": ARGS.model_id,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            if usage:
                event["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            self.wfile.flush()

        send({"role": "assistant", "content": ""})
        time.sleep(ARGS.ttft)
        for i in range(n):
            if i:
                time.sleep(ARGS.token_interval)
            if ARGS.mode == "reasoning" or i < ARGS.reasoning_tokens:
                send({"reasoning_content": f"think{i} ", "content": None})
            else:
                send({"content": f"word{i} "})
        send({}, finish="length", usage={"prompt_tokens": 12, "completion_tokens": n})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def main() -> None:
    global ARGS, T0
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ok", "reasoning", "die", "wedged", "error"], default="ok")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model-id", default="1")
    p.add_argument("--listen-delay", type=float, default=0.3)
    p.add_argument("--warmup", type=float, default=0.2, help="seconds of non-JSON /health after listening starts")
    p.add_argument("--load-seconds", type=float, default=1.0)
    p.add_argument("--ttft", type=float, default=0.3)
    p.add_argument("--token-interval", type=float, default=0.02)
    p.add_argument("--reasoning-tokens", type=int, default=5)
    p.add_argument("--stubborn-rank", action="store_true")
    p.add_argument("--no-rank", action="store_true")
    p.add_argument("--api-key", help="require this bearer key on /v1/* (401 otherwise)")
    p.add_argument("--exit-after", type=float, default=0, help="exit 3 this many seconds after listening (a crash after ready)")
    p.add_argument("--rank-gpu-mib", type=int, default=0, help="the rank holds this much GPU memory (needs torch)")
    p.add_argument("--endless-health", action="store_true", help="/health streams an endless body")
    p.add_argument("--echo-argv", action="store_true", help="print the command line first")
    p.add_argument("--daemonize", action="store_true", help="fork, setsid and serve in the child; the leader exits 0")
    # Any other flag is an engine setting it does not model (--gpu-memory-utilization 0.97): logged, so a
    # test can see what the engine was launched with.
    ARGS, settings = p.parse_known_args()
    if ARGS.echo_argv:
        log("args: " + " ".join(sys.argv))
    if ARGS.daemonize and os.fork():
        os._exit(0)
    if ARGS.daemonize:
        os.setsid()
    log(f"fake-engine pid {os.getpid()} mode {ARGS.mode} port {ARGS.port}")
    if settings:
        log(f"engine settings: {json.dumps(settings)}")
    time.sleep(ARGS.listen_delay)
    server = ThreadingHTTPServer((ARGS.host, ARGS.port), Handler)
    server.daemon_threads = True
    T0 = time.monotonic()
    if not ARGS.no_rank:
        code = "import signal, time\n"
        if ARGS.stubborn_rank:
            code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        if ARGS.rank_gpu_mib:
            code += ("import torch\n"
                     f"held = torch.empty({ARGS.rank_gpu_mib} * 2**20, dtype=torch.uint8, device='cuda')\n"
                     "torch.cuda.synchronize()\n"
                     "print('rank holds', held.numel() >> 20, 'MiB on GPU', flush=True)\n")
        code += "time.sleep(3600)\n"
        # The rank inherits the listening socket, like a TP worker forked after bind.
        rank = subprocess.Popen([sys.executable, "-c", code], pass_fds=(server.fileno(),))
        log(f"rank pid {rank.pid}")
    if ARGS.mode == "die":
        def die():
            time.sleep(ARGS.load_seconds / 2)
            log("Traceback (most recent call last):")
            log('  File "kvcache/pool.py", line 343, in _alloc_buffers')
            log("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 206.00 MiB. GPU 0: 22.03 GiB total, 163.06 MiB free")
            os._exit(1)
        threading.Thread(target=die, daemon=True).start()
    if ARGS.exit_after:
        def crash():
            time.sleep(ARGS.exit_after)
            log("RuntimeError: NCCL watchdog: rank 1 timed out")
            os._exit(3)
        threading.Thread(target=crash, daemon=True).start()
    log(f"listening on http://{ARGS.host}:{ARGS.port}")
    server.serve_forever()


if __name__ == "__main__":
    main()
