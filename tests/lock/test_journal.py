"""lock.journal: an in-place change killed half-way is undone by the next run, exactly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from wheelhouse.lock import WH_JSON_SCHEMA
from wheelhouse.lock.journal import UndoJournal, recover_journals

_CHANGE = r"""
import sys
from pathlib import Path
from wheelhouse.faults import checkpoint
from wheelhouse.lock.journal import UndoJournal
root = Path(sys.argv[1])
undo = UndoJournal(root, ("pylock.toml", "wh.json", "simple"))
undo.replacing(root / "wheels" / "eng.whl")
(root / "wheels" / "eng.whl").write_text("new engine")
undo.created(root / "wheels" / "dep.whl")
(root / "wheels" / "dep.whl").write_text("dep")
(root / "pylock.toml").write_text("changed")
(root / "simple" / "dep").mkdir()
checkpoint("test.half-way")
(root / "wh.json").write_text("changed")
undo.commit()
"""


def _house(root):
    (root / "wheels").mkdir(parents=True)
    (root / "simple" / "a").mkdir(parents=True)
    (root / "simple" / "a" / "index.html").write_text("a page")
    (root / "wheels" / "eng.whl").write_text("old engine")
    (root / "pylock.toml").write_text("lock")
    (root / "wh.json").write_text(json.dumps({"schema": WH_JSON_SCHEMA}))
    (root / "NOTES.md").write_text("n")


def _listing(root):
    return {str(p.relative_to(root)): (p.read_text() if p.is_file() else "dir") for p in sorted(root.rglob("*"))}


def test_a_change_killed_half_way_is_rolled_back_exactly(tmp_path):
    root = tmp_path / "wh"
    _house(root)
    before = _listing(root)
    proc = subprocess.run([sys.executable, "-c", _CHANGE, str(root)], env={"WH_FAULT": "test.half-way",
                          "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert _listing(root) != before
    notes = recover_journals(root)
    assert len(notes) == 1 and "interrupted change" in notes[0]
    assert _listing(root) == before
    assert recover_journals(root) == []


def test_rollback_in_process_and_commit(tmp_path):
    root = tmp_path / "wh"
    _house(root)
    before = _listing(root)
    undo = UndoJournal(root, ("pylock.toml", "wh.json", "simple"))
    undo.created(root / "wheels" / "x.whl")
    (root / "wheels" / "x.whl").write_text("x")
    (root / "pylock.toml").unlink()
    undo.rollback()
    assert _listing(root) == before
    undo = UndoJournal(root, ("pylock.toml",))
    (root / "pylock.toml").write_text("kept")
    undo.commit()
    assert (root / "pylock.toml").read_text() == "kept" and not list(root.glob(".wh-undo-*"))


def test_a_journal_never_reaches_outside_the_wheelhouse(tmp_path):
    root = tmp_path / "wh"
    _house(root)
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    (root / "link").symlink_to(tmp_path)
    saved = root / ".wh-undo-bad"
    saved.mkdir()
    (saved / "journal.json").write_text(json.dumps({"index": ["../outside.txt", "pylock.toml"], "had": [],
                                                    "created": ["../outside.txt", str(outside), "link/outside.txt"],
                                                    "replaced": []}))
    recover_journals(root)
    assert outside.read_text() == "precious"
    assert not (root / "pylock.toml").exists()  # an index file it names is put back as it was: absent


def test_rollback_removes_the_folders_a_created_file_added(tmp_path):
    """A failed `wh build` into a new folder leaves no empty wheels/ behind (the next run took it for user data)."""
    (tmp_path / "logs").mkdir()
    journal = UndoJournal(tmp_path, ["pylock.toml", "wh.json", "simple"])
    target = tmp_path / "wheels" / "sub" / "x.whl"
    journal.created(target)
    target.parent.mkdir(parents=True)
    target.write_bytes(b"x")
    journal.created(tmp_path / "logs" / "build.log")  # an existing folder is not the change's to remove
    journal.rollback()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]
