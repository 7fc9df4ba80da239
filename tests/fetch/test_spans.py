"""fetch.spans: the ranges of one file in progress, shared by a segmented download and a borrowed range.
Where a split may cut, what a writer keeps after one, and how far the complete stretch reaches."""

from __future__ import annotations

from wheelhouse.fetch.spans import PIECE_MIN, Spans, split_minimum
from wheelhouse.index.http import Ticket

MIB = 1 << 20


def test_a_split_never_cuts_under_the_block_being_written():
    spans = Spans.of([(0, 40 * MIB)])
    offset, n = spans.claim(0, 16 * MIB)  # a 16 MiB block is on its way to the disk
    assert (offset, n) == (0, 16 * MIB)
    assert spans.left(0) == 24 * MIB  # what is in flight is not on offer
    new, abandoned = spans.split(0, 0)  # keep nothing: the cut lands at the block's end, not at byte 0
    assert spans.segments == [(0, 16 * MIB), (16 * MIB, 40 * MIB)] and new == 1 and abandoned is None
    assert spans.wrote(0, n) == 16 * MIB
    assert spans.claim(0, MIB) == (16 * MIB, 0)  # the range's writer keeps nothing past its new end


def test_a_writer_keeps_only_what_is_still_its_own_after_a_split():
    spans = Spans.of([(0, 40 * MIB)], [4 * MIB])
    spans.split(0, 6 * MIB)  # keep 6 MiB more: range 0 ends at 10 MiB
    assert spans.segments == [(0, 10 * MIB), (10 * MIB, 40 * MIB)]
    assert spans.claim(0, 8 * MIB) == (4 * MIB, 6 * MIB)
    assert spans.claim(1, 8 * MIB) == (10 * MIB, 8 * MIB)


def test_a_stalled_request_that_keeps_nothing_hands_back_its_ticket_to_cut():
    spans = Spans.of([(0, 40 * MIB)])
    t = Ticket()
    spans.sent(0, t)
    assert spans.split(0, 0) == (1, t)  # (cut by the caller once its lock is let go)
    assert spans.left(0) == 0 and spans.segments[1] == (0, 40 * MIB)


def test_no_split_leaves_less_than_a_piece_and_keep_is_at_most_half():
    spans = Spans.of([(0, PIECE_MIN + PIECE_MIN // 2)])
    assert spans.split(0, PIECE_MIN) is None  # the rest would be under PIECE_MIN
    spans = Spans.of([(0, 40 * MIB)])
    spans.split(0, 39 * MIB)
    assert spans.segments == [(0, 20 * MIB), (20 * MIB, 40 * MIB)]


def test_a_range_written_elsewhere_is_neither_offered_nor_split_again():
    spans = Spans.of([(0, 40 * MIB)])
    new, _ = spans.split(0, 10 * MIB, writing_elsewhere=True)
    assert spans.left(new) == 0
    assert [i for i, _, _ in spans.open_ranges(100.0)] == [0]
    assert [i for i, _, _ in spans.open_ranges(100.0, skip=[True])] == []


def test_the_complete_stretch_stops_at_the_first_range_not_finished_in_offset_order():
    spans = Spans.of([(0, 10), (20, 30), (10, 20)], [10, 3, 10])  # (a split range is appended)
    assert spans.prefix_end() == 23
    spans.have[1] = 10
    assert spans.prefix_end() == 30
    assert Spans.of([(5, 5), (5, 9)], [0, 2]).prefix_end() == 7  # an empty range (taken whole) is no gap


def test_split_minimum_is_an_eighth_of_a_segment_never_under_a_mebibyte():
    assert split_minimum(32 * MIB) == 4 * MIB and split_minimum(2 * MIB) == MIB


def test_a_range_given_back_is_this_processs_again_with_at_most_its_length():
    spans = Spans.of([(0, 40 * MIB)])
    new, _ = spans.split(0, 10 * MIB, writing_elsewhere=True)
    assert spans.returned(new, 3 * MIB) == 3 * MIB
    assert spans.left(new) == 27 * MIB  # offered again: its rest is downloaded here
    assert spans.returned(new, 99 * MIB) == 30 * MIB  # a count past its end is not believed
