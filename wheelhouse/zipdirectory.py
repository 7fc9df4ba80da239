"""A ZIP archive's central directory and small members, read with ``struct`` (APPNOTE.TXT 4.3).

The one reader of the ZIP layout for wh: ``install.wheel.archive`` lists a local wheel with
it (one ``pread`` of the directory instead of a ``ZipInfo`` per member: ~14k of them for the
900 MB benchmark set), ``index.metadata`` finds METADATA in the bytes a range request
brought back, and ``lock.records`` walks every member of a staged wheel. Both read from
bytes in hand, so the same functions serve a local file and a remote one.

Only plain archives are read here: one disk, no zip64, no encryption, no bytes before the
archive, no NUL in a name. Anything else is ``None`` and the caller hands the file to
``zipfile``, so the answer never depends on the path taken. Nothing here judges whether a
name is safe to write: that is the installer's job.

Standard library only (the install path imports it: nothing here can open a socket).
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass

__all__ = [
    "Member",
    "EndOfDirectory",
    "EOCD_SIZE",
    "LOCAL_HEADER_SIZE",
    "MAX_COMMENT",
    "BadMember",
    "end_of_directory",
    "walk_directory",
    "read_directory",
    "local_data_start",
    "inflate_member",
]

# (name, size, compressed size, compression method, CRC-32, local header offset, unix mode bits)
Member = tuple[str, int, int, int, int, int, int]

_EOCD = struct.Struct("<4s4H2LH")  # end of central directory record (4.3.16), 22 bytes
_CDH = struct.Struct("<4s4B4HL2L5H2L")  # central directory file header (4.3.12), 46 bytes
EOCD_SIZE = _EOCD.size
LOCAL_HEADER_SIZE = 30  # local file header (4.3.7) before its name and extra field
MAX_COMMENT = 0xFFFF  # the archive comment after the end record: the end record is within this of the end
STORED, DEFLATED = 0, 8


class BadMember(ValueError):
    """A member's bytes are not what the directory says (not deflate data, a wrong CRC-32 or size)."""


@dataclass(frozen=True)
class EndOfDirectory:
    """Where the central directory is (absolute offsets in the file) and how many entries it holds."""

    count: int
    offset: int
    size: int


def end_of_directory(tail: bytes, tail_start: int) -> EndOfDirectory | None:
    """The end record found in ``tail`` (the file's last bytes, from ``tail_start``), or None: none there,
    several disks, zip64, or bytes before the archive (its offsets would not count from the file's start)."""
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + _EOCD.size > len(tail):
        return None
    _, disk, cd_disk, count_here, count, cd_size, cd_offset, _ = _EOCD.unpack_from(tail, at)
    if (disk or cd_disk or count_here != count or count == 0xFFFF or 0xFFFFFFFF in (cd_size, cd_offset)
            or cd_offset + cd_size != tail_start + at):
        return None
    return EndOfDirectory(count, cd_offset, cd_size)


def walk_directory(cd: bytes, count: int) -> list[Member] | None:
    """Every entry of the central directory ``cd`` (``count`` of them), in order; None where one is not
    plain (a NUL in its name, encryption, a zip64 field) or the headers do not add up to ``cd``."""
    out: list[Member] = []
    pos = 0
    size = len(cd)
    unpack = _CDH.unpack_from
    for _ in range(count):
        if pos + 46 > size:
            return None
        (sig, _, _, _, _, flags, method, _, _, crc, csize, usize, n_len, x_len, c_len, _, _, attr,
         offset) = unpack(cd, pos)
        if sig != b"PK\x01\x02":
            return None
        end = pos + 46 + n_len
        raw = cd[pos + 46:end]
        # ASCII reads the same in both (and decodes much faster than through the cp437 codec)
        name = raw.decode("ascii") if raw.isascii() else raw.decode("utf-8" if flags & 0x800 else "cp437")
        if "\x00" in name or flags & 0x1 or 0xFFFFFFFF in (usize, csize, offset):
            return None  # a NUL (zipfile truncates there), encryption, a zip64 extra: zipfile reads those
        out.append((name, usize, csize, method, crc, offset, (attr >> 16) & 0o777))
        pos = end + x_len + c_len
    return out if pos == size else None


def read_directory(fd: int) -> list[Member] | None:
    """The central directory of the archive open at ``fd`` (two ``pread``: its tail, then the directory),
    or None where only ``zipfile`` should read it (zip64, a prefix, anything odd)."""
    size = os.fstat(fd).st_size
    tail_len = min(size, EOCD_SIZE + MAX_COMMENT)
    end = end_of_directory(os.pread(fd, tail_len, size - tail_len), size - tail_len)
    if end is None:
        return None
    cd = os.pread(fd, end.size, end.offset)
    return walk_directory(cd, end.count) if len(cd) == end.size else None


def local_data_start(head: bytes, name: str | None = None) -> int | None:
    """How far past its local header's offset a member's data starts, read from the header's first bytes
    (30 at least; with ``name``, the name too, which must be the directory's). None: not that local header."""
    if len(head) < LOCAL_HEADER_SIZE or head[:4] != b"PK\x03\x04":
        return None
    n_len = int.from_bytes(head[26:28], "little")
    x_len = int.from_bytes(head[28:30], "little")
    if name is not None:
        raw = head[LOCAL_HEADER_SIZE:LOCAL_HEADER_SIZE + n_len]
        if raw not in (name.encode("utf-8"), name.encode("cp437", "replace")):
            return None  # the directory and the local header name different members
    return LOCAL_HEADER_SIZE + n_len + x_len


def inflate_member(body: bytes, m: Member) -> bytes:
    """A small member's bytes from its stored ``body``, checked against the directory's size and CRC-32
    (BadMember otherwise; LookupError for a method other than stored or deflated)."""
    _, usize, _, method, crc, _, _ = m
    if method == DEFLATED:
        try:
            d = zlib.decompressobj(-15)
            data = d.decompress(body, usize + 1) + d.flush()
        except zlib.error as exc:
            raise BadMember(f"{m[0]} is not valid deflate data ({exc})") from exc
    elif method == STORED:
        data = bytes(body)
    else:
        raise LookupError(method)
    if len(data) != usize or zlib.crc32(data) != crc:
        raise BadMember(f"bad CRC-32 or size for {m[0]}")
    return data
