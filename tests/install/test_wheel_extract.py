"""Extraction streams, hashes and bounds every member (issue 11.16: a zip bomb's size is enforced while streaming)."""

from __future__ import annotations

import base64
import hashlib
import struct
import sys
import zipfile
from pathlib import Path

import pytest

from nvidia_fixtures import tree_listing
from wheelmaker import make_wheel

from wheelhouse.install.wheel import NoSpace, RecordMismatch, install_wheels

INFO = "bomb-1.0.dist-info"


def _bomb(path: Path, real: bytes, declared: int) -> Path:
    """A wheel whose bomb/data.bin inflates to ``real`` while its central directory and RECORD declare
    ``declared`` bytes (what a zip bomb does)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(real).digest()).rstrip(b"=").decode()
    meta = b"Metadata-Version: 2.1\nName: bomb\nVersion: 1.0\n"
    wheel = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = (f"bomb/data.bin,sha256={digest},{declared}\n{INFO}/METADATA,,\n{INFO}/WHEEL,,\n{INFO}/RECORD,,\n")

    def h(b: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()

    record = record.replace(f"{INFO}/METADATA,,", f"{INFO}/METADATA,{h(meta)},{len(meta)}")
    record = record.replace(f"{INFO}/WHEEL,,", f"{INFO}/WHEEL,{h(wheel)},{len(wheel)}")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bomb/data.bin", real)
        zf.writestr(f"{INFO}/METADATA", meta)
        zf.writestr(f"{INFO}/WHEEL", wheel)
        zf.writestr(f"{INFO}/RECORD", record)
    with zipfile.ZipFile(path) as zf:
        start, local = zf.start_dir, zf.getinfo("bomb/data.bin").header_offset
    data = bytearray(path.read_bytes())
    assert data[start:start + 4] == b"PK\x01\x02"  # its entry is the first of the central directory
    struct.pack_into("<I", data, start + 24, declared)  # uncompressed size, central directory
    struct.pack_into("<I", data, local + 22, declared)  # and local header
    path.write_bytes(bytes(data))
    return path


def test_a_member_inflating_past_its_declared_size_stops_while_streaming(tmp_path, scheme):
    before = tree_listing(tmp_path / "env")
    w = _bomb(tmp_path / "bomb-1.0-py3-none-any.whl", bytes(64 << 20), declared=1000)
    assert w.stat().st_size < 1 << 20  # 64 MiB of zeros in well under 1 MiB
    with pytest.raises(RecordMismatch, match="inflates beyond its declared 1000 bytes"):
        install_wheels([w], scheme, sys.executable)
    assert tree_listing(tmp_path / "env") == before


def test_declared_sizes_must_fit_the_free_space(tmp_path, scheme):
    w = _bomb(tmp_path / "bomb-1.0-py3-none-any.whl", b"x" * 10, declared=10)
    # Declare 2**50 bytes (zip64): rewrite the central directory with that size (zipfile writes a zip64
    # extra for it), and RECORD with the same.
    huge = 1 << 50
    with zipfile.ZipFile(w) as zf:
        items = [(i, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(w, "w", zipfile.ZIP_STORED) as zf:
        for info, data in items:
            if info.filename.endswith("RECORD"):
                data = data.replace(b",10\n", f",{huge}\n".encode())
            zf.writestr(info.filename, data)
    with zipfile.ZipFile(w, "a") as zf:
        zf.getinfo("bomb/data.bin").file_size = huge
        zf._didModify = True  # rewrite the central directory on close (with a zip64 extra)
    with zipfile.ZipFile(w) as zf:
        assert zf.getinfo("bomb/data.bin").file_size == huge
    before = tree_listing(tmp_path / "env")
    with pytest.raises(NoSpace, match="unpack to .* MB free"):
        install_wheels([w], scheme, sys.executable)
    assert tree_listing(tmp_path / "env") == before


def test_every_file_is_hashed_as_it_is_written(tmp_path, scheme):
    w = make_wheel(tmp_path / "w", "fine", "1.0", modules={f"fine/m{i}.py": f"X = {i}\n" * 1000 for i in range(20)})
    [done] = install_wheels([w], scheme, sys.executable, jobs=4)
    assert done.files == 20 + 5  # modules, METADATA, WHEEL, INSTALLER, REQUESTED, RECORD
    assert (Path(scheme["purelib"]) / "fine" / "m7.py").read_text() == "X = 7\n" * 1000
