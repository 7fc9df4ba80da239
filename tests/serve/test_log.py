"""The engine log: its tail for an error message, and the new complete lines since the last look (``-v``)."""

from __future__ import annotations

from wheelhouse.serve.log import TAIL_LINES, LogFollower, log_tail


def test_the_tail_is_the_last_lines_only(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert log_tail(log).splitlines() == [f"line {i}" for i in range(100 - TAIL_LINES, 100)]
    assert log_tail(log, lines=2) == "line 98\nline 99"


def test_a_huge_log_is_read_from_its_end(tmp_path):
    log = tmp_path / "engine.log"
    with open(log, "wb") as fh:
        fh.write(b"x" * (8 << 20) + b"\nTraceback: CUDA out of memory\n")
    assert log_tail(log, lines=1) == "Traceback: CUDA out of memory"


def test_an_empty_missing_or_undecodable_log_still_says_something(tmp_path):
    (tmp_path / "empty.log").write_bytes(b"")
    assert log_tail(tmp_path / "empty.log") == "(the log is empty)"
    missing = log_tail(tmp_path / "gone.log")
    assert missing.startswith("(cannot read ") and "gone.log" in missing
    (tmp_path / "bin.log").write_bytes(b"ok\n\xff\xfe bad bytes\n")
    assert log_tail(tmp_path / "bin.log").splitlines()[0] == "ok"


def test_the_follower_hands_out_each_complete_line_once(tmp_path):
    log = tmp_path / "engine.log"
    follower = LogFollower(log)
    assert follower.new_lines() == [], "no log yet is no lines, not an error"
    with open(log, "ab") as fh:
        fh.write(b"INFO starting\nINFO load")
    assert follower.new_lines() == ["INFO starting"], "a partial line waits for its end"
    assert follower.new_lines() == []
    with open(log, "ab") as fh:
        fh.write(b"ing weights\nINFO ready\n")
    assert follower.new_lines() == ["INFO loading weights", "INFO ready"]
    assert follower.new_lines() == []
