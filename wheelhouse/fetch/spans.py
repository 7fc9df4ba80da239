"""Byte ranges of one file being written by several connections at once, and where to cut one.

Two kinds of download write a file this way: a segmented download in one process (``ranges.Segmented``:
its ranges recorded on disk, hashed as they land) and a range lent by the helper process, which this
process may cut into pieces again (``lend._Loan``). Both keep the same facts about each range, and
split one the same way, so both keep them in a ``Spans``:

- ``segments[i]``: ``(start, end)``; a split moves an end and appends the rest as a new range;
- ``have[i]``: bytes written from its start (only once their write returned);
- ``writing[i]``: where the block being written right now ends (0: none); a split cuts beyond it, so a
  byte on its way to the disk is never another range's;
- ``began[i]``, ``moved[i]``, ``tickets[i]``: its current request: when it was sent, the bytes written
  since (its speed, for ``plan_cut``), and its ``Ticket`` (to cut it when another connection takes all
  it had left).

A ``Spans`` holds no lock: its owner's guard is held around every call.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Sequence

from wheelhouse.index.http import Ticket

__all__ = ["Spans", "plan_cut", "request_rate", "split_minimum", "cut_blocks", "PIECE_MIN"]

PIECE_MIN = 1 << 20  # a stalled transfer with less than this left is waited for; no split leaves less
_RATE_AFTER = 0.3  # a request this young has no speed yet (its first bytes include the round trip)
# No byte yet is not stalled before this: a far index's connect, TLS and first answer take several round trips,
# and a late answer is the hedge's to resend first (index.http, HEDGE_MIN).
_STALL_AFTER = 1.0


@dataclass(eq=False)
class Spans:
    """The ranges of one file in progress (the module's docstring says what each list holds)."""

    segments: list[tuple[int, int]] = field(default_factory=list)
    have: list[int] = field(default_factory=list)
    writing: list[int] = field(default_factory=list)
    began: list[float] = field(default_factory=list)
    moved: list[int] = field(default_factory=list)
    tickets: list[Ticket | None] = field(default_factory=list)

    @classmethod
    def of(cls, segments: Sequence[tuple[int, int]], have: Sequence[int] | None = None) -> "Spans":
        n = len(segments)
        return cls(list(segments), list(have) if have is not None else [0] * n, [0] * n, [0.0] * n, [0] * n, [None] * n)

    def __len__(self) -> int:
        return len(self.segments)

    def add(self, a: int, b: int, *, writing: int = 0) -> int:
        """A new range [a, b), nothing written; returns its index."""
        self.segments.append((a, b))
        self.have.append(0)
        self.writing.append(writing)
        self.began.append(0.0)
        self.moved.append(0)
        self.tickets.append(None)
        return len(self.segments) - 1

    def left(self, i: int) -> int:
        """Bytes of range ``i`` not yet written nor being written (the block being written stays with it)."""
        a, b = self.segments[i]
        return b - max(a + self.have[i], self.writing[i])

    def sent(self, i: int, ticket: Ticket) -> None:
        """Range ``i``'s new request went out."""
        self.began[i], self.moved[i], self.tickets[i] = time.monotonic(), 0, ticket

    def claim(self, i: int, n: int) -> tuple[int, int]:
        """The next ``n`` bytes of range ``i`` are about to be written: (their offset, how many of them are
        still its own: a split may have moved its end). A split now cuts beyond them."""
        a, b = self.segments[i]
        offset = a + self.have[i]
        n = max(0, min(n, b - offset))
        self.writing[i] = offset + n
        return offset, n

    def wrote(self, i: int, n: int) -> int:
        """The claimed ``n`` bytes' write returned; returns the bytes range ``i`` now has."""
        self.have[i] += n
        self.moved[i] += n
        self.writing[i] = 0
        return self.have[i]

    def returned(self, i: int, written: int) -> int:
        """Range ``i``, written elsewhere, came back with ``written`` bytes from its start on disk: it is
        this process's again, with those bytes (at most the range's length); returns them."""
        a, b = self.segments[i]
        self.have[i] = max(0, min(int(written), b - a))
        self.writing[i] = 0
        return self.have[i]

    def prefix_end(self) -> int:
        """Where the complete stretch from the first range's start ends: in offset order (split ranges are
        appended), the first range not yet complete, how far it got; else the last one's end."""
        end = 0
        for (a, b), h in sorted(zip(self.segments, self.have)):
            if h < b - a:
                return a + h
            end = b
        return end

    def open_ranges(self, now: float, skip: Sequence[bool] = ()) -> list[tuple[int, int, float | None]]:
        """(index, bytes left, bytes/s of its request so far or None) of the ranges with bytes left that a
        split may cut; ``skip[i]``: range i is not offered."""
        out = []
        for i in range(len(self.segments)):
            if i < len(skip) and skip[i]:
                continue
            left = self.left(i)
            if left > 0:
                out.append((i, left, request_rate(self.began[i], self.moved[i], now)))
        return out

    def split(self, i: int, keep: int, *, writing_elsewhere: bool = False) -> tuple[int, Ticket | None] | None:
        """Cut range ``i`` after ``keep`` more bytes (at most half of what it has left): the rest becomes a
        new range. Returns (its index, the ticket to cut once the owner's guard is let go, where ``i``
        keeps nothing), or None where the rest would be under ``PIECE_MIN`` (its writer moved on since
        the plan). ``writing_elsewhere``: the new range is marked as being written whole (another
        process's), so no connection here takes it and no later split cuts it."""
        left = self.left(i)
        keep = min(keep, left // 2)
        if left - keep < PIECE_MIN:
            return None
        a, b = self.segments[i]
        mid = b - left + keep
        self.segments[i] = (a, mid)
        new = self.add(mid, b, writing=b if writing_elsewhere else 0)
        return new, (self.tickets[i] if keep == 0 else None)


def request_rate(began: float, moved: int, now: float) -> float | None:
    """Bytes/s of a request sent at ``began`` that has written ``moved`` bytes; None while too young to tell."""
    age = now - began if began else 0.0
    if age < _RATE_AFTER or (moved == 0 and age < _STALL_AFTER):
        return None
    return moved / age


def plan_cut(ranges: Sequence[tuple[int, float | None]], minimum: int) -> tuple[int, int] | None:
    """Of ``ranges`` ((bytes left, bytes/s so far or None)), which to cut and how many bytes its transfer
    keeps: (index, keep), or None. A transfer at under an eighth of the median speed (stalled: no byte
    for ``_STALL_AFTER`` s) that would end last keeps nothing: its request is cut and all it had left
    goes to the idle connection. Else the range with the most bytes left, in half, each half at least
    ``minimum``: pieces no smaller, as every new request risks the index's slow answer (1-5 s, a few
    times a run here), and cutting down to 1 MiB pieces made more of them (docs/benchmarks.md, Fetch)."""
    ranges = [(left, None if rate is None else max(rate, 1.0)) for left, rate in ranges]  # (0: stalled)
    rates = [r for _, r in ranges if r is not None]
    typical = statistics.median(rates) if rates else None
    slow = [(left / rate, n) for n, (left, rate) in enumerate(ranges)
            if typical and rate is not None and rate < typical / 8 and left >= PIECE_MIN]
    if slow:
        return max(slow)[1], 0
    most = max(range(len(ranges)), key=lambda n: ranges[n][0], default=None)
    if most is None or ranges[most][0] < 2 * max(minimum, 1):
        return None
    return most, ranges[most][0] // 2


def split_minimum(segment: int) -> int:
    """The smallest piece a split cuts (half of a range at least twice this): an eighth of a segment
    (4 MiB by default), never under 1 MiB; a new request, and the bytes on their way to the cut
    connection, cost more than a smaller piece saves."""
    return max(1 << 20, segment // 8)


def cut_blocks(blocks: list, n: int) -> list:
    """The first ``n`` bytes of ``blocks``."""
    out = []
    for block in blocks:
        if n <= 0:
            break
        out.append(memoryview(block)[:n])
        n -= len(out[-1])
    return out
