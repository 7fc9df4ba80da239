"""wheelhouse.childproc: how helper processes start, and the frames on their pipes."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import pytest

from wheelhouse.childproc import flatten, read_frame, rebuild, spawn, write_frame
from wheelhouse.errors import HashMismatch


def _children() -> set[int]:
    me = os.getpid()
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == me:
                    found.add(int(entry.name))
            except (OSError, ValueError, IndexError):
                pass
    return found


def test_a_config_that_cannot_be_pickled_starts_no_process():
    before = _children()
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        spawn("wheelhouse.fetch.procs", {"bad": lambda: 0})
    assert _children() == before  # nothing left behind, waiting for a config that never comes


def test_frames_round_trip_and_a_cut_frame_is_the_end():
    buf = io.BytesIO()
    write_frame(buf, ("filed", "abc", "/x"))
    write_frame(buf, ("end", "ok", None))
    data = buf.getvalue()
    inp = io.BytesIO(data)
    assert read_frame(inp) == ("filed", "abc", "/x")
    assert read_frame(inp) == ("end", "ok", None)
    assert read_frame(inp) is None
    assert read_frame(io.BytesIO(data[:-3])) == ("filed", "abc", "/x")  # the second, cut short:
    cut = io.BytesIO(data[:-3])
    read_frame(cut)
    assert read_frame(cut) is None


def test_a_wherror_crosses_unchanged_and_nothing_else_is_rebuilt():
    exc = HashMismatch("a.whl", "0" * 64, "1" * 64)
    back = rebuild(pickle.loads(pickle.dumps(flatten(exc))))
    assert type(back) is HashMismatch and str(back) == str(exc) and back.hint == exc.hint and back.bad == exc.bad
    assert rebuild((ValueError, ("x",), {})) is None
    assert rebuild("garbage") is None


def test_ctrl_c_while_waiting_for_a_stopped_helper_to_end_kills_it():
    """A SIGSTOPped helper does not see its stdin close; Ctrl-C during ``end``'s wait must not leave it behind."""
    import signal
    import threading
    import time

    from wheelhouse.childproc import end

    proc, config = spawn("wheelhouse.fetch.procs", {"never": "read"})  # (it waits for its config on stdin)
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        began = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            end(proc, grace=30)
        assert time.monotonic() - began < 5
        assert proc.wait(timeout=5) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_ending_a_helper_that_stopped_reading_with_a_full_pipe_takes_the_grace_not_for_ever():
    """A thread of wh blocked writing to a SIGSTOPped helper (more than a pipe's 64 KiB queued) holds the
    stream's lock: closing its stdin waited on that write, which only the helper's end could free."""
    import signal
    import threading
    import time

    from wheelhouse.childproc import end

    proc, config = spawn("wheelhouse.fetch.procs", {"never": "read"})
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        stuck = threading.Event()

        def write() -> None:
            stuck.set()
            try:
                proc.stdin.write(b"x" * (1 << 20))
                proc.stdin.flush()
            except (OSError, ValueError):
                pass

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        stuck.wait(5)
        time.sleep(0.3)
        assert writer.is_alive()  # (blocked on the full pipe)
        began = time.monotonic()
        end(proc, grace=1)
        assert time.monotonic() - began < 4
        assert proc.returncode == -signal.SIGKILL
        writer.join(5)
        assert not writer.is_alive()  # the killed helper's pipe broke: the write ended
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
