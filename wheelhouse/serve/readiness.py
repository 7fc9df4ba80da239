"""Readiness protocols: when is an engine ready to serve? Its own signal says so, never an open port.

- ``health``: GET /health returns JSON; ``status == "ok"`` is ready, ``"loading"`` carries a
  phase and byte progress, ``"error"`` carries the reason (FreeToken's protocol, ``ft serve``).
- ``http``: an HTTP 200 from a path (for engines with no better signal).
- ``generate``: a one-token completion must come back in time. For engines whose
  ``/v1/models`` keeps answering while the engine is wedged (seen with a vLLM fork whose
  pipeline fell out of sync), only generating proves anything.

Each check is one attempt over an injected ``Transport`` and returns a ``Readiness``;
the wait loop lives in ``serve``.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable, Literal, Mapping, Protocol

__all__ = [
    "READY_MODES",
    "Readiness",
    "HttpReply",
    "Transport",
    "UrllibTransport",
    "auth_headers",
    "check_health",
    "check_http",
    "check_generate",
    "served_model_id",
    "make_probe",
]

READY_MODES = ("health", "http", "generate")

# A readiness answer is a few hundred bytes; a bigger body is not one (and an endless one must not hang wh).
MAX_BODY = 1 << 20

State = Literal["waiting", "loading", "ready", "error"]


@dataclass(frozen=True)
class Readiness:
    """One answer to "is it ready?". ``detail`` says why not (or the engine's error message)."""

    state: State
    detail: str = ""
    phase: str | None = None
    done: float | None = None
    total: float | None = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"


@dataclass(frozen=True)
class HttpReply:
    status: int
    body: bytes
    location: str | None = None  # a redirect's Location (never followed)

    def json(self):
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None


class Transport(Protocol):
    """One HTTP exchange. Raises OSError (refused, reset, timed out) when there is no reply."""

    def request(
        self, method: str, url: str, *, body: bytes | None = None, headers: Mapping[str, str] | None = None, timeout: float = 5.0
    ) -> HttpReply: ...


def _read_bounded(resp, deadline: float, limit: int = MAX_BODY) -> bytes:
    """At most ``limit`` bytes of ``resp``'s body, all of it before ``deadline`` (time.monotonic), else
    TimeoutError: a body that streams forever (or trickles) is no answer. One socket read at a time
    (``read1``), so a slow trickle cannot hold a read past the deadline by more than the socket timeout."""
    chunks, size = [], 0
    read = getattr(resp, "read1", resp.read)
    while size <= limit:
        if time.monotonic() > deadline:
            raise TimeoutError("the reply's body did not end within the attempt timeout")
        chunk = read(min(65536, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    raise TimeoutError(f"the reply's body is more than {limit} bytes")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is the reply: /health answering 302 to a 200 page (a proxy's or a login page) is not the
    engine saying it is ready."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises the 3xx as an HTTPError, which is a reply


class UrllibTransport:
    """The stdlib transport: any HTTP status is a reply, a redirect too (never followed); no reply is an
    OSError (a body that does not end within ``timeout``, or is larger than MAX_BODY, is a TimeoutError)."""

    def request(self, method, url, *, body=None, headers=None, timeout=5.0) -> HttpReply:
        deadline = time.monotonic() + timeout
        req = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
        # Loopback engines must not be routed through a proxy from the environment.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
        try:
            with opener.open(req, timeout=timeout) as resp:
                return HttpReply(resp.status, _read_bounded(resp, deadline))
        except urllib.error.HTTPError as exc:
            with exc:  # an error reply still owns the socket
                body = _read_bounded(exc, deadline) if exc.fp is not None else b""
                return HttpReply(exc.code, body, location=exc.headers.get("Location") if exc.headers else None)
        except urllib.error.URLError as exc:
            reason = exc.reason if isinstance(exc.reason, OSError) else OSError(str(exc.reason))
            raise reason from exc


def auth_headers(api_key: str | None = None) -> dict[str, str]:
    """An OpenAI-style bearer header from ``api_key`` or $WH_API_KEY (engines started with --api-key)."""
    key = api_key or os.environ.get("WH_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def _url(base: str, path: str) -> str:
    return base.rstrip("/") + "/" + path.lstrip("/")


def _why(exc: OSError) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _redirected(reply: HttpReply, path: str) -> Readiness | None:
    """Not ready when ``reply`` is a redirect: whatever answers where it points is not the engine's answer."""
    if not 300 <= reply.status < 400:
        return None
    to = f" to {reply.location}" if reply.location else ""
    return Readiness("waiting", f"GET {path}: HTTP {reply.status}, a redirect{to} (not followed: a redirect is not ready)")


def check_health(transport: Transport, base_url: str, path: str = "/health", timeout: float = 5.0) -> Readiness:
    """FreeToken's /health: JSON ``status`` ok / loading (phase, progress) / error (message).

    A 200 with a body that is not JSON is NOT ready: something answered, the engine did not.
    """
    try:
        reply = transport.request("GET", _url(base_url, path), timeout=timeout)
    except OSError as exc:
        return Readiness("waiting", f"GET {path}: {_why(exc)}")
    redirected = _redirected(reply, path)
    if redirected:
        return redirected
    data = reply.json()
    if not isinstance(data, dict) or "status" not in data:
        return Readiness("waiting", f"GET {path}: HTTP {reply.status}, no JSON status")
    status = str(data.get("status")).lower()
    if status == "ok":
        return Readiness("ready", f"GET {path}: status ok")
    if status == "error":
        return Readiness("error", str(data.get("message") or data.get("error") or "engine reported status error"))
    progress = data.get("progress") if isinstance(data.get("progress"), dict) else {}
    done, total = progress.get("done_bytes"), progress.get("total_bytes")
    phase = data.get("phase")
    return Readiness(
        "loading",
        f"GET {path}: status {status}" + (f", phase {phase}" if phase else ""),
        phase=str(phase) if phase else None,
        done=float(done) if isinstance(done, (int, float)) else None,
        total=float(total) if isinstance(total, (int, float)) and total > 0 else None,
    )


def check_http(transport: Transport, base_url: str, path: str = "/health", timeout: float = 5.0) -> Readiness:
    """Ready on HTTP 200 from ``path``."""
    try:
        reply = transport.request("GET", _url(base_url, path), timeout=timeout)
    except OSError as exc:
        return Readiness("waiting", f"GET {path}: {_why(exc)}")
    if reply.status == 200:
        return Readiness("ready", f"GET {path}: HTTP 200")
    return _redirected(reply, path) or Readiness("waiting", f"GET {path}: HTTP {reply.status}")


def served_model_id(transport: Transport, base_url: str, timeout: float = 5.0, headers: Mapping[str, str] | None = None) -> str | None:
    """The first model id from GET /v1/models, or None when it does not (yet) answer with one."""
    try:
        reply = transport.request("GET", _url(base_url, "/v1/models"), headers=headers, timeout=timeout)
    except OSError:
        return None
    data = reply.json()
    if reply.status != 200 or not isinstance(data, dict):
        return None
    models = data.get("data")
    if isinstance(models, list) and models and isinstance(models[0], dict) and models[0].get("id") is not None:
        return str(models[0]["id"])
    return None


def check_generate(
    transport: Transport, base_url: str, timeout: float = 30.0, headers: Mapping[str, str] | None = None
) -> Readiness:
    """Ready when a one-token completion (model id from /v1/models) finishes within ``timeout``."""
    headers = {"Content-Type": "application/json", **(headers or {})}
    model = served_model_id(transport, base_url, timeout=min(timeout, 10.0), headers=headers)
    if model is None:
        return Readiness("waiting", "GET /v1/models: no model id yet")
    attempts = (
        ("/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0}),
        ("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1, "temperature": 0}),
    )
    last = ""
    for path, payload in attempts:
        try:
            reply = transport.request("POST", _url(base_url, path), body=json.dumps(payload).encode(), headers=headers, timeout=timeout)
        except OSError as exc:
            if isinstance(exc, TimeoutError) or "timed out" in str(exc):
                return Readiness(
                    "waiting", f"/v1/models answers (model {model!r}) but a 1-token completion did not finish within {timeout:g} s"
                )
            return Readiness("waiting", f"POST {path}: {_why(exc)}")
        if reply.status in (404, 405):  # this engine serves only the other endpoint
            last = f"POST {path}: HTTP {reply.status}"
            continue
        if reply.status in (401, 403):
            return Readiness("error", f"POST {path}: HTTP {reply.status}: the engine wants an API key")
        data = reply.json()
        if reply.status == 200 and isinstance(data, dict) and data.get("choices"):
            return Readiness("ready", f"POST {path}: 1-token completion from model {model!r}")
        return Readiness("waiting", f"POST {path}: HTTP {reply.status}: {reply.body[:200].decode('utf-8', 'replace')}")
    return Readiness("waiting", last or "no completion endpoint answered")


def make_probe(
    mode: str,
    base_url: str,
    *,
    path: str | None = None,
    transport: Transport | None = None,
    attempt_timeout: float = 30.0,
    headers: Mapping[str, str] | None = None,
) -> Callable[[], Readiness]:
    """A zero-argument readiness check for ``mode`` (health, http, generate)."""
    tx = transport or UrllibTransport()
    if mode == "health":
        return lambda: check_health(tx, base_url, path or "/health", timeout=min(attempt_timeout, 5.0))
    if mode == "http":
        return lambda: check_http(tx, base_url, path or "/health", timeout=min(attempt_timeout, 5.0))
    if mode == "generate":
        return lambda: check_generate(tx, base_url, timeout=attempt_timeout, headers=headers)
    raise ValueError(f"unknown readiness mode {mode!r}")
