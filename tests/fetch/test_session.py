"""wheelhouse.fetch.session: what the downloads of one run share: the cancel flag (Ctrl-C stops
every wait at once), the retry backoff, and progress serialised for a reporter that is not thread-safe."""

from __future__ import annotations

import threading
import time

import pytest

from wheelhouse.errors import WhError
from wheelhouse.fetch.session import Cancelled, FetchError, FetchItem, Session
from wheelhouse.progress import RecordingReporter


class OneAtATime:
    """A reporter that notices two threads inside it at once (a rich progress bar is not thread-safe)."""

    def __init__(self):
        self.inside = 0
        self.overlaps = 0
        self.total = 0
        self.notes: list[str] = []

    def _enter(self):
        self.inside += 1
        if self.inside > 1:
            self.overlaps += 1
        time.sleep(0)  # give another thread the chance to come in

    def advance(self, task, amount=1):
        self._enter()
        self.total += amount
        self.inside -= 1

    def note(self, message):
        self._enter()
        self.notes.append(message)
        self.inside -= 1


def _session(tmp_path, reporter=None, **kw):
    return Session(tmp_path, client=None, reporter=reporter or RecordingReporter(), task="download", **kw)


def test_progress_and_notes_from_many_threads_reach_the_reporter_one_at_a_time(tmp_path):
    rep = OneAtATime()
    s = _session(tmp_path, rep)

    def work(i):
        for _ in range(300):
            s.advance(7)
        s.note(f"worker {i} done")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert rep.overlaps == 0
    assert rep.total == 8 * 300 * 7
    assert sorted(rep.notes) == [f"worker {i} done" for i in range(8)]


def test_advance_and_note_name_the_sessions_task(tmp_path):
    rep = RecordingReporter()
    s = _session(tmp_path, rep)
    s.advance(10)
    s.note("retrying")
    assert rep.events == [("advance", "download", 10), ("note", "retrying")]


def test_check_raises_once_cancelled(tmp_path):
    s = _session(tmp_path)
    s.check()
    s.cancel.set()
    with pytest.raises(Cancelled):
        s.check()


def test_pause_backs_off_exponentially(tmp_path):
    s = _session(tmp_path, backoff=0.04)
    t0 = time.monotonic()
    s.pause(1)
    one = time.monotonic() - t0
    t0 = time.monotonic()
    s.pause(3)
    three = time.monotonic() - t0
    assert 0.04 <= one < 0.5
    assert 0.16 <= three < 1.0  # 0.04 * 2**2


def test_cancel_ends_a_long_backoff_at_once(tmp_path):
    s = _session(tmp_path, backoff=30.0)
    threading.Timer(0.1, s.cancel.set).start()
    t0 = time.monotonic()
    with pytest.raises(Cancelled):
        s.pause(1)
    assert time.monotonic() - t0 < 2


def test_fetch_error_hides_credentials_and_says_what_to_do():
    err = FetchError("https://alice:s3cret@127.0.0.1/files/a.whl", "HTTP 503 busy")
    assert isinstance(err, WhError) and err.code == "fetch-failed"
    assert "s3cret" not in str(err) and "127.0.0.1/files/a.whl" in str(err) and "HTTP 503 busy" in str(err)
    assert "re-run" in err.hint
    assert FetchError("http://127.0.0.1/x", "no", hint="do that").hint == "do that"


def test_fetch_items_are_frozen_values():
    item = FetchItem("http://127.0.0.1/a.whl", "a.whl", None)
    assert item.size is None
    with pytest.raises(AttributeError):
        item.sha256 = "x"  # type: ignore[misc]


def test_batches_gather_blocks_cut_at_the_limit_and_keep_what_arrived_before_a_break():
    from wheelhouse.fetch.session import BATCH, batches

    blocks = [bytes([i]) * 16384 for i in range(200)]  # ~3.1 MiB in TLS-record-sized reads
    got = list(batches(iter(blocks)))
    assert b"".join(b for bs, _ in got for b in bs) == b"".join(blocks)
    assert len(got) <= 4 and all(n == sum(map(len, bs)) for bs, n in got)
    assert sum(n for _, n in batches(iter(blocks), 100_000)) == 100_000
    assert max(n for _, n in got) <= BATCH + 16384

    def breaks_off():
        yield b"a" * 1000
        yield b"b" * 1000
        raise OSError("connection reset")

    seen = []
    with pytest.raises(OSError):
        for bs, n in batches(breaks_off()):
            seen.append(n)
    assert seen == [2000]  # handed out before the error: written and kept for the resume


def test_write_blocks_writes_every_byte_at_the_offset(tmp_path):
    import os

    from wheelhouse.fetch.session import write_blocks

    path = tmp_path / "f"
    path.write_bytes(bytes(10))
    fd = os.open(path, os.O_RDWR)
    try:
        write_blocks(fd, [b"ab", b"", b"cde"], 3)
    finally:
        os.close(fd)
    assert path.read_bytes() == bytes(3) + b"abcde" + bytes(2)
