"""A wheel's core metadata (Requires-Dist, Requires-Python) without downloading the wheel.

In order of preference:
1. a local file: read the zip directly;
2. PEP 658/714: the index serves ``<wheel-url>.metadata`` (checked against its sha256);
3. HTTP range requests on the zip, read by stdlib ``zipfile`` through a range-backed file: one
   read of the tail (which usually holds the whole central directory, and often METADATA itself,
   since dist-info is written last), then at most one read for the rest of the central directory
   and one for the METADATA member (its CRC checked by zipfile);
4. a full download, only when the server ignores ``Range``.

Results are cached on disk keyed by the wheel's URL (without credentials) and claimed sha256, so
a warm run makes no request at all; each is at most WH_MAX_PAGE_MB (HttpClient.get's bound). A
file's metadata never changes under one URL and sha256, so entries are never revalidated (not even
with --refresh); with the client ``offline`` a miss raises ``NotCached`` instead of a request.
An entry carries the sha256 of its bytes and is written without fsync (a cold resolve writes ~200,
each fsync cost ~40 ms on the prefetch path): what a power cut leaves torn fails its checksum and
is a miss, never a METADATA with lines missing.
"""

from __future__ import annotations

import hashlib
import io
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelhouse.faults import checkpoint
from wheelhouse.zipdirectory import (LOCAL_HEADER_SIZE, BadMember, end_of_directory, inflate_member,
                                     local_data_start, walk_directory)
from .distfile import Distfile
from wheelhouse.errors import WhError
from .http import HttpClient, HttpError
from .http.cache import NotCached, store_entry

__all__ = ["CoreMetadata", "MetadataReader", "MetadataError", "read_metadata", "parse_metadata"]

TAIL_BYTES = 64 * 1024  # first range read: the end of the zip


class MetadataError(WhError):
    """A wheel's METADATA could not be read or does not match the wheel."""

    code = "bad-metadata"


@dataclass(frozen=True)
class CoreMetadata:
    name: str  # canonical
    version: str
    requires_dist: tuple[str, ...]
    requires_python: str | None
    provides_extra: tuple[str, ...]
    raw: bytes = b""


def parse_metadata(raw: bytes) -> CoreMetadata:
    """Parse METADATA (RFC 822 headers, body ignored)."""
    # The headers end at the first empty line; the parser would still read the body (a long
    # README) line by line, so it is given the header block alone.
    end = min((i + len(sep) for sep in (b"\n\n", b"\r\n\r\n") if (i := raw.find(sep)) >= 0), default=len(raw))
    headers = _plain_headers(raw[:end])
    if headers is None:  # anything unusual: the stdlib parser decides
        from email.parser import BytesParser  # (email: loaded by the first metadata read, not by every run)

        msg = BytesParser().parsebytes(raw[:end], headersonly=True)
        headers = {k: [str(v) for v in (msg.get_all(k) or ())] for k in ("name", "version", "requires-dist",
                                                                         "requires-python", "provides-extra")}
    name, version, requires_python = (next(iter(headers.get(k) or ()), None) for k in ("name", "version", "requires-python"))
    if not name or not version:
        raise MetadataError("METADATA lacks Name or Version", hint="the wheel is malformed; report it to its publisher")
    return CoreMetadata(
        name=canonicalize_name(name),
        version=version.strip(),
        requires_dist=tuple(r.strip() for r in headers.get("requires-dist", ())),
        requires_python=(requires_python.strip() or None) if requires_python else None,
        provides_extra=tuple(e.strip() for e in headers.get("provides-extra", ())),
        raw=raw,
    )


_HEADER = re.compile(r"([\x21-\x39\x3b-\x7e]+):[ \t]*(.*)")  # RFC 5322 field name, as the stdlib parser reads it


def _plain_headers(block: bytes) -> dict[str, list[str]] | None:
    """The header block's fields (lower-case name -> values in order) when it is plain: ASCII,
    LF line ends, one field a line. None otherwise (folded or odd lines: the stdlib parser's job).
    Same answers as ``email.parser`` for what it accepts, at a fraction of its cost."""
    if not block.isascii() or b"\r" in block:
        return None
    fields: dict[str, list[str]] = {}
    for line in block.decode("ascii").split("\n"):
        if not line:
            break
        m = _HEADER.fullmatch(line)
        if m is None:
            return None
        fields.setdefault(m.group(1).lower(), []).append(m.group(2))
    return fields


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


class MetadataReader:
    """Reads (and caches) core metadata of Distfiles. Thread-safe; one instance per run."""

    def __init__(self, client: HttpClient | None = None, cache_dir: Path | None = None, tail_bytes: int = TAIL_BYTES):
        self.client = client or HttpClient()
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.tail_bytes = tail_bytes
        self._lock = threading.Lock()
        self._memo: dict[str, CoreMetadata] = {}
        self._inflight: dict[str, threading.Event] = {}
        self.stats = {"cache": 0, "pep658": 0, "range": 0, "local": 0, "download": 0}

    def read(self, distfile: Distfile) -> CoreMetadata:
        # Keyed by URL AND sha256: the sha256 is what the index claims, not yet checked (the body is
        # not downloaded), so two files claiming one (bogus) hash must not share metadata.
        key = hashlib.sha256(f"{distfile.url}#sha256={distfile.sha256 or ''}".encode()).hexdigest()
        while True:
            with self._lock:
                if key in self._memo:
                    return self._memo[key]
                ev = self._inflight.get(key)
                if ev is None:
                    ev = self._inflight[key] = threading.Event()
                    break
            ev.wait()
            with self._lock:
                if key in self._memo:
                    return self._memo[key]
                # the other reader failed: try ourselves
        try:
            meta = self._read(distfile, key)
            with self._lock:
                self._memo[key] = meta
            return meta
        finally:
            with self._lock:
                self._inflight.pop(key, None)
            ev.set()

    # --- the ways to read ---------------------------------------------------------------
    def _read(self, d: Distfile, key: str) -> CoreMetadata:
        if not d.is_wheel:
            raise MetadataError(f"{d.filename} is not a wheel", hint="wh reads metadata of wheels only")
        # A local file may change under the same path: read it, never cache it (it is cheap).
        cached = self._cache_path(key) if d.local_path is None else None
        # A file of its own in one folder, then the sharded layout of earlier wh versions.
        raw = None
        if cached is not None:
            raw = _load_entry(cached) or _load_entry(cached.parent / cached.name[:2] / cached.name)
        hit = raw is not None
        if hit:
            self.stats["cache"] += 1
        elif d.local_path is not None:
            raw = self._from_zipfile(d.local_path, d)
            self.stats["local"] += 1
        elif getattr(self.client, "offline", False):  # --offline: from the cache alone, never a request
            raise NotCached(f"the metadata of {d.filename}")
        else:
            raw = self.fetch(d)
        meta = parse_metadata(raw)
        if meta.name != d.name or not _same_version(meta.version, d.version):
            raise MetadataError(
                f"{d.filename}: its METADATA says {meta.name} {meta.version}",
                hint="the file name and its contents disagree; report it to the index operator",
            )
        if cached is not None and not hit:
            try:
                checkpoint("index.cache-write")
                store_entry(cached, _ENTRY_MAGIC + hashlib.sha256(raw).hexdigest().encode() + b"\n" + raw)
            except OSError:
                pass  # a cache that cannot be written costs a request next time, never the run
        return meta

    def fetch(self, d: Distfile) -> bytes:
        """The METADATA bytes of the wheel at ``d.url``, from the network (counted in ``stats``);
        not cached here (``read`` does)."""
        if d.metadata_url:
            raw = self._from_pep658(d)
            self.stats["pep658"] += 1
            return raw
        return self._from_ranges(d)

    def _cache_path(self, key: str) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / "metadata" / f"{key}.meta"

    @staticmethod
    def _from_zipfile(path: Path, d: Distfile) -> bytes:
        import zipfile  # here, as in each reader below: a stage answered from its stored resolution reads no wheel

        try:
            with zipfile.ZipFile(path) as zf:
                return zf.read(_metadata_member(zf.namelist(), d))
        except (OSError, zipfile.BadZipFile, KeyError) as exc:
            raise MetadataError(f"{path}: cannot read METADATA ({exc})", hint="the wheel file is damaged; fetch it again") from exc

    def _from_pep658(self, d: Distfile) -> bytes:
        body = self.client.get(d.metadata_url).body  # type: ignore[arg-type]
        if d.metadata_sha256 and hashlib.sha256(body).hexdigest() != d.metadata_sha256:
            raise MetadataError(
                f"{d.metadata_url}: sha256 differs from the one the index published",
                hint="the index or a proxy served altered bytes; run again, or use another index",
            )
        return body

    def _from_ranges(self, d: Distfile) -> bytes:
        try:
            with self.client.stream(d.url, {"Range": f"bytes=-{self.tail_bytes}", "Accept-Encoding": "identity"}) as resp:
                if resp.status != 206:
                    # The server ignores Range: the only way left is the whole file.
                    self.stats["download"] += 1
                    return self._from_full_body(resp, d)
                tail = resp.read()
                total = _total_from_content_range(resp.headers.get("content-range"))
        except HttpError as exc:
            if exc.status != 416:
                raise
            # Some servers refuse a suffix range longer than the file: read it whole.
            with self.client.stream(d.url) as resp:
                self.stats["download"] += 1
                return self._from_full_body(resp, d)
        self.stats["range"] += 1
        if total is None:
            total = len(tail)
        remote = _RangeFile(lambda a, b: self._range(d, a, b), total, total - len(tail), tail)
        raw = _metadata_by_directory(remote, total, d)
        if raw is not None:
            return raw
        import zipfile

        try:  # anything unusual (zip64, encryption, a damaged member): zipfile decides, from the bytes held
            with zipfile.ZipFile(remote) as zf:  # reads the central directory (one more range at most)
                member = zf.getinfo(_metadata_member(zf.namelist(), d))
                # The local header (30 bytes + name + extra, whose length only it knows) and the data
                # in one range: zipfile would otherwise ask for each piece separately.
                start = member.header_offset
                remote.prefetch(start, start + LOCAL_HEADER_SIZE + len(member.orig_filename.encode()) + 512
                                + member.compress_size)
                return zf.read(member)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, ValueError) as exc:
            raise MetadataError(f"{d.filename}: not a readable wheel ({exc})", hint="the file is damaged on the index; report it to its operator") from exc

    def _range(self, d: Distfile, start: int, end: int) -> bytes:
        """Bytes [start, end) of the wheel."""
        resp = self.client.get(d.url, {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"})
        if resp.status != 206 or len(resp.body) != end - start:
            raise MetadataError(f"{d.url}: range request returned {resp.status} with {len(resp.body)} bytes", hint="the server's range support is broken; run again")
        self.stats["range"] += 1
        return resp.body

    def _from_full_body(self, resp, d: Distfile) -> bytes:
        with tempfile.TemporaryFile() as tmp:
            got = 0
            try:
                for chunk in resp.iter_chunks(1 << 20):
                    got += len(chunk)
                    if d.size is not None and got > d.size:  # the index said how big it is
                        raise MetadataError(f"{d.url}: more than the {d.size} bytes the index lists",
                                            hint="the server sends other bytes than the index describes; check the index")
                    tmp.write(chunk)
            except OSError as exc:
                raise MetadataError(f"{d.filename}: the server ignores Range requests and the whole file could not "
                                    f"be kept to read its METADATA ({exc.strerror or exc}, in {tempfile.gettempdir()})",
                                    hint="free space there (or set TMPDIR), or use an index that serves PEP 658 metadata") from exc
            tmp.seek(0)
            import zipfile

            try:
                with zipfile.ZipFile(tmp) as zf:
                    return zf.read(_metadata_member(zf.namelist(), d))
            except (zipfile.BadZipFile, KeyError) as exc:
                raise MetadataError(f"{d.url}: not a valid wheel ({exc})", hint="check the index; the file is damaged") from exc


class _RangeFile(io.RawIOBase):
    """A remote file seen as a seekable local one, so stdlib ``zipfile`` reads it (as pip's lazy
    wheel does): the bytes held so far are kept in windows, a read of bytes not yet held fetches
    them (``fetch(start, end)``: one HTTP range), merged with their neighbours. Unbuffered on
    purpose: read-ahead would cost round trips."""

    def __init__(self, fetch: Callable[[int, int], bytes], size: int, start: int, data: bytes):
        super().__init__()
        self._fetch, self._size, self._pos = fetch, size, 0
        self._windows: list[tuple[int, bytes]] = [(start, data)] if data else []

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def readinto(self, buf) -> int:
        n = min(len(buf), self._size - self._pos)
        if n <= 0:
            return 0
        buf[:n] = self._bytes(self._pos, self._pos + n)
        self._pos += n
        return n

    def prefetch(self, a: int, b: int) -> None:
        """Make sure bytes [a, b) are held (clamped to the file), in as few requests as possible."""
        self._bytes(max(0, a), min(b, self._size))

    def prefetch_bytes(self, a: int, b: int) -> bytes:
        """Bytes [a, b) (clamped to the file), fetched where not held."""
        a, b = max(0, a), min(b, self._size)
        return self._bytes(a, b) if a < b else b""

    def held_from(self, end: int) -> int:
        """Where the held bytes that reach ``end`` begin (``end`` when none do)."""
        for start, data in self._windows:
            if start <= end <= start + len(data):
                return start
        return end

    def _bytes(self, a: int, b: int) -> bytes:
        for gap_a, gap_b in self._gaps(a, b):
            self._windows.append((gap_a, self._fetch(gap_a, gap_b)))
        self._merge()
        for start, data in self._windows:
            if start <= a and b <= start + len(data):
                return data[a - start : b - start]
        raise MetadataError("zip member outside the bytes read", hint="the wheel is damaged on the index")

    def _gaps(self, a: int, b: int) -> list[tuple[int, int]]:
        gaps, pos = [], a
        for start, data in sorted(self._windows):
            end = start + len(data)
            if end <= pos or start >= b:
                continue
            if start > pos:
                gaps.append((pos, start))
            pos = max(pos, end)
        if pos < b:
            gaps.append((pos, b))
        return gaps

    def _merge(self) -> None:
        merged: list[tuple[int, bytes]] = []
        for start, data in sorted(self._windows):
            if merged and start <= merged[-1][0] + len(merged[-1][1]):
                prev_start, prev = merged[-1]
                merged[-1] = (prev_start, prev + data[prev_start + len(prev) - start :])
            else:
                merged.append((start, data))
        self._windows = merged


def _metadata_by_directory(remote: "_RangeFile", size: int, d: Distfile) -> bytes | None:
    """METADATA read straight from the central directory, or None when the zip is anything but plain.

    zipfile builds a ZipInfo for every member (torch lists ~13k): most of the CPU of a cold
    resolve's metadata reads. The directory is walked by ``wheelhouse.zipdirectory`` (the one ZIP
    reader, which install uses too) and METADATA is read with one more range at most, its CRC-32
    and size checked. The directory is fetched together with the bytes just before it, where a
    wheel keeps its dist-info (written last), so METADATA is usually in hand with it. Zip64,
    encrypted or damaged archives return None: the zipfile path reads (or refuses) them.
    """
    tail_start = remote.held_from(size)
    end = end_of_directory(remote.prefetch_bytes(tail_start, size), tail_start)
    if end is None:
        return None  # none in the bytes held, multi-disk, zip64, or data before the archive
    if end.offset < tail_start:
        # One range: the directory and as much again before it (RECORD, METADATA, WHEEL).
        remote.prefetch(end.offset - end.size - 16384, tail_start)
    members = walk_directory(remote.prefetch_bytes(end.offset, end.offset + end.size), end.count)
    if members is None:
        return None
    found = {m[0]: m for m in members if m[0].count("/") == 1 and m[0].endswith(".dist-info/METADATA")}
    if not found:
        return None
    m = found[_metadata_member(list(found), d)]
    name, usize, csize, method, _, offset, _ = m
    if method not in (0, 8) or usize > 1 << 24:
        return None  # an unusual method, or no METADATA of that size
    # The local header (whose extra field only it sizes) and the data in one range.
    name_len = len(name.encode("utf-8"))
    remote.prefetch(offset, offset + LOCAL_HEADER_SIZE + name_len + 512 + csize)
    start = local_data_start(remote.prefetch_bytes(offset, offset + LOCAL_HEADER_SIZE + name_len), name)
    if start is None:
        return None  # no local header there, or one naming another member
    try:
        return inflate_member(remote.prefetch_bytes(offset + start, offset + start + csize), m)
    except BadMember:
        return None  # zipfile reads it again and says what is wrong


_ENTRY_MAGIC = b"wh-metadata 1 "


def _load_entry(path: Path) -> bytes | None:
    """A cached METADATA, or None when absent, torn or edited (its sha256 line disagrees)."""
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    head, nl, raw = blob.partition(b"\n")
    if not nl or not head.startswith(_ENTRY_MAGIC):
        return None
    return raw if hashlib.sha256(raw).hexdigest().encode() == head[len(_ENTRY_MAGIC):] else None


def _total_from_content_range(value: str | None) -> int | None:
    # Content-Range: bytes 100-199/1234
    if not value or "/" not in value:
        return None
    total = value.rsplit("/", 1)[1].strip()
    return int(total) if total.isdigit() else None


def _metadata_member(names, d: Distfile) -> str:
    cands = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if not cands:
        raise MetadataError(f"{d.filename}: no .dist-info/METADATA inside", hint="the file is not a valid wheel")
    want = f"{d.name.replace('-', '_')}-"
    cands.sort(key=lambda n: not canonicalize_name(n.split("-")[0]) == canonicalize_name(want[:-1]))
    return cands[0]


_default_reader: MetadataReader | None = None


def read_metadata(distfile: Distfile, reader: MetadataReader | None = None) -> CoreMetadata:
    """Core metadata of ``distfile`` (see the module docstring for how it is fetched)."""
    global _default_reader
    if reader is None:
        if _default_reader is None:
            _default_reader = MetadataReader()
        reader = _default_reader
    return reader.read(distfile)
