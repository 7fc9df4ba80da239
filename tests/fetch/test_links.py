"""The wheelhouse file is a hardlink to its cache entry: each downloaded byte is written once.

Safe because nothing writes into an existing inode, the cache hashes an entry again on every
reuse, and the wheelhouse is checked against its lock by `wh verify` and `wh install`: a write by
someone else through either name is caught on use. Across filesystems it is a copy.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from faults import run_with_fault, wh_command

from wheelhouse.errors import HashMismatch
from wheelhouse.fetch import NoSpace, cached_path, fetch_all
from wheelhouse.fetch.cache import add_to_cache, entry_mode


@pytest.mark.parametrize("segment", [None, 64 * 1024], ids=["one-stream", "ranges"])
def test_a_fresh_download_and_its_cache_entry_are_one_inode_readable_like_before(files, tmp_path, segment):
    data = os.urandom(600_000)
    _srv, (item,) = files({"a-1.0-py3-none-any.whl": data})
    cache = tmp_path / "cache"
    (placed,) = fetch_all([item], tmp_path / "house", cache, jobs=4, segment_size=segment)
    entry = cached_path(cache, item.sha256)
    assert placed.read_bytes() == data
    assert os.path.samefile(placed, entry) and entry.stat().st_nlink == 2
    # As readable as a new file of the wheelhouse was (0644 & ~umask), but read-only: the mode is
    # the inode's, so the cache's privacy is its folder's (owner-only).
    umask = os.umask(0)
    os.umask(umask)
    assert placed.stat().st_mode & 0o777 == 0o444 & ~umask == entry_mode()
    assert (cache / "sha256").stat().st_mode & 0o777 == 0o700
    assert sorted(os.listdir(tmp_path / "house")) == [item.filename]  # no temp name left


def test_a_reused_entry_is_hashed_then_linked_and_an_old_private_mode_made_readable(files, tmp_path):
    data = os.urandom(300_000)
    srv, (item,) = files({"b-1.0-py3-none-any.whl": data})
    cache = tmp_path / "cache"
    fetch_all([item], tmp_path / "one", cache)
    entry = cached_path(cache, item.sha256)
    os.chmod(entry, 0o400)  # what an older wh gave its entries
    os.chmod(cache / "sha256", 0o755)  # and its folder
    (again,) = fetch_all([item], tmp_path / "two", cache)
    assert srv.served[item.filename] == len(data)  # nothing downloaded again
    assert os.path.samefile(again, entry) and entry.stat().st_nlink == 3
    assert again.stat().st_mode & 0o777 == entry_mode()
    assert (cache / "sha256").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("err", [errno.EXDEV, errno.EPERM, errno.EMLINK], ids=["EXDEV", "EPERM", "EMLINK"])
@pytest.mark.parametrize("segment", [None, 64 * 1024], ids=["one-stream", "ranges"])
def test_where_no_link_can_be_made_the_wheelhouse_gets_a_verified_copy(files, tmp_path, monkeypatch, err, segment,
                                                                       flip_byte):
    data = os.urandom(400_000)
    srv, (item,) = files({"c-1.0-py3-none-any.whl": data})
    cache = tmp_path / "cache"
    real_link = os.link

    def refused(src, dst, *a, **kw):
        if Path(src).parent.parent.name == "sha256":  # links out of the cache: "another filesystem"
            raise OSError(err, os.strerror(err))
        return real_link(src, dst, *a, **kw)

    monkeypatch.setattr(os, "link", refused)
    (fresh,) = fetch_all([item], tmp_path / "one", cache, jobs=4, segment_size=segment)
    (reused,) = fetch_all([item], tmp_path / "two", cache)
    entry = cached_path(cache, item.sha256)
    for p in (fresh, reused):
        assert p.read_bytes() == data and not os.path.samefile(p, entry)
    assert srv.served[item.filename] == len(data)
    # The copy path still refuses a damaged entry, and downloads it again.
    flip_byte(entry)
    (third,) = fetch_all([item], tmp_path / "three", cache)
    assert third.read_bytes() == data and srv.served[item.filename] == 2 * len(data)


_CHILD = """
import json, sys
from pathlib import Path
from wheelhouse.fetch import FetchItem, fetch_all
spec = json.loads(sys.argv[1])
fetch_all([FetchItem(**it) for it in spec["items"]], Path(spec["dest"]), Path(spec["cache"]), jobs=2)
"""


@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "reused"])
def test_killed_at_the_link_step_leaves_no_file_under_its_final_name(files, tmp_path, warm):
    data = os.urandom(300_000)
    _srv, (item,) = files({"d-1.0-py3-none-any.whl": data})
    cache, dest = tmp_path / "cache", tmp_path / "house"
    if warm:
        fetch_all([item], tmp_path / "earlier", cache)
    arg = json.dumps({"items": [item.__dict__], "dest": str(dest), "cache": str(cache)})
    proc = subprocess.run([sys.executable, "-c", _CHILD, arg], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "WH_FAULT": "fetch.link:kill"})
    assert proc.returncode == -9, proc.stderr
    assert not (dest / item.filename).exists()  # a temp name at most, never the final one
    entry = cached_path(cache, item.sha256)
    assert hashlib.sha256(entry.read_bytes()).hexdigest() == item.sha256  # the verified download is kept
    (placed,) = fetch_all([item], dest, cache)  # the next run places it
    assert placed.read_bytes() == data and os.path.samefile(placed, entry)


def test_a_full_disk_at_the_link_step_is_no_space_with_nothing_left_in_dest(files, tmp_path, monkeypatch):
    _srv, (item,) = files({"e-1.0-py3-none-any.whl": os.urandom(200_000)})
    monkeypatch.setenv("WH_FAULT", "fetch.link:enospc")
    with pytest.raises(NoSpace):
        fetch_all([item], tmp_path / "house", tmp_path / "cache")
    assert not (tmp_path / "house").exists() or list((tmp_path / "house").iterdir()) == []
    assert cached_path(tmp_path / "cache", item.sha256).is_file()


def test_cleaning_the_cache_unlinks_and_leaves_the_wheelhouse_whole_and_seeding_links_it_back(files, tmp_path,
                                                                                                flip_byte):
    data = os.urandom(300_000)
    _srv, (item,) = files({"f-1.0-py3-none-any.whl": data})
    cache = tmp_path / "cache"
    (placed,) = fetch_all([item], tmp_path / "house", cache)
    shutil.rmtree(cache)  # cleaning the cache: unlinks, never truncates
    assert placed.read_bytes() == data and placed.stat().st_nlink == 1
    entry = add_to_cache(cache, placed, item.sha256)  # a re-stage seeds the cache from the wheelhouse
    assert os.path.samefile(entry, placed) and entry.stat().st_mode & 0o777 == entry_mode()
    # A damaged wheelhouse file never becomes an entry.
    other = tmp_path / "g-1.0-py3-none-any.whl"
    other.write_bytes(data)
    flip_byte(other)
    with pytest.raises(HashMismatch):
        add_to_cache(tmp_path / "cache2", other, item.sha256)
    assert not cached_path(tmp_path / "cache2", item.sha256).exists()
    assert [p.name for p in tmp_path.joinpath("cache2", "sha256").rglob("*") if p.is_file()] == []


def _wh(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_COLOR": "1"}, **kw)


def test_a_write_through_the_cache_name_is_refused_by_verify_and_install_and_restaged(pyindex, tmp_path, flip_byte):
    from wheelmaker import make_wheel

    wheel = make_wheel(tmp_path / "pub", "app", "1.0", pad_bytes=200_000)
    idx = pyindex(tmp_path / "pub")
    out, cache = tmp_path / "house", tmp_path / "cache"
    stage = ["stage", "app", "-i", idx.url, "-o", out, "--cache-dir", cache, "--no-bootstrap"]
    assert (r := _wh(*stage)).returncode == 0, r.stderr
    entry = cached_path(cache, idx.sha256(wheel.name))
    assert os.path.samefile(out / "wheels" / wheel.name, entry)
    assert _wh("verify", out).returncode == 0
    served = idx.bytes_served(wheel.name)
    flip_byte(entry)  # someone writes through the cache's name
    r = _wh("verify", out, "--json")
    assert r.returncode == 1 and wheel.name in r.stdout, r.stdout + r.stderr
    r = _wh("install", out, "--venv", tmp_path / "venv")
    assert r.returncode != 0 and wheel.name in r.stderr, r.stderr
    assert not list((tmp_path / "venv").glob("lib/python*/site-packages/app*"))  # nothing installed
    # The next stage does not trust the entry: it downloads the wheel again, and the wheelhouse verifies.
    assert (r := _wh(*stage)).returncode == 0, r.stderr
    assert idx.bytes_served(wheel.name) == served + wheel.stat().st_size
    assert _wh("verify", out).returncode == 0
    assert hashlib.sha256((out / "wheels" / wheel.name).read_bytes()).hexdigest() == idx.sha256(wheel.name)
    # The read-only, linked wheel installs like a copied one.
    r = _wh("install", out, "--venv", tmp_path / "venv2")
    assert r.returncode == 0, r.stderr
    assert list((tmp_path / "venv2").glob("lib/python*/site-packages/app-1.0.dist-info"))


def test_pack_reads_through_the_links_as_through_copies(pyindex, tmp_path):
    from wheelmaker import make_wheel

    make_wheel(tmp_path / "pub", "app", "1.0", pad_bytes=100_000)
    idx = pyindex(tmp_path / "pub")
    out = tmp_path / "house"
    assert (r := _wh("stage", "app", "-i", idx.url, "-o", out, "--cache-dir", tmp_path / "cache",
                     "--no-bootstrap")).returncode == 0, r.stderr
    copy = tmp_path / "copy" / "house"
    shutil.copytree(out, copy)  # private copies, 0644-style modes
    for src, name in ((out, "linked.tar"), (copy, "copied.tar")):
        assert (r := _wh("pack", src, "-o", tmp_path / name)).returncode == 0, r.stderr
    assert (tmp_path / "linked.tar").read_bytes() == (tmp_path / "copied.tar").read_bytes()


def test_a_staged_kill_at_the_link_step_leaves_no_wheelhouse(pyindex, tmp_path):
    from wheelmaker import make_wheel

    make_wheel(tmp_path / "pub", "app", "1.0", pad_bytes=100_000)
    idx = pyindex(tmp_path / "pub")
    out = tmp_path / "house"
    args = ["stage", "app", "-i", idx.url, "-o", out, "--cache-dir", tmp_path / "cache", "--no-bootstrap"]
    assert run_with_fault(args, "fetch.link").returncode == -9
    assert not out.exists()
    assert (r := _wh(*args)).returncode == 0, r.stderr
