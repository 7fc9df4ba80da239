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


def _children(cmd_part: str) -> list[int]:
    """The pids of this process's children whose command line holds ``cmd_part``."""
    pids = []
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            continue
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if cmd_part.encode() in f.read():
                    out.append(pid)
        except OSError:
            continue
    return out


def test_ctrl_c_that_reaches_the_hash_workers_stops_the_hashing_instead_of_finishing_it_in_process(tmp_path):
    # Ctrl-C goes to the whole foreground process group: the workers die of SIGINT. The doctor must stop, not
    # hash what is left at one process's speed. Sparse files: gigabytes to hash, no disk used.
    import signal
    import threading
    import time

    paths = []
    for i in range(64):
        p = tmp_path / f"big{i}.bin"
        with open(p, "wb") as f:
            f.truncate(96 << 20)
        paths.append(str(p))
    result: dict = {}

    def run():
        try:
            result["out"] = hash_files(paths, 2, sizes=[96 << 20] * len(paths))
        except KeyboardInterrupt:
            result["interrupted"] = time.monotonic()

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 20
    workers: list[int] = []
    while time.monotonic() < deadline and len(workers) < 2:
        workers = _children("-I")
        time.sleep(0.02)
    assert workers, "no hash worker started"
    time.sleep(0.2)
    sent = time.monotonic()
    for pid in workers:
        os.kill(pid, signal.SIGINT)
    t.join(60)
    assert "out" not in result, "every file was hashed in-process after the workers were interrupted"
    assert result["interrupted"] - sent < 5
