"""`wh pack`: a wheelhouse as one deterministic tar archive (optionally in parts) with a sha256 sidecar.

Tar, uncompressed, POSIX pax format: every member's header has fixed fields (mtime, uid,
gid, owner names, modes), members come in sorted order, so the same wheelhouse makes the
same bytes on any machine. Wheels are zip files already compressed; compressing them again
costs minutes on gigabytes and saves a few percent. Any ``tar`` unpacks it; pax (rather than
plain ustar) because names may pass 100 characters and a wheel may pass 8 GiB.

Only what the wheelhouse owns goes in (``wh.json["owned"]``: wh.json, pylock.toml, wheels/,
simple/, bootstrap/, patches, capture_target.py, manifest.toml, the engine's outputs), under
one folder ``wheelhouse/``. The archive and its parts are written under temp names in the
destination folder and renamed into place, the sidecar last: a failure (a full disk) leaves
no file under a final name.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from wheelhouse.atomic import write_atomic
from wheelhouse.errors import HashMismatch, UsageError, WhError
from wheelhouse.faults import checkpoint
from wheelhouse.lock import read_pylock, read_wh_json
from wheelhouse.lock.writer import is_owned, owned_paths
from wheelhouse.progress import NullReporter, Reporter

from .sidecar import SIDECAR_SUFFIX, Sidecar, base_of, part_name, render_sidecar
from .unpack import ROOT

if TYPE_CHECKING:
    from .verify import ClosureRule

__all__ = ["PackError", "PackResult", "MTIME", "parse_size", "archive_members", "pack_wheelhouse"]

MTIME = 315532800  # 1980-01-01T00:00:00Z, the earliest a zip (a wheel) can say: fixed, so the bytes are too
_MAX_PARTS = 9999
_CHUNK = 1 << 20


class PackError(WhError):
    code = "pack"


@dataclass(frozen=True)
class PackResult:
    archive: Path
    sidecar: Path
    sha256: str
    size: int
    files: int
    parts: tuple[tuple[Path, str, int], ...] = ()  # (path, sha256, size), part 1 first

    def to_json(self) -> dict[str, Any]:
        return {"archive": str(self.archive), "sidecar": str(self.sidecar), "sha256": self.sha256, "size": self.size,
                "files": self.files, "parts": [{"path": str(p), "sha256": s, "size": n} for p, s, n in self.parts]}


def parse_size(text: str) -> int:
    """``2G``, ``700M``, ``64K``, ``4096``: a size in bytes (binary units: 1K = 1024)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*", text or "", re.IGNORECASE)
    if not m:
        raise UsageError(f"--part-size {text!r} is not a size", hint="e.g. --part-size 2G, 700M or 64K")
    size = int(float(m[1]) * 1024 ** "_KMGT".index(m[2].upper() or "_"))
    if size < 1024:
        raise UsageError(f"--part-size {text!r} is below 1K", hint="e.g. --part-size 2G (a FAT32 stick holds < 4G)")
    return size


def _is_temp(rel: str) -> bool:
    # wh's temp files and folders are dot-named (.x.tmp, .simple.wh-tmp, .fetch); __pycache__ is no one's data
    return any(p.startswith(".") or p == "__pycache__" for p in rel.split("/"))


def archive_members(root: Path, meta: dict[str, Any]) -> list[tuple[str, Path | None]]:
    """``(relative posix path, file)`` for every folder (file None) and file the wheelhouse owns, sorted."""
    owned = list(owned_paths(meta))
    engine = meta.get("engine") if isinstance(meta.get("engine"), dict) else {}
    owned += [p for p in [engine.get("log"), *(a.get("path") for a in engine.get("artifacts") or []
                                               if isinstance(a, dict))] if isinstance(p, str)]
    found: dict[str, Path | None] = {}
    real_root = root.resolve()
    for top in sorted(set(owned)):
        if Path(top).is_absolute() or ".." in Path(top).parts:
            raise PackError(f"{root / 'wh.json'} owns {top!r}, a path outside the wheelhouse", hint="re-run `wh stage`")
        start = root / top
        if not os.path.lexists(start):
            continue  # a path wh.json owns but that is not there: `wh verify` names it
        walk = [start] if not start.is_dir() or start.is_symlink() else [start, *sorted(start.rglob("*"))]
        for p in walk:
            rel = p.relative_to(root).as_posix()
            if _is_temp(rel) or not is_owned(rel, owned):
                continue
            if p.is_symlink():
                target = p.resolve()
                if not target.is_file() or real_root not in target.parents:
                    raise PackError(f"{p} is a symbolic link to {os.readlink(p)}, outside the wheelhouse",
                                    hint="replace it with the file itself, then pack again")
            if p.is_dir() and not p.is_symlink():
                found[rel] = None
            elif p.is_file():
                found[rel] = p
        for parent in Path(top).parents:  # the folders above an owned file (patches/fix/ for patches/fix/a.toml)
            if str(parent) != ".":
                found.setdefault(parent.as_posix(), None)
    return sorted(found.items())


class _PartWriter:
    """A file-like sink for tarfile: bytes go to temp files, a new one every ``part_size`` bytes,
    with each part's sha256 and the whole's kept as they pass."""

    def __init__(self, out: Path, part_size: int | None):
        self.out, self.part_size = out, part_size
        self.whole = hashlib.sha256()
        self.parts: list[tuple[Path, hashlib._Hash, int]] = []  # (temp path, hash, size)
        self.fh = None
        self.offset = 0

    def _temp(self) -> Path:
        n = len(self.parts) + 1
        name = part_name(self.out.name, n) if self.part_size else self.out.name
        return self.out.with_name(f".{name}.{os.getpid()}.tmp")

    def _next(self) -> None:
        self._close_part()
        path = self._temp()
        self.fh = open(path, "wb")
        self.parts.append((path, hashlib.sha256(), 0))

    def _close_part(self) -> None:
        if self.fh is not None:
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
            self.fh = None
            checkpoint("carry.pack.part-written")

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            if self.fh is None or (self.part_size and self.parts[-1][2] >= self.part_size):
                self._next()
            path, h, size = self.parts[-1]
            room = (self.part_size - size) if self.part_size else len(view)
            block = view[:room]
            self.fh.write(block)
            if self.part_size:  # unsplit, the one part's hash is the whole's
                h.update(block)
            self.whole.update(block)
            self.parts[-1] = (path, h, size + len(block))
            self.offset += len(block)
            view = view[len(block):]
        return len(data)

    def tell(self) -> int:
        return self.offset

    def close(self) -> None:
        self._close_part()

    def discard(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None
        for path, _, _ in self.parts:
            path.unlink(missing_ok=True)


class _Source:
    """A member's file read for tarfile, hashed (a wheel's sha256 is checked against the lock) and reported."""

    def __init__(self, path: Path, reporter: Reporter, task: str):
        self.fh = open(path, "rb")
        self.sha = hashlib.sha256()
        self.reporter, self.task = reporter, task

    def read(self, n: int = -1) -> bytes:
        block = self.fh.read(n)
        self.sha.update(block)
        self.reporter.advance(self.task, len(block))
        return block


def _info(rel: str, size: int | None) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(f"{ROOT}/{rel}" if rel else ROOT)
    ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = MTIME, 0, 0, "", ""
    if size is None:
        ti.type, ti.mode = tarfile.DIRTYPE, 0o755
    else:
        ti.type, ti.mode, ti.size = tarfile.REGTYPE, 0o644, size
    return ti


def _write_tar(sink: _PartWriter, members, wheel_sha: dict[str, str], reporter: Reporter, task: str) -> list[tuple]:
    """Every member into ``sink``; returns the wheels whose bytes are not the lock's ``(path, expected, actual)``."""
    bad = []
    with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT, copybufsize=_CHUNK) as tar:  # type: ignore[arg-type]
        tar.addfile(_info("", None))
        for rel, path in members:
            if path is None:
                tar.addfile(_info(rel, None))
                continue
            src = _Source(path, reporter, task)
            try:
                tar.addfile(_info(rel, os.fstat(src.fh.fileno()).st_size), src)
            finally:
                src.fh.close()
            expected = wheel_sha.get(rel)
            if expected and src.sha.hexdigest() != expected:
                bad.append((str(path), expected, src.sha.hexdigest()))
    return bad


def _finals(out: Path, sink: _PartWriter) -> list[Path]:
    if sink.part_size:
        return [out.with_name(part_name(out.name, i)) for i in range(1, len(sink.parts) + 1)]
    return [out]


def _remove_stale(out: Path, kept: Sequence[Path]) -> None:
    """A previous pack's outputs that this one does not replace: the unsplit FILE, or parts past the last."""
    candidates = [out] + sorted(out.parent.glob(f"{_glob_escape(out.name)}.part-[0-9][0-9][0-9][0-9]"))
    for p in candidates:
        if p not in kept and p.is_file():
            p.unlink()


def _glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def pack_wheelhouse(wheelhouse: str | Path, out: str | Path, *, part_size: int | None = None,
                    reporter: Reporter | None = None, closure: ClosureRule | None = None) -> PackResult:
    """Write ``wheelhouse`` to ``out`` (or ``out.part-0001``... of ``part_size`` bytes) and ``out.sha256``.

    The wheelhouse is checked first (``wh verify`` without the hashes), and each wheel's sha256
    is checked against pylock.toml as it is written: a damaged wheelhouse is not packed.
    """
    from .verify import verify_wheelhouse

    reporter = reporter or NullReporter()
    root, out = Path(wheelhouse), Path(out).absolute()
    meta, lock = read_wh_json(root), read_pylock(root)
    verdict = verify_wheelhouse(root, hashes=False, closure=closure)
    if verdict.problems:
        raise PackError(f"{root} is not whole, nothing was packed: {verdict.problems[0]}"
                        + (f" (and {len(verdict.problems) - 1} more)" if len(verdict.problems) > 1 else ""),
                        hint=f"see every problem with `wh verify {root}`", detail="\n".join(verdict.problems))
    if out.is_dir():
        raise UsageError(f"-o {out} is a folder", hint="name the archive file: -o wheelhouse.tar")
    if base_of(out) != out:  # verify and install would take it for a part or a sidecar of another archive
        raise UsageError(f"-o {out.name} is named like a part or a sidecar (.part-N, {SIDECAR_SUFFIX})",
                         hint="name the archive file: -o wheelhouse.tar")
    if root.resolve() in out.resolve().parents and is_owned(out.resolve().relative_to(root.resolve()).as_posix(),
                                                            owned_paths(meta)):
        raise UsageError(f"-o {out} lies inside what the wheelhouse owns", hint="write the archive beside it")
    members = archive_members(root, meta)
    total = sum(p.stat().st_size for _, p in members if p is not None)
    if part_size and (total // part_size) + 1 > _MAX_PARTS:
        raise UsageError(f"--part-size {part_size} would split {total} bytes into more than {_MAX_PARTS} parts",
                         hint="choose a larger --part-size")
    wheel_sha = {f.path: f.sha256 for f in lock.files}
    task = f"packing {len([m for m in members if m[1]])} files"
    reporter.start(task, total=total, unit="B")
    out.parent.mkdir(parents=True, exist_ok=True)
    sink = _PartWriter(out, part_size)
    renamed: list[Path] = []
    try:
        bad = _write_tar(sink, members, wheel_sha, reporter, task)
        sink.close()
        if bad:
            raise HashMismatch(*bad[0], more=bad[1:], message=f"{len(bad)} wheel(s) do not match pylock.toml, "
                               f"nothing was packed: {Path(bad[0][0]).name}",
                               hint=f"the wheelhouse was altered or damaged; `wh verify {root}` names every problem",
                               detail="\n".join(f"{p}: expected {e}, got {a}" for p, e, a in bad))
        finals = _finals(out, sink)
        parts = tuple((final, h.hexdigest(), size) for final, (_, h, size) in zip(finals, sink.parts)) if part_size else ()
        sidecar = Sidecar(whole=out.name, sha256=sink.whole.hexdigest(), parts=tuple((p.name, sha) for p, sha, _ in parts))
        checkpoint("carry.pack.before-rename")
        side = out.with_name(out.name + SIDECAR_SUFFIX)
        side.unlink(missing_ok=True)  # never a sidecar beside bytes it does not name
        for (tmp, _, _), final in zip(sink.parts, finals):
            os.replace(tmp, final)
            renamed.append(final)
        checkpoint("carry.pack.before-sidecar")
        write_atomic(side, render_sidecar(sidecar))
    except BaseException as exc:
        sink.discard()
        for final in renamed:
            final.unlink(missing_ok=True)
        reporter.finish(task)
        if isinstance(exc, OSError):
            raise PackError(f"could not write {exc.filename or out}: {exc.strerror or exc}; nothing was left behind",
                            hint="free space there (or choose another -o), then run `wh pack` again") from exc
        raise
    reporter.finish(task)
    _remove_stale(out, finals)
    return PackResult(archive=out, sidecar=side, sha256=sidecar.sha256, size=sink.offset,
                      files=len([m for m in members if m[1]]), parts=parts)
