"""The index page cache as a resolver run sees it: conditional requests answered 304, --refresh,
--offline from the cache alone (a stopped index, a remembered 404, a clear miss), and pages kept
pre-parsed beside their entry (used when sound, a miss when torn, edited or of an older format)."""

from __future__ import annotations

import socket

import pytest

import wheelhouse.index as index_mod
from wheelhouse.index import NotCached, PackageSource
from wheelhouse.index.http import HttpClient
from wheelhouse.index.metadata import MetadataReader
from wheelhouse.index.parsed import FORMAT
from wheelmaker import make_wheel


@pytest.fixture
def wheels(tmp_path):
    w = tmp_path / "wheels"
    make_wheel(w, "alpha", "1.0", requires=["beta"])
    make_wheel(w, "alpha", "2.0", requires=["beta"], tags="cp312-cp312-manylinux_2_17_x86_64")
    make_wheel(w, "beta", "1.0")
    return w


class _Keep:
    """A target-like filter with a cache key, as the resolver's candidate finder passes."""

    cache_key = "tags:test-any"

    def __call__(self, filename: str) -> bool:
        return filename.endswith("-py3-none-any.whl")


KEEP = _Keep()


def _source(idx_urls, cache, *, ttl=600.0, **client):
    return PackageSource(list(idx_urls), client=HttpClient(cache_dir=cache, retries=0, **client), page_ttl=ttl)


def _names(files):
    return sorted(f.filename for f in files)


def _parsed(cache):
    return sorted((cache / "http").rglob("*.parsed"))


@pytest.fixture
def no_sockets(monkeypatch):
    """Any connection attempt fails the test: offline means no socket at all, loopback included."""
    def refuse(self, address):
        raise AssertionError(f"offline run opened a connection to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


@pytest.mark.parametrize("validators", ["etag", "last-modified"])
def test_a_warm_run_revalidates_stale_pages_with_conditional_requests(pyindex, wheels, tmp_path, validators):
    idx = pyindex(wheels, validators=validators)
    cache = tmp_path / "cache"
    cold = _source([idx.url], cache, ttl=0).files("alpha")
    assert idx.page_requests() == 1 and not idx.not_modified
    warm = _source([idx.url], cache, ttl=0).files("alpha")  # stale at once: revalidated
    assert idx.page_requests() == 2 and idx.not_modified["/simple/alpha/"] == 1
    sent = idx.log[-1][1]
    assert ("If-None-Match" in sent) == (validators == "etag")
    assert ("If-Modified-Since" in sent) == (validators == "last-modified")
    assert warm == cold and _names(warm) == ["alpha-1.0-py3-none-any.whl", "alpha-2.0-cp312-cp312-manylinux_2_17_x86_64.whl"]


def test_without_validators_a_stale_page_is_fetched_again(pyindex, wheels, tmp_path):
    idx = pyindex(wheels, validators="none")
    cache = tmp_path / "cache"
    _source([idx.url], cache, ttl=0).files("alpha")
    _source([idx.url], cache, ttl=0).files("alpha")
    assert idx.page_requests() == 2 and not idx.not_modified
    assert "If-None-Match" not in idx.log[-1][1] and "If-Modified-Since" not in idx.log[-1][1]


def test_fresh_pages_are_used_without_a_request_and_refresh_revalidates_them(pyindex, wheels, tmp_path):
    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    _source([idx.url], cache).files("alpha")
    _source([idx.url], cache).files("alpha")
    assert idx.page_requests() == 1  # fresh: no request at all
    src = _source([idx.url], cache, refresh=True)
    src.files("alpha")
    src.files("alpha")  # once per run: the source memoizes the page
    assert idx.page_requests() == 2 and idx.not_modified["/simple/alpha/"] == 1
    # a page that changed is seen by --refresh however fresh the entry was
    make_wheel(wheels, "alpha", "3.0")
    idx.add(wheels)
    assert "alpha-3.0-py3-none-any.whl" in _names(_source([idx.url], cache, refresh=True).files("alpha"))
    assert "alpha-3.0-py3-none-any.whl" in _names(_source([idx.url], cache).files("alpha"))  # and is the entry now


def test_offline_answers_from_the_cache_whatever_its_age_with_no_socket(pyindex, wheels, tmp_path, monkeypatch):
    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    online = _source([idx.url], cache).files("alpha", KEEP)
    reader = MetadataReader(HttpClient(cache_dir=cache), cache_dir=cache)
    meta = reader.read(online[0])
    idx.stop()
    refuse = lambda self, address: pytest.fail(f"offline run opened a connection to {address}")  # noqa: E731
    monkeypatch.setattr(socket.socket, "connect", refuse)
    src = _source([idx.url], cache, ttl=0, offline=True)  # every entry is stale: offline uses it anyway
    assert src.files("alpha", KEEP) == online
    again = MetadataReader(src.client, cache_dir=cache)
    assert again.read(online[0]) == meta and again.stats["cache"] == 1
    assert src.client.requests == 0


def test_offline_with_a_cold_cache_names_the_page_and_makes_no_request(pyindex, wheels, tmp_path, no_sockets):
    src = _source(["http://127.0.0.1:9/simple/"], tmp_path / "cache", offline=True)
    with pytest.raises(NotCached) as err:
        src.files("alpha")
    assert "alpha" in err.value.message and "http://127.0.0.1:9/simple/alpha/" in err.value.message
    assert "--offline" in err.value.hint
    assert src.client.requests == 0


def test_offline_metadata_miss_names_the_file(pyindex, wheels, tmp_path):
    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    (d,) = _source([idx.url], cache).files("beta")
    client = HttpClient(cache_dir=cache, offline=True)
    with pytest.raises(NotCached, match="metadata of beta-1.0-py3-none-any.whl"):
        MetadataReader(client, cache_dir=cache).read(d)
    assert client.requests == 0 and idx.requests_for(d.filename) == 0


def test_a_404_is_remembered_so_offline_searches_indexes_as_online_did(pyindex, tmp_path, monkeypatch):
    make_wheel(tmp_path / "a", "only-a", "1.0")
    make_wheel(tmp_path / "b", "only-b", "1.0")
    a, b = pyindex(tmp_path / "a"), pyindex(tmp_path / "b")
    cache = tmp_path / "cache"
    online = _source([a.url, b.url], cache).files("only-b")
    assert [f.origin for f in online] == [b.url]
    a.stop()
    b.stop()
    with monkeypatch.context() as m:
        m.setattr(socket.socket, "connect", lambda self, addr: pytest.fail(f"offline run connected to {addr}"))
        assert _source([a.url, b.url], cache, offline=True).files("only-b") == online


def test_online_a_remembered_404_is_asked_again(pyindex, tmp_path):
    make_wheel(tmp_path / "a", "only-a", "1.0")
    a = pyindex(tmp_path / "a")
    cache = tmp_path / "cache"
    assert _source([a.url], cache).files("newcomer") == []
    make_wheel(tmp_path / "a", "newcomer", "1.0")  # published since
    a.add(tmp_path / "a")
    assert _names(_source([a.url], cache).files("newcomer")) == ["newcomer-1.0-py3-none-any.whl"]
    assert a.page_requests() == 2


def test_pages_are_loaded_pre_parsed_on_a_warm_run(pyindex, wheels, tmp_path, monkeypatch):
    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    cold = _source([idx.url], cache).files("alpha", KEEP)
    assert _names(cold) == ["alpha-1.0-py3-none-any.whl"] and len(_parsed(cache)) == 1

    def no_parsing(*a, **k):
        raise AssertionError("the page was parsed again")

    with monkeypatch.context() as m:
        m.setattr(index_mod, "parse_simple_json", no_parsing)
        m.setattr(index_mod, "parse_simple_html", no_parsing)
        assert _source([idx.url], cache).files("alpha", KEEP) == cold
    # another filter (or none) is its own entry: never the list filtered for someone else
    assert len(_source([idx.url], cache).files("alpha")) == 2
    assert len(_parsed(cache)) == 2


def _corrupt(path, how):
    raw = path.read_bytes()
    head, _, payload = raw.partition(b"\n")
    if how == "garbage":
        path.write_bytes(b"\x00\xff not an entry")
    elif how == "torn":
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "edited":  # the payload changed, the checksum did not
        path.write_bytes(head + b"\n" + payload.replace(b"alpha-1.0", b"alpha-9.0"))


@pytest.mark.parametrize("how", ["garbage", "torn", "edited"])
def test_a_corrupted_pre_parsed_entry_falls_back_to_the_body(pyindex, wheels, tmp_path, how):
    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    cold = _source([idx.url], cache).files("alpha", KEEP)
    (entry,) = _parsed(cache)
    _corrupt(entry, how)
    assert _source([idx.url], cache).files("alpha", KEEP) == cold
    assert idx.page_requests() == 1  # the page itself was fine: no request
    assert entry.read_bytes().startswith(f"wh-parsed-page {FORMAT} ".encode())  # rewritten whole


def test_a_pre_parsed_entry_of_an_older_format_is_ignored(pyindex, wheels, tmp_path):
    import hashlib

    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    cold = _source([idx.url], cache).files("alpha", KEEP)
    (entry,) = _parsed(cache)
    _, _, payload = entry.read_bytes().partition(b"\n")
    # A sound entry (checksum right) written by an older wh, whose rows meant something else.
    payload = payload.replace(b"alpha-1.0", b"alpha-9.0")
    old = b"wh-parsed-page %d %s\n" % (FORMAT - 1, hashlib.sha256(payload).hexdigest().encode())
    entry.write_bytes(old + payload)
    assert _source([idx.url], cache).files("alpha", KEEP) == cold


def test_a_pre_parsed_entry_never_outlives_its_page(pyindex, wheels, tmp_path):
    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    _source([idx.url], cache).files("alpha", KEEP)
    make_wheel(wheels, "alpha", "3.0")
    idx.add(wheels)
    files = _source([idx.url], cache, ttl=0).files("alpha", KEEP)  # a new body: a new parse
    assert _names(files) == ["alpha-1.0-py3-none-any.whl", "alpha-3.0-py3-none-any.whl"]


def test_a_torn_body_behind_a_missing_pre_parsed_entry_is_a_miss(pyindex, wheels, tmp_path):
    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    cold = _source([idx.url], cache).files("alpha", KEEP)
    (entry,) = _parsed(cache)
    entry.unlink()
    body = entry.parent / (entry.name.split(".")[0] + ".body")
    body.write_bytes(body.read_bytes()[:20])  # the page body is torn: its sha256 no longer matches
    with pytest.raises(NotCached, match="index page of alpha"):
        _source([idx.url], cache, offline=True).files("alpha", KEEP)
    assert _source([idx.url], cache).files("alpha", KEEP) == cold  # online: fetched again whole
    assert idx.page_requests() == 2
    assert _source([idx.url], cache, offline=True).files("alpha", KEEP) == cold


def test_stored_rows_carry_every_distfile_field():
    import dataclasses

    from wheelhouse.index.distfile import Distfile
    from wheelhouse.index.parsed import _FIELDS

    # A field added to Distfile must be added to the rows (and FORMAT bumped), or loads would lack it.
    assert {f.name for f in dataclasses.fields(Distfile)} == {*_FIELDS, "origin"}
