"""Smoke test a served model from the client's side: one streamed chat, timed here, not by the engine.

- The model id comes from GET /v1/models: the served id is often the basename of the model
  path (literally "1" on Kaggle), so it is read, never guessed.
- Tokens are counted from BOTH ``delta.content`` and ``delta.reasoning_content`` (and
  ``delta.reasoning``): a reasoning model may send every token as reasoning, and a client
  watching only ``content`` sees an empty stream.
- Time to first token and decode tokens/s = (n - 1) / (t_last - t_first) are measured by
  the client over the streamed tokens. An engine's own throughput log lines are not a
  measurement (the reference deployment: 0.13, 5.42 and 1392.89 tok/s for the same request).

Stdlib only (http.client), one chunk = one token, as engines stream one token per event.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import urlsplit

from wheelhouse.errors import UsageError, WhError
from .readiness import UrllibTransport, auth_headers, served_model_id

__all__ = ["DEFAULT_PROMPT", "SmokeError", "SmokeResult", "fetch_model_id", "stream_chat", "run_smoke"]

DEFAULT_PROMPT = "Explain in 150 words why a mixture-of-experts model can serve from less GPU memory than its weights."
PREVIEW = 200
MAX_LINE = 1 << 20  # an event is a few hundred bytes; a line this long is not one


class SmokeError(WhError):
    code = "smoke-failed"


@dataclass(frozen=True)
class SmokeResult:
    url: str
    model: str
    tokens: int
    content_tokens: int
    reasoning_tokens: int
    ttft_s: float | None
    decode_tok_s: float | None
    total_s: float
    text: str
    reasoning: str
    finish_reason: str | None = None
    engine_completion_tokens: int | None = None  # usage.completion_tokens if the engine sent it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        ttft = f"{self.ttft_s:.2f} s" if self.ttft_s is not None else "-"
        tps = f"{self.decode_tok_s:.2f} tok/s" if self.decode_tok_s is not None else "- (one token)"
        return (f"model {self.model!r}: TTFT {ttft}   decode {tps}   {self.tokens} tokens "
                f"({self.content_tokens} content, {self.reasoning_tokens} reasoning) in {self.total_s:.2f} s")


def _split(url: str) -> tuple[str, str, int, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url {url!r} is not an http(s) URL", hint="write it like http://127.0.0.1:1919")
    return parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), parts.path.rstrip("/")


class _RememberingTransport(UrllibTransport):
    """Keeps the connection error that served_model_id turns into 'no model id'."""

    error: OSError | None = None

    def request(self, *args, **kw):
        try:
            return super().request(*args, **kw)
        except OSError as exc:
            self.error = exc
            raise


def fetch_model_id(url: str, *, timeout: float = 30.0, api_key: str | None = None) -> str:
    """The served model id from GET /v1/models (first entry)."""
    _split(url)  # a URL urllib cannot open is bad input, not an internal error
    transport = _RememberingTransport()
    model = served_model_id(transport, url, timeout=timeout, headers=auth_headers(api_key))
    if model is None and transport.error is not None:
        exc = transport.error
        why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc) or type(exc).__name__)
        raise SmokeError(f"cannot reach {url.rstrip('/')}/v1/models: {why}",
                         hint="is the engine up? start it with `wh serve`, or check --url")
    if model is None:
        raise SmokeError(f"GET {url.rstrip('/')}/v1/models gave no model id", hint="is the engine up and ready? try `wh serve` first, or check --url")
    return model


def stream_chat(
    url: str,
    model: str,
    *,
    prompt: str = DEFAULT_PROMPT,
    max_tokens: int = 256,
    timeout: float = 900.0,
    api_key: str | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> SmokeResult:
    """POST one streamed /v1/chat/completions and time it; ``timeout`` bounds the whole request."""
    scheme, host, port, prefix = _split(url)
    conn_cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    body = json.dumps({
        "model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0.0,
        "messages": [{"role": "user", "content": prompt}],
    }).encode()
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **auth_headers(api_key)}
    t0 = clock()
    deadline = t0 + timeout
    first = last = None
    n = n_content = n_reason = 0
    content: list[str] = []
    reasoning: list[str] = []
    finish = usage = None
    conn = conn_cls(host, port, timeout=timeout)
    resp = None
    done = False
    try:
        conn.request("POST", prefix + "/v1/chat/completions", body=body, headers=headers)
        sock = conn.sock  # kept: with HTTP/1.0 getresponse hands the socket to the response
        sock.settimeout(max(deadline - clock(), 0.001))
        resp = conn.getresponse()
        if resp.status != 200:
            raise SmokeError(f"POST /v1/chat/completions: HTTP {resp.status}: {resp.read(500).decode('utf-8', 'replace').strip()}",
                             hint="check the model id and the engine's log")
        for raw in _lines(resp, sock, deadline, clock):
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            event = _event(payload)
            error = _stream_error(event)
            if error:
                raise SmokeError(f"the engine sent an error mid-stream: {error}", hint="read the engine's log")
            usage = event.get("usage") or usage
            delta, reason = _choice(event, payload)
            finish = reason or finish
            text = delta.get("content")
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if text or thought:
                now = clock()
                first = now if first is None else first
                last = now
                n += 1
            if text:
                n_content += 1
                content.append(text)
            if thought:
                n_reason += 1
                reasoning.append(thought)
    except TimeoutError as exc:  # each read waits at most the time left: a timed-out read is the whole deadline
        raise SmokeError(f"the stream did not finish within {timeout:g} s ({n} tokens so far)",
                         hint="raise --timeout or lower --max-tokens") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise SmokeError(f"streaming from {url} failed after {n} tokens: {exc or type(exc).__name__}",
                         hint="is the engine still up? check its log; raise --timeout for a slow first token") from exc
    finally:
        if resp is not None:  # with HTTP/1.0 streams the response, not the connection, owns the socket
            resp.close()
        conn.close()
    total = clock() - t0
    _check_ending(finish, done, n)
    decode = (n - 1) / (last - first) if n > 1 and last > first else None
    return SmokeResult(
        url=url, model=model, tokens=n, content_tokens=n_content, reasoning_tokens=n_reason,
        ttft_s=round(first - t0, 4), decode_tok_s=round(decode, 2) if decode is not None else None, total_s=round(total, 4),
        text="".join(content)[:PREVIEW], reasoning="".join(reasoning)[:PREVIEW], finish_reason=finish,
        engine_completion_tokens=(usage or {}).get("completion_tokens") if isinstance(usage, dict) else None,
    )


def _check_ending(finish: str | None, done: bool, n: int) -> None:
    """A stream that ended is an answer only when the engine finished it and it holds a token."""
    if finish in ("abort", "error"):  # vLLM ends an aborted request with finish_reason "abort"
        raise SmokeError(f"the engine aborted the request (finish_reason {finish!r})", hint="read the engine's log")
    if not done and finish is None:
        raise SmokeError(f"the stream ended without [DONE] / a finish_reason after {n} tokens: the engine cut it short",
                         hint="is the engine still up? read its log")
    if n == 0:
        raise SmokeError("the stream ended with no token in delta.content or delta.reasoning_content",
                         hint="the engine answered but generated nothing; read its log")


def _lines(resp, sock, deadline: float, clock: Callable[[], float]) -> Iterator[bytes]:
    """The body's lines, all of them before ``deadline``: one socket read at a time, each allowed only the time
    left, so a server that trickles a line that never ends cannot hold the stream past the deadline."""
    buf = b""
    while True:
        left = deadline - clock()
        if left <= 0:
            raise TimeoutError("the stream did not finish in time")
        sock.settimeout(left)
        chunk = resp.read1(65536)
        if not chunk:
            if buf:
                yield buf
            return
        *lines, buf = (buf + chunk).split(b"\n")
        if len(buf) > MAX_LINE:
            raise SmokeError(f"the stream sent a line longer than {MAX_LINE} bytes", hint="is --url an OpenAI-compatible server?")
        yield from lines


def _event(payload: bytes) -> dict[str, Any]:
    try:
        data = json.loads(payload)
    except ValueError as exc:
        raise SmokeError(f"the stream sent a line that is not JSON: {payload[:120]!r}", hint="is --url an OpenAI-compatible server?") from exc
    if not isinstance(data, dict):
        raise _malformed(payload)
    return data


def _stream_error(event: Mapping[str, Any]) -> str | None:
    """The engine's error message: OpenAI's ``{"error": ...}``, or vLLM's ``{"object": "error", "message": ...}``."""
    error = event.get("error")
    if isinstance(error, Mapping):
        return str(error.get("message") or error)
    if error:
        return str(error)
    if event.get("object") == "error":
        return str(event.get("message") or "no message")
    return None


def _choice(event: Mapping[str, Any], payload: bytes) -> tuple[Mapping[str, Any], str | None]:
    """(delta, finish_reason) of the event's first choice; a chunk of another shape is malformed, not a crash."""
    choices = event.get("choices") or [{}]  # a usage-only chunk has no choice
    choice = choices[0] if isinstance(choices, list) else None
    delta = (choice.get("delta") or {}) if isinstance(choice, Mapping) else None
    if not isinstance(delta, Mapping):
        raise _malformed(payload)
    finish = choice.get("finish_reason")
    texts = (delta.get("content"), delta.get("reasoning_content"), delta.get("reasoning"))
    if not all(t is None or isinstance(t, str) for t in texts) or not (finish is None or isinstance(finish, str)):
        raise _malformed(payload)
    return delta, finish


def _malformed(payload: bytes) -> SmokeError:
    return SmokeError(f"the stream sent a malformed chunk: {payload[:120]!r}",
                      hint="expected {\"choices\": [{\"delta\": {\"content\": ...}}]}: is --url an OpenAI-compatible server?")


def run_smoke(
    url: str, *, prompt: str = DEFAULT_PROMPT, max_tokens: int = 256, timeout: float = 900.0, api_key: str | None = None
) -> SmokeResult:
    """Model id from /v1/models, then one timed streamed chat."""
    if max_tokens < 1:
        raise UsageError("--max-tokens must be at least 1", hint="decode tok/s needs a couple of hundred tokens to mean much: try 256")
    model = fetch_model_id(url, timeout=min(timeout, 30.0), api_key=api_key)
    return stream_chat(url, model, prompt=prompt, max_tokens=max_tokens, timeout=timeout, api_key=api_key)
