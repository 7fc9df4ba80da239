"""Byte ranges of one file being written by several connections at once, and where to cut one.

A segmented download (``ranges.Segmented``: its ranges recorded on disk, hashed as they land) keeps these
facts about each range in a ``Spans``:

- ``segments[i]``: ``(start, end)``; a split moves an end and appends the rest as a new range;
- ``have[i]``: bytes written from its start (only once their write returned);
- ``writing[i]``: where the block being written right now ends (0: none); a split cuts beyond it, so a
  byte on its way to the disk is never another range's.

A ``Spans`` holds no lock: its owner's guard is held around every call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

__all__ = ["Spans", "split_minimum", "cut_blocks", "PIECE_MIN"]

PIECE_MIN = 1 << 20  # no split leaves less than this


@dataclass(eq=False)
class Spans:
    """The ranges of one file in progress (the module's docstring says what each list holds)."""

    segments: list[tuple[int, int]] = field(default_factory=list)
    have: list[int] = field(default_factory=list)
    writing: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, segments: Sequence[tuple[int, int]], have: Sequence[int] | None = None) -> "Spans":
        n = len(segments)
        return cls(list(segments), list(have) if have is not None else [0] * n, [0] * n)

    def __len__(self) -> int:
        return len(self.segments)

    def add(self, a: int, b: int) -> int:
        """A new range [a, b), nothing written; returns its index."""
        self.segments.append((a, b))
        self.have.append(0)
        self.writing.append(0)
        return len(self.segments) - 1

    def left(self, i: int) -> int:
        """Bytes of range ``i`` not yet written nor being written (the block being written stays with it)."""
        a, b = self.segments[i]
        return b - max(a + self.have[i], self.writing[i])

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

    def open_ranges(self) -> list[tuple[int, int]]:
        """(index, bytes left) of the ranges with bytes left that a split may cut."""
        return [(i, left) for i in range(len(self.segments)) if (left := self.left(i)) > 0]

    def split(self, i: int) -> int | None:
        """Cut range ``i`` in half of what it has left: the second half becomes a new range. Returns its
        index, or None where a half would be under ``PIECE_MIN`` (its writer moved on since the plan)."""
        left = self.left(i)
        keep = left // 2
        if left - keep < PIECE_MIN or keep < PIECE_MIN:
            return None
        a, b = self.segments[i]
        mid = b - left + keep
        self.segments[i] = (a, mid)
        return self.add(mid, b)


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
