"""The index page cache as a resolver run sees it: conditional requests answered 304, --refresh,
--offline from the cache alone (a stopped index, a remembered 404, a clear miss), and pages kept
pre-parsed beside their entry (used when sound, a miss when torn, edited or of an older format)."""

from __future__ import annotations

import json
import socket

import pytest

import wheelhouse.index.source as index_mod  # PackageSource's module: the parsers it calls, its Accept header
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
    assert _names(cold) == ["alpha-1.0-py3-none-any.whl"]
    (entry,) = _pages(cache)
    assert len(_header(entry)["extras"]) == 1  # one file per page: its body and its pre-parsed form

    def no_parsing(*a, **k):
        raise AssertionError("the page was parsed again")

    with monkeypatch.context() as m:
        import wheelhouse.index.pages as pages_mod  # PackageSource imports the parsers from here when it parses

        m.setattr(pages_mod, "parse_simple_json_body", no_parsing)
        m.setattr(pages_mod, "parse_simple_html", no_parsing)
        assert _source([idx.url], cache).files("alpha", KEEP) == cold
    # another filter (or none) is its own pre-parsed form: never the list filtered for someone else
    assert len(_source([idx.url], cache).files("alpha")) == 2
    assert _pages(cache) == [entry] and len(_header(entry)["extras"]) == 2
    assert _source([idx.url], cache).files("alpha", KEEP) == cold  # the first form is kept beside it
    assert idx.page_requests() == 1


def _pages(cache):
    return sorted((cache / "http").rglob("*.page"))


def _header(entry):
    line, _, rest = entry.read_bytes().partition(b"\n")
    return json.loads(rest[: int(line.split()[3])])


def _spans(entry):
    """(start, end) of each extra and of the body inside a packed entry."""
    line, _, rest = entry.read_bytes().partition(b"\n")
    pos = len(line) + 1 + int(line.split()[3])
    spans = []
    for _, size, _ in _header(entry)["extras"]:
        spans.append((pos, pos + size))
        pos += size
    return spans, (pos, entry.stat().st_size)


def _splice(entry, start, end, new):
    raw = entry.read_bytes()
    entry.write_bytes(raw[:start] + new + raw[end:])


@pytest.mark.parametrize("how", ["garbage", "edited", "older-format"])
def test_a_bad_pre_parsed_form_falls_back_to_the_body(pyindex, wheels, tmp_path, how):
    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    cold = _source([idx.url], cache).files("alpha", KEEP)
    (entry,) = _pages(cache)
    ((start, end),), _ = _spans(entry)
    extra = entry.read_bytes()[start:end]
    if how == "garbage":  # same length, other bytes: its checksum in the header disagrees
        bad = bytes(b ^ 0xFF for b in extra)
    elif how == "edited":
        bad = extra.replace(b"alpha-1.0", b"alpha-9.0")
    else:  # a sound form (checksum right) written by an older wh, whose rows meant something else
        head, _, rows = extra.partition(b"\n")
        bad = b"wh-parsed-page %d\n" % (FORMAT - 1) + rows.replace(b"alpha-1.0", b"alpha-9.0")
    _splice(entry, start, end, bad)
    if how == "older-format":  # re-sign the header, as the older wh would have written it
        _resign(entry, bad)
    assert _source([idx.url], cache).files("alpha", KEEP) == cold
    assert idx.page_requests() == 1  # the page itself was fine: no request
    ((start, end),), _ = _spans(entry)
    assert entry.read_bytes()[start:end].startswith(b"wh-parsed-page %d\n" % FORMAT)  # rewritten
    assert _source([idx.url], cache, offline=True).files("alpha", KEEP) == cold


def _resign(entry, extra):
    """Rewrite a packed entry's header so its (single) extra's checksum matches ``extra``."""
    import hashlib

    raw = entry.read_bytes()
    line, _, rest = raw.partition(b"\n")
    size = int(line.split()[3])
    head = json.loads(rest[:size])
    head["extras"][0][1:] = [len(extra), hashlib.sha256(extra).hexdigest()]
    new = json.dumps(head, separators=(",", ":")).encode()
    parts = line.split()
    parts[2:] = [hashlib.sha256(new).hexdigest().encode(), str(len(new)).encode()]
    entry.write_bytes(b" ".join(parts) + b"\n" + new + rest[size:])


def test_a_pre_parsed_form_never_outlives_its_page(pyindex, wheels, tmp_path):
    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    _source([idx.url], cache).files("alpha", KEEP)
    make_wheel(wheels, "alpha", "3.0")
    idx.add(wheels)
    files = _source([idx.url], cache, ttl=0).files("alpha", KEEP)  # a new body: a new parse
    assert _names(files) == ["alpha-1.0-py3-none-any.whl", "alpha-3.0-py3-none-any.whl"]
    assert _names(_source([idx.url], cache, offline=True).files("alpha", KEEP)) == _names(files)


def test_a_changed_body_behind_a_good_pre_parsed_form_is_a_miss(pyindex, wheels, tmp_path):
    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    _source([idx.url], cache).files("alpha", KEEP)
    (entry,) = _pages(cache)
    _, (start, end) = _spans(entry)
    body = entry.read_bytes()[start:end]
    _splice(entry, start, end, body.replace(b"alpha-1.0", b"alpha-0.1"))  # same length, other bytes
    # the pre-parsed form alone is still sound, and is what this run uses without reading the body
    _source([idx.url], cache, offline=True).files("alpha", KEEP)
    # a filter with no stored form needs the body: it is refused, never parsed into other files
    with pytest.raises(NotCached, match="index page of alpha"):
        _source([idx.url], cache, offline=True).files("alpha")
    assert _names(_source([idx.url], cache).files("alpha")) == [
        "alpha-1.0-py3-none-any.whl", "alpha-2.0-cp312-cp312-manylinux_2_17_x86_64.whl"]
    assert idx.page_requests() == 2  # online: fetched again whole


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.9, -1])
def test_a_torn_entry_is_a_miss_never_fewer_files(pyindex, wheels, tmp_path, cut):
    """A power cut mid-write (the entry is not fsynced) leaves a prefix of it: wherever the cut
    falls, offline refuses and online fetches the page again; no run answers with a partial list."""
    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    cold = _source([idx.url], cache).files("alpha", KEEP)
    (entry,) = _pages(cache)
    raw = entry.read_bytes()
    entry.write_bytes(raw[: int(len(raw) * cut)] if cut > 0 else raw[:-1])
    with pytest.raises(NotCached, match="index page of alpha"):
        _source([idx.url], cache, offline=True).files("alpha", KEEP)
    assert _source([idx.url], cache).files("alpha", KEEP) == cold
    assert idx.page_requests() == 2
    assert _source([idx.url], cache, offline=True).files("alpha", KEEP) == cold


def _legacy_cache(cache, url, body, *, status=200):
    """Write a page the way wh wrote it before pages were packed: ``http/ab/<key>.json`` + ``.body``
    and a pre-parsed side file of the old format (which must not be trusted any more)."""
    import hashlib
    import time

    key = hashlib.sha256(json.dumps([url, sorted({"Accept": index_mod.SIMPLE_ACCEPT}.items())]).encode()).hexdigest()
    entry = cache / "http" / key[:2] / key
    entry.parent.mkdir(parents=True)
    entry.with_suffix(".body").write_bytes(body)
    entry.with_suffix(".json").write_text(json.dumps({
        "url": url, "status": status, "headers": {"content-type": "application/vnd.pypi.simple.v1+json"},
        "stored": time.time() - 86400, "sha256": hashlib.sha256(body).hexdigest() if status == 200 else ""}))
    payload = b'{"body":"x","files":[]}'
    (entry.parent / f"{key}.0123456789abcdef.parsed").write_bytes(
        b"wh-parsed-page 1 " + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    return entry


def test_a_cache_from_before_packing_is_read_offline_and_replaced_online(pyindex, wheels, tmp_path):
    idx = pyindex(wheels)
    fresh = _source([idx.url], tmp_path / "ref")
    cold = fresh.files("alpha", KEEP)
    body = fresh.client.get(idx.url + "alpha/", {"Accept": index_mod.SIMPLE_ACCEPT}).body
    torn = _legacy_cache(tmp_path / "torn", idx.url + "alpha/", body)
    torn.with_suffix(".body").write_bytes(body[: len(body) // 2])  # a torn old body: a miss, not fewer files
    with pytest.raises(NotCached):
        _source([idx.url], tmp_path / "torn", offline=True).files("alpha", KEEP)
    cache = tmp_path / "old"
    _legacy_cache(cache, idx.url + "alpha/", body)
    _legacy_cache(cache, idx.url + "missing/", b"", status=404)
    before = idx.page_requests()
    assert _source([idx.url], cache, offline=True).files("alpha", KEEP) == cold  # old entries still read
    assert _source([idx.url], cache, offline=True).files("missing") == []  # and the remembered 404
    assert len(_pages(cache)) == 1  # what was parsed is kept packed (the old side file is not trusted)
    assert _source([idx.url], cache, offline=True).files("alpha", KEEP) == cold
    assert _source([idx.url], cache, ttl=0).files("alpha", KEEP) == cold  # online: revalidated as usual
    assert idx.page_requests() == before + 1


def test_stored_rows_carry_every_distfile_field():
    import dataclasses

    from wheelhouse.index.distfile import Distfile
    from wheelhouse.index.parsed import _FIELDS

    # A field added to Distfile must be added to the rows (and FORMAT bumped), or loads would lack it.
    assert {f.name for f in dataclasses.fields(Distfile)} == {*_FIELDS, "origin"}
