"""lock.output: the fcntl lock on an output folder, the swap that keeps the user's files, and recovery."""

from __future__ import annotations

import json
import threading
import time

import pytest

from wheelhouse.lock import WH_JSON_SCHEMA
from wheelhouse.lock.output import (OutputBusy, foreign_paths, hold_output, interrupted_swap, new_tree, recover,
                                    swap_in)


def _wheelhouse(folder, owned, files):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wh.json").write_text(json.dumps({"schema": WH_JSON_SCHEMA, "owned": owned}))
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


def _listing(folder):
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_foreign_paths_are_the_smallest_set_wh_did_not_write(tmp_path):
    root = _wheelhouse(tmp_path / "wh", ["wh.json", "wheels", "logs/build.log"],
                       {"wheels/a.whl": "w", "logs/build.log": "b", "logs/run.txt": "r", "NOTES.md": "n",
                        "mine/deep/file": "m", ".wh-fetch-1/x": "scratch"})
    assert foreign_paths(root, ["wh.json", "wheels", "logs/build.log"]) == ["NOTES.md", "logs/run.txt", "mine"]


def test_swap_keeps_the_users_files_and_replaces_wh_s(tmp_path):
    out = _wheelhouse(tmp_path / "wh", ["wh.json", "wheels"], {"wheels/old.whl": "old", "NOTES.md": "n",
                                                               "logs/run.txt": "r"})
    new = new_tree(out)
    _wheelhouse(new, ["wh.json", "wheels"], {"wheels/new.whl": "new", "logs/build.log": "b"})
    swap_in(new, out)
    got = _listing(out)
    assert got.pop("wh.json") and got == {"wheels/new.whl": "new", "NOTES.md": "n", "logs/run.txt": "r",
                                          "logs/build.log": "b"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wh"]


def test_swap_refuses_a_conflict_before_touching_anything(tmp_path):
    from wheelhouse.lock.output import BadOutput

    out = _wheelhouse(tmp_path / "wh", ["wh.json"], {"report.txt": "users"})
    new = _wheelhouse(new_tree(out), ["wh.json", "report.txt"], {"report.txt": "wh's"})
    before = _listing(out)
    with pytest.raises(BadOutput, match="report.txt"):
        swap_in(new, out)
    assert _listing(out) == before


@pytest.mark.parametrize("state", ["between-renames", "new-incomplete", "after-renames", "before-renames"])
def test_recover_from_each_crash_point(tmp_path, state):
    out = tmp_path / "wh"
    old = _wheelhouse(tmp_path / ".wh.wh-old-1", ["wh.json"], {"v": "old"})
    new = _wheelhouse(tmp_path / ".wh.wh-new-1", ["wh.json"], {"v": "new", "NOTES.md": "n"})
    if state == "new-incomplete":
        (new / "wh.json").unlink()
        (new / "NOTES.md").unlink()
    if state == "after-renames":
        new.rename(out)
    if state == "before-renames":  # the user's NOTES.md had been moved into the complete new tree
        old.rename(out)
    notes = recover(out)
    want = {"between-renames": "new", "new-incomplete": "old", "after-renames": "new", "before-renames": "old"}[state]
    assert (out / "v").read_text() == want
    if state != "new-incomplete":
        assert (out / "NOTES.md").read_text() == "n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wh"]
    assert notes and all(isinstance(n, str) for n in notes)
    assert recover(out) == []  # nothing left to do


def test_hold_output_serialises_and_leaves_no_lock_file(tmp_path):
    out = tmp_path / "wh"
    told = []
    order = []
    with hold_output(out):
        with pytest.raises(OutputBusy, match="gave up after waiting"):
            with hold_output(out, timeout=0.3, on_wait=told.append):
                pass
        assert len(told) == 1 and "waiting for another wh stage on" in told[0]

        def second():
            with hold_output(out, timeout=30):
                order.append("second")

        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.4)
        order.append("first done")
    t.join(30)
    assert order == ["first done", "second"]
    assert list(tmp_path.iterdir()) == []


def test_interrupted_swap_says_where_the_previous_wheelhouse_is(tmp_path):
    out = tmp_path / "wh"
    assert interrupted_swap(out) is None
    old = _wheelhouse(tmp_path / ".wh.wh-old-1", ["wh.json"], {"v": "old"})
    said = interrupted_swap(out)
    assert str(old) in said and "wh stage" in said
    recover(out)
    assert interrupted_swap(out) is None and (out / "v").read_text() == "old"
