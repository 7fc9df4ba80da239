"""patch.journal: an intent without a record is an unfinished apply, rolled back from its backup."""

from __future__ import annotations

import hashlib
import json

import pytest

from wheelhouse.patch.journal import (
    PatchDrifted,
    backup_name,
    intent_path,
    patch_dir,
    record_path,
    recover_interrupted,
)

BEFORE, AFTER = b"old\n", b"new\n"


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def interrupted(tmp_path):
    """A site where an apply replaced pkg/f.py and was killed before its record."""
    site = tmp_path / "site"
    target = site / "pkg" / "f.py"
    target.parent.mkdir(parents=True)
    target.write_bytes(AFTER)
    pdir = patch_dir(site, "p")
    pdir.mkdir(parents=True)
    (pdir / f"{_sha(BEFORE)}.orig").write_bytes(BEFORE)
    intent_path(pdir).write_text(json.dumps({"name": "p", "file": str(target), "before_sha256": _sha(BEFORE),
                                             "after_sha256": _sha(AFTER), "backup": f"{_sha(BEFORE)}.orig",
                                             "mode": 0o640}))
    return site, target, pdir


def test_nothing_to_recover_without_an_intent(tmp_path):
    assert recover_interrupted("p", "d", tmp_path / "f", tmp_path / "none") == ""


def test_payload_in_place_is_rolled_back_and_the_journal_removed(interrupted):
    site, target, pdir = interrupted
    note = recover_interrupted("p", "d", target, pdir)
    assert "interrupted apply of p was rolled back" in note
    assert target.read_bytes() == BEFORE and (target.stat().st_mode & 0o777) == 0o640
    assert not pdir.exists() and not (site / ".wh").exists()


def test_killed_before_the_file_changed_only_cleans_up(interrupted):
    _, target, pdir = interrupted
    target.write_bytes(BEFORE)
    assert recover_interrupted("p", "d", target, pdir) and target.read_bytes() == BEFORE and not pdir.exists()


def test_an_older_finished_record_is_kept(interrupted):
    _, target, pdir = interrupted
    record_path(pdir).write_text("{}")
    recover_interrupted("p", "d", target, pdir)
    assert record_path(pdir).exists() and not intent_path(pdir).exists()


def test_a_file_that_is_neither_version_is_refused_and_the_journal_kept(interrupted):
    _, target, pdir = interrupted
    target.write_bytes(b"someone else's\n")
    with pytest.raises(PatchDrifted, match="changed after an interrupted apply"):
        recover_interrupted("p", "d", target, pdir)
    assert intent_path(pdir).exists() and target.read_bytes() == b"someone else's\n"


def test_a_damaged_backup_is_refused(interrupted):
    _, target, pdir = interrupted
    (pdir / f"{_sha(BEFORE)}.orig").write_bytes(b"tampered")
    with pytest.raises(PatchDrifted, match="backup .* is missing or damaged"):
        recover_interrupted("p", "d", target, pdir)
    assert target.read_bytes() == AFTER


@pytest.mark.parametrize("name", ["/etc/passwd", "../x.orig", "..", "", 5, None])
def test_backup_name_must_stay_in_the_patch_folder(tmp_path, name):
    with pytest.raises(PatchDrifted, match="names no valid backup"):
        backup_name({"backup": name}, tmp_path)
    assert backup_name({"backup": "abc.orig"}, tmp_path) == "abc.orig"
