"""Unpack a packed wheelhouse, checked against its sidecar, into a folder of our own.

The archive is read once: its bytes (each part's, then the whole's) are hashed as the tar
stream is unpacked, and every problem the sidecar shows (a missing part, a part whose bytes
are another part's, a flipped byte) is named. Members are trusted for nothing, sidecar or not
(a sidecar proves the bytes are the ones packed, not who packed them): only regular files
and folders under ``wheelhouse/``, with plain relative names, each once, are written, with
``O_EXCL | O_NOFOLLOW`` into a folder no one else writes to. Links, devices, absolute names,
``..``, duplicates and truncated members are refused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
from pathlib import Path

from wheelhouse.datafile import read_text
from wheelhouse.errors import WhError
from wheelhouse.progress import NullReporter, Reporter

from .sidecar import Located, Sidecar, parse_sidecar

__all__ = ["ArchiveError", "UnpackFailed", "UnsafeArchive", "ROOT", "archive_files", "unpack_archive"]

ROOT = "wheelhouse"  # every member lies under this one folder: `tar -xf` makes ./wheelhouse/
_MAX_MEMBERS = 500_000
_MAX_NAME = 1024
_CHUNK = 1 << 20


class ArchiveError(WhError):
    """A packed wheelhouse is incomplete or is not the bytes its sidecar names."""

    code = "bad-archive"


class UnpackFailed(ArchiveError):
    """Writing the unpacked files failed (a full disk, a quota): the archive may be fine."""

    code = "unpack-failed"


class UnsafeArchive(ArchiveError):
    """A member would be written outside the folder, or is not a plain file or folder."""

    code = "unsafe-archive"


_HINT = "copy the archive and its .sha256 (and every .part-N) again from where `wh pack` wrote them"


def _read_sidecar(loc: Located) -> Sidecar:
    if not loc.sidecar.is_file():
        raise ArchiveError(f"{loc.sidecar} is missing: {loc.base} is trusted only with the sidecar `wh pack` "
                           "wrote beside it (and is no wheelhouse folder)",
                           hint=f"copy {loc.sidecar.name} beside it, or pass the wheelhouse folder (the one holding wh.json)")
    text = read_text(loc.sidecar, what="sidecar", error=ArchiveError, max_bytes=1 << 20, hint=_HINT)
    sidecar, problems = parse_sidecar(text, str(loc.sidecar))
    if sidecar is None:
        raise ArchiveError(problems[0], hint=_HINT, detail="\n".join(problems))
    return sidecar


def archive_files(loc: Located) -> tuple[Sidecar, list[Path], list[str]]:
    """The sidecar, the files to read in order, and what is missing (empty when all are there)."""
    sidecar = _read_sidecar(loc)
    if not sidecar.parts:
        return sidecar, [loc.whole], ([] if loc.whole.is_file() else [f"{loc.whole} is missing"])
    files = [loc.part(i) for i in range(1, len(sidecar.parts) + 1)]
    missing = [f"{p} is missing (the sidecar lists {len(files)} parts)" for p in files if not p.is_file()]
    return sidecar, files, missing


class _Parts:
    """The parts read back to back as one stream, each part's sha256 and the whole's kept as they pass."""

    def __init__(self, files: list[Path], reporter: Reporter, task: str):
        self.files, self.reporter, self.task = files, reporter, task
        self.whole = hashlib.sha256()
        # one file: its hash is the whole's (hashing it twice cost a second pass of the CPU)
        self.each = [hashlib.sha256() for _ in files] if len(files) > 1 else []
        self.index, self.fh = 0, None
        self.pos = 0  # bytes read so far
        self.recent: list[tuple[int, bytes]] = []  # the last blocks read, with their offsets (tarfile reads ahead)

    def read(self, n: int = -1) -> bytes:
        data = self._read(n)
        if data:
            self.recent = [*self.recent[-3:], (self.pos, data)]
            self.pos += len(data)
        return data

    def since(self, offset: int) -> bytes | None:
        """The bytes read from ``offset`` on, when they are still held (None: read too long ago)."""
        held = [(o, b) for o, b in self.recent if o + len(b) > offset]
        if not held or held[0][0] > offset:
            return b"" if offset >= self.pos else None
        return b"".join(b for _, b in held)[offset - held[0][0]:]

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while self.index < len(self.files) and (n < 0 or len(out) < n):
            if self.fh is None:
                self.fh = open(self.files[self.index], "rb")
            block = self.fh.read(_CHUNK if n < 0 else n - len(out))
            if not block:
                self.fh.close()
                self.fh, self.index = None, self.index + 1
                continue
            self.whole.update(block)
            if self.each:
                self.each[self.index].update(block)
            self.reporter.advance(self.task, len(block))
            if not out and (n < 0 or len(block) == n):
                return block  # the usual case: one read, no copy
            out += block
        return bytes(out)

    def drain(self) -> bool:
        """Read (and hash) the rest; whether all of it was zeros (a tar's end blocks and padding)."""
        zeros = True
        while block := self.read(_CHUNK):
            zeros = zeros and not block.strip(b"\0")
        return zeros

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()


def _hash_problems(loc: Located, sidecar: Sidecar, stream: _Parts) -> list[str]:
    """Each part whose bytes are not the sidecar's, naming a part found under another's name; then the whole."""
    problems = []
    expected = [sha for _, sha in sidecar.parts]
    for i, h in enumerate(stream.each if sidecar.parts else ()):
        got = h.hexdigest()
        if got != expected[i]:
            other = expected.index(got) + 1 if got in expected else None
            problems.append(f"{stream.files[i].name} holds part {other} of {len(expected)}: the parts are out of order"
                            if other else f"{stream.files[i].name}: sha256 {got[:16]}... is not the sidecar's "
                                          f"{expected[i][:16]}...")
    if stream.whole.hexdigest() != sidecar.sha256:
        problems.append(f"{loc.whole.name}: sha256 {stream.whole.hexdigest()[:16]}... is not the sidecar's "
                        f"{sidecar.sha256[:16]}... ({loc.sidecar.name})")
    return problems


_MAX_HEADER = 1 << 20  # a pax or GNU long-name header wh writes is a few hundred bytes
_EXTENDED = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
             tarfile.GNUTYPE_LONGLINK)


class _GuardedInfo(tarfile.TarInfo):
    """tarfile reads an extended header's whole body into memory: refuse one bigger than any real one first."""

    def _proc_member(self, tarfile_):  # tarfile's hook for each header it reads (3.8 to 3.13)
        if self.type in _EXTENDED and self.size > _MAX_HEADER:
            raise UnsafeArchive(f"archive member {self.name!r} is an extended header of {self.size} bytes "
                                f"(at most {_MAX_HEADER})", hint=_HINT)
        return super()._proc_member(tarfile_)


def _member_path(member: tarfile.TarInfo, seen: dict[str, bool]) -> str:
    """The member's name relative to the archive's root folder, or UnsafeArchive naming why not."""
    name = member.name
    kind = {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link", tarfile.CHRTYPE: "a character device",
            tarfile.BLKTYPE: "a block device", tarfile.FIFOTYPE: "a FIFO", tarfile.CONTTYPE: "a contiguous file",
            tarfile.GNUTYPE_SPARSE: "a sparse file"}.get(member.type)
    if kind is None and not (member.isreg() or member.isdir()):
        kind = f"of type {member.type!r}"
    if kind:
        target = f" -> {member.linkname}" if member.issym() or member.islnk() else ""
        raise UnsafeArchive(f"archive member {name!r}{target} is {kind}; a wh archive holds only files and folders",
                            hint=_HINT)
    parts = name.rstrip("/").split("/") if member.isdir() else name.split("/")
    if (not name or len(name) > _MAX_NAME or name.startswith("/") or "\\" in name or "\0" in name
            or any(p in ("", ".", "..") for p in parts)):
        raise UnsafeArchive(f"archive member {name!r} is not a plain relative path (absolute, `..`, or empty parts)",
                            hint=_HINT)
    if parts[0] != ROOT:
        raise UnsafeArchive(f"archive member {name!r} is not under {ROOT}/; this is not an archive `wh pack` wrote",
                            hint=_HINT)
    rel = "/".join(parts[1:])
    if not rel and not member.isdir():
        raise UnsafeArchive(f"archive member {name!r} is a file where the archive's root folder must be", hint=_HINT)
    if rel in seen:
        raise UnsafeArchive(f"archive member {name!r} comes twice", hint=_HINT)
    for i in range(1, len(parts) - 1):  # a file may not stand where a folder is needed
        if seen.get("/".join(parts[1:i + 1])) is False:
            raise UnsafeArchive(f"archive member {name!r} lies below a file of the same archive", hint=_HINT)
    seen[rel] = member.isdir()
    return rel


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, rel: str) -> None:
    path = dest / rel
    if member.isdir():
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
        return
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    src = tar.extractfile(member)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    written = 0
    with os.fdopen(fd, "wb") as out:
        while True:
            block = src.read(min(_CHUNK, member.size - written)) if written < member.size else b""
            if not block:
                break
            out.write(block)
            written += len(block)
    if written != member.size:
        raise ArchiveError(f"archive member {member.name!r} ends after {written} of its {member.size} bytes",
                           hint=_HINT)


def _unpack_stream(stream: _Parts, loc: Located, dest: Path) -> WhError | None:
    """Write the members; an unsafe one raises, damaged bytes are returned (the sidecar may say which part)."""
    try:
        with tarfile.open(fileobj=stream, mode="r|", bufsize=_CHUNK,  # type: ignore[arg-type]
                          tarinfo=_GuardedInfo) as tar:
            seen: dict[str, bool] = {}
            for count, member in enumerate(tar, 1):
                if count > _MAX_MEMBERS:
                    raise UnsafeArchive(f"{loc.whole.name} holds more than {_MAX_MEMBERS} members", hint=_HINT)
                _write_member(tar, member, dest / ROOT, _member_path(member, seen))
            end = tar.offset  # where the end-of-archive blocks start (or a header tarfile could not read)
    except UnsafeArchive:
        raise
    except (tarfile.TarError, EOFError, ArchiveError) as exc:
        return exc if isinstance(exc, ArchiveError) else ArchiveError(
            f"{loc.whole.name} is not a readable tar archive: {exc}", hint=_HINT)
    # tarfile takes a header it cannot read for the end of the archive: past the end, only zeros may follow,
    # else a member held more bytes than its header declared (or bytes were inserted)
    rest = stream.since(end)
    if not stream.drain() or rest is None or rest.strip(b"\0"):
        return UnsafeArchive(f"{loc.whole.name} has bytes past its last readable member: a member holds more "
                             "bytes than its header declares, or the archive was altered", hint=_HINT)
    return None


def _amount(n: int) -> str:
    """Bytes as a person reads them: a small TMPDIR shows its KiB (or bytes), never "0 MiB"."""
    if n < 1024:
        return f"{n} bytes"
    if n < 1 << 20:
        return f"{n / 1024:.1f} KiB"
    if n < 1 << 30:
        return f"{n / (1 << 20):.1f} MiB"
    return f"{n / (1 << 30):.2f} GiB"


def unpack_archive(loc: Located, dest: Path, reporter: Reporter | None = None) -> Path:
    """Unpack the archive at ``loc`` into the empty folder ``dest``; returns the wheelhouse folder in it.

    Raises ArchiveError naming every part that is missing or not the sidecar's bytes, and
    UnsafeArchive for a member that is not a plain file or folder under ``wheelhouse/``.
    """
    reporter = reporter or NullReporter()
    sidecar, files, missing = archive_files(loc)
    if missing:
        raise ArchiveError(missing[0], hint=_HINT, detail="\n".join(missing))
    total = sum(p.stat().st_size for p in files)
    free = shutil.disk_usage(dest).free
    if total > free:
        raise ArchiveError(f"{dest} has {_amount(free)} free, unpacking {loc.whole.name} needs {_amount(total)}",
                           hint="point TMPDIR at a folder with room (TMPDIR=/big/tmp wh ...), or unpack it yourself")
    task = f"unpacking {loc.whole.name}"
    reporter.start(task, total=total, unit="B")
    stream = _Parts(files, reporter, task)
    try:
        failure = _unpack_stream(stream, loc, dest)
        stream.drain()  # after a damaged member: hash every byte, so the sidecar can say which part
    finally:  # refused or failed, no file stays open
        stream.close()
        reporter.finish(task)
    problems = _hash_problems(loc, sidecar, stream)
    if problems:
        raise ArchiveError(f"{loc.whole.name} is not what its sidecar says: {problems[0]}"
                           + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                           hint=_HINT, detail="\n".join(problems))
    if failure is not None:
        raise failure
    if not (dest / ROOT / "wh.json").is_file():
        raise ArchiveError(f"{loc.whole.name} holds no {ROOT}/wh.json; this is not an archive `wh pack` wrote",
                           hint="pack the wheelhouse folder with `wh pack WH -o FILE`")
    return dest / ROOT
