"""fetch: parallel, resumable, verified downloads into a content-addressed cache.

A small file server on 127.0.0.1 (tests/support/file_server.py) that can honour or ignore
Range, drop the connection midway, or serve tampered bytes, and counts what it served.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from wheelhouse.fetch import FetchError, FetchItem, HashMismatch, cached_path, fetch_all
from wheelhouse.progress import RecordingReporter


def _fetch(items, tmp_path, **kw):
    kw.setdefault("backoff", 0.01)
    return fetch_all(items, tmp_path / "dest", tmp_path / "cache", **kw)


def test_parallel_fetch_verifies_and_reports_bytes(server, tmp_path):
    items = [server.add(f"f{i}-1.0-py3-none-any.whl", os.urandom(200_000 + i)) for i in range(6)]
    rec = RecordingReporter()
    paths = _fetch(items, tmp_path, jobs=4, reporter=rec)
    assert [p.name for p in paths] == [it.filename for it in items]
    for it, p in zip(items, paths):
        assert hashlib.sha256(p.read_bytes()).hexdigest() == it.sha256
        # The cache entry itself (a hardlink): every downloaded byte is written once.
        assert os.path.samefile(p, cached_path(tmp_path / "cache", it.sha256))
    advanced = sum(e[2] for e in rec.events if e[0] == "advance")
    assert advanced == sum(it.size for it in items)
    assert not list((tmp_path / "cache" / "partial").iterdir())


def test_cache_reuse_serves_zero_bytes(server, tmp_path):
    item = server.add("big-1.0-py3-none-any.whl", os.urandom(300_000))
    _fetch([item], tmp_path)
    served = dict(server.served)
    other = tmp_path / "second"
    fetch_all([item], other / "dest", tmp_path / "cache")
    assert server.served == served
    assert (other / "dest" / item.filename).read_bytes() == server.files[item.filename]


def test_tampered_file_is_refused_and_not_kept(server, tmp_path):
    item = server.add("evil-1.0-py3-none-any.whl", os.urandom(100_000))
    server.tampered[item.filename] = os.urandom(100_000)
    with pytest.raises(HashMismatch) as err:
        _fetch([item], tmp_path)
    assert err.value.expected == item.sha256 and err.value.actual != item.sha256
    assert "sha256" in err.value.message and err.value.hint
    assert not (tmp_path / "dest" / item.filename).exists()
    assert not cached_path(tmp_path / "cache", item.sha256).exists()
    assert not list((tmp_path / "cache" / "partial").iterdir())


def test_download_killed_midway_resumes_with_range(server, tmp_path):
    size = 2_000_000
    item = server.add("torn-1.0-py3-none-any.whl", os.urandom(size))
    server.drop_after[item.filename] = 700_000
    paths = _fetch([item], tmp_path)
    assert paths[0].read_bytes() == server.files[item.filename]
    assert any(r.startswith(item.filename + ":bytes=") for r in server.ranges)
    # The second request asked only for the rest: total served is the size (no re-download).
    assert server.served[item.filename] == size


def test_partial_from_a_previous_run_is_continued(server, tmp_path):
    data = os.urandom(1_000_000)
    item = server.add("half-1.0-py3-none-any.whl", data)
    part = tmp_path / "cache" / "partial" / f"{item.sha256}.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(data[:600_000])  # what an interrupted `wh stage` leaves behind
    _fetch([item], tmp_path)
    assert server.served[item.filename] == 400_000
    assert (tmp_path / "dest" / item.filename).read_bytes() == data


def test_server_ignoring_range_restarts_cleanly(server, tmp_path):
    data = os.urandom(500_000)
    item = server.add("norange-1.0-py3-none-any.whl", data)
    server.ignore_range = True
    part = tmp_path / "cache" / "partial" / f"{item.sha256}.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(data[:200_000])
    paths = _fetch([item], tmp_path)
    assert paths[0].read_bytes() == data  # not 200k + 500k glued together


def test_corrupt_partial_is_discarded_and_refetched(server, tmp_path):
    data = os.urandom(400_000)
    item = server.add("bad-part-1.0-py3-none-any.whl", data)
    part = tmp_path / "cache" / "partial" / f"{item.sha256}.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(os.urandom(100_000))  # garbage from some earlier accident
    paths = _fetch([item], tmp_path)
    assert paths[0].read_bytes() == data


def test_missing_file_is_one_clear_error(server, tmp_path):
    item = FetchItem(server.url("nope-1.0-py3-none-any.whl"), "nope-1.0-py3-none-any.whl", "0" * 64, 10)
    with pytest.raises(FetchError) as err:
        _fetch([item], tmp_path)
    assert "404" in err.value.message and "nope-1.0" in err.value.message
    assert not (tmp_path / "dest" / item.filename).exists()


def test_file_urls_and_relinking_into_existing_dest(tmp_path):
    src = tmp_path / "src.whl"
    src.write_bytes(b"x" * 5000)
    item = FetchItem(src.as_uri(), "local-1.0-py3-none-any.whl", hashlib.sha256(b"x" * 5000).hexdigest(), 5000)
    first = _fetch([item], tmp_path)
    again = _fetch([item], tmp_path)
    assert first == again and again[0].read_bytes() == b"x" * 5000


def test_the_same_file_asked_twice_is_downloaded_once(server, tmp_path):
    item = server.add("twice-1.0-py3-none-any.whl", os.urandom(300_000))
    paths = _fetch([item, item], tmp_path, jobs=4)
    assert paths[0] == paths[1] and paths[0].read_bytes() == server.files[item.filename]
    assert server.served[item.filename] == 300_000


def test_a_file_without_published_hash_is_filed_under_its_real_hash(server, tmp_path):
    data = os.urandom(50_000)
    server.add("nohash-1.0-py3-none-any.whl", data)
    item = FetchItem(server.url("nohash-1.0-py3-none-any.whl"), "nohash-1.0-py3-none-any.whl", None, None)
    paths = _fetch([item], tmp_path)
    assert cached_path(tmp_path / "cache", hashlib.sha256(data).hexdigest()).read_bytes() == paths[0].read_bytes() == data


# --- big files: parallel byte ranges --------------------------------------------------------------

SEG = 128 * 1024


def test_big_file_is_fetched_as_parallel_ranges(server, tmp_path):
    data = os.urandom(8 * SEG + 1234)
    item = server.add("huge-1.0-py3-none-any.whl", data)
    rec = RecordingReporter()
    paths = _fetch([item], tmp_path, jobs=4, segment_size=SEG, reporter=rec)
    assert paths[0].read_bytes() == data
    assert len([r for r in server.ranges if r.startswith(item.filename)]) >= 4
    assert server.served[item.filename] == len(data)  # every byte once
    assert sum(e[2] for e in rec.events if e[0] == "advance") == len(data)
    assert not list((tmp_path / "cache" / "partial").iterdir())  # no .part, no sidecar left


def test_a_range_dropped_midway_resumes_without_refetching(server, tmp_path):
    data = os.urandom(6 * SEG)
    item = server.add("drop-1.0-py3-none-any.whl", data)
    server.drop_after[item.filename] = SEG // 2  # the first range request dies halfway
    paths = _fetch([item], tmp_path, jobs=3, segment_size=SEG)
    assert paths[0].read_bytes() == data
    assert server.served[item.filename] == len(data)


def test_single_stream_partial_is_reused_by_a_ranged_download(server, tmp_path):
    data = os.urandom(6 * SEG)
    item = server.add("prefix-1.0-py3-none-any.whl", data)
    part = tmp_path / "cache" / "partial" / f"{item.sha256}.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(data[: 3 * SEG + 10])
    paths = _fetch([item], tmp_path, jobs=3, segment_size=SEG)
    assert paths[0].read_bytes() == data
    assert server.served[item.filename] == len(data) - (3 * SEG + 10)


def test_ranges_ignored_by_the_server_fall_back_to_one_stream(server, tmp_path):
    data = os.urandom(4 * SEG)
    item = server.add("plain-1.0-py3-none-any.whl", data)
    server.ignore_range = True
    paths = _fetch([item], tmp_path, jobs=4, segment_size=SEG)
    assert paths[0].read_bytes() == data


def test_tampered_big_file_is_refused_and_nothing_kept(server, tmp_path):
    item = server.add("bigevil-1.0-py3-none-any.whl", os.urandom(4 * SEG))
    server.tampered[item.filename] = os.urandom(4 * SEG)
    with pytest.raises(HashMismatch):
        _fetch([item], tmp_path, jobs=4, segment_size=SEG)
    assert not cached_path(tmp_path / "cache", item.sha256).exists()
    assert not list((tmp_path / "cache" / "partial").iterdir())
    assert not (tmp_path / "dest" / item.filename).exists()


def test_a_record_ahead_of_its_bytes_is_downloaded_again_not_refused(server, tmp_path):
    """A power cut can leave the progress record ahead of the bytes it counts (zeros in the body):
    the file does not verify, and since those bytes were kept from an earlier run, it is fetched
    again from the start instead of failing as tampered."""
    import struct

    from wheelhouse.fetch.ranges import plan_segments

    data = os.urandom(6 * SEG)
    item = server.add("torn-1.0-py3-none-any.whl", data)
    rec = RecordingReporter()
    job = plan_segments(item, tmp_path / "cache", 2 * SEG)
    job.record.write_bytes(struct.pack("<3Q", 2 * SEG, SEG, 0))  # claims bytes the body never got
    job.release()
    paths = _fetch([item], tmp_path, jobs=3, segment_size=SEG, reporter=rec)
    assert paths[0].read_bytes() == data
    assert any("did not verify; downloading it again" in e[1] for e in rec.events if e[0] == "note")
    assert not list((tmp_path / "cache" / "partial").iterdir())


def test_ctrl_c_leaves_a_ranges_files_open_until_its_writers_have_stopped(tmp_path, monkeypatch):
    """Ctrl-C reaches the main thread while range writers are mid-transfer. Their file descriptors
    and the entry's lock are released only once every writer has returned: a descriptor closed
    under a writer could be reused by the next file this process opens, and the late write land there."""
    import threading
    import time

    import wheelhouse.fetch.downloads as fetch  # the module fetch_all runs in
    from file_server import FileServer
    from wheelhouse.fetch.ranges import Segmented

    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    srv = FileServer(rate=400_000)
    item = srv.add("slow-1.0-py3-none-any.whl", os.urandom(4 << 20))
    running, events, lock = [0], [], threading.Lock()
    real_range, real_release, real_collect = fetch.fetch_range, Segmented.release, fetch._collect

    def fetch_range(job, idx, s):
        with lock:
            running[0] += 1
        try:
            return real_range(job, idx, s)
        finally:
            time.sleep(0.2)  # a writer slow to notice the cancel flag
            with lock:
                running[0] -= 1

    def release(job):
        with lock:
            events.append(running[0])
        real_release(job)

    def interrupted(*a, **kw):
        time.sleep(0.3)  # the transfers are under way
        raise KeyboardInterrupt

    monkeypatch.setattr(fetch, "fetch_range", fetch_range)
    monkeypatch.setattr(Segmented, "release", release)
    monkeypatch.setattr(fetch, "_collect", interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            fetch_all([item], tmp_path / "dest", tmp_path / "cache", jobs=4, segment_size=1 << 20, backoff=0.01)
        deadline = time.monotonic() + 10
        while not events and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        srv.close()
    assert events == [0], events  # released once, with no writer left running
