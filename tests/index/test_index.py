"""PackageSource (PEP 691/503 pages, find-links, direct files) and MetadataReader (PEP 658, ranges)."""

from __future__ import annotations

import os
import io
import zipfile

import pytest

from wheelhouse.index.http import HttpClient
from wheelhouse.index import BadDirectReference, PackageSource, parse_simple_html
from wheelhouse.index.metadata import MetadataError, MetadataReader
from wheelhouse.index.distfile import distfile_from_filename
from wheelmaker import make_wheel


@pytest.fixture
def wheels(tmp_path):
    w = tmp_path / "wheels"
    make_wheel(w, "alpha.pkg", "1.0", requires=["beta>=2"])
    make_wheel(w, "alpha-pkg", "2.0", requires=["beta>=2"], tags="cp312-cp312-manylinux_2_17_x86_64")
    make_wheel(w, "beta", "2.0")
    (w / "beta-2.0.tar.gz").write_bytes(b"not really an sdist")
    return w


@pytest.mark.parametrize("fmt", ["json", "html"])
def test_index_pages_list_files_with_their_attributes(pyindex, wheels, fmt):
    idx = pyindex(
        wheels,
        json=fmt == "json",
        serve_metadata=True,
        yanked={"alpha_pkg-1.0-py3-none-any.whl": "broken build"},
        requires_python={"alpha_pkg-2.0-cp312-cp312-manylinux_2_17_x86_64.whl": ">=3.12,<3.14"},
    )
    files = {f.filename: f for f in PackageSource([idx.url]).files("ALPHA_pkg")}
    assert set(files) == {"alpha_pkg-1.0-py3-none-any.whl", "alpha_pkg-2.0-cp312-cp312-manylinux_2_17_x86_64.whl"}
    old, new = files["alpha_pkg-1.0-py3-none-any.whl"], files["alpha_pkg-2.0-cp312-cp312-manylinux_2_17_x86_64.whl"]
    assert old.name == "alpha-pkg" and old.version == "1.0"
    assert old.yanked and old.yanked_reason == "broken build" and not new.yanked
    assert new.requires_python == ">=3.12,<3.14"  # HTML-escaped on the page, plain here
    assert new.sha256 == idx.sha256(new.filename)
    assert new.url == idx.file_url(new.filename)  # relative link resolved against the page
    assert new.metadata_url == new.url + ".metadata" and new.metadata_sha256
    # sdists are listed too (the resolver refuses them with a reason)
    assert any(not f.is_wheel for f in PackageSource([idx.url]).files("beta"))


def test_unknown_project_is_empty_not_an_error(pyindex, wheels):
    idx = pyindex(wheels)
    assert PackageSource([idx.url]).files("nope") == []


def test_first_index_that_has_a_project_wins(pyindex, tmp_path):
    make_wheel(tmp_path / "a", "shared", "1.0")
    make_wheel(tmp_path / "b", "shared", "9.0")
    make_wheel(tmp_path / "b", "only-b", "1.0")
    a, b = pyindex(tmp_path / "a"), pyindex(tmp_path / "b")
    src = PackageSource([a.url, b.url])
    assert [f.version for f in src.files("shared")] == ["1.0"]  # extra index cannot shadow it
    assert [f.version for f in src.files("only-b")] == ["1.0"]


def test_find_links_folder_page_and_direct_files(tmp_path, wheels):
    page = tmp_path / "links.html"
    page.write_text(f'<a href="{(wheels / "beta-2.0-py3-none-any.whl").as_uri()}#sha256=abc">beta</a>')
    src = PackageSource((), [str(wheels), str(page)])
    names = sorted(f.filename for f in src.files("beta"))
    assert names == ["beta-2.0-py3-none-any.whl", "beta-2.0-py3-none-any.whl", "beta-2.0.tar.gz"]
    assert any(f.sha256 == "abc" for f in src.files("beta"))
    d = src.direct(str(wheels / "beta-2.0-py3-none-any.whl"))
    assert d.name == "beta" and d.origin == "direct" and d.local_path.is_file()
    with pytest.raises(BadDirectReference, match="source distribution"):
        src.direct(str(wheels / "beta-2.0.tar.gz"))
    with pytest.raises(BadDirectReference, match="no such file"):
        src.direct(str(tmp_path / "missing-1.0-py3-none-any.whl"))
    with pytest.raises(BadDirectReference, match="no such folder"):
        PackageSource((), [str(tmp_path / "nowhere")]).files("beta")


def test_pages_are_cached_on_disk_between_runs(pyindex, wheels, tmp_path):
    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    PackageSource([idx.url], client=HttpClient(cache_dir=cache)).files("beta")
    PackageSource([idx.url], client=HttpClient(cache_dir=cache)).files("beta")
    assert idx.hits["/simple/beta/"] == 1  # the second run read the page from disk
    # a stale entry is revalidated, not re-downloaded
    PackageSource([idx.url], client=HttpClient(cache_dir=cache), page_ttl=0).files("beta")
    assert idx.hits["/simple/beta/"] == 2
    assert "If-None-Match" in idx.log[-1][1]


def test_html_parser_handles_base_and_pep658_bare_attribute():
    html = '<base href="https://files.example/x/"><a href="p-1.0-py3-none-any.whl" data-dist-info-metadata>p</a>'
    (d,) = parse_simple_html(html, "https://index.example/simple/p/", "idx")
    assert d.url == "https://files.example/x/p-1.0-py3-none-any.whl"
    assert d.metadata_url == d.url + ".metadata" and d.metadata_sha256 is None


# --- metadata ------------------------------------------------------------------------------------
def _dist(pyindex, folder, **knobs):
    idx = pyindex(folder, **knobs)
    src = PackageSource([idx.url])
    return idx, src


def test_metadata_by_range_requests_reads_a_sliver_of_a_big_wheel(pyindex, tmp_path):
    path = make_wheel(tmp_path / "w", "big", "1.0", requires=["dep>=1", "other; extra == 'x'"], extras={}, pad_bytes=4_000_000)
    idx, src = _dist(pyindex, tmp_path / "w", serve_metadata=False)
    (d,) = src.files("big")
    reader = MetadataReader(src.client)
    meta = reader.read(d)
    assert meta.requires_dist == ("dep>=1", "other; extra == 'x'")
    served = idx.bytes_served(path.name)
    assert served <= 70_000 < path.stat().st_size // 50  # a 64 KiB tail, not 4 MB
    assert idx.requests_for(path.name) == 1 and reader.stats["range"] == 1


def _zip_with_metadata_first(path, n_files=3000):
    """A wheel whose METADATA is the FIRST member and whose central directory outgrows one tail read."""
    meta = b"Metadata-Version: 2.1\nName: early\nVersion: 1.0\nRequires-Dist: dep==2\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("early-1.0.dist-info/METADATA", meta)
        zf.writestr("early/blob.bin", os.urandom(1_500_000))
        for i in range(n_files):
            zf.writestr(f"early/some/rather/long/package/path/module_{i:05d}.py", "")
        zf.writestr("early-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        zf.writestr("early-1.0.dist-info/RECORD", "")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())
    return path


def test_metadata_early_in_zip_and_large_central_directory(pyindex, tmp_path):
    path = _zip_with_metadata_first(tmp_path / "w" / "early-1.0-py3-none-any.whl")
    idx, src = _dist(pyindex, tmp_path / "w")
    (d,) = src.files("early")
    reader = MetadataReader(src.client, tail_bytes=16 * 1024)
    assert reader.read(d).requires_dist == ("dep==2",)
    # tail + rest of the central directory + METADATA: three round trips, never the blob
    assert idx.requests_for(path.name) == 3
    assert idx.bytes_served(path.name) < path.stat().st_size - 1_000_000


def test_pep658_metadata_is_used_and_verified(pyindex, tmp_path):
    path = make_wheel(tmp_path / "w", "meta", "1.0", requires=["dep"], pad_bytes=500_000)
    idx, src = _dist(pyindex, tmp_path / "w", serve_metadata=True)
    (d,) = src.files("meta")
    assert MetadataReader(src.client).read(d).requires_dist == ("dep",)
    assert idx.bytes_served(path.name) == 0 and idx.hits[f"/files/{path.name}.metadata"] == 1
    bad = type(d)(**{**d.__dict__, "metadata_sha256": "0" * 64})
    with pytest.raises(MetadataError, match="sha256 differs"):
        MetadataReader(src.client).read(bad)


def test_server_without_ranges_falls_back_to_one_full_download(pyindex, tmp_path):
    path = make_wheel(tmp_path / "w", "plain", "1.0", requires=["dep"], pad_bytes=100_000)
    idx, src = _dist(pyindex, tmp_path / "w", ranges=False)
    (d,) = src.files("plain")
    reader = MetadataReader(src.client)
    assert reader.read(d).requires_dist == ("dep",)
    assert reader.stats["download"] == 1 and idx.bytes_served(path.name) == path.stat().st_size


def test_metadata_disk_cache_makes_the_second_run_free(pyindex, tmp_path):
    path = make_wheel(tmp_path / "w", "cached", "1.0", requires=["dep"])
    idx, src = _dist(pyindex, tmp_path / "w")
    (d,) = src.files("cached")
    MetadataReader(src.client, cache_dir=tmp_path / "c").read(d)
    again = MetadataReader(src.client, cache_dir=tmp_path / "c")
    assert again.read(d).requires_dist == ("dep",)
    assert idx.requests_for(path.name) == 1 and again.stats["cache"] == 1


def test_metadata_that_names_another_project_is_refused(pyindex, tmp_path):
    make_wheel(tmp_path / "w", "real", "1.0", filename="fake-1.0-py3-none-any.whl")
    idx, src = _dist(pyindex, tmp_path / "w")
    (d,) = src.files("fake")
    with pytest.raises(MetadataError, match="METADATA says real 1.0"):
        MetadataReader(src.client).read(d)


def _zip_like_a_real_wheel(path, n_files=3000, *, comment=b"", method=zipfile.ZIP_DEFLATED):
    """dist-info written last (METADATA, WHEEL, a RECORD listing every file), and a central
    directory that outgrows one tail read, as torch-sized wheels have."""
    names = [f"late/some/rather/long/package/path/module_{i:05d}.py" for i in range(n_files)]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        zf.writestr("late/blob.bin", os.urandom(1_500_000))
        for n in names:
            zf.writestr(n, "")
        zf.writestr("late-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: late\nVersion: 1.0\nRequires-Dist: dep<3\n")
        zf.writestr("late-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
        zf.writestr("late-1.0.dist-info/RECORD", "".join(f"{n},sha256={'A' * 43},0\n" for n in names))
        zf.comment = comment
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())
    return path


def test_metadata_of_a_wheel_with_a_large_directory_takes_two_ranges(pyindex, tmp_path):
    """The directory is fetched with the bytes just before it (where dist-info lives): tail +
    one range, not tail + directory + member (one round trip less on torch-like wheels)."""
    path = _zip_like_a_real_wheel(tmp_path / "w" / "late-1.0-py3-none-any.whl")
    idx, src = _dist(pyindex, tmp_path / "w", serve_metadata=False)
    (d,) = src.files("late")
    reader = MetadataReader(src.client, tail_bytes=16 * 1024)
    assert reader.read(d).requires_dist == ("dep<3",)
    assert idx.requests_for(path.name) == 2
    assert idx.bytes_served(path.name) < path.stat().st_size - 1_000_000  # never the blob


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
@pytest.mark.parametrize("comment", [b"", b"a zip comment"])
def test_directory_walk_reads_what_zipfile_reads(tmp_path, method, comment):
    """The central-directory walk gives zipfile's bytes for METADATA, or steps aside (None)."""
    from wheelhouse.index.metadata import _metadata_by_directory, _RangeFile

    path = _zip_like_a_real_wheel(tmp_path / "late-1.0-py3-none-any.whl", 200, comment=comment, method=method)
    data = path.read_bytes()
    d = distfile_from_filename(path.name, path.as_uri())
    remote = _RangeFile(lambda a, b: data[a:b], len(data), len(data) - 4096, data[-4096:])
    with zipfile.ZipFile(path) as zf:
        assert _metadata_by_directory(remote, len(data), d) == zf.read("late-1.0.dist-info/METADATA")


def test_directory_walk_steps_aside_for_a_damaged_member(tmp_path):
    """Altered METADATA bytes fail the CRC-32: the walk returns None (zipfile then refuses it)."""
    from wheelhouse.index.metadata import _metadata_by_directory, _RangeFile

    path = _zip_like_a_real_wheel(tmp_path / "late-1.0-py3-none-any.whl", 10, method=zipfile.ZIP_STORED)
    data = bytearray(path.read_bytes())
    pos = data.find(b"Requires-Dist: dep<3")
    data[pos + len("Requires-Dist: ")] = ord("X")
    data = bytes(data)
    d = distfile_from_filename(path.name, path.as_uri())
    remote = _RangeFile(lambda a, b: data[a:b], len(data), 0, data)
    assert _metadata_by_directory(remote, len(data), d) is None


def test_a_torn_metadata_cache_entry_is_a_miss_not_fewer_dependencies(pyindex, tmp_path):
    """Cache entries are written without fsync: one cut short by a power cut (here: truncated
    after its first dependency) must be read again from the index, never trusted."""
    path = make_wheel(tmp_path / "w", "torn", "1.0", requires=["a>=1", "b>=2", "c>=3"], pad_bytes=10_000)
    idx, src = _dist(pyindex, tmp_path / "w", serve_metadata=False)
    (d,) = src.files("torn")
    MetadataReader(src.client, cache_dir=tmp_path / "c").read(d)
    (entry,) = (tmp_path / "c" / "metadata").rglob("*.meta")
    blob = entry.read_bytes()
    entry.write_bytes(blob[: blob.index(b"Requires-Dist: b")])
    before = idx.requests_for(path.name)
    reader = MetadataReader(src.client, cache_dir=tmp_path / "c")
    assert reader.read(d).requires_dist == ("a>=1", "b>=2", "c>=3")
    assert idx.requests_for(path.name) > before and reader.stats["cache"] == 0
    # and the entry is whole again: the next reader needs no request
    again = MetadataReader(src.client, cache_dir=tmp_path / "c")
    assert again.read(d).requires_dist == ("a>=1", "b>=2", "c>=3") and again.stats["cache"] == 1
