"""A wheel's core metadata (Requires-Dist, Requires-Python) without downloading the wheel.

In order of preference:
1. a local file: read the zip directly;
2. PEP 658/714: the index serves ``<wheel-url>.metadata`` (checked against its sha256);
3. HTTP range requests on the zip: one read of the tail (which usually holds the whole central
   directory, and often METADATA itself, since dist-info is written last), then at most one read
   for the rest of the central directory and one for the METADATA member;
4. a full download, only when the server ignores ``Range``.

Results are cached on disk keyed by the wheel's sha256 (else its URL), so a warm run makes no
request at all.
"""

from __future__ import annotations

import hashlib
import struct
import tempfile
import threading
import zipfile
import zlib
from dataclasses import dataclass
from email.parser import BytesParser
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelhouse.atomic import write_atomic
from .distfile import Distfile
from wheelhouse.errors import WhError
from .http import HttpClient, HttpError

__all__ = ["CoreMetadata", "MetadataReader", "MetadataError", "read_metadata", "parse_metadata"]

TAIL_BYTES = 64 * 1024  # first range read: the end of the zip
_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_CDH = b"PK\x01\x02"
_LFH_LEN = 30


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
    msg = BytesParser().parsebytes(raw, headersonly=True)
    name = msg.get("Name")
    version = msg.get("Version")
    if not name or not version:
        raise MetadataError("METADATA lacks Name or Version", hint="the wheel is malformed; report it to its publisher")
    return CoreMetadata(
        name=canonicalize_name(str(name)),
        version=str(version).strip(),
        requires_dist=tuple(str(r).strip() for r in (msg.get_all("Requires-Dist") or ())),
        requires_python=(str(msg.get("Requires-Python")).strip() or None) if msg.get("Requires-Python") else None,
        provides_extra=tuple(str(e).strip() for e in (msg.get_all("Provides-Extra") or ())),
        raw=raw,
    )


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
        key = distfile.sha256 or hashlib.sha256(distfile.url.encode()).hexdigest()
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
        raw = None
        if cached is not None and cached.is_file():
            raw = cached.read_bytes()
            self.stats["cache"] += 1
        elif d.local_path is not None:
            raw = self._from_zipfile(d.local_path, d)
            self.stats["local"] += 1
        elif d.metadata_url:
            raw = self._from_pep658(d)
            self.stats["pep658"] += 1
        else:
            raw = self._from_ranges(d)
        meta = parse_metadata(raw)
        if meta.name != d.name or not _same_version(meta.version, d.version):
            raise MetadataError(
                f"{d.filename}: its METADATA says {meta.name} {meta.version}",
                hint="the file name and its contents disagree; report it to the index operator",
            )
        if cached is not None and not cached.is_file():
            write_atomic(cached, raw)
        return meta

    def _cache_path(self, key: str) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / "metadata" / key[:2] / f"{key}.METADATA"

    @staticmethod
    def _from_zipfile(path: Path, d: Distfile) -> bytes:
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
        tail_start = total - len(tail)
        windows = [_Window(tail_start, tail)]
        cd_offset, cd_size = _find_central_directory(tail, tail_start, d)
        if cd_offset < tail_start:
            windows[0].prepend(self._range(d, cd_offset, tail_start))
        cd = windows[0].slice(cd_offset, cd_offset + cd_size)
        member, offset, comp_size, method = _find_member(cd, d)

        def read(a: int, b: int, slack: int = 0) -> bytes:
            for w in windows:
                if w.covers(a, b):
                    return w.slice(a, b)
            end = min(b + slack, total)
            if end > windows[0].start and a < windows[0].start:
                end = windows[0].start  # the rest is already held; stay contiguous with it
                windows[0].prepend(self._range(d, a, end))
                return windows[0].slice(a, b)
            windows.append(_Window(a, self._range(d, a, end)))
            return windows[-1].slice(a, b)

        # The local header (30 bytes + name + extra) precedes the data; the extra field's length
        # is only known once read, so the first read takes the data and some slack along.
        header = read(offset, offset + _LFH_LEN, slack=len(member) + 512 + comp_size)
        if header[:4] != b"PK\x03\x04":
            raise MetadataError(f"{d.filename}: bad local header for {member}", hint="the wheel is damaged on the index")
        name_len, extra_len = struct.unpack("<HH", header[26:30])
        start = offset + _LFH_LEN + name_len + extra_len
        data = read(start, start + comp_size)
        if method == 0:
            return data
        if method == 8:
            return zlib.decompress(data, -15)
        raise MetadataError(f"{d.filename}: METADATA uses zip compression method {method}", hint="report it to the wheel's publisher")

    def _range(self, d: Distfile, start: int, end: int) -> bytes:
        """Bytes [start, end) of the wheel."""
        resp = self.client.get(d.url, {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"})
        if resp.status != 206 or len(resp.body) != end - start:
            raise MetadataError(f"{d.url}: range request returned {resp.status} with {len(resp.body)} bytes", hint="the server's range support is broken; run again")
        self.stats["range"] += 1
        return resp.body

    def _from_full_body(self, resp, d: Distfile) -> bytes:
        with tempfile.TemporaryFile() as tmp:
            for chunk in resp.iter_chunks(1 << 20):
                tmp.write(chunk)
            tmp.seek(0)
            try:
                with zipfile.ZipFile(tmp) as zf:
                    return zf.read(_metadata_member(zf.namelist(), d))
            except (zipfile.BadZipFile, KeyError) as exc:
                raise MetadataError(f"{d.url}: not a valid wheel ({exc})", hint="check the index; the file is damaged") from exc


class _Window:
    """Contiguous bytes of a remote file starting at ``start``."""

    def __init__(self, start: int, data: bytes):
        self.start, self.data = start, data

    def prepend(self, data: bytes) -> None:
        self.start -= len(data)
        self.data = data + self.data

    def covers(self, a: int, b: int) -> bool:
        return self.start <= a and b <= self.start + len(self.data)

    def slice(self, a: int, b: int) -> bytes:
        if a < self.start or b > self.start + len(self.data):
            raise MetadataError("zip member outside the bytes read", hint="the wheel is damaged on the index")
        return self.data[a - self.start : b - self.start]


def _total_from_content_range(value: str | None) -> int | None:
    # Content-Range: bytes 100-199/1234
    if not value or "/" not in value:
        return None
    total = value.rsplit("/", 1)[1].strip()
    return int(total) if total.isdigit() else None


def _find_central_directory(tail: bytes, tail_start: int, d: Distfile) -> tuple[int, int]:
    pos = tail.rfind(_EOCD)
    if pos < 0 or len(tail) - pos < 22:
        raise MetadataError(f"{d.filename}: no zip end-of-central-directory record", hint="the file is not a wheel, or is damaged")
    cd_size, cd_offset = struct.unpack("<II", tail[pos + 12 : pos + 20])
    if cd_offset == 0xFFFFFFFF or cd_size == 0xFFFFFFFF:
        # ZIP64: the locator sits just before the EOCD and points at the zip64 EOCD record.
        loc = pos - 20
        if loc < 0 or tail[loc : loc + 4] != _EOCD64_LOCATOR:
            raise MetadataError(f"{d.filename}: zip64 locator missing", hint="the wheel is damaged")
        (eocd64_off,) = struct.unpack("<Q", tail[loc + 8 : loc + 16])
        rel = eocd64_off - tail_start
        if rel < 0:
            raise MetadataError(f"{d.filename}: zip64 record outside the tail read", hint="report this wheel to wh's authors")
        cd_size, cd_offset = struct.unpack("<QQ", tail[rel + 40 : rel + 56])
    return cd_offset, cd_size


def _metadata_member(names, d: Distfile) -> str:
    cands = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if not cands:
        raise MetadataError(f"{d.filename}: no .dist-info/METADATA inside", hint="the file is not a valid wheel")
    want = f"{d.name.replace('-', '_')}-"
    cands.sort(key=lambda n: not canonicalize_name(n.split("-")[0]) == canonicalize_name(want[:-1]))
    return cands[0]


def _find_member(cd: bytes, d: Distfile) -> tuple[str, int, int, int]:
    """Walk central directory headers; return (name, local header offset, compressed size, method)."""
    entries = {}
    pos = 0
    while pos + 46 <= len(cd) and cd[pos : pos + 4] == _CDH:
        method, = struct.unpack("<H", cd[pos + 10 : pos + 12])
        comp, _uncomp, n_len, e_len, c_len = struct.unpack("<IIHHH", cd[pos + 20 : pos + 34])
        (offset,) = struct.unpack("<I", cd[pos + 42 : pos + 46])
        name = cd[pos + 46 : pos + 46 + n_len].decode("utf-8", "replace")
        extra = cd[pos + 46 + n_len : pos + 46 + n_len + e_len]
        if name.endswith(".dist-info/METADATA") and name.count("/") == 1:
            if 0xFFFFFFFF in (comp, offset, _uncomp):
                comp, offset = _zip64_extra(extra, _uncomp, comp, offset)
            entries[name] = (offset, comp, method)
        pos += 46 + n_len + e_len + c_len
    member = _metadata_member(list(entries), d)
    offset, comp, method = entries[member]
    return member, offset, comp, method


def _zip64_extra(extra: bytes, uncomp: int, comp: int, offset: int) -> tuple[int, int]:
    i = 0
    while i + 4 <= len(extra):
        hid, size = struct.unpack("<HH", extra[i : i + 4])
        if hid == 1:
            vals = extra[i + 4 : i + 4 + size]
            j = 0
            if uncomp == 0xFFFFFFFF:
                j += 8
            if comp == 0xFFFFFFFF:
                (comp,) = struct.unpack("<Q", vals[j : j + 8])
                j += 8
            if offset == 0xFFFFFFFF:
                (offset,) = struct.unpack("<Q", vals[j : j + 8])
            break
        i += 4 + size
    return comp, offset


_default_reader: MetadataReader | None = None


def read_metadata(distfile: Distfile, reader: MetadataReader | None = None) -> CoreMetadata:
    """Core metadata of ``distfile`` (see the module docstring for how it is fetched)."""
    global _default_reader
    if reader is None:
        if _default_reader is None:
            _default_reader = MetadataReader()
        reader = _default_reader
    return reader.read(distfile)
