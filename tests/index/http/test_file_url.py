"""wheelhouse.index.http.file_url: file:// answered like HTTP (200, 206 for Range, 404, 416)."""

from __future__ import annotations

import os

import pytest

from wheelhouse.index.http.file_url import open_file_url
from wheelhouse.index.http.messages import HttpError

DATA = os.urandom(100_000)


@pytest.fixture
def wheel(tmp_path):
    folder = tmp_path / "find links"  # a space: the URL is percent-encoded
    folder.mkdir()
    path = folder / "demo-1.0-py3-none-any.whl"
    path.write_bytes(DATA)
    return path


def test_a_whole_file_is_a_200_with_its_length(wheel):
    resp = open_file_url(wheel.as_uri(), {})
    assert "%20" in resp.url
    assert resp.status == 200
    assert resp.headers["Content-Length"] == str(len(DATA)) and resp.headers["Accept-Ranges"] == "bytes"
    assert resp.read() == DATA


def test_chunks_have_the_asked_size(wheel):
    sizes = [len(c) for c in open_file_url(wheel.as_uri(), {}).iter_chunks(30_000)]
    assert sizes == [30_000, 30_000, 30_000, 10_000]


@pytest.mark.parametrize(
    "rng, start, end",
    [("bytes=0-0", 0, 1), ("bytes=10-19", 10, 20), ("bytes=99990-", 99990, 100_000),
     ("bytes=-16", 100_000 - 16, 100_000), ("bytes=99990-200000", 99990, 100_000), ("bytes=-200000", 0, 100_000)],
)
def test_a_range_is_a_206_with_exactly_those_bytes(wheel, rng, start, end):
    resp = open_file_url(wheel.as_uri(), {"range": rng})  # header names are case-insensitive
    assert resp.status == 206
    assert resp.headers["content-range"] == f"bytes {start}-{end - 1}/{len(DATA)}"
    assert resp.headers["content-length"] == str(end - start)
    assert resp.read() == DATA[start:end]


@pytest.mark.parametrize("rng", ["bytes=100000-", "bytes=-0", "bytes=20-10", "bytes=0-1,5-6", "items=0-1"])
def test_an_unsatisfiable_range_is_a_416(wheel, rng):
    with pytest.raises(HttpError) as err:
        open_file_url(wheel.as_uri(), {"Range": rng})
    assert err.value.status == 416


def test_a_missing_file_is_a_404(tmp_path):
    with pytest.raises(HttpError) as err:
        open_file_url((tmp_path / "nope.whl").as_uri(), {})
    assert err.value.status == 404
    assert "check the name" in err.value.hint


def test_a_folder_serves_its_index_html_or_is_a_404(tmp_path):
    (tmp_path / "simple" / "demo").mkdir(parents=True)
    (tmp_path / "simple" / "demo" / "index.html").write_text("<a href='x'>x</a>")
    assert open_file_url((tmp_path / "simple" / "demo").as_uri() + "/", {}).read() == b"<a href='x'>x</a>"
    with pytest.raises(HttpError) as err:
        open_file_url((tmp_path / "simple").as_uri(), {})
    assert err.value.status == 404
