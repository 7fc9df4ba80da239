"""A wheel's listing and its small text members, read in one pass without building a ZipInfo per member.

Planning reads every member's name, sizes, CRC-32, offset and mode, and the text of
WHEEL, RECORD, METADATA and ``entry_points.txt``; the requirements check reads METADATA.
``zipfile.ZipFile`` builds a ``ZipInfo`` object per member for that (~14k of them for the
900 MB benchmark set, the largest single cost of planning), and opening a wheel twice
(requirements, then planning) read each central directory twice. Here the central
directory is read with one ``pread`` and walked by ``wheelhouse.zipdirectory`` (the one ZIP
reader); the text members are read through their local headers (raw inflate, CRC-32 checked). Anything this fast path
does not handle (zip64, an archive with bytes before it, an odd compression method, a
header that does not add up) is read by ``zipfile`` instead, so the answer never depends
on the path taken. Nothing is checked here for safety: that is ``plan``'s job.

``read_wheel`` remembers what it read per file identity (device, inode, size, mtime), so
the requirements check and planning of one install read each wheel once; a file that was
replaced or rewritten is read again.
"""

from __future__ import annotations

import os
import struct
import threading
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from wheelhouse.fileidentity import FileIdentity, file_identity
from wheelhouse.zipdirectory import BadMember, LOCAL_HEADER_SIZE, Member, inflate_member, local_data_start, read_directory
from .record import UnpackError

__all__ = ["Member", "WheelArchive", "read_wheel"]


_TEXT_LIMIT = 64 << 20  # WHEEL, RECORD, METADATA, entry_points.txt: a bigger one is not read into memory


@dataclass(frozen=True)
class WheelArchive:
    """What planning and the requirements check read from one wheel."""

    wheel: Path
    members: tuple[Member, ...]  # every entry, folders included, in central-directory order
    texts: Mapping[str, str]  # archive path -> text, for the small members asked for by ``_wanted``
    # The identity of the file these were read from (``fstat`` of the descriptor read, the same before and
    # after reading), None when it changed while it was read: what a plan made from this is a plan of.
    identity: FileIdentity | None = None

    @property
    def names(self) -> list[str]:
        return [m[0] for m in self.members]


def _unreadable(wheel: Path, why: object) -> UnpackError:
    return UnpackError(f"{wheel.name} is not a readable wheel: {why}", hint="re-stage it with `wh stage`")


def _wanted(names: list[str]) -> list[str]:
    """The text members planning and the requirements check read: each top-level ``.dist-info``'s
    WHEEL, RECORD, METADATA and entry_points.txt."""
    leaves = ("/WHEEL", "/RECORD", "/METADATA", "/entry_points.txt")
    return [n for n in names if n.count("/") == 1 and n.endswith(leaves) and n.split("/", 1)[0].endswith(".dist-info")]


def _text(fd: int, wheel: Path, m: Member) -> str:
    name, usize, csize, _, _, offset, _ = m
    if usize > _TEXT_LIMIT or csize > _TEXT_LIMIT:
        raise _unreadable(wheel, f"{name} is {usize} bytes")
    start = local_data_start(os.pread(fd, LOCAL_HEADER_SIZE, offset))
    if start is None:
        raise _unreadable(wheel, f"bad local header for {name}")
    try:
        data = inflate_member(os.pread(fd, csize, offset + start), m)
    except BadMember as exc:
        raise _unreadable(wheel, exc) from exc
    return data.decode("utf-8", "replace")


def _same(before: FileIdentity, fd: int) -> FileIdentity | None:
    return before if file_identity(os.fstat(fd)) == before else None


def _read_fast(wheel: Path) -> WheelArchive | None:
    fd = os.open(wheel, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        before = file_identity(os.fstat(fd))
        members = read_directory(fd)
        if members is None:
            return None
        by_name = {m[0]: m for m in members}
        wanted = [by_name[n] for n in _wanted(list(by_name))]
        if any(m[3] not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) for m in wanted):
            return None
        texts = {m[0]: _text(fd, wheel, m) for m in wanted}
        return WheelArchive(wheel, tuple(members), texts, _same(before, fd))
    finally:
        os.close(fd)


def _read_zipfile(wheel: Path) -> WheelArchive:
    try:
        with open(wheel, "rb") as fh, zipfile.ZipFile(fh) as zf:
            before = file_identity(os.fstat(fh.fileno()))
            infos = zf.infolist()
            members = tuple((i.filename, i.file_size, i.compress_size, i.compress_type, i.CRC, i.header_offset,
                             (i.external_attr >> 16) & 0o777) for i in infos)
            texts = {}
            for n in _wanted([i.filename for i in infos]):
                if zf.getinfo(n).file_size > _TEXT_LIMIT:
                    raise _unreadable(wheel, f"{n} is {zf.getinfo(n).file_size} bytes")
                texts[n] = zf.read(n).decode("utf-8", "replace")
            identity = _same(before, fh.fileno())
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError, EOFError) as exc:
        raise _unreadable(wheel, exc) from exc
    return WheelArchive(wheel, members, texts, identity)


_cache: dict[Path, tuple[FileIdentity, WheelArchive]] = {}
_cache_lock = threading.Lock()
_CACHE_SIZE = 256


def read_wheel(wheel: Path) -> WheelArchive:
    """``wheel``'s listing and small text members; UnpackError when it cannot be read as a zip archive."""
    wheel = Path(wheel)
    try:
        st = os.stat(wheel)
        key = file_identity(st)
        with _cache_lock:
            hit = _cache.get(wheel)
        if hit is not None and hit[0] == key:
            return hit[1]
        archive = _read_fast(wheel) or _read_zipfile(wheel)
    except OSError as exc:
        raise _unreadable(wheel, exc) from exc
    except (UnicodeDecodeError, struct.error) as exc:
        raise _unreadable(wheel, exc) from exc
    with _cache_lock:
        if len(_cache) >= _CACHE_SIZE:
            _cache.pop(next(iter(_cache)))
        _cache[wheel] = (key, archive)
    return archive
