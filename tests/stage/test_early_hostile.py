"""Early downloads, attacked (wheelhouse.fetch.early): a guess is a speed-up, never a different answer,
and nothing is lost or leaked (no partial file, no stray helper, no file placed that was not pinned).

A real index on 127.0.0.1 (slow pages, slow files, scripted errors), real wheels, real helper processes;
WH_EARLY_FETCH=always so the helpers start at the first guess whatever the machine.
"""

from __future__ import annotations

import hashlib
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

from wheelhouse.progress import RecordingReporter
from wheelhouse.stage import StageFlags, merge_inputs, stage
from wheelhouse.target import target_from_flags

FETCH_HELPER = b"wheelhouse.fetch.procs"
MARK = "WH_TEST_EARLY_HOSTILE"


@pytest.fixture(autouse=True)
def _always(monkeypatch, tmp_path):
    monkeypatch.setenv("WH_EARLY_FETCH", "always")
    monkeypatch.setenv(MARK, str(tmp_path))  # (inherited by every wh and helper this test starts)


def _argv(idx, tmp_path: Path, *reqs: str, out: str = "out", cache: str = "cache") -> list[str]:
    return [sys.executable, "-m", "wheelhouse", "stage", *reqs, "--index-url", idx.url, "--python-version", "3.12",
            "--platform", "manylinux_2_35_x86_64", "--no-bootstrap", "--cache-dir", str(tmp_path / cache),
            "-o", str(tmp_path / out)]


def _cli(idx, tmp_path: Path, *reqs: str, early: str = "always", timeout: float = 60, env: dict | None = None,
         **kw) -> subprocess.CompletedProcess:
    return subprocess.run(_argv(idx, tmp_path, *reqs, **kw), env={**os.environ, "WH_EARLY_FETCH": early, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def _inproc(idx, tmp_path: Path, *reqs: str, out: str = "out", cache: str = "cache", **run):
    rec = RecordingReporter()
    flags = StageFlags(requirements=tuple(reqs), index_url=idx.url,
                       target=target_from_flags("3.12", ["manylinux_2_35_x86_64"]))
    res = stage(merge_inputs(None, flags, tmp_path / out, cache_dir=tmp_path / cache, bootstrap=False, **run),
                reporter=rec)
    return res, rec


def _wheels(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((folder / "wheels").glob("*.whl"))}


def _leftovers(cache: Path) -> list[str]:
    part = cache / "partial"
    return sorted(p.name for p in part.iterdir()) if part.is_dir() else []


def _ours() -> list[int]:
    """Live download helpers started by this test (whoever their parent is now: a killed wh's are adopted)."""
    mark = f"{MARK}={os.environ[MARK]}".encode()
    found = []
    for pid in helper_pids(FETCH_HELPER, parent=0, zombies=False):
        try:
            if mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(pid)
        except OSError:
            pass
    return found


def _no_helpers_left() -> None:
    deadline = time.monotonic() + 10
    while _ours():
        assert time.monotonic() < deadline, "an early download helper outlived the stage"
        time.sleep(0.05)


def _bar(rec: RecordingReporter, task: str = "download") -> tuple[float | None, float]:
    total = [e[2] for e in rec.events if e[0] == "start" and e[1] == task]
    done = sum(e[2] for e in rec.events if e[0] == "advance" and e[1] == task)
    return (total[-1] if total else None), done


# --- a guess the resolution dropped, already filed --------------------------------------------------

@pytest.fixture
def filed_drop(tmp_path, pyindex):  # noqa: F811
    """Requested: b and app. The walk ahead guesses b 2.0 (2 MB, fast: filed long before the resolution
    ends, since app's page answers 1 s late); app needs b<2, so b 1.0 is pinned."""
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["b<2"])
    make_wheel(d, "b", "1.0", pad_bytes=300_000)
    make_wheel(d, "b", "2.0", pad_bytes=2_000_000)
    idx = pyindex(d, serve_metadata=True)
    idx.delays["/simple/app/"] = 1.0
    return idx


def test_the_download_bar_of_a_stage_with_a_dropped_filed_guess_ends_at_its_total(filed_drop, tmp_path):
    """The bytes of a guess the resolution dropped are not this stage's downloads: the bar counts only the
    pinned files' bytes, never more than its total."""
    idx = filed_drop
    res, rec = _inproc(idx, tmp_path, "b", "app")
    assert idx.hits["/files/b-2.0-py3-none-any.whl"] >= 1  # guessed and downloaded
    assert sorted(_wheels(tmp_path / "out")) == ["app-1.0-py3-none-any.whl", "b-1.0-py3-none-any.whl"]
    total, done = _bar(rec)
    pinned = sum(len(idx.files[f]) for f in ("app-1.0-py3-none-any.whl", "b-1.0-py3-none-any.whl"))
    assert total == pinned, (total, pinned)
    assert done == total, (done, total)
    _no_helpers_left()
    assert _leftovers(tmp_path / "cache") == []


def _x_index(tmp_path, pyindex, rate: int, app_late: float):  # noqa: F811
    """x 2.0 (4 MB, sent at ``rate``) is the walk ahead's guess for `x`; app needs x<2 and its page answers
    ``app_late`` s late: a stage of `x app` drops the guess while it downloads, a stage of `x` pins it."""
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["x<2"])
    make_wheel(d, "x", "1.0")
    make_wheel(d, "x", "2.0", pad_bytes=4_000_000)
    idx = pyindex(d, serve_metadata=True)
    idx.rates["x-2.0-py3-none-any.whl"] = rate
    idx.delays["/simple/app/"] = app_late
    return idx


@pytest.fixture
def dropped_slow(tmp_path, pyindex):  # noqa: F811
    return _x_index(tmp_path, pyindex, 1_000_000, 1.0)


# --- two stages, one cache ----------------------------------------------------------------------------

@pytest.fixture
def shared_x(tmp_path, pyindex):  # noqa: F811
    return _x_index(tmp_path, pyindex, 2_000_000, 0.8)


@pytest.mark.parametrize("first", ["pins", "drops"])
@pytest.mark.parametrize("fixture", ["shared_x", "huge_x"])
def test_a_guess_dropped_while_another_stage_downloads_the_same_file(request, tmp_path, first, fixture):
    """The dropped guess's unfinished bytes are removed only where no other process holds the entry:
    the stage that pinned the file gets it whole and verified, whichever began first (one stream, or
    ranges), and nothing is left in partial/."""
    idx = request.getfixturevalue(fixture)
    big = "x-2.0-py3-none-any.whl"
    env = {**os.environ, "WH_EARLY_FETCH": "always"}
    argv = {"pins": _argv(idx, tmp_path, "x", out="out-pins"),
            "drops": _argv(idx, tmp_path, "x", "app", out="out-drops")}
    second = "drops" if first == "pins" else "pins"
    procs = {first: subprocess.Popen(argv[first], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)}
    try:
        deadline = time.monotonic() + 20
        while idx.bytes_served(big) == 0 and idx.hits[f"/files/{big}"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # (the first one holds the entry, some bytes in)
        procs[second] = subprocess.Popen(argv[second], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)
        outs = {k: p.communicate(timeout=60) for k, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
    for k, p in procs.items():
        assert p.returncode == 0, (k, outs[k][1])
    assert _wheels(tmp_path / "out-pins") == {big: idx.sha256(big)}
    assert sorted(_wheels(tmp_path / "out-drops")) == ["app-1.0-py3-none-any.whl", "x-1.0-py3-none-any.whl"]
    assert _leftovers(tmp_path / "cache") == []
    _no_helpers_left()


# --- a server that fails ------------------------------------------------------------------------------

@pytest.fixture
def slow_page(tmp_path, pyindex):  # noqa: F811
    """app -> big (3 MB), small, slow; the page of `slow` answers 1 s late (the guesses download meanwhile)."""
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["big", "small", "slow"])
    make_wheel(d, "big", "1.0", pad_bytes=3_000_000)
    make_wheel(d, "small", "1.0")
    make_wheel(d, "slow", "1.0")
    idx = pyindex(d, serve_metadata=True)
    idx.delays["/simple/slow/"] = 1.0
    return idx


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(("error:", "hint:"))]


@pytest.mark.parametrize("status", [404, 403])
def test_a_pinned_guess_the_server_refuses_is_the_same_error_as_without_early_downloads(slow_page, tmp_path,
                                                                                          status):
    idx = slow_page
    runs = {}
    for early in ("always", "0"):
        idx.scripted.clear()
        idx.script("/files/big-1.0-py3-none-any.whl", *[(status, b"refused", {})] * 30)
        runs[early] = _cli(idx, tmp_path, "app", early=early, out=f"out-{early}", cache=f"cache-{early}")
    for early, run in runs.items():
        assert run.returncode == 1, (early, run.stderr)
        assert "Traceback" not in run.stderr, run.stderr
        assert not (tmp_path / f"out-{early}").exists()
        assert _leftovers(tmp_path / f"cache-{early}") == [], early
    assert _error_lines(runs["always"].stderr) == _error_lines(runs["0"].stderr), (runs["always"].stderr,
                                                                                   runs["0"].stderr)
    assert _error_lines(runs["0"].stderr)
    _no_helpers_left()


def test_a_pinned_guess_cut_mid_body_and_a_500_resume_to_the_same_wheelhouse(slow_page, tmp_path):
    idx = slow_page
    big = "big-1.0-py3-none-any.whl"
    idx.drop_after(big, 1_000_000)
    idx.script("/files/small-1.0-py3-none-any.whl", (500, b"oops", {}))
    run = _cli(idx, tmp_path, "app")
    assert run.returncode == 0, run.stderr
    assert idx.bytes_served(big) < 2 * len(idx.files[big])  # resumed, not downloaded again from byte 0
    assert _wheels(tmp_path / "out") == {f: idx.sha256(f) for f in sorted(idx.files)
                                         if f.split("-")[0] in ("app", "big", "small", "slow")}
    assert _leftovers(tmp_path / "cache") == []
    _no_helpers_left()


# --- a helper that dies or stops ------------------------------------------------------------------------

@pytest.mark.parametrize("point", ["fetch.write", "fetch.place", "fetch.copy"])
def test_early_helpers_killed_during_the_resolution_the_stage_finishes_the_same(slow_page, tmp_path, monkeypatch,
                                                                                point):
    """Both helpers die (SIGKILL at their first write, or once a file is in): the offers after that go
    nowhere, and the fetch downloads here what they had not filed, resuming their bytes; the bar ends at
    its total."""
    idx = slow_page
    monkeypatch.setenv("WH_FAULT_HELPER", f"{point}:kill")
    res, rec = _inproc(idx, tmp_path, "app")
    want = {f: idx.sha256(f) for f in sorted(idx.files) if f.split("-")[0] in ("app", "big", "small", "slow")}
    assert _wheels(tmp_path / "out") == want
    total, done = _bar(rec)
    assert total == sum(len(idx.files[f]) for f in want), total
    assert done == total, (done, total)
    assert _leftovers(tmp_path / "cache") == []
    _no_helpers_left()


# --- a resolution that backtracks ------------------------------------------------------------------------

@pytest.fixture
def backtrack(tmp_path, pyindex):  # noqa: F811
    """a 3.0 (big, slow) -> d, e (big, slow), nope>5 (only nope 1.0 exists: a 3.0 is abandoned); a 2.0 ->
    f, nope<5. The walk ahead guesses a 3.0, d 1.0 and e 1.0: all dropped while still downloading."""
    d = tmp_path / "pub"
    make_wheel(d, "a", "3.0", requires=["d", "e", "nope>5"], pad_bytes=1_500_000)
    make_wheel(d, "a", "2.0", requires=["f", "nope<5"])
    make_wheel(d, "d", "1.0", pad_bytes=1_500_000)
    make_wheel(d, "e", "1.0", pad_bytes=1_500_000)
    make_wheel(d, "f", "1.0", pad_bytes=200_000)
    make_wheel(d, "nope", "1.0")
    idx = pyindex(d, serve_metadata=True)
    for f in ("a-3.0-py3-none-any.whl", "d-1.0-py3-none-any.whl", "e-1.0-py3-none-any.whl"):
        idx.rates[f] = 500_000
    idx.delays["/simple/nope/"] = 0.5
    return idx


def test_a_backtracking_resolution_drops_its_guesses_and_stages_what_it_would_without_them(backtrack, tmp_path,
                                                                                             monkeypatch):
    idx = backtrack
    began = time.monotonic()
    res, rec = _inproc(idx, tmp_path, "a")
    took = time.monotonic() - began
    dropped = ("a-3.0-py3-none-any.whl", "d-1.0-py3-none-any.whl", "e-1.0-py3-none-any.whl")
    assert all(idx.hits[f"/files/{f}"] >= 1 for f in dropped), dict(idx.hits)  # each guessed and begun
    assert took < 3, took  # (not waited for: 3 s each at 500 kB/s)
    want = ["a-2.0-py3-none-any.whl", "f-1.0-py3-none-any.whl", "nope-1.0-py3-none-any.whl"]
    assert sorted(_wheels(tmp_path / "out")) == want
    total, done = _bar(rec)
    assert total == sum(len(idx.files[f]) for f in want) and done == total, (done, total)
    assert _leftovers(tmp_path / "cache") == []
    for f in dropped:
        assert not [p for p in (tmp_path / "cache").rglob(idx.sha256(f) + "*") if p.parent.name != "locks"], f
    _no_helpers_left()
    monkeypatch.setenv("WH_EARLY_FETCH", "0")
    _inproc(idx, tmp_path, "a", out="out-plain", cache="cache-plain")
    assert _wheels(tmp_path / "out") == _wheels(tmp_path / "out-plain")


# --- wh killed once the fetch took the helpers over ---------------------------------------------------------

def test_wh_killed_after_the_fetch_took_the_helpers_over(slow_page, tmp_path):
    """SIGKILL while the adopted helpers still download: they end (their stdin closes), no wheelhouse is
    there, and the next run completes, resuming their bytes."""
    idx = slow_page
    big = "big-1.0-py3-none-any.whl"
    idx.rates[big] = 1_000_000
    proc = subprocess.Popen(_argv(idx, tmp_path, "app"), env={**os.environ, "WH_EARLY_FETCH": "always"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while "/simple/slow/" not in idx.first_hit and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "/simple/slow/" in idx.first_hit
        # The resolution ends ~1 s after that page was asked for; small and slow are then downloaded.
        while idx.hits["/files/slow-1.0-py3-none-any.whl"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        helpers = helper_pids(FETCH_HELPER, parent=proc.pid)
        assert helpers, "no helper at work after the resolution"
        assert set(helpers) <= set(_ours())  # (what _no_helpers_left looks for)
        assert idx.bytes_served(big) >= 0 and proc.poll() is None
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while [p for p in helpers if alive(p)]:
        assert time.monotonic() < deadline, "an adopted helper outlived the killed wh"
        time.sleep(0.05)
    assert not (tmp_path / "out").exists()
    part = tmp_path / "cache" / "partial" / f"{idx.sha256(big)}.part"
    kept = part.stat().st_size if part.exists() else 0
    assert kept > 0, "the helper's bytes were not kept"
    _no_helpers_left()
    asked = len(idx.log)
    idx.rates.clear()
    again = _cli(idx, tmp_path, "app")
    assert again.returncode == 0, again.stderr
    assert len(_wheels(tmp_path / "out")) == 4
    starts = idx.range_starts(big, since=asked)
    assert starts and all(s is not None and s >= kept for s in starts), (kept, starts)
    assert _leftovers(tmp_path / "cache") == []


# --- a stage that fails after its downloads -----------------------------------------------------------------

@pytest.mark.parametrize("hash_ok", [False, True])
def test_a_find_links_wheel_beside_early_downloads(slow_page, tmp_path, hash_ok):
    """`loc` is only in a find-links folder (no published hash: never guessed; its --hash line is checked
    once it is downloaded). A wrong hash fails the stage as without early downloads (the same error lines,
    no wheelhouse, nothing in partial/); a right one stages the same wheelhouse."""
    idx = slow_page
    idx.rates["big-1.0-py3-none-any.whl"] = 2_000_000
    links = tmp_path / "links"
    loc = make_wheel(links, "loc", "1.0", pad_bytes=100_000)
    digest = hashlib.sha256(loc.read_bytes()).hexdigest() if hash_ok else "0" * 64
    reqs = tmp_path / "reqs.txt"
    reqs.write_text(f"app\nloc==1.0 --hash=sha256:{digest}\n")
    runs = {early: _cli(idx, tmp_path, "-r", str(reqs), "-f", str(links), early=early, out=f"out-{early}",
                        cache=f"cache-{early}") for early in ("always", "0")}
    for early, run in runs.items():
        assert "Traceback" not in run.stderr, run.stderr
        assert _leftovers(tmp_path / f"cache-{early}") == [], early
        if hash_ok:
            assert run.returncode == 0, (early, run.stderr)
        else:
            assert run.returncode != 0 and "loc" in run.stderr, (early, run.stderr)
            assert not (tmp_path / f"out-{early}").exists()
    assert runs["always"].returncode == runs["0"].returncode
    assert _error_lines(runs["always"].stderr) == _error_lines(runs["0"].stderr)
    if hash_ok:
        assert _wheels(tmp_path / "out-always") == _wheels(tmp_path / "out-0")
        assert "loc-1.0-py3-none-any.whl" in _wheels(tmp_path / "out-always")
    _no_helpers_left()


# --- a full disk in a helper, during the resolution -------------------------------------------------------------

def test_a_full_disk_in_an_early_helper_does_not_cut_the_resolvers_requests(slow_page, tmp_path):
    """ENOSPC in an early helper while the resolver still reads the index: the stage's error is the
    no-space error (as the ordinary fetch's), not an index request cut short by the helper's end."""
    idx = slow_page
    idx.delays["/simple/slow/"] = 1.5
    run = _cli(idx, tmp_path, "app", env={"WH_FAULT_HELPER": "fetch.write:enospc"})
    assert run.returncode != 0
    assert "Traceback" not in run.stderr, run.stderr
    assert "error: no space left on" in run.stderr and "hint: free space there" in run.stderr, run.stderr
    assert "interrupted" not in run.stderr, run.stderr
    assert not (tmp_path / "out").exists()
    _no_helpers_left()
    # What a download cut by the stop kept is resumable state (the one that filled the disk is gone): the
    # next run completes from it and leaves nothing.
    idx.delays.clear()
    again = _cli(idx, tmp_path, "app")
    assert again.returncode == 0, again.stderr
    assert _leftovers(tmp_path / "cache") == []


# --- a big guess, downloaded as byte ranges (>= 2 segments: 64 MiB) ----------------------------------------------

@pytest.fixture(scope="module")
def huge_wheel(tmp_path_factory) -> Path:
    return make_wheel(tmp_path_factory.mktemp("huge"), "x", "2.0", pad_bytes=66 << 20)


@pytest.fixture
def huge_x(tmp_path, pyindex, huge_wheel):  # noqa: F811
    """As shared_x, with x 2.0 big enough for ranges (66 MiB, each range sent at 8 MB/s)."""
    d = tmp_path / "pub"
    d.mkdir()
    os.link(huge_wheel, d / huge_wheel.name)
    make_wheel(d, "app", "1.0", requires=["x<2"])
    make_wheel(d, "x", "1.0")
    make_wheel(d, "y", "1.0", requires=["x"])
    idx = pyindex(d, serve_metadata=True)
    idx.rates[huge_wheel.name] = 8_000_000
    idx.delays["/simple/app/"] = 0.8
    return idx


def test_a_dropped_guess_in_ranges_leaves_neither_its_body_nor_its_record(huge_x, tmp_path):
    idx = huge_x
    run = _cli(idx, tmp_path, "x", "app")
    assert run.returncode == 0, run.stderr
    assert idx.hits["/files/x-2.0-py3-none-any.whl"] >= 2  # guessed, begun as ranges
    assert sorted(_wheels(tmp_path / "out")) == ["app-1.0-py3-none-any.whl", "x-1.0-py3-none-any.whl"]
    assert _leftovers(tmp_path / "cache") == []
    _no_helpers_left()


def test_a_full_disk_in_an_early_range_record_is_the_stages_no_space_error(huge_x, tmp_path):
    idx = huge_x
    idx.delays["/files/x-2.0-py3-none-any.whl.metadata"] = 0.8  # (the resolver waits; the helper fills the disk)
    run = _cli(idx, tmp_path, "y", env={"WH_FAULT_HELPER": "fetch.range.recorded:enospc"})
    assert run.returncode != 0
    assert "Traceback" not in run.stderr, run.stderr
    assert "error: no space left on" in run.stderr and "hint: free space there" in run.stderr, run.stderr
    assert not (tmp_path / "out").exists()
    _no_helpers_left()
    idx.delays.clear()  # (what another download kept is resumable state: the next run completes, leaves nothing)
    idx.rates.clear()
    again = _cli(idx, tmp_path, "y")
    assert again.returncode == 0, again.stderr
    assert _leftovers(tmp_path / "cache") == []


# --- helpers that stop answering ---------------------------------------------------------------------------------

def test_sigstopped_helpers_and_a_dropped_guess(dropped_slow, tmp_path):
    """Both early helpers SIGSTOPped while a guess the resolution drops downloads: they are killed (a
    stopped process ignores its closed stdin) after one grace period for both, the stage completes with
    the right wheelhouse, nothing is left in partial/ and no helper outlives it."""
    idx = dropped_slow
    proc = subprocess.Popen(_argv(idx, tmp_path, "x", "app"), env={**os.environ, "WH_EARLY_FETCH": "always"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped: list[int] = []
    try:
        deadline = time.monotonic() + 20
        while idx.bytes_served("x-2.0-py3-none-any.whl") == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        while len(stopped) < 2 and time.monotonic() < deadline:
            for pid in helper_pids(FETCH_HELPER, parent=proc.pid, zombies=False):
                if pid not in stopped:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            time.sleep(0.01)
        assert len(stopped) == 2, stopped
        began = time.monotonic()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert proc.returncode == 0, err
    assert sorted(_wheels(tmp_path / "out")) == ["app-1.0-py3-none-any.whl", "x-1.0-py3-none-any.whl"]
    assert _leftovers(tmp_path / "cache") == []
    assert not [p for p in stopped if alive(p)], "a stopped helper outlived the stage"
    _no_helpers_left()
    # One grace period for both (5 s, then SIGKILL), not one each: 11 s before, ~6 s now, ~1 s without them.
    assert took < 9, took


def test_early_helpers_killed_mid_ranges_the_bar_ends_at_its_total(huge_x, tmp_path, monkeypatch):
    """Killed after recording a range of the big guess (the resolver still waiting): the fetch resumes the
    recorded ranges here; the bytes the helpers counted are not counted twice."""
    idx = huge_x
    idx.delays["/files/x-2.0-py3-none-any.whl.metadata"] = 0.8
    monkeypatch.setenv("WH_FAULT_HELPER", "fetch.range.recorded:kill")
    res, rec = _inproc(idx, tmp_path, "y")
    want = ["x-2.0-py3-none-any.whl", "y-1.0-py3-none-any.whl"]
    assert _wheels(tmp_path / "out") == {f: idx.sha256(f) for f in want}
    total, done = _bar(rec)
    assert total == sum(len(idx.files[f]) for f in want) and done == total, (done, total)
    assert _leftovers(tmp_path / "cache") == []
    _no_helpers_left()


# --- what is at hand is never guessed -------------------------------------------------------------------------

def test_a_damaged_cache_entry_is_not_guessed_and_is_downloaded_again(slow_page, tmp_path):
    """A cache entry is at hand, so not guessed; damaged, the fetch finds it (hashed again, as always),
    removes it and downloads it: the wheelhouse is the published bytes."""
    idx = slow_page
    big = "big-1.0-py3-none-any.whl"
    assert _cli(idx, tmp_path, "app", out="first").returncode == 0
    entry = next(p for p in (tmp_path / "cache").rglob(idx.sha256(big)) if p.is_file() and p.parent.name != "locks")
    entry.chmod(0o644)
    data = bytearray(entry.read_bytes())
    data[1000] ^= 0xFF
    entry.write_bytes(bytes(data))
    asked = idx.hits[f"/files/{big}"]
    run = _cli(idx, tmp_path, "app")
    assert run.returncode == 0, run.stderr
    assert idx.hits[f"/files/{big}"] == asked + 1  # once: by the fetch, not guessed before it
    assert _wheels(tmp_path / "out")[big] == idx.sha256(big)
    assert _leftovers(tmp_path / "cache") == []
    _no_helpers_left()


def test_ctrl_c_after_the_fetch_took_the_helpers_over(slow_page, tmp_path):
    """Ctrl-C while the adopted helpers download: wh exits promptly without a traceback, no helper is left,
    no wheelhouse is written, their bytes are kept and the next run resumes them."""
    idx = slow_page
    big = "big-1.0-py3-none-any.whl"
    idx.rates[big] = 500_000
    proc = subprocess.Popen(_argv(idx, tmp_path, "app"), env={**os.environ, "WH_EARLY_FETCH": "always"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while idx.hits["/files/slow-1.0-py3-none-any.whl"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)  # (the resolution is over: the fetch has the helpers; big has ~5 s to go)
        helpers = helper_pids(FETCH_HELPER, parent=proc.pid, zombies=False)
        assert helpers and proc.poll() is None
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0 and "Traceback" not in err, err
    assert took < 3, took
    assert not [p for p in helpers if alive(p)], "a helper outlived Ctrl-C"
    _no_helpers_left()
    assert not (tmp_path / "out").exists()
    part = tmp_path / "cache" / "partial" / f"{idx.sha256(big)}.part"
    kept = part.stat().st_size
    assert kept > 0
    asked = len(idx.log)
    idx.rates.clear()
    again = _cli(idx, tmp_path, "app")
    assert again.returncode == 0, again.stderr
    starts = idx.range_starts(big, since=asked)
    assert starts and all(s is not None and s >= kept for s in starts), (kept, starts)
    assert _leftovers(tmp_path / "cache") == []


@pytest.mark.parametrize("fault", ["", "fetch.write:enospc", "fetch.write:kill"])
def test_a_failed_resolution_is_its_own_error_whatever_the_guesses_met(tmp_path, pyindex, fault):  # noqa: F811
    """The resolution fails (a requirement nowhere to be found): that is the stage's error, the same lines as
    without early downloads, whatever happened to the guesses (a full disk, a dead helper)."""
    d = tmp_path / "pub"
    make_wheel(d, "big", "1.0", pad_bytes=2_000_000)
    make_wheel(d, "app", "1.0", requires=["big", "nowhere-to-be-found"])
    idx = pyindex(d, serve_metadata=True)
    idx.delays["/simple/nowhere-to-be-found/"] = 0.8
    env = {"WH_FAULT_HELPER": fault} if fault else {}
    runs = {early: _cli(idx, tmp_path, "app", early=early, out=f"out-{early}", cache=f"cache-{early}", env=env)
            for early in ("always", "0")}
    assert idx.hits["/files/big-1.0-py3-none-any.whl"] >= 1
    for early, run in runs.items():
        assert run.returncode == 1 and "nowhere-to-be-found" in run.stderr, (early, run.stderr)
        assert "Traceback" not in run.stderr and "no space" not in run.stderr, run.stderr
        assert not (tmp_path / f"out-{early}").exists()
        assert _leftovers(tmp_path / f"cache-{early}") == [], early
    assert _error_lines(runs["always"].stderr) == _error_lines(runs["0"].stderr)
    _no_helpers_left()


def test_a_dropped_guess_stops_the_helpers_and_the_pinned_one_in_flight_resumes_the_bar_at_its_total(
        dropped_slow, tmp_path):
    """The stop path: x 2.0 dropped mid-download, z (pinned, 2 MB at 1 MB/s) in flight too: z resumes from
    the helpers' bytes in the ordinary fetch, and the bar counts each byte once."""
    idx = dropped_slow
    make_wheel(tmp_path / "pub2", "z", "1.0", pad_bytes=2_000_000)
    idx.add(tmp_path / "pub2")
    z = "z-1.0-py3-none-any.whl"
    idx.rates[z] = 1_000_000
    res, rec = _inproc(idx, tmp_path, "x", "app", "z")
    want = ["app-1.0-py3-none-any.whl", "x-1.0-py3-none-any.whl", z]
    assert _wheels(tmp_path / "out") == {f: idx.sha256(f) for f in want}
    starts = idx.range_starts(z)
    assert len(starts) >= 2 and starts[0] is None and starts[-1], starts  # begun early, resumed after the stop
    total, done = _bar(rec)
    assert total == sum(len(idx.files[f]) for f in want) and done == total, (done, total)
    assert _leftovers(tmp_path / "cache") == []
    _no_helpers_left()


def test_a_bad_hash_line_fails_the_stage_and_the_other_guesses_bytes_go(tmp_path, pyindex):  # noqa: F811
    """`big`'s --hash line refuses its published file (never guessed); `other` (3 MB at 1 MB/s) is guessed
    and still downloading when the stage fails: its bytes go, the error is the one without early downloads."""
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["big", "other"])
    make_wheel(d, "big", "1.0", pad_bytes=200_000)
    make_wheel(d, "other", "1.0", pad_bytes=3_000_000)
    idx = pyindex(d, serve_metadata=True)
    idx.rates["other-1.0-py3-none-any.whl"] = 1_000_000
    idx.delays["/files/big-1.0-py3-none-any.whl.metadata"] = 0.5
    reqs = tmp_path / "reqs.txt"
    reqs.write_text(f"app\nbig==1.0 --hash=sha256:{'0' * 64}\n")
    runs = {}
    for early in ("always", "0"):
        began = time.monotonic()
        runs[early] = _cli(idx, tmp_path, "-r", str(reqs), early=early, out=f"out-{early}", cache=f"cache-{early}")
        runs[early].took = time.monotonic() - began
    assert idx.hits["/files/other-1.0-py3-none-any.whl"] >= 1 and idx.hits["/files/big-1.0-py3-none-any.whl"] == 0
    for early, run in runs.items():
        assert run.returncode != 0 and "big" in run.stderr and "Traceback" not in run.stderr, (early, run.stderr)
        assert not (tmp_path / f"out-{early}").exists()
        assert _leftovers(tmp_path / f"cache-{early}") == [], early
    assert runs["always"].took < 2.5, runs["always"].took  # (the guess was not waited for)
    assert _error_lines(runs["always"].stderr) == _error_lines(runs["0"].stderr)
    _no_helpers_left()


@pytest.mark.parametrize("answer", ["404", "500", "cut"])
def test_an_error_of_a_dropped_guess_is_never_the_stages(dropped_slow, tmp_path, answer):
    """The dropped guess's server refuses it (404), keeps failing (500, retried with backoff) or cuts it
    mid-body: the stage succeeds with the wheelhouse it has without early downloads, promptly."""
    idx = dropped_slow
    x2 = "x-2.0-py3-none-any.whl"
    if answer == "cut":
        idx.rates.clear()
        idx.drop_after(x2, 500_000)
    else:
        idx.script(f"/files/{x2}", *[(int(answer), b"no", {})] * 50)
    began = time.monotonic()
    run = _cli(idx, tmp_path, "x", "app")
    took = time.monotonic() - began
    assert run.returncode == 0, run.stderr
    assert idx.hits[f"/files/{x2}"] >= 1
    assert sorted(_wheels(tmp_path / "out")) == ["app-1.0-py3-none-any.whl", "x-1.0-py3-none-any.whl"]
    assert took < 4, took
    assert _leftovers(tmp_path / "cache") == []
    _no_helpers_left()


def test_a_failing_stage_removes_its_guess_but_not_under_the_stage_that_pinned_it(tmp_path, pyindex):  # noqa: F811
    """Stage A (its resolution fails) began `big` first; stage B (pins big) waits for A's entry lock. A's
    failure stops its helpers and removes its unfinished bytes only where B does not hold the entry: B
    stages big whole and verified, and nothing is left in partial/."""
    d = tmp_path / "pub"
    make_wheel(d, "big", "1.0", pad_bytes=3_000_000)
    make_wheel(d, "app", "1.0", requires=["big", "nowhere-to-be-found"])
    idx = pyindex(d, serve_metadata=True)
    big = "big-1.0-py3-none-any.whl"
    idx.rates[big] = 2_000_000
    idx.delays["/simple/nowhere-to-be-found/"] = 1.0
    env = {**os.environ, "WH_EARLY_FETCH": "always"}
    a = subprocess.Popen(_argv(idx, tmp_path, "app", out="out-a"), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    b = None
    try:
        deadline = time.monotonic() + 20
        while idx.hits[f"/files/{big}"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        b = subprocess.Popen(_argv(idx, tmp_path, "big", out="out-b"), env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        _, err_a = a.communicate(timeout=30)
        _, err_b = b.communicate(timeout=30)
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
    assert a.returncode == 1 and "nowhere-to-be-found" in err_a, err_a
    assert b.returncode == 0, err_b
    assert _wheels(tmp_path / "out-b") == {big: idx.sha256(big)}
    assert not (tmp_path / "out-a").exists()
    assert _leftovers(tmp_path / "cache") == []
    _no_helpers_left()
