"""``wh bytecode`` and ``wh stage --bytecode``: compile a wheelhouse's wheels for the target's Python.

The format and the rules for using a pack are in ``wheelhouse.lock.bytecode``. Here: find an
interpreter of the target's version (the running one, ``pythonX.Y`` on PATH, or ``--python``),
split every wheel's importable ``.py`` files into chunks, compile them in one worker process per
core of that interpreter (the biggest wheels' chunks first, so torch does not finish alone), and
write one pack per wheel.

Nothing half-done: each pack is written under a temp name and renamed; wh.json is rewritten
(atomically) only after every pack is in place, and only then are packs it no longer lists
removed. A run killed before that leaves wh.json as it was: a pack it does not list is never
used, and the next run replaces it. A wheelhouse changed in place (``wh build``) keeps its
other packs: each is bound to its wheel's sha256.
"""

from __future__ import annotations

import hashlib
import io
import json
import marshal
import os
import queue
import select
import shutil
import struct
import subprocess
import sys
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelhouse.errors import UsageError, WhError
from wheelhouse.faults import checkpoint
from wheelhouse.lock import read_pylock, read_wh_json, write_wh_json
from wheelhouse.atomic import write_atomic
from wheelhouse.script_answer import PRINT_ANSWER, read_answer
from wheelhouse.digest import sha256_of
from wheelhouse.lock.bytecode import (BYTECODE, FORMAT, INDEX, BytecodeRecord, PackRecord, bytecode_record, importable,
                                      is_code, pack_name)
from wheelhouse.lock.writer import STANDARD_LAYOUT
from wheelhouse.progress import NullReporter, Reporter

__all__ = ["BytecodeError", "NoCompiler", "BytecodeResult", "Compiler", "find_compiler", "compile_wheelhouse"]

_CHUNK_BYTES = 1 << 20  # source bytes per task: small enough that two workers finish together
# A source bigger than this (as its zip entry declares, which bounds what zipfile inflates) is not
# precompiled: it is compiled on the box like any module without a pack. The biggest real modules
# are a few MB; a hostile wheel's "source" of gigabytes would otherwise fill a worker's memory.
MAX_SOURCE_BYTES = 16 << 20
_MAX_FRAME = 1 << 32  # a worker's answer is far smaller; a bigger length is garbage on its stdout
# A worker's first line: what is before it is the interpreter's own start-up talk (a .pth banner), not
# a frame (wheelhouse.script_answer). More than this before it is not a worker.
_FRAMES_START = b"\n@@WH-FRAMES@@\n"
_MAX_BANNER = 64 << 10

# Runs in the COMPILING interpreter (the target's version): stdlib only. Reads one task per line
# (a wheel path and member names) and answers one frame: 8-byte length + marshal of
# {member: (source size, marshal of the code)}; a member that does not compile is left out
# (py_compile and uv let such files pass too: a Python 2 file in a wheel).
_WORKER = r"""
import marshal, struct, sys, warnings, zipfile, json
warnings.simplefilter("ignore")
out = sys.stdout.buffer
out.write(%r)
out.flush()
for line in sys.stdin:
    task = json.loads(line)
    done = {}
    with zipfile.ZipFile(task["wheel"]) as w:
        for member, name in task["members"]:
            src = w.read(member)
            try:
                code = compile(src, name, "exec", dont_inherit=True, optimize=0)
            except Exception:
                continue
            done[member] = (len(src), marshal.dumps(code))
    blob = marshal.dumps(done)
    out.write(struct.pack("<Q", len(blob)) + blob)
    out.flush()
""" % (_FRAMES_START,)

# Asked of a candidate interpreter: which bytecode it writes.
_ASK = ("import importlib.util, json, sys; answer = {'magic': importlib.util.MAGIC_NUMBER.hex(), "
        "'cache_tag': sys.implementation.cache_tag, 'version': '.'.join(map(str, sys.version_info[:3])), "
        "'implementation': sys.implementation.name}; " + PRINT_ANSWER)


class BytecodeError(WhError):
    code = "bytecode"


class NoCompiler(UsageError):
    """No interpreter of the target's version: bad input (exit 2), nothing was written."""

    code = "no-compiler"


@dataclass(frozen=True)
class Compiler:
    """An interpreter that writes the target's bytecode."""

    executable: str
    magic: str
    cache_tag: str
    version: str


@dataclass(frozen=True)
class BytecodeResult:
    wheelhouse: Path
    record: BytecodeRecord
    compiled: int  # files compiled by this run
    reused: int  # packs taken as they were (same wheel, same magic)
    size: int  # bytes of packs

    @property
    def files(self) -> int:
        return sum(p.files for p in self.record.packs.values())

    def to_json(self) -> dict[str, Any]:
        return {"wheelhouse": str(self.wheelhouse), "python": self.record.python, "cache_tag": self.record.cache_tag,
                "magic": self.record.magic, "wheels": len(self.record.packs), "files": self.files,
                "compiled": self.compiled, "reused": self.reused, "size": self.size,
                "packs": [p.path for p in sorted(self.record.packs.values(), key=lambda p: p.path)]}


class _Answers:
    """A worker's stdout, read from its descriptor through one buffer of wh's: each read waits at most the
    silence limit (a worker that stops talking, mid-frame too, is found out), and what its interpreter
    printed before the worker's first line (a .pth banner: wheelhouse.script_answer) is read past."""

    def __init__(self, fd: int):
        self.fd, self.buf, self.started = fd, bytearray(), False

    def _fill(self, ended: str) -> None:
        if not select.select([self.fd], [], [], _silence_limit())[0]:
            raise TimeoutError(f"it answered nothing for {_silence_limit():g} s (hung?)")
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            raise OSError(ended)
        self.buf += chunk

    def read(self, n: int, ended: str) -> bytes:
        """The next ``n`` bytes of the frames (OSError ``ended`` when the worker ends first)."""
        while not self.started:
            at = self.buf.find(_FRAMES_START)
            if at >= 0:
                del self.buf[:at + len(_FRAMES_START)]
                self.started = True
            elif len(self.buf) > _MAX_BANNER:
                raise ValueError(f"it printed over {_MAX_BANNER >> 10} KiB before the worker started: not a worker")
            else:
                self._fill(ended)
        while len(self.buf) < n:
            self._fill(ended)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out


def _ask(exe: str) -> dict[str, str] | None:
    try:
        proc = subprocess.run([exe, "-I", "-c", _ASK], capture_output=True, text=True, timeout=60)
        return read_answer(proc.stdout) if proc.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def find_compiler(version: str, implementation: str, python: str | None = None,
                  flag: str = "--bytecode-python") -> Compiler:
    """An interpreter of the target's ``version`` ("3.12"): ``python`` if given, else the running one
    or ``python3.12`` on PATH. Raises BytecodeError naming what was found instead."""
    if implementation not in ("cp", "cpython"):
        raise NoCompiler(f"the target's interpreter is {implementation}, wh compiles bytecode for CPython only",
                            hint="leave the compiling to the box: `wh install --compile`")
    candidates = [python] if python else [sys.executable, shutil.which(f"python{version}")]
    seen = []
    for exe in filter(None, candidates):
        facts = _ask(exe)
        if facts is None:
            seen.append(f"{exe} (does not run)")
            continue
        if facts["implementation"] == "cpython" and facts["version"].rsplit(".", 1)[0] == version:
            return Compiler(exe, facts["magic"], facts["cache_tag"], facts["version"])
        seen.append(f"{exe} ({facts['implementation']} {facts['version']})")
    found = "; found " + ", ".join(seen) if seen else ""
    raise NoCompiler(f"no CPython {version} here to compile the target's bytecode{found}",
                        hint=f"pass one: {flag} /path/to/python{version} (any CPython {version}.x writes the same "
                             "bytecode), or leave the compiling to the box (`wh install --compile`)")


def _silence_limit() -> float:
    """Seconds a worker may take over one task (about 1 MB of source: seconds; one huge generated file:
    a minute) before the run fails as hung; WH_BYTECODE_TIMEOUT overrides it."""
    try:
        return max(0.1, float(os.environ.get("WH_BYTECODE_TIMEOUT", "") or 900))
    except ValueError:
        return 900.0


def _checked(done: Any, members: list) -> dict[str, tuple[int, bytes]]:
    """A worker's answer, as the worker writes it ({member: (source size, code)}, members of its task only)."""
    asked = {m for m, _ in members}
    if not isinstance(done, dict) or not all(
            m in asked and isinstance(v, tuple) and len(v) == 2 and type(v[0]) is int and is_code(v[1])
            for m, v in done.items()):
        raise ValueError("its answer is not the result of the task it was given")
    return done


class _Pool:
    """One worker process per job, each fed by its own thread from one queue of tasks."""

    def __init__(self, exe: str, jobs: int, on_done):
        self.on_done = on_done  # (wheel index, files compiled)
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.results: dict[int, dict] = {}
        self.failed: list[str] = []
        self.answered = 0  # tasks answered: each one must be, or the run fails
        self._lock = threading.Lock()
        self._procs = [subprocess.Popen([exe, "-I", "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE) for _ in range(jobs)]
        self._threads = [threading.Thread(target=self._feed, args=(p,), daemon=True) for p in self._procs]

    def run(self, tasks: list[tuple[int, str, list]]) -> None:
        for t in tasks:
            self.tasks.put(t)
        for _ in self._threads:
            self.tasks.put(None)
        for t in self._threads:
            t.start()
        for t in self._threads:
            t.join()
        if not self.failed and self.answered != len(tasks):  # a feeder that ended without a word
            self.failed.append(f"{len(tasks) - self.answered} of {len(tasks)} tasks got no answer")

    def _feed(self, proc: subprocess.Popen) -> None:
        answers = _Answers(proc.stdout.fileno())
        while True:
            task = self.tasks.get()
            if task is None or self.failed:
                break
            key, wheel, members = task
            try:
                proc.stdin.write((json.dumps({"wheel": wheel, "members": members}) + "\n").encode())
                proc.stdin.flush()
                head = answers.read(8, "the worker ended")
                size = struct.unpack("<Q", head)[0]
                if size > _MAX_FRAME:  # not a frame: something else on the worker's stdout
                    raise ValueError(f"it wrote {head!r} where a result was expected")
                blob = answers.read(size, "the worker ended in the middle of a result")
                done = _checked(marshal.loads(blob), members)
            except Exception as exc:  # whatever the worker did, it is this run's failure, said in one line
                try:
                    err = proc.stderr.read().decode("utf-8", "replace")[-2000:] if proc.poll() is not None else ""
                except (OSError, ValueError):  # closed under it: the run is being stopped (Ctrl-C, kill)
                    err = ""
                with self._lock:
                    self.failed.append(f"{Path(wheel).name}: {err.strip() or exc}")
                break
            with self._lock:
                self.results.setdefault(key, {}).update(done)
                self.answered += 1
                self.on_done(key, len(members))
        try:
            proc.stdin.close()
        except OSError:
            pass

    def close(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            for f in (p.stdout, p.stderr):
                f.close()


def _write_pack(dest: Path, index: dict[str, Any], members: dict[str, tuple[int, bytes]]) -> tuple[str, int]:
    """The pack at ``dest`` (built in memory, then written atomically); returns its sha256 and size."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr(INDEX, json.dumps(index, sort_keys=True))
        for name in sorted(members):
            z.writestr(name, members[name][1])
    data = buf.getvalue()
    write_atomic(dest, data, 0o644, fault="bytecode.write")
    return hashlib.sha256(data).hexdigest(), len(data)


def _reusable(root: Path, reuse: Path | None, compiler: Compiler, wheels) -> dict[str, PackRecord]:
    """Packs of ``reuse`` (a wheelhouse, maybe ``root`` itself) for these very wheels and this magic,
    whose bytes are still the recorded ones: linked (or copied) into ``root`` instead of compiled."""
    if reuse is None or not (Path(reuse) / "wh.json").is_file():
        return {}
    try:
        old = bytecode_record(read_wh_json(reuse))
    except WhError:
        return {}
    if old is None or old.magic != compiler.magic or old.cache_tag != compiler.cache_tag:
        return {}
    out: dict[str, PackRecord] = {}
    for f in wheels:
        p = old.packs.get(f.filename)
        if p is None or p.wheel_sha256 != f.sha256 or p.path not in (pack_name(compiler.cache_tag, f.filename),
                                                                       pack_name(compiler.cache_tag, f.filename, f.sha256)):
            continue
        src = Path(reuse) / p.path
        try:
            if sha256_of(src) != p.sha256:
                continue
            if Path(reuse).resolve() != root.resolve():
                dest = root / p.path
                dest.parent.mkdir(parents=True, exist_ok=True)
                tmp = dest.with_name(f".{dest.name}.reuse")
                tmp.unlink(missing_ok=True)
                try:
                    os.link(src, tmp)
                except OSError:
                    shutil.copyfile(src, tmp)
                os.replace(tmp, dest)
        except OSError:
            continue
        out[f.filename] = p
    return out


def compile_wheelhouse(root: Path, compiler: Compiler, *, jobs: int | None = None,
                       reporter: Reporter | None = None, reuse: Path | None = None) -> BytecodeResult:
    """Compile every wheel of the wheelhouse at ``root`` with ``compiler``; write the packs, then wh.json.

    ``reuse``: a wheelhouse (the previous one at -o, or ``root``) whose packs for the same wheel
    sha256 and magic are taken as they are. The caller holds the wheelhouse (``hold_output``) or
    owns it outright (stage's new tree)."""
    reporter = reporter or NullReporter()
    root = Path(root)
    lock = read_pylock(root)
    wheels = list({f.filename: f for f in lock.files if f.filename.endswith(".whl") and f.path}.values())  # once each
    kept = _reusable(root, reuse, compiler, wheels)
    if kept:
        reporter.note(f"bytecode of {len(kept)} wheel(s) taken from {reuse} (same wheels, same Python)")
    wheels = [f for f in wheels if f.filename not in kept]
    plans: list[tuple[Any, list[tuple[str, str, int]]]] = []
    for f in wheels:
        path = root / f.path
        try:
            with zipfile.ZipFile(path) as w:
                plans.append((f, [t for t in importable(w) if t[2] <= MAX_SOURCE_BYTES]))
        except (OSError, zipfile.BadZipFile) as exc:
            raise BytecodeError(f"cannot read {f.path}: {exc}", hint="check the wheelhouse: `wh verify "
                                f"{root}`") from exc
    tasks: list[tuple[int, str, list]] = []
    for i, (f, targets) in enumerate(plans):
        chunk: list = []
        size = 0
        for member, name, n in targets:
            chunk.append([member, name])
            size += n
            if size >= _CHUNK_BYTES:
                tasks.append((i, str(root / f.path), chunk))
                chunk, size = [], 0
        if chunk:
            tasks.append((i, str(root / f.path), chunk))
    sizes = {i: sum(n for _, _, n in t) for i, (_, t) in enumerate(plans)}
    tasks.sort(key=lambda t: -sizes[t[0]])  # the biggest wheels' chunks first: no straggler at the end
    total = sum(len(t[2]) for t in tasks)
    task = f"compiling {len(plans)} wheels for Python {compiler.version}"
    reporter.start(task, total=total or 1, unit="files")
    pool = _Pool(compiler.executable, max(1, min(jobs or os.cpu_count() or 2, len(tasks) or 1)),
                 lambda key, n: reporter.advance(task, n))
    try:
        pool.run(tasks)
    finally:
        pool.close()
    if pool.failed:
        raise BytecodeError(f"the compiling interpreter {compiler.executable} failed", hint="check that it runs: "
                            f"{compiler.executable} -c 'import zipfile, marshal'", detail=pool.failed[0])
    packs: dict[str, PackRecord] = dict(kept)
    compiled = 0
    try:
        current = bytecode_record(read_wh_json(root)) if (root / "wh.json").is_file() else None
    except WhError:
        current = None
    listed = {p.path for p in current.packs.values()} if current is not None else set()
    for i, (f, targets) in enumerate(plans):
        done = pool.results.get(i, {})
        by_name = {name: done[member] for member, name, _ in targets if member in done}
        rel = pack_name(compiler.cache_tag, f.filename)
        if rel in listed:  # wh.json lists the pack there until the record changes: never overwrite it before
            rel = pack_name(compiler.cache_tag, f.filename, f.sha256)
        index = {"format": FORMAT, "wheel": f.filename, "wheel_sha256": f.sha256, "magic": compiler.magic,
                 "cache_tag": compiler.cache_tag, "python": compiler.version,
                 "files": {n: by_name[n][0] for n in sorted(by_name)}}
        try:
            sha, size = _write_pack(root / rel, index, by_name)
            checkpoint("bytecode.pack")
        except OSError as exc:
            raise BytecodeError(f"could not write {root / rel}: {exc.strerror or exc}; wh.json and the installable "
                                "wheelhouse are as they were", hint="free space or fix permissions there, then "
                                f"re-run `wh bytecode {root}`") from exc
        packs[f.filename] = PackRecord(f.filename, f.sha256, rel, sha, size, len(by_name))
        compiled += len(by_name)
    reporter.finish(task, f"{compiled} files compiled")
    record = BytecodeRecord(compiler.magic, compiler.cache_tag, compiler.version, packs)
    try:
        checkpoint("bytecode.before-record")
        meta = read_wh_json(root)
        if not isinstance(meta.get("owned"), list):  # written before wh.json listed its paths: list what is there
            meta["owned"] = [p for p in STANDARD_LAYOUT if (root / p).exists()]
        meta["owned"] = sorted(set(meta["owned"]) | {BYTECODE})
        meta["bytecode"] = record.to_json()
        write_wh_json(root, meta)
    except OSError as exc:
        raise BytecodeError(f"could not write {root / 'wh.json'}: {exc.strerror or exc}; it is as it was, and so "
                            "is the installable wheelhouse", hint=f"free space there, then re-run `wh bytecode "
                            f"{root}`") from exc
    try:
        _remove_unlisted(root, record)
    except OSError:
        pass  # recorded: a pack wh.json does not list is never used, and the next run removes it
    return BytecodeResult(root, record, compiled, len(kept), sum(p.size for p in packs.values()))


def _remove_unlisted(root: Path, record: BytecodeRecord) -> None:
    """Packs wh.json no longer lists (another interpreter's, a wheel no longer staged, a killed run's)."""
    keep = {p.path for p in record.packs.values()}
    base = root / BYTECODE
    for dirpath, dirnames, filenames in os.walk(base, topdown=False):
        for n in filenames:
            rel = Path(dirpath, n).relative_to(root).as_posix()
            if rel not in keep and n.endswith((".zip", ".tmp", ".reuse")):  # only what a run of wh writes
                os.unlink(os.path.join(dirpath, n))
        if dirpath != str(base) and not os.listdir(dirpath):
            os.rmdir(dirpath)
