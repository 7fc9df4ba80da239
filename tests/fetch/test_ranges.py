"""wheelhouse.fetch.ranges: a big file as parallel byte ranges written in place into one
preallocated body, each range's progress in a record; hashed in file order as the bytes arrive,
verified and filed once all are complete."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading

import pytest

from wheelhouse.errors import HashMismatch
from wheelhouse.fetch.cache import cached_path, partial_path
from wheelhouse.fetch.ranges import NoRanges, bytes_kept, fetch_range, plan_segments
from wheelhouse.fetch.session import FetchItem

NAME = "big-1.0-py3-none-any.whl"
DATA = os.urandom(1_000_000)
SEG = 300_000  # 4 ranges: 3 x 300000 + 100000


SESSION_RETRIES = 1  # the range tests run their session with a single retry (conftest.py: 2 by default)


def _item(data=DATA):
    return FetchItem("http://127.0.0.1:9/" + NAME, NAME, hashlib.sha256(data).hexdigest(), len(data))


def _run_all(job, s):
    """Every range in its own thread, as fetch_all does; returns what the last one returned."""
    results, errors = [], []

    def one(i):
        try:
            results.append(fetch_range(job, i, s))
        except BaseException as exc:  # noqa: BLE001  (re-raised in the test thread)
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(job.segments))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    job.release()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


def _record(job, have):
    """Write what an earlier run would have left: bytes in the body, their count in the record."""
    with open(job.body, "r+b") as fh:
        for (a, b), h in zip(job.segments, have):
            fh.seek(a)
            fh.write(DATA[a:a + h])
    job.record.write_bytes(b"".join(struct.pack("<Q", h) for h in have))


def test_plan_splits_the_file_into_one_preallocated_body_and_records_the_split(tmp_path):
    job = plan_segments(_item(), tmp_path, SEG)
    try:
        assert job.segments == [(0, 300_000), (300_000, 600_000), (600_000, 900_000), (900_000, 1_000_000)]
        assert job.have == [0, 0, 0, 0] and job.remaining == 4
        assert json.loads(job.layout.read_text()) == {"v": 2, "size": len(DATA), "segments": [list(s) for s in job.segments]}
        assert job.body.stat().st_size == len(DATA)  # one file, every range writes in place
        assert job.body.stat().st_blocks * 512 >= len(DATA)  # its blocks reserved up front
        assert job.record.read_bytes() == bytes(32)
        assert sorted(p.name for p in job.part.parent.iterdir()) == sorted(
            [job.body.name, job.record.name, job.layout.name])
    finally:
        job.release()


def test_one_process_at_a_time_holds_an_entry(tmp_path):
    first = plan_segments(_item(), tmp_path, SEG)
    assert plan_segments(_item(), tmp_path, SEG) is None
    first.release()
    second = plan_segments(_item(), tmp_path, SEG)
    assert second is not None
    second.release()


def test_a_new_plan_continues_from_the_progress_record(tmp_path):
    job = plan_segments(_item(), tmp_path, SEG)
    _record(job, [1000, 0, 300_000, 100_000])
    job.release()
    assert bytes_kept(tmp_path, _item().sha256) == 401_000
    again = plan_segments(_item(), tmp_path, 123_456)  # the recorded split wins over a new segment size
    try:
        assert again.segments == job.segments
        assert again.have == [1000, 0, 300_000, 100_000] and again.remaining == 2
    finally:
        again.release()


def test_a_record_past_its_range_restarts_that_range(tmp_path):
    job = plan_segments(_item(), tmp_path, SEG)
    _record(job, [1000, 0, 0, 0])
    job.record.write_bytes(struct.pack("<4Q", 1000, 0, 0, 100_001))  # cannot be right
    job.release()
    again = plan_segments(_item(), tmp_path, SEG)
    try:
        assert again.have == [1000, 0, 0, 0]
    finally:
        again.release()


@pytest.mark.parametrize("damage", ["no-record", "short-record", "short-body", "old-layout"])
def test_a_torn_or_old_download_starts_over(tmp_path, damage):
    job = plan_segments(_item(), tmp_path, SEG)
    _record(job, [1000, 0, 300_000, 0])
    job.release()
    if damage == "no-record":
        job.record.unlink()
    elif damage == "short-record":
        job.record.write_bytes(job.record.read_bytes()[:12])
    elif damage == "short-body":
        os.truncate(job.body, 500_000)
    else:  # a split written by the joining version (one file per range): its files go
        job.layout.write_text(json.dumps({"size": len(DATA), "segments": job.segments}))
        job.part.with_name(job.part.name + ".0").write_bytes(DATA[:1000])
    again = plan_segments(_item(), tmp_path, SEG)
    try:
        assert again.have == [0, 0, 0, 0]
        assert sorted(p.name for p in again.part.parent.iterdir()) == sorted(
            [again.body.name, again.record.name, again.layout.name])
    finally:
        again.release()


def test_a_single_stream_partial_becomes_the_body_in_place(tmp_path):
    part = partial_path(tmp_path, _item().sha256)
    part.parent.mkdir(parents=True)
    part.write_bytes(DATA[:450_000])
    job = plan_segments(_item(), tmp_path, SEG)
    try:
        assert job.have == [300_000, 150_000, 0, 0]
        assert job.body.read_bytes()[:450_000] == DATA[:450_000]
        assert not part.exists()
    finally:
        job.release()


def test_a_split_for_another_size_is_thrown_away(tmp_path):
    job = plan_segments(_item(), tmp_path, SEG)
    _record(job, [1000, 0, 0, 0])
    job.release()
    moved = plan_segments(FetchItem(_item().url, NAME, _item().sha256, 500_000), tmp_path, SEG)
    try:
        assert moved.segments == [(0, 300_000), (300_000, 500_000)] and moved.have == [0, 0]
        assert moved.body.stat().st_size == 500_000
    finally:
        moved.release()


def test_all_ranges_fetched_in_place_become_the_verified_cache_entry(server, session):
    item = server.add(NAME, DATA)
    job = plan_segments(item, session.cache, SEG)
    _record(job, [0, 10_000, 0, 0])  # one range was partly there
    job.release()
    job = plan_segments(item, session.cache, SEG)
    [final] = _run_all(job, session)
    assert final == cached_path(session.cache, item.sha256) and final.read_bytes() == DATA
    assert sorted(server.ranges) == sorted(f"{NAME}:bytes={a}-{b}" for a, b in
                                           [(0, 299_999), (310_000, 599_999), (600_000, 899_999), (900_000, 999_999)])
    assert server.served[NAME] == len(DATA) - 10_000
    assert sorted(p.name for p in (session.cache / "partial").iterdir()) == []


def test_a_server_that_ignores_ranges_is_reported_for_the_one_stream_fallback(server, session):
    item = server.add(NAME, DATA)
    server.ignore_range = True
    job = plan_segments(item, session.cache, SEG)
    with pytest.raises(NoRanges):
        _run_all(job, session)
    assert job.no_ranges


def test_ranges_that_do_not_verify_are_all_discarded(server, session):
    item = server.add(NAME, DATA)
    server.tampered[NAME] = DATA[:500_000] + bytes(500_000)
    job = plan_segments(item, session.cache, SEG)
    with pytest.raises(HashMismatch):
        _run_all(job, session)
    assert not cached_path(session.cache, item.sha256).exists()
    assert list((session.cache / "partial").iterdir()) == []


def test_an_unfinished_download_gives_back_the_blocks_it_reserved_and_keeps_what_it_recorded(tmp_path):
    """Issue 32.6: released unfinished (Ctrl-C), the body holds only the recorded bytes' blocks; the
    next plan resumes every range from its record."""
    job = plan_segments(_item(), tmp_path, SEG)
    assert job.body.stat().st_blocks * 512 >= len(DATA)  # reserved up front
    _record(job, [100_000, 0, 50_000, 0])
    job.release()
    assert job.body.stat().st_size == len(DATA)  # the layout stays: ranges resume at their offsets
    assert job.body.stat().st_blocks * 512 < 300_000  # ~150 kB recorded, not 1 MB reserved
    again = plan_segments(_item(), tmp_path, SEG)
    try:
        assert again.have == [100_000, 0, 50_000, 0]
        body = again.body.read_bytes()
        assert body[:100_000] == DATA[:100_000] and body[600_000:650_000] == DATA[600_000:650_000]
    finally:
        again.discard()
        again.release()


def test_where_holes_cannot_be_punched_the_body_is_cut_to_its_received_prefix(tmp_path, monkeypatch):
    import wheelhouse.fetch.ranges as ranges

    monkeypatch.setattr(ranges, "_punch_hole", lambda fd, offset, length: False)
    job = plan_segments(_item(), tmp_path, SEG)
    _record(job, [300_000, 20_000, 50_000, 0])  # range 0 whole, range 1 begun: prefix 320 000
    job.release()
    part = partial_path(tmp_path, _item().sha256)
    assert part.read_bytes() == DATA[:320_000]  # a one-stream partial: what the next run resumes from
    assert sorted(p.name for p in part.parent.iterdir()) == [part.name]
    assert bytes_kept(tmp_path, _item().sha256) == 320_000


def test_an_unfinished_download_that_received_nothing_leaves_nothing(tmp_path):
    job = plan_segments(_item(), tmp_path, SEG)
    job.release()
    assert not list(partial_path(tmp_path, _item().sha256).parent.iterdir())
