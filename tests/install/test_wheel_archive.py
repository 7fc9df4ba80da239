"""Reading a wheel's listing without zipfile: the same answer as zipfile, or zipfile's own (issue 14)."""

from __future__ import annotations

import io
import os
import zipfile

import pytest

from wheelmaker import make_wheel

from wheelhouse.install.wheel import archive
from wheelhouse.install.wheel.archive import read_wheel
from wheelhouse.install.wheel.record import UnpackError


def _by_zipfile(w):
    with zipfile.ZipFile(w) as zf:
        members = tuple((i.filename, i.file_size, i.compress_size, i.compress_type, i.CRC, i.header_offset,
                         (i.external_attr >> 16) & 0o777) for i in zf.infolist())
        texts = {n: zf.read(n).decode() for n in zf.namelist()
                 if n.count("/") == 1 and n.endswith(("/RECORD", "/WHEEL", "/METADATA", "/entry_points.txt"))}
    return members, texts


def _fresh(w):
    archive._cache.clear()
    return read_wheel(w)


def _variants(tmp_path):
    """Wheels the fast path reads, and wheels it must leave to zipfile, all with the same content."""
    base = make_wheel(tmp_path / "base", "pkg", "1.0", modules={"pkg/__init__.py": "X = 1\n" * 100,
                                                                "pkg/é.py": "Y = 2\n"},
                      entry_points={"console_scripts": {"pkg": "pkg:main"}}, files={"pkg/blob.bin": os.urandom(5000)})
    out = {"plain": base}
    with zipfile.ZipFile(base) as zf:
        items = [(i, zf.read(i)) for i in zf.infolist()]

    def rewrite(name, prefix=b"", comment=b"", stored=False, zip64=False):
        path = tmp_path / name / base.name
        path.parent.mkdir()
        fh = io.BytesIO()
        with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED,
                             allowZip64=True) as zf:
            for info, data in items:
                zi = zipfile.ZipInfo(info.filename, info.date_time)
                zi.external_attr = 0o100755 << 16 if info.filename.endswith(".bin") else info.external_attr
                zi.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
                with zf.open(zi, "w", force_zip64=zip64) as dst:
                    dst.write(data)
            zf.comment = comment
        # Bytes before an archive whose offsets count from its own start (a zip appended to a script).
        path.write_bytes(prefix + fh.getvalue())
        out[name] = path

    rewrite("stored", stored=True)
    rewrite("comment", comment=b"a comment after the end record")
    rewrite("prefixed", prefix=b"#!/bin/sh\nexec something\n")
    rewrite("zip64", zip64=True)
    return out


def test_the_listing_is_zipfiles_listing_for_every_kind_of_archive(tmp_path):
    for kind, w in _variants(tmp_path).items():
        got = _fresh(w)
        members, texts = _by_zipfile(w)
        assert got.members == members, kind
        assert dict(got.texts) == texts, kind
        assert set(texts) == {"pkg-1.0.dist-info/RECORD", "pkg-1.0.dist-info/WHEEL", "pkg-1.0.dist-info/METADATA",
                              "pkg-1.0.dist-info/entry_points.txt"}


def test_the_fast_path_is_taken_for_a_plain_wheel_and_declined_for_odd_ones(tmp_path):
    v = _variants(tmp_path)
    assert archive._read_fast(v["plain"]) is not None
    assert archive._read_fast(v["stored"]) is not None
    assert archive._read_fast(v["comment"]) is not None
    assert archive._read_fast(v["zip64"]) is not None  # zip64 local headers; the listing needs no zip64 extra
    assert archive._read_fast(v["prefixed"]) is None  # zipfile's reading, which allows for the prefix


def test_a_damaged_record_is_named_not_parsed(tmp_path):
    w = make_wheel(tmp_path, "pkg", "1.0", modules={"pkg/__init__.py": ""})
    data = bytearray(w.read_bytes())
    with zipfile.ZipFile(w) as zf:
        info = zf.getinfo("pkg-1.0.dist-info/RECORD")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + 3] ^= 0xFF  # inside RECORD's compressed bytes
    w.write_bytes(bytes(data))
    with pytest.raises(UnpackError, match=r"pkg-1.0-py3-none-any.whl is not a readable wheel"):
        _fresh(w)


def test_a_replaced_file_is_read_again(tmp_path):
    w = make_wheel(tmp_path / "a", "pkg", "1.0", modules={"pkg/__init__.py": ""})
    first = _fresh(w)
    assert read_wheel(w) is first  # remembered
    other = make_wheel(tmp_path / "b", "pkg", "1.0", modules={"pkg/__init__.py": "", "pkg/extra.py": "E = 1\n"})
    os.replace(other, w)
    assert "pkg/extra.py" in read_wheel(w).names


def test_not_a_zip_is_an_unpack_error(tmp_path):
    w = tmp_path / "pkg-1.0-py3-none-any.whl"
    w.write_bytes(b"this is not a zip archive" * 10)
    with pytest.raises(UnpackError, match="not a readable wheel"):
        _fresh(w)
    with pytest.raises(UnpackError, match="not a readable wheel"):
        _fresh(tmp_path / "missing-1.0-py3-none-any.whl")
