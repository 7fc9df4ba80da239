"""wheelhouse.procgroup: stopping a started group stops every member, grandchildren and orphans included."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from wheelhouse.procgroup import group_members, kill_group, no_interrupts, spawn_group, start_ticks, stop_group

# The leader starts a worker that starts its own worker (a grandchild), plus one orphan whose parent
# exits at once (re-parented to init, still in the group). Each writes its pid to the file.
TREE = r"""
{trap}
sleep 60 & echo $! >> "$1"
sh -c 'sleep 60 & echo $! >> "$1"; wait' _ "$1" & echo $! >> "$1"
sh -c 'sleep 60 & echo $! >> "$1"' _ "$1"
echo ready >> "$1"
wait
"""


def _alive(pid: int) -> bool:
    """Running or sleeping (a zombie holds nothing), read from procfs independently of the module."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return raw[raw.rfind(")") + 2] not in "ZX"


def _start(tmp_path, log, *, ignore_term=False):
    pids = tmp_path / "pids"
    script = TREE.replace("{trap}", "trap '' TERM" if ignore_term else "")
    leader = spawn_group(["sh", "-c", script, "tree", str(pids)], stdout=log)

    def members() -> list[int]:
        return [int(x) for x in (pids.read_text() if pids.exists() else "").split() if x.isdigit()]

    # "ready" can come before the grandchild's pid: its shell runs in the background. Wait for both.
    end = time.monotonic() + 30
    while time.monotonic() < end and not ("ready" in (pids.read_text() if pids.exists() else "") and len(members()) == 4):
        time.sleep(0.01)
    if len(members()) != 4:
        kill_group(leader.pid)
        leader.wait()
    assert len(members()) == 4
    return leader, members()


@pytest.fixture
def log(tmp_path):
    with open(tmp_path / "log", "wb") as fh:
        yield fh


def test_stop_group_stops_children_grandchildren_and_orphans(tmp_path, log):
    leader, members = _start(tmp_path, log)
    try:
        assert os.getpgid(leader.pid) == leader.pid  # a group of its own, not ours
        assert os.getpgid(leader.pid) != os.getpgid(0)
        assert set(members) | {leader.pid} <= set(group_members(leader.pid))
        report = stop_group(leader.pid, leader=leader, grace=5.0)
        assert report.was_running and report.sigterm and not report.sigkill
        assert [p for p in members + [leader.pid] if _alive(p)] == []
        assert leader.returncode == -signal.SIGTERM
        assert group_members(leader.pid) == []
    finally:
        kill_group(leader.pid)
        leader.wait()


def test_members_that_ignore_sigterm_are_killed_after_the_grace(tmp_path, log):
    leader, members = _start(tmp_path, log, ignore_term=True)
    try:
        t0 = time.monotonic()
        report = stop_group(leader.pid, leader=leader, grace=0.3)
        assert report.sigterm and report.sigkill
        assert 0.3 <= time.monotonic() - t0 < 5
        assert [p for p in members + [leader.pid] if _alive(p)] == []
        assert report.to_json()["sigkill"] is True
    finally:
        kill_group(leader.pid)
        leader.wait()


def test_stopping_a_group_that_already_ended_reports_it_was_not_running(tmp_path, log):
    leader = spawn_group(["true"], stdout=log)
    leader.wait()
    report = stop_group(leader.pid, leader=leader, grace=0.1)
    assert report.was_running is False and not report.sigterm and not report.sigkill
    assert kill_group(leader.pid, signal.SIGTERM) is False


def test_spawn_group_sends_stdout_and_stderr_to_one_file_with_the_given_env(tmp_path):
    out = tmp_path / "out"
    with open(out, "wb") as fh:
        p = spawn_group([sys.executable, "-c", "import os, sys; print(os.environ['WH_X']); print('err', file=sys.stderr)"],
                        stdout=fh, env={**os.environ, "WH_X": "seen"}, cwd=tmp_path)
        assert p.wait(timeout=10) == 0
    assert out.read_text().split() == ["seen", "err"]


def test_start_ticks_tells_a_live_process_from_a_gone_one(tmp_path, log):
    p = spawn_group(["sleep", "30"], stdout=log)
    try:
        ticks = start_ticks(p.pid)
        assert isinstance(ticks, int) and ticks >= start_ticks(os.getpid())
    finally:
        kill_group(p.pid)
        p.wait()
    assert start_ticks(p.pid) is None


def test_no_interrupts_holds_off_sigint_and_sigterm_then_restores_the_handlers():
    got: list[int] = []
    record = lambda signum, frame: got.append(signum)  # noqa: E731
    old = {sig: signal.signal(sig, record) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with no_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        assert got == []  # ignored while the group was being stopped, not queued for later
        assert signal.getsignal(signal.SIGINT) is record and signal.getsignal(signal.SIGTERM) is record
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert got == [signal.SIGTERM]
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def test_no_interrupts_off_the_main_thread_changes_nothing():
    seen = []

    def worker():
        with no_interrupts():
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [before]
