"""fetch.spans: the ranges of one file in progress. Where a split may cut, what a writer keeps after
one, and how far the complete stretch reaches."""

from __future__ import annotations

from wheelhouse.fetch.spans import PIECE_MIN, Spans, split_minimum

MIB = 1 << 20


def test_a_split_never_cuts_under_the_block_being_written():
    spans = Spans.of([(0, 40 * MIB)])
    offset, n = spans.claim(0, 16 * MIB)  # a 16 MiB block is on its way to the disk
    assert (offset, n) == (0, 16 * MIB)
    assert spans.left(0) == 24 * MIB  # what is in flight is not on offer
    assert spans.split(0) == 1  # half of what is left, after the block in flight
    assert spans.segments == [(0, 28 * MIB), (28 * MIB, 40 * MIB)]
    assert spans.wrote(0, n) == 16 * MIB


def test_a_writer_keeps_only_what_is_still_its_own_after_a_split():
    spans = Spans.of([(0, 40 * MIB)], [4 * MIB])
    spans.split(0)  # 36 MiB left: range 0 ends at 22 MiB
    assert spans.segments == [(0, 22 * MIB), (22 * MIB, 40 * MIB)]
    assert spans.claim(0, 20 * MIB) == (4 * MIB, 18 * MIB)
    assert spans.claim(1, 8 * MIB) == (22 * MIB, 8 * MIB)


def test_no_split_leaves_less_than_a_piece():
    spans = Spans.of([(0, PIECE_MIN + PIECE_MIN // 2)])
    assert spans.split(0) is None  # a half would be under PIECE_MIN
    assert spans.segments == [(0, PIECE_MIN + PIECE_MIN // 2)]


def test_only_ranges_with_bytes_left_are_offered():
    spans = Spans.of([(0, 10 * MIB), (10 * MIB, 20 * MIB)], [10 * MIB, 2 * MIB])
    assert spans.open_ranges() == [(1, 8 * MIB)]


def test_the_complete_stretch_stops_at_the_first_range_not_finished_in_offset_order():
    spans = Spans.of([(0, 10), (20, 30), (10, 20)], [10, 3, 10])  # (a split range is appended)
    assert spans.prefix_end() == 23
    spans.have[1] = 10
    assert spans.prefix_end() == 30
    assert Spans.of([(5, 5), (5, 9)], [0, 2]).prefix_end() == 7  # an empty range is no gap


def test_split_minimum_is_an_eighth_of_a_segment_never_under_a_mebibyte():
    assert split_minimum(32 * MIB) == 4 * MIB and split_minimum(2 * MIB) == MIB
