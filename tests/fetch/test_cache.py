"""fetch.cache: nothing from the cache is trusted on reuse, the wheelhouse links its entries, two
processes take turns on one entry, and a full disk is one clear error with nothing left behind."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

from wheelhouse.fetch import NoSpace, cached_path, fetch_all

CHILD = """
import json, sys
from pathlib import Path
from wheelhouse.fetch import FetchItem, fetch_all
spec = json.loads(sys.argv[1])
items = [FetchItem(**it) for it in spec["items"]]
paths = fetch_all(items, Path(spec["dest"]), Path(spec["cache"]), jobs=spec.get("jobs", 4),
                  segment_size=spec.get("segment"), backoff=0.01)
print(json.dumps([str(p) for p in paths]))
"""


def _child(items, dest, cache, env=None, **spec) -> subprocess.Popen:
    arg = json.dumps({"items": [it.__dict__ for it in items], "dest": str(dest), "cache": str(cache), **spec})
    return subprocess.Popen([sys.executable, "-c", CHILD, arg], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})})


def _raise(exc: BaseException):
    raise exc


def test_a_corrupted_cache_entry_is_caught_on_reuse_and_downloaded_again(files, tmp_path, flip_byte):
    data = os.urandom(300_000)
    srv, (item,) = files({"a-1.0-py3-none-any.whl": data})
    cache = tmp_path / "cache"
    fetch_all([item], tmp_path / "one", cache)
    entry = cached_path(cache, item.sha256)
    flip_byte(entry)  # same size, one bit of one byte wrong
    served = srv.served[item.filename]
    (path,) = fetch_all([item], tmp_path / "two", cache)
    assert path.read_bytes() == data
    assert srv.served[item.filename] == served + len(data)  # downloaded again, not trusted
    assert hashlib.sha256(entry.read_bytes()).hexdigest() == item.sha256  # and the cache repaired


def test_the_wheelhouse_file_is_the_cache_entry_and_a_write_through_it_is_caught_on_reuse(files, tmp_path, flip_byte):
    data = os.urandom(200_000)
    srv, (item,) = files({"b-1.0-py3-none-any.whl": data})
    cache = tmp_path / "cache"
    (placed,) = fetch_all([item], tmp_path / "house", cache)
    entry = cached_path(cache, item.sha256)
    assert os.path.samefile(placed, entry) and placed.stat().st_nlink == 2  # written once
    flip_byte(entry)  # whoever writes to the cache later reaches the wheelhouse too...
    assert placed.read_bytes() != data
    (again,) = fetch_all([item], tmp_path / "house2", cache)  # ...and the next fetch does not trust it
    assert again.read_bytes() == data and srv.served[item.filename] == 2 * len(data)
    assert not os.path.samefile(again, placed)  # a new inode; the damaged one is no entry any more


def test_two_processes_downloading_one_file_take_turns(files, tmp_path):
    data = os.urandom(3_000_000)
    srv, (item,) = files({"c-1.0-py3-none-any.whl": data}, rate=4_000_000)  # ~0.75 s per download
    cache = tmp_path / "cache"
    procs = [_child([item], tmp_path / f"dest{i}", cache, jobs=1) for i in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    for i in range(2):
        assert (tmp_path / f"dest{i}" / item.filename).read_bytes() == data
    assert srv.served[item.filename] == len(data)  # the second waited, then reused the first's


def test_two_processes_with_ranged_downloads_never_corrupt(files, tmp_path):
    data = os.urandom(4_000_000)
    srv, (item,) = files({"d-1.0-py3-none-any.whl": data}, rate=4_000_000)
    cache = tmp_path / "cache"
    procs = [_child([item], tmp_path / f"dest{i}", cache, jobs=4, segment=256 * 1024) for i in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    for i in range(2):
        assert (tmp_path / f"dest{i}" / item.filename).read_bytes() == data
    assert srv.served[item.filename] == len(data)


@pytest.mark.parametrize("jobs, segment", [(1, None), (4, 64 * 1024)], ids=["one-stream", "ranges"])
def test_a_full_disk_is_one_clear_error_and_leaves_no_partial(files, tmp_path, monkeypatch, jobs, segment):
    data = os.urandom(1_000_000)
    _srv, (item,) = files({"e-1.0-py3-none-any.whl": data})
    cache = tmp_path / "cache"
    monkeypatch.setenv("WH_FAULT", "fetch.write:enospc")
    with pytest.raises(NoSpace) as exc:
        fetch_all([item], tmp_path / "dest", cache, jobs=jobs, segment_size=segment, backoff=0.01)
    assert exc.value.code == "no-space" and exc.value.exit_code == 1
    # 1 MB: the download; its place in dest is a hardlink (same filesystem), which takes no space.
    assert str(exc.value).startswith("no space left on /") and "needs 1 MB more" in str(exc.value)
    assert "--cache-dir" in exc.value.hint
    leftovers = [p.name for p in (cache / "partial").iterdir()] if (cache / "partial").exists() else []
    assert leftovers == []  # no partial, no range file, no sidecar
    assert not (tmp_path / "dest" / item.filename).exists()
    monkeypatch.delenv("WH_FAULT")
    (path,) = fetch_all([item], tmp_path / "dest", cache, jobs=jobs, segment_size=segment)  # space again: works
    assert path.read_bytes() == data


def test_a_full_disk_while_copying_into_the_wheelhouse(files, tmp_path, monkeypatch):
    data = os.urandom(500_000)
    _srv, (item,) = files({"f-1.0-py3-none-any.whl": data})
    cache = tmp_path / "cache"
    fetch_all([item], tmp_path / "first", cache)
    real_link = os.link
    monkeypatch.setattr(os, "link", lambda src, dst, *a, **kw: (
        _raise(OSError(18, "Invalid cross-device link")) if "sha256" in str(src) else real_link(src, dst, *a, **kw)))
    monkeypatch.setenv("WH_FAULT", "fetch.copy:enospc")  # the wheelhouse on another filesystem: a copy
    with pytest.raises(NoSpace):
        fetch_all([item], tmp_path / "dest", cache)
    assert not (tmp_path / "dest").exists() or list((tmp_path / "dest").iterdir()) == []  # no temp copy left
    assert cached_path(cache, item.sha256).is_file()  # the verified download is kept


def test_stale_checkpoint_temp_files_are_removed(files, tmp_path):
    _srv, (item,) = files({"g-1.0-py3-none-any.whl": os.urandom(10_000)})
    partial = tmp_path / "cache" / "partial"
    partial.mkdir(parents=True)
    stale = partial / f"{'0' * 64}.part.json.139912345"
    stale.write_text("")  # what an older wh left when the disk filled up
    fetch_all([item], tmp_path / "dest", tmp_path / "cache")
    assert not stale.exists()


def test_wh_stage_on_a_full_disk_exits_1_with_the_message(pyindex, tmp_path):
    from wheelmaker import make_wheel

    make_wheel(tmp_path / "pub", "app", "1.0", pad_bytes=300_000)
    idx = pyindex(tmp_path / "pub")
    cmd = [sys.executable, "-c", "import sys; from wheelhouse.cli import main; main(sys.argv[1:])",
           "stage", "app", "-i", idx.url, "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"),
           "--no-bootstrap"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "WH_FAULT": "fetch.write:enospc", "NO_COLOR": "1"})
    assert proc.returncode == 1, proc.stderr
    assert "error: no space left on /" in proc.stderr and "MB more" in proc.stderr and "hint:" in proc.stderr
    assert "internal error" not in proc.stderr and time.monotonic() - t0 < 60
    assert not (tmp_path / "out").exists()
    partial = tmp_path / "cache" / "partial"
    assert not partial.exists() or list(partial.iterdir()) == []


def test_wh_stage_after_a_cache_byte_flip_writes_the_real_wheel(pyindex, tmp_path, flip_byte):
    """Issue 11.9: a corrupted cache entry made a re-stage exit 0 with a bad wheel and a lying lock."""
    from wheelmaker import make_wheel

    from wheelhouse.lock import read_pylock

    wheel = make_wheel(tmp_path / "pub", "app", "1.0", pad_bytes=200_000)
    idx = pyindex(tmp_path / "pub")
    cache = tmp_path / "cache"

    def stage(out):
        cmd = [sys.executable, "-c", "import sys; from wheelhouse.cli import main; main(sys.argv[1:])",
               "stage", "app", "-i", idx.url, "-o", str(out), "--cache-dir", str(cache), "--no-bootstrap"]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    assert stage(tmp_path / "one").returncode == 0
    flip_byte(cached_path(cache, idx.sha256(wheel.name)))
    for out in (tmp_path / "two", tmp_path / "one"):  # a new wheelhouse, and a re-stage in place
        proc = stage(out)
        assert proc.returncode == 0, proc.stderr
        (locked,) = read_pylock(out).files
        assert hashlib.sha256((out / locked.path).read_bytes()).hexdigest() == locked.sha256 == idx.sha256(wheel.name)


@pytest.mark.parametrize("size, segment", [(300_000, None), (2_000_000, 256 * 1024)], ids=["one-stream", "ranges"])
def test_a_file_another_wh_filed_while_this_one_waited_counts_on_the_bar(files, tmp_path, size, segment):
    """Two runs share a cache: the second waits for the first's download of a file, then takes its entry. Its
    progress bar counts that file too (it ended short of its total by the file's size)."""
    import threading

    from wheelhouse.fetch.cache import commit_part, try_entry_lock
    from wheelhouse.progress import RecordingReporter

    data = os.urandom(size)
    srv, (item,) = files({"w-1.0-py3-none-any.whl": data})
    cache = tmp_path / "cache"
    held = try_entry_lock(cache, item.sha256)  # "the other wh", downloading it
    assert held >= 0
    rec, box = RecordingReporter(), {}

    def run():
        try:
            box["paths"] = fetch_all([item], tmp_path / "dest", cache, jobs=4, segment_size=segment, reporter=rec)
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not any(e[0] == "note" and "another wh" in e[1] for e in rec.events) and time.monotonic() < deadline:
        time.sleep(0.02)
    part = tmp_path / "other.part"
    part.write_bytes(data)
    commit_part(cache, part, item.sha256)  # the other wh files it, then lets go of the entry
    os.close(held)
    t.join(30)
    assert not t.is_alive() and "error" not in box, box.get("error")
    assert box["paths"][0].read_bytes() == data
    assert srv.served.get(item.filename, 0) == 0  # taken from the other's entry, not downloaded again
    total = next(e[2] for e in rec.events if e[0] == "start")
    assert sum(e[2] for e in rec.events if e[0] == "advance") == total == size
