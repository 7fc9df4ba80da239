"""A cold resolve's index work in helper processes (wheelhouse.index.offload): the same answer as
without them, the same errors, nothing left behind when the run ends or is killed.

Real pieces only: an index on 127.0.0.1 (``pyindex``), wheels made here, real helper processes
(``WH_INDEX_PROCESS=always``: every request that needs the network goes through a helper), and a
real ``wh stage`` killed with SIGKILL or interrupted with SIGINT.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wheelhouse.index import PackageSource
from wheelhouse.index.http import HttpClient, HttpError
from wheelhouse.index.metadata import MetadataReader
from wheelhouse.index.offload import Offload
from wheelhouse.resolve import resolve
from wheelhouse.resolve.candidates import _TagFilter
from wheelhouse.target import target_from_flags
from helper_procs import helper_pids
from wheelmaker import make_wheel

CP312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
ROOT = "app==1.0"


def _publish(folder: Path) -> list[str]:
    """app -> lib0..lib9 (each in two versions, lib{i} -> lib{i+1} for the first few), all real wheels."""
    names = [f"lib{i}" for i in range(10)]
    make_wheel(folder, "app", "1.0", requires=[f"{n}>=1" for n in names])
    for i, n in enumerate(names):
        nxt = [f"lib{i + 1}>=1"] if i < 4 else []
        make_wheel(folder, n, "1.0", requires=nxt)
        make_wheel(folder, n, "2.0", requires=nxt)
    return ["app", *names]


@pytest.fixture
def index(pyindex, tmp_path):
    folder = tmp_path / "index-files"
    _publish(folder)
    return lambda **knobs: pyindex(folder, **knobs)


def _resolve(idx, cache: Path, mode: str, monkeypatch, *, refresh: bool = False, url: str | None = None):
    monkeypatch.setenv("WH_INDEX_PROCESS", mode)
    client = HttpClient(cache_dir=cache, refresh=refresh, retries=0)
    source = PackageSource([url or idx.url], client=client)
    before = sum(idx.hits.values())
    res = resolve([ROOT], CP312, source, metadata=MetadataReader(client, cache_dir=cache))
    return res, sum(idx.hits.values()) - before


def _pins(res) -> dict[str, str]:
    return {p.name: p.version for p in res.pins}


def _helper_pids(parent: int | None = None) -> list[int]:
    """The resolve's helpers whose parent is ``parent`` (default: this process)."""
    return helper_pids(b"wheelhouse.index.offload", parent=parent)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pids, seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


# --- the same answer ---------------------------------------------------------------------------------
@pytest.mark.parametrize("pep658", [True, False], ids=["pep658", "ranges"])
def test_helpers_give_the_same_pins_and_count_every_request(index, tmp_path, monkeypatch, pep658):
    idx = index(serve_metadata=pep658)
    plain, plain_hits = _resolve(idx, tmp_path / "c0", "0", monkeypatch)
    helped, helped_hits = _resolve(idx, tmp_path / "c1", "always", monkeypatch)
    assert _pins(helped) == _pins(plain) == {"app": "1.0", **{f"lib{i}": "2.0" for i in range(10)}}
    assert plain.stats["helpers"] == 0 and plain.stats["offloaded"] == 0
    # every page and every METADATA read went through a helper
    assert helped.stats["helpers"] >= 1 and helped.stats["offloaded"] >= 11
    # the helpers' round trips are counted as the run's, and they made no more than the run alone
    assert helped.stats["requests"] == helped_hits
    assert helped_hits == plain_hits
    how = "pep658" if pep658 else "range"
    assert helped.stats[how] == plain.stats[how] > 0


def test_a_warm_run_starts_no_helper(index, tmp_path, monkeypatch):
    idx = index()
    cold, _ = _resolve(idx, tmp_path / "c", "always", monkeypatch)
    warm, hits = _resolve(idx, tmp_path / "c", "always", monkeypatch)
    assert _pins(warm) == _pins(cold)
    assert hits == 0 and warm.stats["helpers"] == 0 and warm.stats["offloaded"] == 0


def test_refresh_revalidates_each_page_once(index, tmp_path, monkeypatch):
    """The helper revalidates a page; this process then takes the entry it confirmed, not a second request."""
    idx = index()
    _resolve(idx, tmp_path / "c", "0", monkeypatch)
    pages_before = idx.page_requests()
    res, _ = _resolve(idx, tmp_path / "c", "always", monkeypatch, refresh=True)
    assert res.stats["offloaded"] >= 11
    assert idx.page_requests() - pages_before == 11  # app and lib0..lib9: once each
    assert sum(idx.not_modified.values()) == 11  # and each answered 304 (the cache's validators sent)


def test_credentials_reach_the_helper_and_never_its_command_line(index, tmp_path, monkeypatch):
    idx = index(auth=("alice", "s3cret-TOKEN"))
    url = idx.url.replace("http://", "http://alice:s3cret-TOKEN@")
    res, _ = _resolve(idx, tmp_path / "c", "always", monkeypatch, url=url)
    assert res.stats["offloaded"] >= 11 and len(res.pins) == 11

    client = HttpClient(cache_dir=tmp_path / "c2")
    source = PackageSource([url], client=client)
    off = Offload(client, page_ttl=600, after=0, helpers=1, wait=True)
    try:
        assert off.page(source.index_urls[0], "lib3", _TagFilter(CP312)) is True
        pids = _helper_pids()
        assert pids, "a helper runs"
        for pid in pids:
            assert b"s3cret" not in Path(f"/proc/{pid}/cmdline").read_bytes()
            assert b"s3cret" not in Path(f"/proc/{pid}/environ").read_bytes()
    finally:
        off.close()
    assert _wait_gone(pids) == []


# --- the same errors -----------------------------------------------------------------------------------
def test_an_error_in_the_helper_is_raised_here_as_it_was(index, tmp_path, monkeypatch):
    idx = index(auth=("alice", "right"))
    url = idx.url.replace("http://", "http://alice:wrong@")
    errors, hits = {}, {}
    for mode in ("0", "always"):
        before = sum(idx.hits.values())
        with pytest.raises(Exception) as exc:
            _resolve(idx, tmp_path / f"c-{mode}", mode, monkeypatch, url=url)
        errors[mode], hits[mode] = exc.value, sum(idx.hits.values()) - before
    plain, helped = errors["0"], errors["always"]
    assert hits["always"] == hits["0"] == 1, "the helper's answer is the error: the page is not asked again here"
    assert type(helped) is type(plain) and isinstance(helped, HttpError)
    assert str(helped) == str(plain) and helped.hint == plain.hint and helped.status == plain.status == 401
    assert "wrong" not in str(helped)


def test_a_project_the_index_lacks_is_not_asked_again(index, tmp_path, monkeypatch):
    idx = index()
    client = HttpClient(cache_dir=tmp_path / "c")
    source = PackageSource([idx.url], client=client)
    off = Offload(client, page_ttl=600, after=0, helpers=1, wait=True)
    try:
        source.offload = off
        assert source.files("no-such-project") == []
    finally:
        source.offload = None
        off.close()
    assert idx.hits["/simple/no-such-project/"] == 1


# --- a helper that dies, a run that is killed ----------------------------------------------------------
def test_a_helper_that_dies_leaves_the_work_to_this_process(index, tmp_path, monkeypatch):
    idx = index()
    plain, _ = _resolve(idx, tmp_path / "c0", "0", monkeypatch)
    monkeypatch.setenv("WH_FAULT_HELPER", "index.helper-request:kill")  # each helper SIGKILLs itself on its first request
    helped, hits = _resolve(idx, tmp_path / "c1", "always", monkeypatch)
    assert _pins(helped) == _pins(plain)
    assert helped.stats["helpers"] >= 1 and helped.stats["offloaded"] == 0
    assert helped.stats["requests"] == hits
    assert _wait_gone(_helper_pids()) == []


def _stage_cmd(idx, cache: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "wheelhouse", "stage", ROOT, "--index-url", idx.url, "--cache-dir", str(cache),
            "--python-version", "3.12", "--platform", "manylinux_2_35_x86_64", "--dry-run", "--no-bootstrap",
            "--output", str(out)]


def _children_helpers(pid: int, seconds: float = 20.0) -> list[int]:
    """The helpers under ``pid``, once at least one is up."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        mine = _helper_pids(pid)
        if mine:
            return mine
        time.sleep(0.02)
    return []


@pytest.mark.parametrize("how", ["sigkill", "sigint", "sigterm"])
def test_a_run_killed_midway_leaves_no_helper_and_no_temp_file(index, tmp_path, how):
    idx = index(delay=0.3)  # slow: the run is still resolving when it is stopped
    cache = tmp_path / "cache"
    env = {**os.environ, "WH_INDEX_PROCESS": "always"}
    proc = subprocess.Popen(_stage_cmd(idx, cache, tmp_path / "out"), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        helpers = _children_helpers(proc.pid)
        assert helpers, "the run started its helpers"
        time.sleep(0.4)  # requests in flight in the helpers
        if how == "sigkill":
            proc.kill()
        elif how == "sigterm":
            proc.terminate()
        else:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert _wait_gone(helpers) == [], "every helper ended with the run"
    left = [p.name for p in cache.rglob("*") if p.name.endswith(".tmp")]
    assert left == [], f"temp files left in the cache: {left}"


def test_a_full_disk_under_the_cache_costs_requests_not_the_run(index, tmp_path, monkeypatch):
    """Every cache write fails with ENOSPC (helpers and this process alike): the pins are the
    same, and nothing half-written is left in the cache."""
    idx = index()
    plain, _ = _resolve(idx, tmp_path / "c0", "0", monkeypatch)
    monkeypatch.setenv("WH_FAULT", "index.cache-write:enospc")
    monkeypatch.setenv("WH_FAULT_HELPER", "index.cache-write:enospc")
    helped, hits = _resolve(idx, tmp_path / "c1", "always", monkeypatch)
    assert _pins(helped) == _pins(plain)
    assert helped.stats["requests"] == hits
    assert [p.name for p in (tmp_path / "c1").rglob("*") if p.is_file() and p.suffix != ".pack"] == []


def test_temp_files_a_killed_writer_left_are_swept_and_a_live_ones_kept(index, tmp_path, monkeypatch):
    """A writer killed mid-write (SIGKILL, a power cut, a helper killed by its watch) leaves
    `.<name>.*.tmp` in the page or metadata folder: the next resolve on that cache removes those
    older than an hour, never a young one (another run's write in flight) nor an entry."""
    idx = index()
    cache = tmp_path / "c"
    _resolve(idx, cache, "always", monkeypatch)
    entries = sorted(p.name for p in (cache / "http").iterdir())
    old_page = cache / "http" / ".abc.page.x1.tmp"
    old_meta = cache / "metadata" / ".def.pack.x2.tmp"
    young = cache / "http" / ".ghi.page.x3.tmp"
    for p in (old_page, old_meta, young):
        p.write_bytes(b"half a page")
    hour_ago = time.time() - 3700
    for p in (old_page, old_meta):
        os.utime(p, (hour_ago, hour_ago))
    _resolve(idx, cache, "0", monkeypatch)
    assert not old_page.exists() and not old_meta.exists()
    assert young.exists()
    assert sorted(p.name for p in (cache / "http").iterdir() if p != young) == entries
