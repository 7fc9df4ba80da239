"""fetch.procs: a second process downloads half of a big fetch's bytes. It must never change the
answer: every file verified and placed, its errors raised unchanged, a full disk one no-space
error, and when it is killed, stopped or cannot start, this process downloads what it had not
filed, without asking again for a byte it recorded. It never outlives wh, even killed by SIGKILL.

WH_FETCH_PROCESS=always starts it for any fetch of two files (auto waits for 256 MiB)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from file_server import FileServer
from helper_procs import helper_pids, wait_for

from wheelhouse.errors import HashMismatch
from wheelhouse.fetch import FetchItem, NoSpace, cached_path, fetch_all, procs
from wheelhouse.fetch.ranges import bytes_kept
from wheelhouse.index.http import HttpClient
from wheelhouse.progress import RecordingReporter

MIB = 1 << 20
SEG = 1 << 20
# Two big files (one per share: the biggest goes here, the second to the helper) and small ones.
FILES = {
    "here-1.0-py3-none-any.whl": os.urandom(6 * MIB),
    "there-1.0-py3-none-any.whl": os.urandom(6 * MIB - 4096),
    "s1-1.0-py3-none-any.whl": os.urandom(1_200_000),
    "s2-1.0-py3-none-any.whl": os.urandom(1_100_000),
}
THERE = "there-1.0-py3-none-any.whl"

CHILD = """
import json, sys
from pathlib import Path
from wheelhouse.fetch import FetchItem, fetch_all
spec = json.loads(sys.argv[1])
fetch_all([FetchItem(*i) for i in spec["items"]], Path(spec["dest"]), Path(spec["cache"]), jobs=4,
          segment_size=spec["segment"], backoff=0.01)
print("done")
"""


@pytest.fixture
def always(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(procs.ENV, "always")


def _serve(rate=None, auth=None) -> tuple[FileServer, list[FetchItem]]:
    srv = FileServer(rate=rate)
    srv.auth = auth
    return srv, [srv.add(name, data) for name, data in FILES.items()]


def _helpers(parent: int | None = None) -> list[int]:
    """Live fetch helper processes whose parent is ``parent`` (default: this process)."""
    return helper_pids(b"wheelhouse.fetch.procs", parent=parent, zombies=False)


def _fetch_in_thread(items, tmp_path, **kw):
    """fetch_all in a thread; returns (thread, box) where box gets "paths", "error" and "reporter"."""
    box: dict = {"reporter": RecordingReporter()}

    def run():
        try:
            box["paths"] = fetch_all(items, tmp_path / "dest", tmp_path / "cache", jobs=4, segment_size=SEG,
                                     backoff=0.01, reporter=box["reporter"], **kw)
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t, box


def _check_placed(tmp_path):
    for name, data in FILES.items():
        assert (tmp_path / "dest" / name).read_bytes() == data, name


def test_a_second_process_downloads_its_share_and_every_file_is_verified_and_placed(always, tmp_path):
    srv, items = _serve(rate=4_000_000)
    try:
        t, box = _fetch_in_thread(items, tmp_path)
        seen = wait_for(_helpers, 10)
        t.join(60)
        assert "error" not in box, box.get("error")
    finally:
        srv.close()
    assert seen, "a helper process ran"
    _check_placed(tmp_path)
    # The progress bar counts each byte once, the helper's included.
    advanced = sum(e[2] for e in box["reporter"].events if e[0] == "advance")
    assert advanced == sum(len(d) for d in FILES.values())
    for name, data in FILES.items():  # no file downloaded by both processes (a cut range re-sends < 1 MiB)
        assert srv.served[name] < len(data) + MIB, (name, srv.served[name])
    assert not wait_for(lambda: not _helpers(), 5) is None  # and it is gone
    assert not list((tmp_path / "cache" / "partial").iterdir())


# The 7 NVIDIA wheels of bench/bench_fetch.py (MB): biggest-first alone leaves a 54 MB gap (706 / 760).
NVIDIA_MB = [403, 349, 219, 204, 192, 55, 44]


def _sized(mbs):
    return [FetchItem(f"http://x/{i}.whl", f"f{i}-1.0-py3-none-any.whl", None, mb * MIB) for i, mb in enumerate(mbs)]


@pytest.mark.parametrize("mbs", [NVIDIA_MB, [300, 290, 120, 100, 95, 90, 5, 3], list(range(1, 71))],
                         ids=["nvidia", "uneven", "seventy"])
@pytest.mark.parametrize("loads", [[0, 0], [0, 40 * MIB], [100 * MIB, 0]], ids=["even", "handicap", "loaded"])
def test_the_shares_are_as_even_as_whole_files_allow(mbs, loads):
    items = _sized(mbs)
    shares = procs.split(items, loads)
    assert sorted(it.filename for sh in shares for it in sh) == sorted(it.filename for it in items)  # each once
    totals = [load + sum(it.size for it in sh) for load, sh in zip(loads, shares)]
    hi, lo = (0, 1) if totals[0] >= totals[1] else (1, 0)
    gap = totals[hi] - totals[lo]
    # No one move or swap from the fuller share would bring the two closer ...
    for x in shares[hi]:
        for y in (None, *shares[lo]):
            assert not 0 < x.size - (y.size if y else 0) < gap, (x.size >> 20, y and y.size >> 20, gap >> 20)
    # ... and the gap is never wider than biggest-first alone leaves it.
    greedy = list(loads)
    for it in sorted(items, key=lambda it: -it.size):
        greedy[greedy.index(min(greedy))] += it.size
    assert gap <= abs(greedy[0] - greedy[1]), (totals, greedy)
    for sh in shares:  # biggest first: the longest transfers start at once
        assert [it.size for it in sh] == sorted((it.size for it in sh), reverse=True)


def test_the_helper_that_starts_later_gets_the_lighter_share(always):
    from wheelhouse.fetch.session import Session

    mine, theirs = procs.shares(_sized(NVIDIA_MB), Session(Path("/nonexistent"), HttpClient(), RecordingReporter(), "t"), 8)
    here, there = sum(it.size for it in mine), sum(it.size for it in theirs)
    assert 0 < here - there <= 64 * MIB, (here >> 20, there >> 20)


def test_auto_leaves_a_small_fetch_in_one_process(monkeypatch, tmp_path):
    monkeypatch.setenv(procs.ENV, "auto")
    srv, items = _serve(rate=4_000_000)
    try:
        t, box = _fetch_in_thread(items, tmp_path)
        seen = []
        while t.is_alive():
            seen += _helpers()
            time.sleep(0.02)
        t.join()
    finally:
        srv.close()
    assert "error" not in box and not seen
    _check_placed(tmp_path)


def test_a_helper_killed_mid_download_leaves_its_bytes_to_this_process(always, tmp_path):
    """SIGKILL the helper once it has recorded 2 MiB of its big file: this process finishes that file
    from the helper's record (the server sends those bytes once), and every file verifies."""
    srv, items = _serve(rate=1_500_000)
    there = next(it for it in items if it.filename == THERE)
    try:
        t, box = _fetch_in_thread(items, tmp_path)
        pid = wait_for(lambda: bytes_kept(tmp_path / "cache", there.sha256) >= 2 * MIB and _helpers(), 20)
        assert pid, "the helper recorded 2 MiB of its file"
        os.kill(pid[0], signal.SIGKILL)
        t.join(60)
    finally:
        srv.close()
    assert "error" not in box, box.get("error")
    _check_placed(tmp_path)
    notes = [e[1] for e in box["reporter"].events if e[0] == "note"]
    assert any("second download process stopped" in n for n in notes), notes
    # What the killed helper had recorded was not asked for again: at most what was in flight on its
    # connections when it died (each about one write of the server's) is served twice.
    assert srv.served[THERE] < len(FILES[THERE]) + 1 * MIB, srv.served[THERE]


def test_a_stopped_helper_is_ended_and_its_share_done_here(always, tmp_path, monkeypatch):
    """A helper SIGSTOPped mid-download says nothing: after _SILENT seconds it is killed and its
    share downloaded here. Before the watch, the run waited on it for ever."""
    monkeypatch.setattr(procs, "_SILENT", 1.5)
    monkeypatch.setattr(procs, "_BEAT", 0.2)
    srv, items = _serve(rate=1_500_000)
    try:
        t, box = _fetch_in_thread(items, tmp_path)
        pid = wait_for(_helpers, 10)
        assert pid
        time.sleep(0.3)
        os.kill(pid[0], signal.SIGSTOP)
        t.join(60)
        assert not t.is_alive()
    finally:
        srv.close()
    assert "error" not in box, box.get("error")
    _check_placed(tmp_path)
    assert wait_for(lambda: not _helpers(), 5)


def test_the_helper_ends_when_wh_is_killed_and_the_next_run_keeps_both_processes_bytes(always, tmp_path):
    srv, items = _serve(rate=1_000_000)
    spec = json.dumps({"items": [(i.url, i.filename, i.sha256, i.size) for i in items], "dest": str(tmp_path / "dest"),
                       "cache": str(tmp_path / "cache"), "segment": SEG})
    try:
        child = subprocess.Popen([sys.executable, "-c", CHILD, spec], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        helper = wait_for(lambda: _helpers(child.pid), 20)
        assert helper, "the child started a helper"
        kept = lambda: bytes_kept(tmp_path / "cache", items[0].sha256) + bytes_kept(tmp_path / "cache", items[1].sha256)
        assert wait_for(lambda: kept() >= 3 * MIB, 20)
        child.kill()
        child.wait()
        assert wait_for(lambda: not Path(f"/proc/{helper[0]}").exists()
                         or "Z" in Path(f"/proc/{helper[0]}/stat").read_text().rsplit(")", 1)[1].split()[0], 10), \
            "the helper outlived wh"
        before = kept()
        served = sum(srv.served.values())
        again = subprocess.run([sys.executable, "-c", CHILD, spec], capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
    finally:
        srv.close()
    _check_placed(tmp_path)
    total = sum(len(d) for d in FILES.values())
    # The second run asked only for what neither process had recorded (plus what was in flight).
    assert sum(srv.served.values()) - served <= total - before + 2 * MIB


def test_a_hash_mismatch_in_the_helpers_share_is_raised_here_unchanged(always, tmp_path, monkeypatch):
    srv, items = _serve()
    srv.tampered[THERE] = os.urandom(len(FILES[THERE]))
    try:
        with pytest.raises(HashMismatch) as helped:
            fetch_all(items, tmp_path / "d1", tmp_path / "c1", jobs=4, segment_size=SEG, backoff=0.01)
        monkeypatch.setenv(procs.ENV, "0")
        with pytest.raises(HashMismatch) as alone:
            fetch_all(items, tmp_path / "d2", tmp_path / "c2", jobs=4, segment_size=SEG, backoff=0.01)
    finally:
        srv.close()
    assert type(helped.value) is HashMismatch and str(helped.value) == str(alone.value)
    assert helped.value.hint == alone.value.hint and THERE in str(helped.value)
    assert not cached_path(tmp_path / "c1", items[1].sha256).exists()
    assert not (tmp_path / "d1" / THERE).exists()


def test_a_full_disk_in_the_helper_is_one_no_space_error(always, tmp_path, monkeypatch):
    monkeypatch.setenv("WH_FAULT_HELPER", "fetch.write:enospc")
    srv, items = _serve(rate=4_000_000)
    try:
        with pytest.raises(NoSpace) as err:
            fetch_all(items, tmp_path / "dest", tmp_path / "cache", jobs=4, segment_size=SEG, backoff=0.01)
    finally:
        srv.close()
    assert err.value.code == "no-space"
    assert wait_for(lambda: not _helpers(), 5)
    assert not (tmp_path / "dest" / THERE).exists()


def test_a_helper_that_cannot_start_costs_nothing_but_time(always, tmp_path, monkeypatch):
    """No Python to start (a broken sys.executable): this process downloads everything itself."""
    import wheelhouse.childproc as childproc

    monkeypatch.setattr(childproc.sys, "executable", str(tmp_path / "no-python"))
    srv, items = _serve()
    try:
        fetch_all(items, tmp_path / "dest", tmp_path / "cache", jobs=4, segment_size=SEG, backoff=0.01)
    finally:
        srv.close()
    _check_placed(tmp_path)


def test_credentials_reach_the_helper_over_its_pipe_never_its_command_line(always, tmp_path):
    srv, items = _serve(rate=2_000_000, auth="alice:s3cret-TOKEN")
    client = HttpClient(retries=0)
    base = srv.url("").replace("http://", "http://alice:s3cret-TOKEN@")
    client.credentials.strip(base)  # learnt as from an index URL; the file URLs carry none
    try:
        t, box = _fetch_in_thread(items, tmp_path, client=client)
        pid = wait_for(_helpers, 10)
        assert pid
        for p in pid:
            assert b"s3cret" not in Path(f"/proc/{p}/cmdline").read_bytes()
            assert b"s3cret" not in Path(f"/proc/{p}/environ").read_bytes()
        t.join(60)
    finally:
        srv.close()
    assert "error" not in box, box.get("error")
    _check_placed(tmp_path)
    assert srv.unauthorized == 0


def test_ctrl_c_stops_wh_and_its_helper_at_once(always, tmp_path):
    srv, items = _serve(rate=300_000)
    spec = json.dumps({"items": [(i.url, i.filename, i.sha256, i.size) for i in items], "dest": str(tmp_path / "dest"),
                       "cache": str(tmp_path / "cache"), "segment": SEG})
    try:
        child = subprocess.Popen([sys.executable, "-c", CHILD, spec], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
        helper = wait_for(lambda: _helpers(child.pid), 20)
        assert helper
        time.sleep(0.3)
        t0 = time.monotonic()
        os.killpg(child.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group
        out, err = child.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        srv.close()
    assert child.returncode != 0 and b"KeyboardInterrupt" in err and b"done" not in out
    assert took < 5, took
    assert not Path(f"/proc/{helper[0]}").exists() or not _helpers(child.pid)
