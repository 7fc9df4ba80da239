"""Host names resolved once per client: a burst of parallel connections makes one DNS query, not sixteen.

Why: ``socket.create_connection`` calls ``getaddrinfo`` for every new connection. Sixteen parallel downloads
opening their connections at once send sixteen queries for the same name, and a resolver that drops some of
them (glibc retries after its 5 s timeout) makes a few connections wait exactly 5 s. Here the first
connection to a (host, port) asks, the others wait for its answer, and every later connection of the same
client reuses it. Addresses are tried in the order the resolver gave them; one that refused is moved
behind the one that answered, so later connections do not wait on it again.

Only the TCP connect uses the address: the connection keeps the host *name*, so TLS sends it as SNI and
checks the certificate against it (``http.client`` wraps with ``server_hostname=host``). Through a proxy,
the connection's host is the proxy, so the proxy's name is the one resolved (the index host is resolved by
the proxy).
"""

from __future__ import annotations

import socket
import threading

__all__ = ["HostResolver"]

_DEFAULT_TIMEOUT = getattr(socket, "_GLOBAL_DEFAULT_TIMEOUT", object())


class HostResolver:
    """``getaddrinfo`` answers kept per (host, port) for the owner's life, shared between threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[tuple[str, int], list[tuple]] = {}
        self._asking: dict[tuple[str, int], threading.Lock] = {}
        self.lookups = 0  # getaddrinfo calls made (for tests and benchmarks)

    def addresses(self, host: str, port: int) -> list[tuple]:
        """The (family, type, proto, canonname, sockaddr) tuples for ``host:port``, asked once."""
        key = (host, port)
        with self._lock:
            if key in self._answers:
                return list(self._answers[key])
            asking = self._asking.setdefault(key, threading.Lock())
        with asking:  # one thread asks; the others of the burst wait for its answer
            with self._lock:
                if key in self._answers:
                    return list(self._answers[key])
            self.lookups += 1
            found = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)  # a failure is raised, never kept
            if not found:
                raise socket.gaierror(f"no address for {host}")
            with self._lock:
                self._answers[key] = list(found)
                self._asking.pop(key, None)
            return list(found)

    def forget(self, host: str, port: int) -> None:
        """Drop the answer for ``host:port`` (every address refused: ask again next time)."""
        with self._lock:
            self._answers.pop((host, port), None)

    def create_connection(self, address: tuple[str, int], timeout=_DEFAULT_TIMEOUT, source_address=None):
        """``socket.create_connection`` with the kept answer: each address in order until one connects."""
        host, port = address
        errors: list[OSError] = []
        for info in self.addresses(host, port):
            family, type_, proto, _, sockaddr = info
            sock = socket.socket(family, type_, proto)
            try:
                if timeout is not _DEFAULT_TIMEOUT:
                    sock.settimeout(timeout)
                if source_address:
                    sock.bind(source_address)
                sock.connect(sockaddr)
            except OSError as exc:
                sock.close()
                errors.append(exc)
                continue
            if errors:
                self._prefer(host, port, info)
            return sock
        self.forget(host, port)
        if len(errors) == 1:
            raise errors[0]
        raise OSError(f"could not connect to {host}:{port}: " + "; ".join(str(e) for e in errors)) from errors[-1]

    def attach(self, conn):
        """Make an ``http.client`` connection open its socket through this resolver; returns it."""
        # http.client.HTTPConnection.connect() opens its socket with self._create_connection((host, port),
        # timeout, source_address), then (HTTPS) wraps it with server_hostname=host: the name stays the name.
        conn._create_connection = self.create_connection
        return conn

    def _prefer(self, host: str, port: int, info: tuple) -> None:
        with self._lock:
            answer = self._answers.get((host, port))
            if answer and info in answer:
                answer.remove(info)
                answer.insert(0, info)
