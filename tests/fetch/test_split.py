"""fetch.ranges.split_range: a connection that lags is not waited for. When a connection is idle
and nothing is queued, the unfinished range with the most bytes left is split and its second half
fetched by the idle connection; the split is on disk before its range is asked for, so a process
killed right after it resumes without asking for a recorded byte again."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import time

import pytest
from file_server import FileServer

from wheelhouse.fetch import FetchItem, cached_path, fetch_all
from wheelhouse.fetch.ranges import plan_segments
from wheelhouse.progress import RecordingReporter

MIB = 1 << 20
DATA = os.urandom(12 * MIB)
NAME = "lag-1.0-py3-none-any.whl"
SEG = 4 * MIB  # 3 ranges for 3 connections; a range is split while at least 2 MiB of it is left

CHILD = """
import json, sys
from pathlib import Path
from wheelhouse.fetch import FetchItem, fetch_all
spec = json.loads(sys.argv[1])
fetch_all([FetchItem(**spec["item"])], Path(spec["dest"]), Path(spec["cache"]), jobs=3,
          segment_size=spec["segment"], backoff=0.01)
"""


class LaggingServer(FileServer):
    """The request for the file's first range crawls at ``slow`` bytes/s; every other one is fast.
    ``slow_sent``: the bytes the lagging connection put on the wire."""

    def __init__(self, files, slow: float):
        super().__init__(files)
        self.slow = slow
        self.slow_sent = 0

    def _send(self, handler, name, body):
        if not (handler.headers.get("Range") or "").startswith("bytes=0-"):
            return super()._send(handler, name, body)
        self.crawl(handler, name, body, self.slow, counted=self._count_slow)

    def _count_slow(self, n: int) -> None:
        self.slow_sent += n


@pytest.fixture
def lagging(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    srv = LaggingServer({NAME: DATA}, slow=1_000_000)
    yield srv
    srv.close()


def _item(srv) -> FetchItem:
    return FetchItem(srv.url(NAME), NAME, hashlib.sha256(DATA).hexdigest(), len(DATA))


def _starts(srv) -> list[int]:
    return sorted(int(r.split("bytes=")[1].split("-")[0]) for r in srv.ranges)


def test_idle_connections_take_over_a_lagging_range(lagging, tmp_path):
    item = _item(lagging)
    rec = RecordingReporter()
    t0 = time.monotonic()
    (path,) = fetch_all([item], tmp_path / "house", tmp_path / "cache", jobs=3, segment_size=SEG, backoff=0.01,
                        reporter=rec)
    took = time.monotonic() - t0
    assert path.read_bytes() == DATA
    # The progress bar counts each byte once: the bytes a cut connection read past its new end are not counted.
    assert sum(e[2] for e in rec.events if e[0] == "advance") == len(DATA)
    # The lagging first range was cut: other connections asked for parts of it...
    assert [s for s in _starts(lagging) if 0 < s < SEG], lagging.ranges
    # ...and it sent at most about half of its 4 MiB (alone, at 1 MB/s, it would have taken over 4 s). How
    # often it is split depends on when its first block lands; the first split always happens.
    assert lagging.slow_sent < 3 * MIB and took < 3.6
    assert not list((tmp_path / "cache" / "partial").iterdir())  # body, record and layout are gone


def test_a_fetch_killed_right_after_a_split_resumes_without_asking_for_a_recorded_byte(lagging, tmp_path):
    from wheelhouse.faults import ENV

    item = _item(lagging)
    cache, dest = tmp_path / "cache", tmp_path / "dest"
    arg = json.dumps({"item": item.__dict__, "dest": str(dest), "cache": str(cache), "segment": SEG})
    killed = subprocess.run([sys.executable, "-c", CHILD, arg], capture_output=True, text=True, timeout=120,
                            env={**os.environ, ENV: "fetch.range.split:kill"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not dest.exists() and not cached_path(cache, item.sha256).exists()  # nothing under a final name
    part = cache / "partial" / f"{item.sha256}.part"
    layout = json.loads(part.with_name(part.name + ".json").read_text())
    segments = [tuple(s) for s in layout["segments"]]
    assert layout["v"] == 3 and len(segments) == 4  # the 3 planned ranges and the split's new one
    pos = 0
    for a, b in sorted(segments):  # the split ranges still cover the file, once
        assert a == pos
        pos = b
    assert pos == len(DATA)
    raw = part.with_name(part.name + ".have").read_bytes()
    have = [struct.unpack_from("<Q", raw, 8 * i)[0] for i in range(len(segments))]
    assert len(raw) == 8 * len(segments) and have[-1] == 0
    body = part.with_name(part.name + ".body").read_bytes()
    for (a, b), h in zip(segments, have):
        assert h <= b - a and body[a:a + h] == DATA[a:a + h]  # every recorded byte is the right byte

    before = len(lagging.ranges)
    again = subprocess.run([sys.executable, "-c", CHILD, arg], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert (dest / NAME).read_bytes() == DATA
    for r in lagging.ranges[before:]:  # no recorded byte was asked for again
        lo, hi = (int(x) for x in r.split("bytes=")[1].split("-"))
        for (a, _b), h in zip(segments, have):
            assert hi < a or lo >= a + h, (r, segments, have)
    assert not list((cache / "partial").iterdir())


def test_a_record_that_fits_no_layout_starts_the_download_again(tmp_path):
    """Killed between growing the record and writing the split's layout (or a layout whose ranges
    overlap): the kept bytes cannot be trusted to a range, so that download starts from zero."""
    item = FetchItem("http://127.0.0.1:9/" + NAME, NAME, hashlib.sha256(DATA).hexdigest(), len(DATA))
    job = plan_segments(item, tmp_path, SEG)
    with open(job.record, "r+b") as fh:  # what was recorded, plus a split's entry with no layout
        fh.write(struct.pack("<QQQQ", MIB, MIB, MIB, 0))
    job.release()
    again = plan_segments(item, tmp_path, SEG)
    assert again.have == [0, 0, 0] and again.segments == [(0, SEG), (SEG, 2 * SEG), (2 * SEG, 3 * SEG)]
    again.release()

    job = plan_segments(item, tmp_path, SEG)
    job.record.write_bytes(struct.pack("<QQQ", MIB, MIB, MIB))
    job.layout.write_text(json.dumps({"v": 3, "size": len(DATA), "segments": [[0, SEG], [SEG // 2, 2 * SEG], [2 * SEG, 3 * SEG]]}))
    job.release()
    again = plan_segments(item, tmp_path, SEG)
    assert again.have == [0, 0, 0] and again.segments[1] == (SEG, 2 * SEG)
    again.release()
