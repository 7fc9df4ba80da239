"""wheelhouse.fetch.stream: one file, one stream, into the cache: resumed from the partial file's
size, verified while it streams, and never filed under a hash it does not have."""

from __future__ import annotations

import hashlib
import os
import threading
import time

import pytest

from wheelhouse.errors import HashMismatch
from wheelhouse.fetch.cache import cached_path, entry_lock, entry_mode, partial_path
from wheelhouse.fetch.session import FetchError, FetchItem, Session
from wheelhouse.fetch.stream import download, entry_key

DATA = os.urandom(600_000)
NAME = "demo-1.0-py3-none-any.whl"


def _advanced(s: Session) -> int:
    return sum(e[2] for e in s.reporter.events if e[0] == "advance")


def _notes(s: Session) -> list[str]:
    return [e[1] for e in s.reporter.events if e[0] == "note"]


def test_entry_key_is_the_sha256_or_derived_from_the_url():
    assert entry_key(FetchItem("http://127.0.0.1/a.whl", "a.whl", "ab" * 32)) == "ab" * 32
    k1 = entry_key(FetchItem("http://127.0.0.1/a.whl", "a.whl", None))
    assert k1.startswith("url-") and k1 == entry_key(FetchItem("http://127.0.0.1/a.whl", "other-name.whl", None))
    assert k1 != entry_key(FetchItem("http://127.0.0.1/b.whl", "a.whl", None))


def test_a_download_is_filed_under_its_sha256_read_only(server, session):
    item = server.add(NAME, DATA)
    path = download(item, session)
    assert path == cached_path(session.cache, item.sha256)
    assert path.read_bytes() == DATA and (path.stat().st_mode & 0o777) == entry_mode()  # read-only
    assert entry_mode() & 0o222 == 0
    assert _advanced(session) == len(DATA)
    assert not partial_path(session.cache, item.sha256).exists()


def test_a_partial_file_is_continued_from_its_size(server, session):
    item = server.add(NAME, DATA)
    part = partial_path(session.cache, item.sha256)
    part.parent.mkdir(parents=True)
    part.write_bytes(DATA[:250_000])
    path = download(item, session)
    assert path.read_bytes() == DATA
    assert server.ranges == [f"{NAME}:bytes=250000-"]
    assert server.served[NAME] == len(DATA) - 250_000
    assert _advanced(session) == len(DATA)  # the kept bytes count once, as progress already made


def test_a_resumed_file_that_does_not_verify_is_fetched_once_more_from_zero(server, session):
    item = server.add(NAME, DATA)
    part = partial_path(session.cache, item.sha256)
    part.parent.mkdir(parents=True)
    part.write_bytes(bytes(100_000))  # the kept bytes are what is wrong
    assert download(item, session).read_bytes() == DATA
    assert server.served[NAME] == len(DATA) - 100_000 + len(DATA)
    assert any("did not verify" in n for n in _notes(session))


def test_wrong_bytes_are_refused_and_nothing_is_kept(server, session):
    item = server.add(NAME, DATA)
    server.tampered[NAME] = DATA[:-1] + bytes([DATA[-1] ^ 1])  # (a fixed byte equals a random last byte 1 time in 256)
    with pytest.raises(HashMismatch) as err:
        download(item, session)
    assert (err.value.expected, err.value.actual) == (item.sha256, hashlib.sha256(server.tampered[NAME]).hexdigest())
    assert not cached_path(session.cache, item.sha256).exists()
    assert not partial_path(session.cache, item.sha256).exists()


def test_more_bytes_than_promised_cannot_verify(server, session):
    item = server.add(NAME, DATA)
    server.tampered[NAME] = DATA + os.urandom(400_000)
    with pytest.raises(HashMismatch):
        download(item, session)
    assert list((session.cache / "partial").iterdir()) == []


def test_a_missing_file_is_one_error_with_the_status(server, session):
    item = FetchItem(server.url("gone-1.0-py3-none-any.whl"), "gone-1.0-py3-none-any.whl", "ab" * 32, 10)
    with pytest.raises(FetchError) as err:
        download(item, session)
    assert "HTTP 404" in str(err.value)
    assert list((session.cache / "partial").iterdir()) == []


def test_without_a_published_hash_the_file_is_filed_under_its_real_one(server, session):
    server.files[NAME] = DATA
    item = FetchItem(server.url(NAME), NAME, None)
    path = download(item, session)
    assert path == cached_path(session.cache, hashlib.sha256(DATA).hexdigest())
    assert path.read_bytes() == DATA


def test_a_partial_longer_than_the_file_now_is_started_over(pyindex, wheel_factory, session):
    # The file behind an unhashed URL changed and shrank: the server answers the resume with 416.
    wheel = wheel_factory("demo", "1.0")
    idx = pyindex(wheel_factory.folder)
    item = FetchItem(idx.file_url(wheel.name), wheel.name, None)
    part = partial_path(session.cache, entry_key(item))
    part.parent.mkdir(parents=True)
    part.write_bytes(os.urandom(wheel.stat().st_size + 1000))
    path = download(item, session)
    assert path.read_bytes() == wheel.read_bytes()
    assert not part.exists()


def test_a_second_downloader_waits_and_takes_the_first_ones_file(server, session):
    item = server.add(NAME, DATA)
    held = threading.Event()

    def other_wh():  # another process's download, holding the entry, then filing it
        with entry_lock(session.cache, item.sha256):
            held.set()
            time.sleep(0.3)
            final = cached_path(session.cache, item.sha256)
            final.parent.mkdir(parents=True, exist_ok=True)
            final.write_bytes(DATA)

    t = threading.Thread(target=other_wh)
    t.start()
    held.wait(5)
    try:
        path = download(item, session)
    finally:
        t.join()
    assert path.read_bytes() == DATA
    assert server.served.get(NAME, 0) == 0
    assert any("another wh is downloading it" in n for n in _notes(session))
