"""Download accounting under attack: the bar's total, whatever is resumed, restarted, shared or unsized."""

from __future__ import annotations

import os
import time

import pytest
from file_server import FileServer

from wheelhouse.fetch import FetchItem, fetch_all
from wheelhouse.progress import RecordingReporter


MIB = 1 << 20
FILES = {
    "a-1.0-py3-none-any.whl": os.urandom(3 * MIB),
    "b-1.0-py3-none-any.whl": os.urandom(3 * MIB - 8192),
    "c-1.0-py3-none-any.whl": os.urandom(700_000),
    "d-1.0-py3-none-any.whl": os.urandom(600_000),
}

@pytest.mark.parametrize("restart", [False, True], ids=["resumed", "server-ignores-range"])
def test_a_connection_cut_mid_file_and_resumed_counts_each_byte_once(tmp_path, monkeypatch, restart):
    """One stream, the body cut after 200 kB, resumed on the retry (or restarted from zero where the
    server ignores Range): the bar ends at the file's size. It ended at 140% (the 200 kB counted as they
    arrived, then again as "kept" when resumed) or 140% again (counted again as the restart re-sent them)."""
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    srv = FileServer()
    try:
        data = os.urandom(500_000)
        item = srv.add("x-1.0-py3-none-any.whl", data)
        srv.drop_after[item.filename] = 200_000
        srv.ignore_range = restart
        rep = RecordingReporter()
        fetch_all([item], tmp_path / "dest", tmp_path / "cache", jobs=1, backoff=0.01, reporter=rep)
    finally:
        srv.close()
    assert (tmp_path / "dest" / item.filename).read_bytes() == data
    assert any(e[0] == "note" and "retrying" in e[1] for e in rep.events), rep.events
    assert sum(e[2] for e in rep.events if e[0] == "advance") == len(data)


CHILD = """
import json, sys
from pathlib import Path
from wheelhouse.fetch import FetchItem, fetch_all
s = json.loads(sys.argv[1])
fetch_all([FetchItem(*s["item"])], Path(s["dest"]), Path(s["cache"]), jobs=4, segment_size=1 << 20, backoff=0.01)
"""


def test_ranges_kept_by_a_killed_run_then_refused_by_the_server_count_once(tmp_path, monkeypatch):
    """A run killed mid-file leaves its ranges; the next finds the server ignoring Range: the kept bytes
    (counted as done) go and the file comes again as one stream. The bar ended at 100% + the kept bytes."""
    import json
    import subprocess
    import sys

    from wheelhouse.fetch.ranges import bytes_kept

    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    srv = FileServer(rate=2_000_000)
    try:
        data = os.urandom(4 * MIB)
        item = srv.add("big-1.0-py3-none-any.whl", data)
        spec = {"item": [item.url, item.filename, item.sha256, item.size], "dest": str(tmp_path / "dest0"),
                "cache": str(tmp_path / "cache")}
        killed = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], timeout=60,
                                env={**os.environ, "WH_FAULT": "fetch.range.recorded:kill"})
        assert killed.returncode == -9
        assert bytes_kept(tmp_path / "cache", item.sha256) > 0
        srv.ignore_range, srv.rate = True, None
        rep = RecordingReporter()
        fetch_all([item], tmp_path / "dest", tmp_path / "cache", jobs=4, segment_size=MIB, backoff=0.01,
                  reporter=rep)
    finally:
        srv.close()
    assert (tmp_path / "dest" / item.filename).read_bytes() == data
    assert any(e[0] == "note" and "ignores Range" in e[1] for e in rep.events), rep.events
    assert sum(e[2] for e in rep.events if e[0] == "advance") == len(data)


def test_two_runs_on_one_cache_each_end_their_bar_at_its_total(tmp_path, monkeypatch):
    """Two wh fetching the same files into one cache at once (ranges and streams on the entry locks):
    each file arrives once per byte, and each run's bar, whichever run filed a file, ends exactly at its
    own total."""
    import threading

    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    srv = FileServer(rate=6_000_000)
    try:
        items = [srv.add(name, data) for name, data in FILES.items()]
        boxes = [{"rep": RecordingReporter()} for _ in range(2)]

        def run(i):
            try:
                fetch_all(items, tmp_path / f"dest{i}", tmp_path / "cache", jobs=4, segment_size=MIB // 2,
                          backoff=0.01, reporter=boxes[i]["rep"])
            except BaseException as exc:  # noqa: BLE001
                boxes[i]["error"] = exc

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
            time.sleep(0.05)
        for t in threads:
            t.join(60)
    finally:
        srv.close()
    for i, box in enumerate(boxes):
        assert "error" not in box, box["error"]
        for name, data in FILES.items():
            assert (tmp_path / f"dest{i}" / name).read_bytes() == data
        events = box["rep"].events
        started = [e[2] for e in events if e[0] == "start"]
        advanced = sum(e[2] for e in events if e[0] == "advance")
        assert advanced == (started[0] if started else 0), (i, advanced, started)
    for name, data in FILES.items():  # (a cut range may re-send a little)
        assert srv.served[name] < len(data) + MIB, (name, srv.served[name])


def test_a_file_of_unknown_size_among_sized_ones_leaves_the_bar_without_a_total_not_past_it(tmp_path, monkeypatch):
    """An index that gives no size for one file (an HTML page, a find-links folder beside a JSON index): its
    bytes are counted as they arrive, so a total of the other files' sizes ended the bar at 167%."""
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    srv = FileServer()
    try:
        a = srv.add("a-1.0-py3-none-any.whl", os.urandom(300_000))
        b = srv.add("b-1.0-py3-none-any.whl", os.urandom(200_000))
        b = FetchItem(b.url, b.filename, b.sha256, None)
        rep = RecordingReporter()
        fetch_all([a, b], tmp_path / "dest", tmp_path / "cache", jobs=2, reporter=rep)
    finally:
        srv.close()
    total = next(e[2] for e in rep.events if e[0] == "start")
    advanced = sum(e[2] for e in rep.events if e[0] == "advance")
    assert advanced == 500_000
    assert total is None or total >= advanced, (total, advanced)
