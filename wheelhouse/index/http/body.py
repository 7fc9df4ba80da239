"""Reading a streamed response's body (urllib3's, raw: no decoding): blocks as they arrive, or
into the caller's reused buffer.

Both hand out what has arrived (at most one socket read per step, ``read1``), so a writer keeps
every byte received even if the process dies before a larger block is full; both feed the stall
watch and turn a dropped or cut connection into HttpError with ``received`` set, for resuming.
``into`` exists for the big downloads: one buffer, handed out as a view every ~1 MiB or
``seconds``, so the caller makes one write and one hash update per batch. A plain body (a
Content-Length, not chunked) is read by the http.client response under urllib3's
(``transport.RawResponse``): from its socket itself (``recv_into`` into the buffer) once its
buffered reader has handed over what it read ahead with the headers. Through urllib3's ``read1``
each 16 KiB TLS record costs four more Python frames, a ``bytes`` object and a copy: 0.5-0.7 s of
CPU per GB here (paired, loopback TLS).
"""

from __future__ import annotations

import http.client
import time
from typing import Callable, Iterator

from urllib3.exceptions import HTTPError as Urllib3Error

from .messages import HttpError

__all__ = ["BodyReader", "READ_ERRORS"]

READ_ERRORS = (OSError, http.client.HTTPException, Urllib3Error, ValueError)


class BodyReader:
    """The body of one open response. ``done``: read to its end and complete (its connection is
    back in its pool)."""

    def __init__(self, resp, url: str, watch, window: float, whole: bool, reason: Callable[[object, int], str],
                 raw=None):
        self.resp = resp
        self.raw = raw  # the http.client response under ``resp`` (transport.RawResponse), for ``into``
        self.url = url
        self.watch = watch
        self.window = window  # the stall window, for a streamed body
        self.whole = whole  # read whole under a deadline (pages): no stall watch, plain reads
        self.reason = reason  # (watch, received) -> why a deadline cut the body
        self.received = 0
        self.done = False

    def chunks(self, size: int) -> Iterator[bytes]:
        """The body in blocks of at most ``size`` bytes, each as it arrived."""
        read = self.resp.read if self.whole else self.resp.read1
        try:
            while True:
                data = read(size)
                if not data:
                    break
                self.received += len(data)
                if not self.whole:
                    self.watch.progress(len(data), self.window)
                yield data
        except READ_ERRORS as exc:
            raise self._broken(exc) from exc
        self._ended()

    def into(self, buf: bytearray, limit: int | None = None, seconds: float = 0.05) -> Iterator[memoryview]:
        """The body read into ``buf``, handed out as a view of it when full or ``seconds`` after the
        batch began (the view is valid until the next step: write and hash it before asking on).
        Stops after ``limit`` bytes; a body that breaks off hands out what arrived, then raises."""
        view = memoryview(buf)
        plain = self._plain_length() is not None and self.raw is not None and self.raw.length is not None
        read = self.raw.read_plain_into if plain else self._read1_into
        ended = False
        while not ended and (limit is None or self.received < limit):
            room = len(buf) if limit is None else min(len(buf), limit - self.received)
            n, since, broken = 0, time.monotonic(), None
            try:
                while n < room:
                    got = read(view[n:room])
                    if not got:
                        ended = True
                        break
                    n += got
                    if time.monotonic() - since >= seconds:
                        break
            except READ_ERRORS as exc:
                broken = exc
            if n:
                self.received += n
                self.watch.progress(n, self.window)
                yield view[:n]
            if broken is not None:
                raise self._broken(broken) from broken
        if not ended:
            # ``limit`` reached. Read the body's end: a response read to its end leaves its connection
            # in the keep-alive pool (a range ends exactly at its limit). More bytes are excess: the
            # connection is not kept, and an error now costs only that: every byte wanted arrived.
            try:
                if read(view[:1]):
                    return
            except READ_ERRORS:
                return
        self._ended()

    def _read1_into(self, view: memoryview) -> int:
        """At most one socket read (urllib3's ``read1``) into ``view``; 0 at the body's end."""
        data = self.resp.read1(len(view))
        if not data:
            return 0
        view[:len(data)] = data
        return len(data)

    def _plain_length(self) -> int | None:
        """The Content-Length of a body sent as it is (not chunked, not encoded); None otherwise."""
        headers = self.resp.headers
        length = headers.get("Content-Length")
        if length is None or not length.isdigit() or "chunked" in headers.get("Transfer-Encoding", "").lower():
            return None
        return None if headers.get("Content-Encoding") else int(length)

    def _broken(self, exc: BaseException) -> HttpError:
        status = self.resp.status
        if self.watch.expired:
            return HttpError(self.url, status, self.reason(self.watch, self.received), received=self.received)
        return HttpError(self.url, status, f"connection dropped after {self.received} bytes ({exc})",
                         received=self.received)

    def _ended(self) -> None:
        """The body ended: complete (``done``), or why not."""
        resp, received = self.resp, self.received
        if self.watch.expired:  # cut between two reads: the body looks short, say why
            raise HttpError(self.url, resp.status, self.reason(self.watch, received), received=received)
        expected = resp.headers.get("Content-Length")
        if expected is not None and resp.headers.get("Content-Encoding") is None and int(expected) != received:
            raise HttpError(self.url, resp.status, f"body ended after {received} of {expected} bytes", received=received)
        self.done = True
