"""wheelhouse.fetch.ranges: a big file as parallel byte ranges, each in its own file whose size is
how far it got; joined, verified and filed once all are complete."""

from __future__ import annotations

import hashlib
import json
import os
import threading

import pytest

from wheelhouse.errors import HashMismatch
from wheelhouse.fetch.cache import cached_path, partial_path
from wheelhouse.fetch.ranges import NoRanges, fetch_range, plan_segments
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


def test_plan_splits_the_file_and_records_the_split(tmp_path):
    job = plan_segments(_item(), tmp_path, SEG)
    try:
        assert job.segments == [(0, 300_000), (300_000, 600_000), (600_000, 900_000), (900_000, 1_000_000)]
        assert job.have == [0, 0, 0, 0] and job.remaining == 4
        assert json.loads(job.layout.read_text()) == {"size": len(DATA), "segments": [list(s) for s in job.segments]}
    finally:
        job.release()


def test_one_process_at_a_time_holds_an_entry(tmp_path):
    first = plan_segments(_item(), tmp_path, SEG)
    assert plan_segments(_item(), tmp_path, SEG) is None
    first.release()
    second = plan_segments(_item(), tmp_path, SEG)
    assert second is not None
    second.release()


def test_a_new_plan_continues_from_the_range_files_sizes(tmp_path):
    job = plan_segments(_item(), tmp_path, SEG)
    job.range_file(0).write_bytes(DATA[:1000])
    job.range_file(2).write_bytes(DATA[600_000:900_000])  # complete
    job.range_file(3).write_bytes(DATA[900_000:] + b"excess")  # longer than its range: cut back
    job.release()
    again = plan_segments(_item(), tmp_path, 123_456)  # the recorded split wins over a new segment size
    try:
        assert again.segments == job.segments
        assert again.have == [1000, 0, 300_000, 100_000] and again.remaining == 2
        assert again.range_file(3).read_bytes() == DATA[900_000:]
    finally:
        again.release()


def test_a_single_stream_partial_becomes_the_ranges_start(tmp_path):
    part = partial_path(tmp_path, _item().sha256)
    part.parent.mkdir(parents=True)
    part.write_bytes(DATA[:450_000])
    job = plan_segments(_item(), tmp_path, SEG)
    try:
        assert job.have == [300_000, 150_000, 0, 0]
        assert job.range_file(1).read_bytes() == DATA[300_000:450_000]
        assert not part.exists()
    finally:
        job.release()


def test_a_split_for_another_size_is_thrown_away(tmp_path):
    job = plan_segments(_item(), tmp_path, SEG)
    job.range_file(0).write_bytes(DATA[:1000])
    job.release()
    moved = plan_segments(FetchItem(_item().url, NAME, _item().sha256, 500_000), tmp_path, SEG)
    try:
        assert moved.segments == [(0, 300_000), (300_000, 500_000)] and moved.have == [0, 0]
    finally:
        moved.release()


def test_all_ranges_fetched_join_into_the_verified_cache_entry(server, session):
    item = server.add(NAME, DATA)
    job = plan_segments(item, session.cache, SEG)
    job.range_file(1).write_bytes(DATA[300_000:310_000])  # one range was partly there
    job.have[1] = 10_000
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
