"""The ground floor's error classes: one class per kind of failure, whichever piece raises it."""

import hashlib

import pytest

from wheelhouse.errors import HashMismatch, WhError
from wheelhouse.fetch.cache import add_to_cache


def test_one_hash_mismatch_for_fetch_and_install():
    import wheelhouse.fetch
    import wheelhouse.install

    assert wheelhouse.fetch.HashMismatch is HashMismatch is wheelhouse.install.HashMismatch
    assert issubclass(HashMismatch, WhError) and HashMismatch.code == "hash-mismatch"


def test_a_bad_cache_entry_raises_it_with_every_field(tmp_path):
    f = tmp_path / "x.whl"
    f.write_bytes(b"real bytes")
    wrong = hashlib.sha256(b"other bytes").hexdigest()
    with pytest.raises(HashMismatch) as err:
        add_to_cache(tmp_path / "cache", f, wrong)
    e = err.value
    assert (e.expected, e.actual) == (wrong, hashlib.sha256(b"real bytes").hexdigest())
    assert e.bad == [(e.path, e.expected, e.actual)] and e.hint and "sha256" in e.message


def test_many_bad_files_are_all_listed():
    e = HashMismatch("a.whl", "1" * 64, "2" * 64, more=[("b.whl", "3" * 64, "missing")], message="2 files do not match")
    assert [b[0] for b in e.bad] == ["a.whl", "b.whl"] and str(e) == "2 files do not match"
