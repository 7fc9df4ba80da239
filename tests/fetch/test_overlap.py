"""fetch_all copies each download into the wheelhouse as soon as it is filed, with the kernel's copy."""

from __future__ import annotations

import hashlib
import os
import threading
import time

import pytest
from file_server import serve_files

from wheelhouse.fetch import FetchItem, fetch_all
from wheelhouse.fetch.cache import cached_path, copy_private
from wheelhouse.errors import HashMismatch


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


def test_a_finished_download_is_in_the_wheelhouse_before_the_slowest_one_ends(tmp_path):
    small, big = os.urandom(32 * 1024), os.urandom(1_500_000)
    srv = serve_files({"small-1.0-py3-none-any.whl": small, "big-1.0-py3-none-any.whl": big}, rate=1_000_000)
    try:
        items = [FetchItem(srv.url(n), n, hashlib.sha256(d).hexdigest(), len(d))
                 for n, d in (("big-1.0-py3-none-any.whl", big), ("small-1.0-py3-none-any.whl", small))]
        dest = tmp_path / "dest"
        done = threading.Event()
        seen_early = []

        def watch():
            while not done.is_set():
                if (dest / "small-1.0-py3-none-any.whl").is_file():
                    seen_early.append(not cached_path(tmp_path / "cache", items[0].sha256).exists())
                    return
                time.sleep(0.01)

        watcher = threading.Thread(target=watch)
        watcher.start()
        paths = fetch_all(items, dest, tmp_path / "cache", jobs=2, segment_size=1 << 30)
        done.set()
        watcher.join()
    finally:
        srv.close()
    assert seen_early == [True]  # placed while the big one was still downloading
    assert [p.read_bytes() for p in paths] == [big, small]
    for p, it in zip(paths, items):  # the cache entry's inode: each byte written once
        assert p.stat().st_ino == cached_path(tmp_path / "cache", it.sha256).stat().st_ino
    assert sorted(os.listdir(dest)) == ["big-1.0-py3-none-any.whl", "small-1.0-py3-none-any.whl"]  # no temp left


def test_copy_private_copies_every_byte_to_a_new_inode(tmp_path):
    src = tmp_path / "src.whl"
    data = os.urandom(3 * (1 << 20) + 17)
    src.write_bytes(data)
    dst = copy_private(src, tmp_path / "out" / "dst.whl", len(data))
    assert dst.read_bytes() == data and dst.stat().st_ino != src.stat().st_ino
    with pytest.raises(HashMismatch):  # a size that does not match: nothing under the final name
        copy_private(src, tmp_path / "out" / "short.whl", len(data) + 1)
    assert sorted(os.listdir(tmp_path / "out")) == ["dst.whl"]


def test_a_full_disk_while_placing_a_fresh_download_is_no_space(tmp_path, monkeypatch):
    from wheelhouse.fetch import NoSpace

    data = os.urandom(200_000)
    srv = serve_files({"f-1.0-py3-none-any.whl": data})
    try:
        item = FetchItem(srv.url("f-1.0-py3-none-any.whl"), "f-1.0-py3-none-any.whl",
                         hashlib.sha256(data).hexdigest(), len(data))
        monkeypatch.setenv("WH_FAULT", "fetch.link:enospc")  # placing is a hardlink (same filesystem)
        with pytest.raises(NoSpace):
            fetch_all([item], tmp_path / "dest", tmp_path / "cache")
    finally:
        srv.close()
    assert not (tmp_path / "dest").exists() or os.listdir(tmp_path / "dest") == []
    assert cached_path(tmp_path / "cache", item.sha256).is_file()  # the verified download is kept
