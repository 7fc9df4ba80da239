"""Early downloads (wheelhouse.fetch.early): wheels start downloading while the resolver still reads
the index, and a guess is a speed-up, never a different answer.

A real index on 127.0.0.1 with one slow page (the resolver waits on it) and slow files (a guess
still downloading when the resolution ends); `wh stage` runs as a subprocess with
WH_EARLY_FETCH=always, so the helpers start at the first guess whatever the machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helper_procs import alive, helper_pids
from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_wheel

from wheelhouse.fetch.early import remove_partial

BIG = 6_000_000
FETCH_HELPER = b"wheelhouse.fetch.procs"


def _stage(idx, tmp_path: Path, *reqs: str, out: str = "out", cache: str = "cache", early: str = "always",
           timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "WH_EARLY_FETCH": early}
    return subprocess.run(
        [sys.executable, "-m", "wheelhouse", "stage", *reqs, "--index-url", idx.url, "--python-version", "3.12",
         "--platform", "manylinux_2_35_x86_64", "--no-bootstrap", "--cache-dir", str(tmp_path / cache),
         "-o", str(tmp_path / out), "--json"],
        env=env, capture_output=True, text=True, timeout=timeout)


def _wheels(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((folder / "wheels").glob("*.whl"))}


def _leftovers(cache: Path) -> list[str]:
    part = cache / "partial"
    return sorted(p.name for p in part.iterdir()) if part.is_dir() else []


@pytest.fixture
def slow_index(tmp_path, pyindex):  # noqa: F811
    """app -> big (6 MB), small, slow; the page of `slow` answers 1.5 s late."""
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["big", "small", "slow"])
    make_wheel(d, "big", "1.0", pad_bytes=BIG)
    make_wheel(d, "small", "1.0")
    make_wheel(d, "slow", "1.0")
    idx = pyindex(d, serve_metadata=True)
    idx.delays["/simple/slow/"] = 1.5
    return idx


def test_wheels_download_while_the_resolver_waits_and_the_wheelhouse_is_the_same(slow_index, tmp_path):
    idx = slow_index
    run = _stage(idx, tmp_path, "app")
    assert run.returncode == 0, run.stderr
    big = "/files/big-1.0-py3-none-any.whl"
    # The big wheel was asked for before the page the resolution waited on was answered.
    assert idx.first_hit[big] < idx.first_hit["/simple/slow/"] + 1.5, (idx.first_hit[big], idx.first_hit)
    assert idx.hits[big] >= 1 and idx.bytes_served("big-1.0-py3-none-any.whl") < 2 * BIG  # (downloaded once)
    plain = _stage(idx, tmp_path, "app", out="out-plain", cache="cache-plain", early="0")
    assert plain.returncode == 0, plain.stderr
    assert _wheels(tmp_path / "out") == _wheels(tmp_path / "out-plain")
    assert len(_wheels(tmp_path / "out")) == 4
    report = json.loads(run.stdout)
    assert report["reused"] == 0, report  # (downloaded early is downloaded, not taken from a cache)
    assert _leftovers(tmp_path / "cache") == []


@pytest.fixture
def dropped_index(tmp_path, pyindex):  # noqa: F811
    """Requested: app and b. The walk ahead guesses b 2.0 (8 MB, sent at 1 MB/s); app needs b<2."""
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["b<2"])
    make_wheel(d, "b", "1.0")
    make_wheel(d, "b", "2.0", pad_bytes=8_000_000)
    idx = pyindex(d, serve_metadata=True)
    idx.rates["b-2.0-py3-none-any.whl"] = 1_000_000
    idx.delays["/simple/app/"] = 0.5  # (b's guess is downloading before app's page says b<2)
    return idx


def test_a_guess_the_resolution_dropped_is_stopped_and_its_bytes_removed(dropped_index, tmp_path):
    idx = dropped_index
    began = time.monotonic()
    run = _stage(idx, tmp_path, "b", "app")
    took = time.monotonic() - began
    assert run.returncode == 0, run.stderr
    assert idx.hits["/files/b-2.0-py3-none-any.whl"] >= 1  # it was guessed and begun
    assert sorted(_wheels(tmp_path / "out")) == ["app-1.0-py3-none-any.whl", "b-1.0-py3-none-any.whl"]
    assert took < 7, took  # not waited for (8 s at 1 MB/s)
    assert _leftovers(tmp_path / "cache") == []  # its unfinished bytes are gone
    assert not list((tmp_path / "cache" / "sha256").rglob(idx.sha256("b-2.0-py3-none-any.whl")))


def test_an_error_of_a_dropped_guess_is_not_the_stages(dropped_index, tmp_path):
    idx = dropped_index
    idx.rates.clear()
    other = make_wheel(tmp_path / "other", "b", "2.0", pad_bytes=8_000_001)  # a valid wheel, not the published one
    idx.tamper("b-2.0-py3-none-any.whl", other.read_bytes())
    run = _stage(idx, tmp_path, "b", "app")
    assert run.returncode == 0, run.stderr
    assert sorted(_wheels(tmp_path / "out")) == ["app-1.0-py3-none-any.whl", "b-1.0-py3-none-any.whl"]
    assert _leftovers(tmp_path / "cache") == []


def test_a_hash_mismatch_of_a_pinned_guess_fails_the_stage_as_without_early_downloads(slow_index, tmp_path):
    idx = slow_index
    other = make_wheel(tmp_path / "other", "big", "1.0", pad_bytes=BIG + 1)  # a valid wheel, not the published one
    idx.tamper("big-1.0-py3-none-any.whl", other.read_bytes())
    runs = {mode: _stage(idx, tmp_path, "app", out=f"out-{mode}", cache=f"cache-{mode}", early=mode)
            for mode in ("always", "0")}
    for mode, run in runs.items():
        assert run.returncode != 0, (mode, run.stdout)
        assert "sha256" in run.stderr and "big-1.0-py3-none-any.whl" in run.stderr, (mode, run.stderr)
        assert not (tmp_path / f"out-{mode}").exists(), mode
        assert _leftovers(tmp_path / f"cache-{mode}") == [], mode


def test_a_failed_resolution_stops_the_early_downloads_and_removes_their_bytes(tmp_path, pyindex):  # noqa: F811
    d = tmp_path / "pub"
    make_wheel(d, "big", "1.0", pad_bytes=BIG)
    make_wheel(d, "app", "1.0", requires=["big", "nowhere-to-be-found"])
    idx = pyindex(d, serve_metadata=True)
    idx.rates["big-1.0-py3-none-any.whl"] = 1_000_000
    idx.delays["/simple/nowhere-to-be-found/"] = 1.0
    began = time.monotonic()
    run = _stage(idx, tmp_path, "app")
    took = time.monotonic() - began
    assert run.returncode != 0 and "nowhere-to-be-found" in run.stderr, run.stderr
    assert idx.hits["/files/big-1.0-py3-none-any.whl"] >= 1
    assert took < 5, took  # (the guess was not waited for)
    assert _leftovers(tmp_path / "cache") == []
    assert not (tmp_path / "out").exists()


def test_wh_killed_while_guesses_download_leaves_no_helper_and_a_rerun_completes(slow_index, tmp_path):
    idx = slow_index
    idx.rates["big-1.0-py3-none-any.whl"] = 1_000_000
    env = {**os.environ, "WH_EARLY_FETCH": "always"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "wheelhouse", "stage", "app", "--index-url", idx.url, "--python-version", "3.12",
         "--platform", "manylinux_2_35_x86_64", "--no-bootstrap", "--cache-dir", str(tmp_path / "cache"),
         "-o", str(tmp_path / "out")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while idx.bytes_served("big-1.0-py3-none-any.whl") < 1_000_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert idx.bytes_served("big-1.0-py3-none-any.whl") >= 1_000_000
        helpers = helper_pids(FETCH_HELPER, parent=proc.pid)
        assert helpers, "no early download helper was running"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in helpers):
        assert time.monotonic() < deadline, "an early download helper outlived the killed wh"
        time.sleep(0.05)
    idx.rates.clear()
    again = _stage(idx, tmp_path, "app")
    assert again.returncode == 0, again.stderr
    assert len(_wheels(tmp_path / "out")) == 4
    assert _leftovers(tmp_path / "cache") == []


def test_a_restage_downloads_nothing_early(slow_index, tmp_path):
    idx = slow_index
    assert _stage(idx, tmp_path, "app").returncode == 0
    served = sum(idx.served[p] for p in list(idx.served) if p.startswith("/files/") and p.endswith(".whl"))
    again = _stage(idx, tmp_path, "app", cache="cache-2")  # (a new cache: only the previous wheelhouse has them)
    assert again.returncode == 0, again.stderr
    assert sum(idx.served[p] for p in list(idx.served) if p.startswith("/files/") and p.endswith(".whl")) == served


def test_remove_partial_leaves_what_another_process_is_downloading(tmp_path):
    """The lock is the one every download of the entry takes (wheelhouse.fetch.cache.entry_lock)."""
    key = "ab" * 32
    part = tmp_path / "partial" / f"{key}.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * 10)
    part.with_name(part.name + ".have").write_bytes(b"\0" * 8)
    (tmp_path / "locks").mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(tmp_path / 'locks' / (key + '.lock'))!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(30)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert remove_partial(tmp_path, key) is False
        assert part.exists() and part.with_name(part.name + ".have").exists()
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert remove_partial(tmp_path, key) is True
    assert not list((tmp_path / "partial").iterdir())


def test_a_full_disk_in_an_early_download_is_the_stages_no_space_error(slow_index, tmp_path, monkeypatch):
    """ENOSPC in a helper while the resolver still waits: one no-space error once the fetch takes over (the
    same as the ordinary fetch's), nothing written, and a re-run completes."""
    monkeypatch.setenv("WH_FAULT_HELPER", "fetch.write:enospc")
    run = _stage(slow_index, tmp_path, "app")
    assert run.returncode != 0
    assert "error: no space left on" in run.stderr and "hint: free space there" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()
    # A download the stop cut keeps its bytes (resumable; the one that filled the disk is gone): the next
    # run completes from them and leaves nothing.
    monkeypatch.delenv("WH_FAULT_HELPER")
    slow_index.delays.clear()
    again = _stage(slow_index, tmp_path, "app")
    assert again.returncode == 0, again.stderr
    assert len(_wheels(tmp_path / "out")) == 4
    assert _leftovers(tmp_path / "cache") == []


def test_ctrl_c_while_guesses_download_keeps_their_bytes_for_the_next_run(slow_index, tmp_path):
    """As for any download: Ctrl-C stops the helpers and keeps what they wrote; the next run resumes it."""
    idx = slow_index
    big = "big-1.0-py3-none-any.whl"
    idx.rates[big] = 1_000_000
    idx.delays["/simple/slow/"] = 30  # (the resolver is still waiting when Ctrl-C comes)
    env = {**os.environ, "WH_EARLY_FETCH": "always"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "wheelhouse", "stage", "app", "--index-url", idx.url, "--python-version", "3.12",
         "--platform", "manylinux_2_35_x86_64", "--no-bootstrap", "--cache-dir", str(tmp_path / "cache"),
         "-o", str(tmp_path / "out")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    part = tmp_path / "cache" / "partial" / f"{idx.sha256(big)}.part"
    try:
        deadline = time.monotonic() + 20
        while (not part.exists() or part.stat().st_size < 1_000_000) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert part.exists() and part.stat().st_size >= 1_000_000, "the early download did not begin"
        helpers = helper_pids(FETCH_HELPER, parent=proc.pid)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0 and "Traceback" not in err, err
    assert helpers and not [p for p in helpers if alive(p)], "a helper outlived Ctrl-C"
    kept = part.stat().st_size
    assert kept >= 1_000_000, "the unfinished download was not kept"
    asked = len(idx.log)
    idx.rates.clear()
    idx.delays.clear()
    again = _stage(idx, tmp_path, "app")
    assert again.returncode == 0, again.stderr
    assert len(_wheels(tmp_path / "out")) == 4
    starts = idx.range_starts(big, since=asked)
    assert starts and all(s is not None and s >= kept for s in starts), (kept, starts)  # resumed
    assert _leftovers(tmp_path / "cache") == []
