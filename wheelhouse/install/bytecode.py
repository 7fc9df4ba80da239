"""Streaming byte-compilation in the receiving interpreter, overlapping extraction.

``wh install --compile`` starts one worker per core in the receiving interpreter
(its bytecode magic, not wh's). Each ``.py`` file goes into one queue as soon as the
unpacker has verified it; one feeding thread per worker keeps that worker a few paths
ahead and hears it acknowledge each file, so the workers pull work at their own pace:
none sits idle at the end while another works through a backlog dealt to it in advance,
the unpacking threads never wait on a full pipe, and ``finish`` tells every worker
"no more" before it waits for any.
"""

from __future__ import annotations

import os
import queue
import subprocess
import tempfile
import threading
from typing import Callable

from .errors import InstallFailed

__all__ = ["ByteCompiler"]

# Runs in the RECEIVING interpreter (its bytecode magic). One line per file on stdin:
# - a path: compile it; answer 1 (compiled or up to date) or 0 (not compilable: a Python 2 file in a wheel,
#   which pip and uv let pass too);
# - "\0" path "\0" pack "\0" member "\0" size: write the path's .pyc from that member of a verified pack
#   (``wheelhouse.install.pycs``) the way py_compile writes one: this interpreter's magic, flags 0, the
#   installed source's mtime and size from its stat, under a temp name ending in .pyc, then renamed; answer 2.
#   Anything that does not fit (not code, another size, an unreadable member) is compiled instead.
# Warnings (invalid escapes, ...) are silenced: compileall's quiet does not silence them, and a worker must
# never block on a full stderr.
_COMPILE_WORKER = r"""
import compileall, importlib.util, os, signal, sys, warnings, zipfile
warnings.simplefilter("ignore")
MAGIC, TAG = importlib.util.MAGIC_NUMBER, sys.implementation.cache_tag
KILL_HERE = os.environ.get("WH_FAULT") == "install.pyc-from-pack:kill"
packs = {}
def from_pack(path, pack, member, size):
    z = packs.get(pack)
    if z is None:
        z = packs[pack] = zipfile.ZipFile(pack)
    code = z.read(member)
    if len(code) <= 32 or code[0] & 0x7F != 0x63:  # not a marshalled code object
        return False
    st = os.stat(path)
    if st.st_size != size:
        return False
    head = MAGIC + bytes(4) + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little")
    folder, name = os.path.split(path)
    cache = os.path.join(folder, "__pycache__")
    os.makedirs(cache, exist_ok=True)
    tmp = os.path.join(cache, "%s.%s.%d.tmp.pyc" % (name[:-3], TAG, os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, (st.st_mode | 0o200) & 0o666)
    try:
        try:
            view = memoryview(head + code)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        if KILL_HERE:  # the fault point of a .pyc half-placed: the install (our parent) dies here
            os.kill(os.getppid(), signal.SIGKILL)
            os._exit(137)
        os.replace(tmp, os.path.join(cache, "%s.%s.pyc" % (name[:-3], TAG)))
    except BaseException:
        try:
            os.unlink(tmp)  # a full disk: no half .pyc left (compiling is tried next)
        except OSError:
            pass
        raise
    return True
out = sys.stdout
for line in sys.stdin.buffer:
    line = line.rstrip(b"\n")
    answer = "0"
    try:
        if line[:1] == b"\0":
            path, pack, member, size = (os.fsdecode(x) for x in line[1:].split(b"\0"))
            try:
                if from_pack(path, pack, member, int(size)):
                    answer = "2"
            except Exception:
                pass
        else:
            path = os.fsdecode(line)
        if answer == "0" and compileall.compile_file(path, quiet=2):
            answer = "1"
    except Exception:
        pass
    out.write(answer + "\n")
    out.flush()
"""

# Paths a worker holds at once: the next ones are there while its feeding thread waits for the GIL
# (the unpacking threads hold it often); small enough that the workers finish together.
_WINDOW = 8


class ByteCompiler:
    """One streaming byte-compile worker per core, each pulling the next path from one shared queue."""

    def __init__(self, python: str, workers: int, *,
                 resolver: Callable[[str], tuple[str, str, int] | None] | None = None):
        # resolver(path): (pack copy, member, source size) of a verified pack holding path's code, or None
        self._resolver = resolver
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._errs = [tempfile.TemporaryFile() for _ in range(max(1, workers))]
        self._procs = [
            subprocess.Popen([python, "-c", _COMPILE_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=err, bufsize=0)
            for err in self._errs
        ]
        self._done = [0] * len(self._procs)  # per worker (its feeding thread alone counts): files answered
        self._from_packs = [0] * len(self._procs)  # of those, .pyc files written from packs (answered 2)
        self._closed = False
        self._feeders = [threading.Thread(target=self._feed, args=(i,), daemon=True, name=f"wh-compile-{i}")
                         for i in range(len(self._procs))]
        for t in self._feeders:
            t.start()

    @property
    def precompiled(self) -> int:
        """How many .pyc files the workers wrote from packs (read after ``finish``)."""
        return sum(self._from_packs)

    def _feed(self, i: int) -> None:
        proc, held, ending = self._procs[i], 0, False
        try:
            while True:
                while not ending and held < _WINDOW:
                    path = self._queue.get()
                    if path is None:
                        ending = True
                    else:
                        proc.stdin.write(self._line(path))
                        held += 1
                if held == 0:
                    break
                answer = proc.stdout.readline()
                if not answer:  # the worker died: finish() reports it
                    break
                held -= 1
                self._done[i] += 1
                if answer == b"2\n":
                    self._from_packs[i] += 1
        except (BrokenPipeError, ValueError, OSError):
            pass
        finally:
            try:
                proc.stdin.close()  # "no more": the worker ends after its last path
            except OSError:
                pass

    def _line(self, path: str) -> bytes:
        """What the worker is told for ``path``: its pack member where a verified pack has it, else the path."""
        hit = self._resolver(path) if self._resolver is not None else None
        raw = os.fsencode(path)
        if hit is not None:
            fields = [raw, os.fsencode(hit[0]), os.fsencode(hit[1]), str(hit[2]).encode()]
            if not any(b"\0" in f or b"\n" in f for f in fields):
                return b"\0" + b"\0".join(fields) + b"\n"
        return raw + b"\n"

    def submit(self, path: str) -> None:
        """Queue ``path`` for compilation (never raises: a dead worker is reported by ``finish``)."""
        if "\n" not in path:  # one path per line; such a name is left uncompiled
            self._queue.put(path)

    def _stop_feeding(self) -> None:
        if not self._closed:
            self._closed = True
            for _ in self._feeders:
                self._queue.put(None)

    def _wait(self) -> list[int]:
        for t in self._feeders:
            t.join()
        codes = [p.wait() for p in self._procs]
        for p in self._procs:
            p.stdout.close()
        return codes

    def abort(self) -> None:
        """Kill every worker (the install is being rolled back)."""
        self._stop_feeding()
        for p in self._procs:
            p.kill()
        self._wait()

    def finish(self) -> int:
        """Wait for the workers; returns how many files they compiled, raises InstallFailed if one failed."""
        self._stop_feeding()
        codes = self._wait()
        failed = []
        for code, err in zip(codes, self._errs):
            if code != 0:
                err.seek(0)
                failed.append(err.read()[-3000:].decode("utf-8", "replace") or f"a worker exited with {code}")
            err.close()
        if failed:
            raise InstallFailed("byte-compilation failed", hint="re-run without --compile", detail=failed[0])
        return sum(self._done)
