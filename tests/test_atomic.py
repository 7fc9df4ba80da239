"""wheelhouse.atomic: a file that matters is either its old self or its whole new self, never half."""

from __future__ import annotations

import os
import stat

import pytest

from wheelhouse.atomic import probe_writable, replace_atomic, write_atomic


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_write_creates_parents_writes_all_bytes_and_applies_the_mode(tmp_path):
    data = os.urandom(3 << 20)  # bigger than one write buffer
    target = tmp_path / "a" / "b" / "lock.json"
    assert write_atomic(target, data, mode=0o600) == target
    assert target.read_bytes() == data
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert _leftovers(target.parent) == []


def test_text_is_written_as_utf8(tmp_path):
    target = tmp_path / "report.txt"
    write_atomic(target, "µ-arch ✓\n")
    assert target.read_bytes() == "µ-arch ✓\n".encode("utf-8")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_writer_raising_midway_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "lock.json"
    target.write_bytes(b"old, complete")

    def interrupted(fd):  # Ctrl-C after the bytes were written, before they were made durable
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, b"new" * 100_000)
    monkeypatch.undo()
    assert target.read_bytes() == b"old, complete"
    assert _leftovers(tmp_path) == []


def test_a_failed_rename_leaves_no_partial_under_any_name(tmp_path):
    # The final name is a non-empty folder: everything is written, then os.replace fails.
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep").write_text("x")
    with pytest.raises(OSError):
        write_atomic(target, b"payload")
    assert target.is_dir() and (target / "keep").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_replace_atomic_moves_a_finished_file_over_the_old_one(tmp_path):
    tmp, final = tmp_path / ".x.tmp", tmp_path / "x"
    tmp.write_bytes(b"new")
    final.write_bytes(b"old")
    assert replace_atomic(tmp, final) == final
    assert final.read_bytes() == b"new" and not tmp.exists()


def test_probe_writable_names_the_nearest_existing_folder_and_creates_nothing(tmp_path):
    (tmp_path / "exists").mkdir()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert probe_writable(tmp_path / "exists" / "not" / "yet") == (tmp_path / "exists").resolve()
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_probe_writable_under_a_file_is_not_a_directory(tmp_path):
    (tmp_path / "plain").write_text("")
    with pytest.raises(NotADirectoryError):
        probe_writable(tmp_path / "plain" / "sub")
