"""Deadlines for network reads, and size bounds for what is read whole.

A socket timeout bounds each read, not a request: a server that sends one byte every two seconds
(headers or body) never trips it. Here a watchdog thread shuts down the socket of any request
whose deadline passed, whatever the request is blocked in, so the blocked read fails at once:

- a request must have its status line and headers within ``timeout`` seconds;
- a body read whole (index pages, metadata, range reads: ``HttpClient.get``) must be complete
  within ``WH_HTTP_DEADLINE`` seconds (default 300);
- a streamed body (a wheel download) must keep moving: every ``WH_HTTP_STALL`` seconds (default
  30) at least ``LOW_SPEED_BYTES`` must have arrived, like curl's --speed-limit/--speed-time.
  A big wheel on a slow link is fine; a trickle is not.

``abort_all`` shuts down every watched socket: Ctrl-C stops in-flight downloads at once instead
of waiting for them. Sizes: ``max_body_bytes()`` bounds what is read into memory (default 64 MiB,
``WH_MAX_PAGE_MB``).
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["Watch", "Watchdog", "body_deadline", "stall_seconds", "max_body_bytes", "LOW_SPEED_BYTES"]

LOW_SPEED_BYTES = 16 * 1024


def _env_float(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, "") or default)
    except ValueError:
        return default
    return value if value > 0 else default


def body_deadline() -> float:
    """Seconds a whole-body read (page, metadata) may take, from ``WH_HTTP_DEADLINE``."""
    return _env_float("WH_HTTP_DEADLINE", 300.0)


def stall_seconds() -> float:
    """Seconds a streamed body may go without ``LOW_SPEED_BYTES`` arriving (``WH_HTTP_STALL``)."""
    return _env_float("WH_HTTP_STALL", 30.0)


def max_body_bytes() -> int:
    """The most bytes of a page or metadata file read into memory (``WH_MAX_PAGE_MB``, default 64)."""
    return int(_env_float("WH_MAX_PAGE_MB", 64.0) * (1 << 20))


class Watch:
    """One request's deadline; ``expired`` says the watchdog cut it (for the error message)."""

    def __init__(self, sock_owner, deadline: float, what: str):
        self.owner = sock_owner  # a connection (its .sock is set once connected)
        self.sock = None  # the connected socket, kept: http.client drops conn.sock once a response owns it
        self.deadline = deadline
        self.what = what  # "headers", "body", "stalled"
        self.expired = False
        self._moved = 0
        self._since = time.monotonic()

    def set(self, seconds: float, what: str) -> None:
        self.deadline = time.monotonic() + seconds
        self.what = what

    def progress(self, n: int, window: float) -> None:
        """Bytes arrived: a stream that moved LOW_SPEED_BYTES gets another ``window`` seconds."""
        self._moved += n
        if self._moved >= LOW_SPEED_BYTES:
            self._moved = 0
            self.deadline = time.monotonic() + window

    def bind(self) -> None:
        """Remember the connected socket (call after the request was sent)."""
        self.sock = getattr(self.owner, "sock", None)
        if self.expired:  # cut while connecting: cut the socket that exists now
            self.cut()

    def cut(self) -> None:
        sock = self.sock or getattr(self.owner, "sock", None)
        if sock is not None:
            import socket  # here: a client that never connects (a stage answered from the cache) loads no socket

            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Watchdog:
    """Shuts down the sockets of requests past their deadline (one daemon thread per client)."""

    def __init__(self, tick: float = 0.2):
        self._lock = threading.Lock()
        self._watches: set[Watch] = set()
        self._tick = tick
        self._thread: threading.Thread | None = None
        self._aborted = False

    def watch(self, owner, seconds: float, what: str) -> Watch:
        w = Watch(owner, time.monotonic() + seconds, what)
        with self._lock:
            if self._aborted:
                raise InterruptedError("interrupted")
            self._watches.add(w)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="wh-http-deadline", daemon=True)
                self._thread.start()
        return w

    def extend(self, w: Watch, seconds: float, what: str) -> bool:
        """Give ``w`` a new deadline; False where it has already expired (its socket is being cut)."""
        with self._lock:
            if w.expired:
                return False
            w.set(seconds, what)
            return True

    def restart(self, w: Watch, owner, seconds: float, what: str) -> None:
        """A new attempt of ``w``'s request on connection ``owner``: a fresh deadline (its last one may
        have passed in a backoff); raises InterruptedError once aborted."""
        with self._lock:
            if self._aborted:
                raise InterruptedError("interrupted")
            w.owner, w.sock, w.expired = owner, None, False
            w.set(seconds, what)

    def unwatch(self, w: Watch) -> None:
        with self._lock:
            self._watches.discard(w)

    def abort_all(self) -> None:
        """Cut every request in flight, and every one started from now on (Ctrl-C)."""
        with self._lock:
            self._aborted = True
            watches = list(self._watches)
        for w in watches:
            w.expired = True
            w.what = "interrupted"
            w.cut()

    @property
    def aborted(self) -> bool:
        return self._aborted

    def _run(self) -> None:
        while True:
            time.sleep(self._tick)
            now = time.monotonic()
            with self._lock:
                if not self._watches:
                    self._thread = None
                    return
                late = [w for w in self._watches if w.deadline <= now and not w.expired]
                for w in late:  # (marked under the lock: ``extend`` then knows it lost the race)
                    w.expired = True
            for w in late:
                w.cut()
