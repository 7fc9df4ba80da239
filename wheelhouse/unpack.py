"""wh's own wheel installer: many wheels, extracted in parallel, checked against their RECORD.

The box never has a warm cache, so install time is extraction time. Each wheel
is planned first (every archive path checked: no absolute paths, no ``..``,
every file listed in RECORD with a hash); then all wheels' files are extracted
by one pool of threads (zlib, hashlib and file writes release the GIL), each
file hashed as it is written and compared with RECORD; then each wheel is
finished (console-script launchers, INSTALLER, REQUESTED, a RECORD of what was
really installed). A previously installed version of the same distribution is
moved aside first and deleted only when the batch succeeded; on any failure
the batch's new files are removed and the old ones put back.

Only stdlib modules that cannot reach a network are imported here (no
multiprocessing: its connection module imports socket).
"""

from __future__ import annotations

import base64
import configparser
import csv
import hashlib
import io
import os
import re
import shutil
import threading
import time
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .errors import WhError
from .progress import NullReporter, Reporter

__all__ = [
    "UnpackError",
    "UnsafeWheelPath",
    "RecordMismatch",
    "InstalledDist",
    "install_wheels",
    "find_installed",
    "remove_distribution",
    "canonical_name",
]

_CHUNK = 1 << 20
_SCHEME_KEYS = ("purelib", "platlib", "scripts", "data", "headers")


class UnpackError(WhError):
    code = "bad-wheel"


class UnsafeWheelPath(UnpackError):
    code = "unsafe-wheel-path"


class RecordMismatch(UnpackError):
    code = "record-mismatch"


@dataclass(frozen=True)
class InstalledDist:
    name: str
    version: str
    wheel: str
    dist_info: str
    files: int
    replaced: str | None = None  # version that was there before


def canonical_name(name: str) -> str:
    """PEP 503 normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


# ---- planning ------------------------------------------------------------------------------


@dataclass
class _Member:
    name: str  # archive path
    dest: str  # absolute destination
    size: int
    digest: str | None  # urlsafe-b64 sha256 from RECORD
    mode: int  # unix permission bits from the archive
    script: bool  # from .data/scripts: shebang rewrite
    offset: int = 0  # local header offset in the archive
    compress_size: int = 0
    compress_type: int = zipfile.ZIP_STORED
    write: bool = True  # False when another wheel of the batch writes the same path


@dataclass
class _WheelPlan:
    wheel: Path
    name: str
    version: str
    dist_info: str  # folder name
    base: str  # site folder that holds the dist-info
    members: list[_Member]
    entry_points: str | None
    written: list[str] = field(default_factory=list)
    moved: list[tuple[str, str]] = field(default_factory=list)  # (original, trash) of the old version
    replaced: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def _check_archive_path(wheel: Path, name: str) -> None:
    parts = name.split("/")
    if (
        name.startswith("/")
        or "\\" in name
        or re.match(r"^[A-Za-z]:", name)
        or any(p == ".." for p in parts)
        or "\x00" in name
    ):
        raise UnsafeWheelPath(
            f"{wheel.name} contains an unsafe path {name!r} (absolute or with '..')",
            hint="this wheel would write outside the environment; rebuild it or remove it from the wheelhouse and re-run `wh stage`",
        )


def _parse_record(wheel: Path, text: str) -> dict[str, tuple[str | None, int | None]]:
    out: dict[str, tuple[str | None, int | None]] = {}
    for row in csv.reader(io.StringIO(text)):
        if not row or not row[0]:
            continue
        path = row[0]
        digest = None
        if len(row) > 1 and row[1]:
            algo, _, value = row[1].partition("=")
            if algo != "sha256":
                # Only sha256 is trusted here; weaker hashes are treated as missing.
                digest = None
            else:
                digest = value
        size = int(row[2]) if len(row) > 2 and row[2].strip().isdigit() else None
        out[path] = (digest, size)
    return out


def _find_dist_info(wheel: Path, names: list[str]) -> str:
    tops = {n.split("/", 1)[0] for n in names if "/" in n}
    infos = [t for t in tops if t.endswith(".dist-info") and f"{t}/METADATA" in names]
    if len(infos) != 1:
        raise UnpackError(f"{wheel.name} has {len(infos)} .dist-info folders with METADATA (exactly one expected)",
                          hint="the wheel is malformed; rebuild it")
    return infos[0]


def _plan_wheel(wheel: Path, scheme: Mapping[str, str]) -> _WheelPlan:
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise UnpackError(f"{wheel.name} is not a readable wheel: {exc}", hint="re-stage it with `wh stage`") from exc
    with zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        for n in names:
            _check_archive_path(wheel, n)
        dist_info = _find_dist_info(wheel, names)
        wheel_meta = zf.read(f"{dist_info}/WHEEL").decode("utf-8", "replace")
        if f"{dist_info}/RECORD" not in names:
            raise RecordMismatch(f"{wheel.name} has no RECORD", hint="the wheel is malformed; rebuild it")
        record = _parse_record(wheel, zf.read(f"{dist_info}/RECORD").decode("utf-8"))
        entry_points = None
        if f"{dist_info}/entry_points.txt" in names:
            entry_points = zf.read(f"{dist_info}/entry_points.txt").decode("utf-8")
    meta = dict(
        (k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in wheel_meta.splitlines()) if v
    )
    if not meta.get("wheel-version", "1").startswith("1."):
        raise UnpackError(f"{wheel.name} has Wheel-Version {meta.get('wheel-version')}; wh installs 1.x",
                          hint="install it with `--installer pip`")
    purelib = meta.get("root-is-purelib", "true").lower() == "true"
    root = scheme["purelib" if purelib else "platlib"]
    stem = dist_info[: -len(".dist-info")]
    name, _, version = stem.partition("-")
    data_prefix = f"{stem}.data/"
    members: list[_Member] = []
    for info in infos:
        n = info.filename
        if n.endswith("/"):
            continue
        if n in (f"{dist_info}/RECORD", f"{dist_info}/RECORD.jws", f"{dist_info}/RECORD.p7s"):
            continue
        if n not in record:
            raise RecordMismatch(f"{wheel.name}: {n} is not listed in RECORD", hint="the wheel was altered; re-stage it")
        digest, size = record[n]
        if digest is None:
            raise RecordMismatch(f"{wheel.name}: {n} has no sha256 in RECORD", hint="the wheel was altered; re-stage it")
        script = False
        if n.startswith(data_prefix):
            key, _, rest = n[len(data_prefix):].partition("/")
            if key not in _SCHEME_KEYS or not rest:
                raise UnpackError(f"{wheel.name}: {n} names an unknown .data folder {key!r}",
                                  hint="the wheel is malformed; rebuild it")
            base_dir = scheme[key]
            if key == "headers":
                rest = f"{name}/{rest}"
            script = key == "scripts"
        else:
            base_dir, rest = root, n
        dest = os.path.normpath(os.path.join(base_dir, rest))
        if os.path.commonpath([dest, os.path.normpath(base_dir)]) != os.path.normpath(base_dir):
            raise UnsafeWheelPath(f"{wheel.name}: {n} would be written outside {base_dir}",
                                  hint="remove this wheel from the wheelhouse and re-run `wh stage`")
        mode = (info.external_attr >> 16) & 0o777
        members.append(_Member(n, dest, info.file_size, digest, mode, script, info.header_offset,
                               info.compress_size, info.compress_type))
    return _WheelPlan(wheel, name, version, dist_info, root, members, entry_points)


# ---- the installed side ---------------------------------------------------------------------


def find_installed(site_dirs: Sequence[str | os.PathLike], name: str) -> list[tuple[Path, str]]:
    """``(dist-info folder, version)`` of every installed copy of ``name`` in ``site_dirs``."""
    want = canonical_name(name)
    out = []
    for site in dict.fromkeys(str(s) for s in site_dirs):
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        for e in entries:
            if e.endswith(".dist-info"):
                n, _, v = e[: -len(".dist-info")].partition("-")
                if canonical_name(n) == want:
                    out.append((Path(site) / e, v))
    return out


def _record_paths(dist_info: Path) -> list[str]:
    base = dist_info.parent
    paths = [str(dist_info)]
    try:
        text = (dist_info / "RECORD").read_text(encoding="utf-8")
    except OSError:
        return paths
    for row in csv.reader(io.StringIO(text)):
        if row and row[0]:
            p = os.path.normpath(os.path.join(base, row[0]))
            if not p.startswith(str(dist_info) + os.sep):
                paths.append(p)
    return paths


def _inside(paths: list[str], scheme: Mapping[str, str]) -> list[str]:
    """Only paths inside the environment: an old RECORD naming /etc/passwd must not make us move it."""
    roots = [os.path.normpath(r) + os.sep for r in scheme.values()]
    return [p for p in paths if any((os.path.normpath(p) + os.sep).startswith(r) for r in roots)]


def _move_aside(paths: list[str], trash: Path) -> list[tuple[str, str]]:
    moved = []
    for i, p in enumerate(paths):
        if not os.path.lexists(p):
            continue
        dest = trash / f"{i}-{os.path.basename(p)}"
        trash.mkdir(parents=True, exist_ok=True)
        shutil.move(p, dest)
        moved.append((p, str(dest)))
        if p.endswith(".py"):  # its bytecode goes with it
            cache = os.path.join(os.path.dirname(p), "__pycache__")
            stem = os.path.basename(p)[:-3] + "."
            if os.path.isdir(cache):
                for c in os.listdir(cache):
                    if c.startswith(stem) and c.endswith(".pyc"):
                        os.unlink(os.path.join(cache, c))
    return moved


def _prune_empty_dirs(paths: list[str], stop: set[str]) -> None:
    for d in sorted({os.path.dirname(p) for p in paths}, key=len, reverse=True):
        while d and d not in stop and os.path.isdir(d):
            try:
                cache = os.path.join(d, "__pycache__")
                if os.path.isdir(cache) and not os.listdir(cache):
                    os.rmdir(cache)
                os.rmdir(d)
            except OSError:
                break
            d = os.path.dirname(d)


def remove_distribution(name: str, scheme: Mapping[str, str]) -> list[str]:
    """Uninstall every installed copy of ``name`` (files from its RECORD); returns the versions removed."""
    sites = [scheme["purelib"], scheme["platlib"]]
    removed = []
    for dist_info, version in find_installed(sites, name):
        paths = _inside(_record_paths(dist_info), scheme)
        for p in paths:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            elif os.path.lexists(p):
                os.unlink(p)
        _prune_empty_dirs(paths, set(scheme.values()))
        removed.append(version)
    return removed


# ---- extraction -----------------------------------------------------------------------------


def _shebang(python: str) -> bytes:
    if len(python) < 127 and " " not in python:
        return f"#!{python}\n".encode()
    # Long or spaced paths: let sh find the interpreter (the kernel limits #! lines).
    return f"#!/bin/sh\n'''exec' '{python}' \"$0\" \"$@\"\n' '''\n".encode()


def _open_new(dest: str, mode: int):
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(dest, flags, mode)
    except FileExistsError:
        # Never write into an existing inode: a running process may have it mapped.
        os.unlink(dest)
        fd = os.open(dest, flags, mode)
    return os.fdopen(fd, "wb")


class _Archives:
    """One read-only descriptor per wheel, shared by all threads (``os.pread`` has no file position)."""

    def __init__(self) -> None:
        self._fds: dict[Path, int] = {}
        self._lock = threading.Lock()

    def fd(self, path: Path) -> int:
        with self._lock:
            fd = self._fds.get(path)
            if fd is None:
                fd = self._fds[path] = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            return fd

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


_READ = 4 << 20


def _member_chunks(fd: int, wheel: Path, m: _Member):
    """The member's uncompressed bytes, in pieces. Raw inflate over pread: no per-read Python
    buffering (ZipExtFile's is ~1.6x slower), and no CRC -- the RECORD sha256 checks every byte."""
    header = os.pread(fd, 30, m.offset)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise UnpackError(f"{wheel.name}: bad local header for {m.name}", hint="the wheel is damaged; re-stage it")
    name_len, extra_len = int.from_bytes(header[26:28], "little"), int.from_bytes(header[28:30], "little")
    pos = m.offset + 30 + name_len + extra_len
    left = m.compress_size
    if m.compress_type == zipfile.ZIP_STORED:
        while left > 0:
            chunk = os.pread(fd, min(left, _READ), pos)
            if not chunk:
                break
            pos += len(chunk)
            left -= len(chunk)
            yield chunk
        return
    if m.compress_type == zipfile.ZIP_DEFLATED:
        inflater = zlib.decompressobj(-15)
        while left > 0:
            chunk = os.pread(fd, min(left, _READ), pos)
            if not chunk:
                break
            pos += len(chunk)
            left -= len(chunk)
            out = inflater.decompress(chunk)
            if out:
                yield out
        tail = inflater.flush()
        if tail:
            yield tail
        return
    with zipfile.ZipFile(wheel) as zf, zf.open(m.name) as src:  # bzip2/lzma: rare, let zipfile do it
        while True:
            chunk = src.read(_READ)
            if not chunk:
                return
            yield chunk


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _create(dest: str, mode: int) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(dest, flags, mode)
    except FileExistsError:
        # Never write into an existing inode: a running process may have it mapped.
        os.unlink(dest)
        return os.open(dest, flags, mode)


def _extract(plan: _WheelPlan, members: list[_Member], python: str, archives: _Archives, reporter: Reporter,
             task: str, failed: threading.Event, on_written: Callable[[str], None] | None = None) -> None:
    src = archives.fd(plan.wheel)
    for m in members:
        if failed.is_set():
            return
        mode = 0o755 if (m.mode & 0o111 or m.script) else 0o644
        h = hashlib.sha256()
        size = 0
        if m.script:
            data = b"".join(_member_chunks(src, plan.wheel, m))
            h.update(data)
            size = len(data)
            if data.startswith(b"#!python"):
                data = _shebang(python) + (data.split(b"\n", 1)[1] if b"\n" in data else b"")
            chunks = [data]
        else:
            chunks = _member_chunks(src, plan.wheel, m)
        out = _create(m.dest, mode)
        try:
            with plan.lock:
                plan.written.append(m.dest)
            for chunk in chunks:
                if not m.script:
                    h.update(chunk)
                    size += len(chunk)
                _write_all(out, chunk)
        finally:
            os.close(out)
        if size != m.size or _b64(h.digest()) != m.digest:
            raise RecordMismatch(f"{plan.wheel.name}: {m.name} does not match its RECORD hash",
                                 hint="the wheel was altered after it was built; re-stage it with `wh stage`")
        reporter.advance(task, max(size, 1))
        if on_written is not None and m.dest.endswith(".py"):
            on_written(m.dest)


def _chunks(plans: list[_WheelPlan], target_bytes: int) -> list[tuple[_WheelPlan, list[_Member]]]:
    out = []
    for plan in plans:
        todo = [m for m in plan.members if m.write]
        todo.sort(key=lambda m: -m.size)
        batch: list[_Member] = []
        acc = 0
        for m in todo:
            batch.append(m)
            acc += m.size
            if acc >= target_bytes or len(batch) >= 400:
                out.append((plan, batch))
                batch, acc = [], 0
        if batch:
            out.append((plan, batch))
    # Biggest first so one huge wheel does not finish last on one thread.
    out.sort(key=lambda pb: -sum(m.size for m in pb[1]))
    return out


# ---- finishing ----------------------------------------------------------------------------------


_LAUNCHER = """# -*- coding: utf-8 -*-
import sys
from {module} import {head}
if __name__ == "__main__":
    sys.exit({call}())
"""


def _launchers(entry_points: str | None) -> list[tuple[str, str]]:
    if not entry_points:
        return []
    cp = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    cp.optionxform = str  # type: ignore[assignment]
    try:
        cp.read_string(entry_points)
    except configparser.Error:
        return []
    out = []
    for group in ("console_scripts", "gui_scripts"):
        if not cp.has_section(group):
            continue
        for script, ref in cp.items(group):
            ref = ref.split("[", 1)[0].strip()
            module, _, attr = ref.partition(":")
            if not module.strip() or not attr.strip() or "/" in script:
                continue
            attr = attr.strip()
            out.append((script.strip(), _LAUNCHER.format(module=module.strip(), head=attr.split(".")[0], call=attr)))
    return out


def _finish(plan: _WheelPlan, scheme: Mapping[str, str], python: str) -> InstalledDist:
    info_dir = os.path.join(plan.base, plan.dist_info)
    rows: list[tuple[str, str, str]] = []
    for m in plan.members:
        if os.path.exists(m.dest):
            rows.append((m.dest, f"sha256={m.digest}", str(m.size)))
    extra: list[tuple[str, bytes, int]] = []
    for script, body in _launchers(plan.entry_points):
        data = _shebang(python) + body.encode()
        extra.append((os.path.join(scheme["scripts"], script), data, 0o755))
    extra.append((os.path.join(info_dir, "INSTALLER"), b"wh\n", 0o644))
    extra.append((os.path.join(info_dir, "REQUESTED"), b"", 0o644))
    for dest, data, mode in extra:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with _open_new(dest, mode) as out:
            plan.written.append(dest)
            out.write(data)
        os.chmod(dest, mode)
        rows.append((dest, f"sha256={_b64(hashlib.sha256(data).digest())}", str(len(data))))
    record = os.path.join(info_dir, "RECORD")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for dest, digest, size in rows:
        writer.writerow((os.path.relpath(dest, plan.base), digest, size))
    writer.writerow((os.path.relpath(record, plan.base), "", ""))
    with _open_new(record, 0o644) as out:
        plan.written.append(record)
        out.write(buf.getvalue().encode())
    return InstalledDist(plan.name, plan.version, plan.wheel.name, info_dir, len(rows) + 1, plan.replaced)


# ---- the whole batch ----------------------------------------------------------------------------


def _make_dirs(dirs: set[str]) -> list[str]:
    """Create ``dirs``; returns the ones that did not exist (parents first)."""
    created: list[str] = []
    for d in sorted(dirs):
        missing = []
        p = d
        while p and not os.path.isdir(p):
            missing.append(p)
            p = os.path.dirname(p)
        for m in reversed(missing):
            try:
                os.mkdir(m)
                created.append(m)
            except FileExistsError:
                pass
    return created


def _remove_trash(trash: Path) -> None:
    shutil.rmtree(trash, ignore_errors=True)
    for d in (trash.parent, trash.parent.parent):  # .wh/trash, .wh: only when empty
        try:
            d.rmdir()
        except OSError:
            break


def _drop_bytecode(path: str) -> None:
    cache = os.path.join(os.path.dirname(path), "__pycache__")
    stem = os.path.basename(path)[:-3] + "."
    try:
        names = os.listdir(cache)
    except OSError:
        return
    for c in names:
        if c.startswith(stem) and c.endswith(".pyc"):
            try:
                os.unlink(os.path.join(cache, c))
            except OSError:
                pass


def _rollback(plans: list[_WheelPlan], scheme: Mapping[str, str], created: list[str]) -> None:
    for plan in plans:
        for p in plan.written:
            try:
                os.unlink(p)
            except OSError:
                pass
            if p.endswith(".py"):
                _drop_bytecode(p)
        _prune_empty_dirs(plan.written, set(scheme.values()))
        for original, trash in reversed(plan.moved):
            try:
                os.makedirs(os.path.dirname(original), exist_ok=True)
                shutil.move(trash, original)
            except OSError:
                pass
    for d in sorted(created, key=len, reverse=True):
        shutil.rmtree(os.path.join(d, "__pycache__"), ignore_errors=True)
        try:
            os.rmdir(d)
        except OSError:
            pass


def install_wheels(
    wheels: Sequence[Path],
    scheme: Mapping[str, str],
    python: str,
    *,
    jobs: int | None = None,
    reporter: Reporter | None = None,
    trash_dir: Path | None = None,
    on_written: Callable[[str], None] | None = None,
    on_abort: Callable[[], None] | None = None,
) -> list[InstalledDist]:
    """Install ``wheels`` into ``scheme`` (purelib, platlib, scripts, data, headers) for ``python``.

    All or nothing: on any error every file written by this call is removed
    and replaced versions are restored, then the error is raised.
    ``on_written(path)`` hears of each verified ``.py`` file as soon as it is written (to
    byte-compile while extraction goes on); ``on_abort()`` is called before a rollback.
    """
    reporter = reporter or NullReporter()
    wheels = [Path(w) for w in wheels]
    jobs = jobs or min(32, (os.cpu_count() or 2) * 2)
    if not wheels:
        return []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        plans = list(pool.map(lambda w: _plan_wheel(w, scheme), wheels))
    # Two wheels of one batch writing the same file: the later one keeps it.
    owner: dict[str, _Member] = {}
    for plan in plans:
        for m in plan.members:
            prev = owner.get(m.dest)
            if prev is not None:
                prev.write = False
            owner[m.dest] = m
    trash = Path(trash_dir or os.path.join(scheme["platlib"], ".wh", "trash")) / f"{os.getpid()}-{time.time_ns()}"
    total = sum(m.size for p in plans for m in p.members if m.write) or 1
    task = f"installing {len(plans)} wheels"
    reporter.start(task, total=total, unit="B")
    archives = _Archives()
    failed = threading.Event()
    created: list[str] = []
    try:
        site_dirs = [scheme["purelib"], scheme["platlib"]]
        for i, plan in enumerate(plans):
            old = find_installed(site_dirs, plan.name)
            if old:
                plan.replaced = ",".join(v for _, v in old)
                paths: list[str] = []
                for dist_info, _ in old:
                    paths += _record_paths(dist_info)
                plan.moved = _move_aside(_inside(paths, scheme), trash / str(i))
        dirs = {os.path.dirname(m.dest) for p in plans for m in p.members}
        dirs |= {os.path.join(p.base, p.dist_info) for p in plans} | {scheme["scripts"]}
        created += _make_dirs(dirs)
        work = _chunks(plans, target_bytes=max(8 << 20, total // (jobs * 4)))

        def run(item):
            plan, members = item
            try:
                _extract(plan, members, python, archives, reporter, task, failed, on_written)
            except BaseException:
                failed.set()
                raise

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(run, item) for item in work]
            errors = [f.exception() for f in futures]
        archives.close()
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            done = list(pool.map(lambda p: _finish(p, scheme, python), plans))
    except BaseException as exc:
        archives.close()
        if on_abort is not None:
            on_abort()
        reporter.finish(task)
        _rollback(plans, scheme, created)
        _remove_trash(trash)
        if isinstance(exc, OSError):
            raise UnpackError(f"could not write {exc.filename or 'a file'}: {exc.strerror or exc}",
                              hint="check free space and permissions of the environment, then re-run `wh install`") from exc
        raise
    reporter.finish(task)
    _remove_trash(trash)
    # Folders only the replaced versions used are empty now.
    _prune_empty_dirs([o for p in plans for o, _ in p.moved], set(scheme.values()))
    return done
