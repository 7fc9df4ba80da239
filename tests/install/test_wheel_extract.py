"""Extraction streams, hashes and bounds every member (issue 11.16: a zip bomb's size is enforced while streaming)."""

from __future__ import annotations

import base64
import os
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


# ---- the extraction cache (linkcache), in process -------------------------------------------------

def _scheme(root: Path) -> dict[str, str]:
    """A second (third) install target beside the ``scheme`` fixture's, laid out the same."""
    s = {"purelib": root / "site", "platlib": root / "site", "scripts": root / "bin", "data": root,
         "headers": root / "include"}
    for p in s.values():
        p.mkdir(parents=True, exist_ok=True)
    return {k: str(v) for k, v in s.items()}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_linkable_members_exclude_what_differs_per_venv():
    from wheelhouse.install.wheel.linkcache import linkable

    info = "a-1.0.dist-info"
    assert linkable("a/__init__.py", info, script=False)
    assert linkable(f"{info}/METADATA", info, script=False)
    assert not linkable("a-1.0.data/scripts/tool", info, script=True)
    assert not linkable("a/__pycache__/x.cpython-312.pyc", info, script=False)
    for name in ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json"):
        assert not linkable(f"{info}/{name}", info, script=False)
    assert linkable(f"a/{info}/RECORD", info, script=False)  # only the dist-info's own


def test_linked_modules_are_handed_to_the_byte_compiler_and_the_reporter(tmp_path):
    from wheelhouse.progress import RecordingReporter

    w = make_wheel(tmp_path / "w", "fine", "1.0", modules={f"fine/m{i}.py": f"X = {i}\n" for i in range(5)})
    cache, sha = tmp_path / "cache", _sha(w)
    install_wheels([w], _scheme(tmp_path / "a"), sys.executable, expected={w: sha}, link_cache=cache,
                   record_checked=[w])
    written: list[str] = []
    rec = RecordingReporter()
    [done] = install_wheels([w], _scheme(tmp_path / "b"), sys.executable, expected={w: sha}, link_cache=cache,
                            record_checked=[w], on_written=written.append, reporter=rec)
    assert done.linked == 7  # 5 modules, METADATA, WHEEL
    assert sorted(Path(p).name for p in written) == [f"m{i}.py" for i in range(5)]
    assert (tmp_path / "b" / "site" / "fine" / "m3.py").stat().st_nlink == 3


def test_no_lock_hash_no_cache(tmp_path):
    """A wheel the lock does not vouch for (checked by its own RECORD only) is neither linked nor cached;
    nor is one the lock pins whose RECORD its stage did not check (a linked file is not hashed)."""

    w = make_wheel(tmp_path / "w", "fine", "1.0", modules={"fine/__init__.py": "X = 1\n"})
    cache = tmp_path / "cache"
    for venv in ("a", "b"):
        [done] = install_wheels([w], _scheme(tmp_path / venv), sys.executable, link_cache=cache)
        assert done.linked == 0
    for venv in ("c", "d"):
        [done] = install_wheels([w], _scheme(tmp_path / venv), sys.executable, expected={w: _sha(w)},
                                link_cache=cache)
        assert done.linked == 0 and done.members_hashed
    assert not list(cache.glob("*/*/manifest.json"))


def test_a_file_two_wheels_write_is_not_cached_for_the_one_overwritten(tmp_path):

    a = make_wheel(tmp_path / "w", "one", "1.0", modules={"shared/x.py": "WHO = 'one'\n", "one/__init__.py": ""})
    b = make_wheel(tmp_path / "w", "two", "1.0", modules={"shared/x.py": "WHO = 'two'\n", "two/__init__.py": ""})
    cache, expected = tmp_path / "cache", {a: _sha(a), b: _sha(b)}
    install_wheels([a, b], _scheme(tmp_path / "v1"), sys.executable, expected=expected, link_cache=cache,
                   record_checked=[a, b])
    assert not (cache / _sha(a)[:2] / _sha(a)).exists()  # its shared/x.py holds two's bytes
    assert (cache / _sha(b)[:2] / _sha(b) / "files" / "shared" / "x.py").read_text() == "WHO = 'two'\n"
    # Installed alone, one gets its own file (extracted), not two's.
    install_wheels([a], _scheme(tmp_path / "v2"), sys.executable, expected={a: _sha(a)}, link_cache=cache,
                   record_checked=[a])
    assert (tmp_path / "v2" / "site" / "shared" / "x.py").read_text() == "WHO = 'one'\n"


def test_a_mount_boundary_inside_the_venv_falls_back_to_extraction(tmp_path, monkeypatch):
    """EXDEV from a link (a folder of the venv on another mount of the same device) extracts instead."""
    import errno
    from wheelhouse.install.wheel import linkcache

    w = make_wheel(tmp_path / "w", "fine", "1.0", modules={f"fine/m{i}.py": f"X = {i}\n" for i in range(5)})
    cache, sha = tmp_path / "cache", _sha(w)
    install_wheels([w], _scheme(tmp_path / "a"), sys.executable, expected={w: sha}, link_cache=cache,
                   record_checked=[w])
    real_link = os.link

    def cross(src, dst, **kw):
        if "/cache/" in str(src):
            raise OSError(errno.EXDEV, "Invalid cross-device link", str(src))
        return real_link(src, dst, **kw)

    monkeypatch.setattr(linkcache.os, "link", cross)
    [done] = install_wheels([w], _scheme(tmp_path / "b"), sys.executable, expected={w: sha}, link_cache=cache,
                            record_checked=[w])
    assert done.linked == 0
    assert (tmp_path / "b" / "site" / "fine" / "m3.py").read_text() == "X = 3\n"
    assert (tmp_path / "b" / "site" / "fine" / "m3.py").stat().st_nlink == 1


# ---- inflation in pieces, and what checks each inflated byte ----------------------------------------

def _backends() -> list:
    from wheelhouse import inflate

    return [pytest.param(n, marks=pytest.mark.skipif(n not in inflate.available(), reason=f"{n} not importable"))
            for n in inflate.BACKENDS]


def _pieces_wheel(folder: Path) -> tuple[Path, dict[str, bytes]]:
    """Deflated members that cross every piece boundary of extraction: one whose compressed bytes span
    several preads (incompressible), one whose every fed piece inflates to many bounded outputs (a long
    run), one of exactly one output piece's size, and an empty one."""
    import random

    from wheelhouse.install.wheel import extract

    rnd = random.Random(14)
    files = {
        "pieces/noise.bin": rnd.randbytes(3 * extract._IN + 12345),
        "pieces/run.bin": (b"A" * 1000 + rnd.randbytes(24)) * (40 * extract._OUT // 1024),
        "pieces/exact.bin": bytes(range(256)) * (extract._OUT // 256),
        "pieces/empty.bin": b"",
    }
    w = make_wheel(folder, "pieces", "1.0", files=files)
    with zipfile.ZipFile(w) as zf:
        assert zf.getinfo("pieces/noise.bin").compress_size > 3 * extract._IN  # several preads
        assert zf.getinfo("pieces/run.bin").compress_size < extract._FEED * 16  # each piece -> many outputs
    return w, files


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("by_lock", [True, False], ids=["crc", "record"])
def test_members_inflated_in_pieces_are_written_byte_for_byte(tmp_path, scheme, monkeypatch, backend, by_lock):
    monkeypatch.setenv("WH_INFLATE", backend)
    w, files = _pieces_wheel(tmp_path / "w")
    install_wheels([w], scheme, sys.executable, expected={w: _sha(w)} if by_lock else None, jobs=3)
    for name, body in files.items():
        assert (Path(scheme["purelib"]) / name).read_bytes() == body, name


def _set_crc(wheel: Path, member: str, crc: int) -> None:
    """Give ``member`` another CRC-32 in its local header and its central-directory entry, its deflate
    bytes untouched (what a re-read that differs from the hashed bytes, or an inflater fault, looks like)."""
    with zipfile.ZipFile(wheel) as zf:
        local, start = zf.getinfo(member).header_offset, zf.start_dir
    data = bytearray(wheel.read_bytes())
    struct.pack_into("<I", data, local + 14, crc)
    at = start
    while data[at:at + 4] == b"PK\x01\x02":
        n, x, c = struct.unpack_from("<3H", data, at + 28)
        if data[at + 46:at + 46 + n].decode() == member:
            struct.pack_into("<I", data, at + 16, crc)
            break
        at += 46 + n + x + c
    else:
        raise AssertionError(f"{member} not in the central directory")
    wheel.write_bytes(bytes(data))


@pytest.mark.parametrize("backend", _backends())
def test_a_deflated_member_whose_crc_differs_is_refused_and_nothing_is_left(tmp_path, scheme, monkeypatch, backend):
    monkeypatch.setenv("WH_INFLATE", backend)
    w, files = _pieces_wheel(tmp_path / "w")
    _set_crc(w, "pieces/noise.bin", zlib_crc(files["pieces/noise.bin"]) ^ 0x00010000)
    before = tree_listing(tmp_path / "env")
    with pytest.raises(RecordMismatch, match="pieces/noise.bin does not match its CRC-32"):
        install_wheels([w], scheme, sys.executable, expected={w: _sha(w)})  # the lock hash of these bytes
    assert tree_listing(tmp_path / "env") == before


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("member, caught", [
    ("pieces/noise.bin", "does not match its CRC-32"),  # stored blocks: the stream stays valid, one byte differs
    ("pieces/run.bin", "(does not match its CRC-32|is not valid deflate data)"),  # Huffman codes: either
])
def test_a_flipped_deflate_byte_is_caught_and_nothing_is_left(tmp_path, scheme, monkeypatch, backend, member,
                                                              caught):
    """A byte flipped inside a member's deflate data, the lock hash taken after the flip."""
    from wheelhouse.install.wheel import UnpackError

    monkeypatch.setenv("WH_INFLATE", backend)
    w, _ = _pieces_wheel(tmp_path / "w")
    with zipfile.ZipFile(w) as zf:
        info = zf.getinfo(member)
    data = bytearray(w.read_bytes())
    body = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[body + info.compress_size // 2 + 1000] ^= 0x20
    w.write_bytes(bytes(data))
    before = tree_listing(tmp_path / "env")
    # a CRC-32 mismatch is a RecordMismatch (the ground floor's), bad deflate data an UnpackError
    with pytest.raises((UnpackError, RecordMismatch), match=f"{member} {caught}"):
        install_wheels([w], scheme, sys.executable, expected={w: _sha(w)})
    assert tree_listing(tmp_path / "env") == before


@pytest.mark.parametrize("by_lock", [True, False], ids=["crc", "record"])
def test_a_member_that_inflates_short_of_its_declared_size_is_refused(tmp_path, scheme, by_lock):
    real = bytes(range(256)) * 4096  # 1 MiB, several output pieces
    w = _bomb(tmp_path / "bomb-1.0-py3-none-any.whl", real, declared=len(real) + 1)
    before = tree_listing(tmp_path / "env")
    what = "its CRC-32" if by_lock else "its RECORD hash"
    with pytest.raises(RecordMismatch, match=f"bomb/data.bin does not match {what}"):
        install_wheels([w], scheme, sys.executable, expected={w: _sha(w)} if by_lock else None)
    assert tree_listing(tmp_path / "env") == before


def zlib_crc(data: bytes) -> int:
    import zlib

    return zlib.crc32(data)
