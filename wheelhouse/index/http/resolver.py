"""Host names resolved once per client: a burst of parallel connections makes one DNS query, not sixteen.

Why: ``socket.create_connection`` calls ``getaddrinfo`` for every new connection. Sixteen parallel downloads
opening their connections at once send sixteen queries for the same name, and a resolver that drops some of
them (glibc retries after its 5 s timeout) makes a few connections wait exactly 5 s. Here the first
connection to a (host, port) asks, the others wait for its answer, and every later connection of the same
client reuses it. Addresses are tried in the order the resolver gave them; one that refused is moved
behind the one that answered, so later connections do not wait on it again.

Only the TCP connect uses the address (``transport``: urllib3's connection is pointed at it for its
``connect`` alone): the connection keeps the host *name* as its ``server_hostname``, so TLS sends it as SNI
and checks the certificate against it, and the ``Host`` header names it. Through a proxy, the connection's
host is the proxy, so the proxy's name is the one resolved (the index host is resolved by the proxy).
"""

from __future__ import annotations

import threading

__all__ = ["HostResolver"]

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
            import socket  # here: a client that never connects (a stage answered from the cache) loads no socket

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

    def prefer(self, host: str, port: int, address: str) -> None:
        """``address`` answered for ``host:port``: tried first from now on."""
        with self._lock:
            answer = self._answers.get((host, port))
            info = next((i for i in answer or () if i[4][0] == address), None)
            if info is not None:
                answer.remove(info)
                answer.insert(0, info)
