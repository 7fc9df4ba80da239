"""The stack check's hashing: worker processes for a big first run, and the digest cache's two schemas.

Real files on disk, the real worker processes (the interpreter running wh, ``-I -S``); what a worker answers is
checked against hashlib, and what it cannot read (gone, a FIFO in a file's place) is never a digest.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os

import pytest

from wheelhouse.install import digests
from wheelhouse.install.digests import FileDigests, cache_path, hash_files


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.fixture
def tree(tmp_path):
    site = tmp_path / "site"
    files = {}
    for i in range(40):
        data = os.urandom(1000 + i * 5000) if i % 7 else os.urandom(3 << 20)
        p = site / "pkg" / f"f{i}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        files[f"pkg/f{i}.bin"] = data
    return site, files


def test_worker_processes_hash_what_hashlib_hashes_and_never_digest_what_they_cannot_read(tree, monkeypatch):
    site, files = tree
    monkeypatch.setattr(digests, "_PROCESS_BYTES", 1)  # workers even for a few MB
    monkeypatch.setattr(digests, "_BATCH_BYTES", 1 << 20)  # several batches per worker
    rels = sorted(files)
    fifo = site / "pkg" / "fifo"
    os.mkfifo(fifo)
    paths = [str(site / r) for r in rels] + [str(site / "pkg" / "gone.bin"), str(fifo)]
    sizes = [len(files[r]) for r in rels] + [0, 0]
    got = hash_files(paths, jobs=2, sizes=sizes)
    for rel, g in zip(rels, got):
        assert g is not None and g[0] == _digest(files[rel]) and g[1] == g[2] and g[1][2] == len(files[rel]), rel
    assert got[-2] is None and got[-1] is None  # missing; a FIFO (not waited on)


def test_a_first_run_by_workers_and_a_rerun_by_stats_agree_and_see_a_changed_file(tree, tmp_path, monkeypatch):
    site, files = tree
    monkeypatch.setattr(digests, "_PROCESS_BYTES", 1)
    env = {"WH_CACHE_DIR": str(tmp_path / "cache")}
    items = [(str(site), r) for r in sorted(files)]
    first = FileDigests(jobs=2, environ=env)
    assert [s[0] for s in first.states(items)] == [_digest(files[r]) for r in sorted(files)]
    assert first.hashed == len(files)
    first.save()
    again = FileDigests(jobs=2, environ=env)
    assert [s[0] for s in again.states(items)] == [_digest(files[r]) for r in sorted(files)]
    assert again.hashed == 0  # unchanged identities: nothing read
    (site / "pkg" / "f3.bin").write_bytes(b"changed")
    third = FileDigests(jobs=2, environ=env)
    states = dict(zip(sorted(files), third.states(items)))
    assert third.hashed == 1 and states["pkg/f3.bin"] == (_digest(b"changed"), 7)


def test_a_cache_of_the_older_schema_is_honoured_and_written_again_in_the_new_one(tree, tmp_path):
    site, files = tree
    env = {"WH_CACHE_DIR": str(tmp_path / "cache")}
    items = [(str(site), r) for r in sorted(files)]
    old = {}
    for rel, data in files.items():
        st = os.stat(site / rel)
        old[rel] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, _digest(data)]
    path = cache_path(site, env)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": "wh-digests/1", "site": str(site), "files": old}))
    d = FileDigests(environ=env)
    assert [s[0] for s in d.states(items)] == [_digest(files[r]) for r in sorted(files)]
    assert d.hashed == 0
    d.save()
    body = json.loads(path.read_text())
    assert body["schema"] == "wh-digests/2" and set(body["files"]) == set(files)
    assert FileDigests(environ=env).states(items) and all(isinstance(e, str) for e in body["files"].values())
