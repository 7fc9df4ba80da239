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

from .errors import InstallFailed

__all__ = ["ByteCompiler"]

# Runs in the RECEIVING interpreter (its bytecode magic): compiles each path as soon as it arrives on
# stdin and answers 1 (compiled or up to date) or 0 (not compilable: a Python 2 file in a wheel, which
# pip and uv let pass too) on stdout. Warnings (invalid escapes, ...) are silenced: compileall's quiet
# does not silence them, and a worker must never block on a full stderr.
_COMPILE_WORKER = r"""
import compileall, os, sys, warnings
warnings.simplefilter("ignore")
out = sys.stdout
for line in sys.stdin.buffer:
    path = os.fsdecode(line.rstrip(b"\n"))
    try:
        ok = compileall.compile_file(path, quiet=2)
    except Exception:
        ok = False
    out.write("1\n" if ok else "0\n")
    out.flush()
"""

# Paths a worker holds at once: the next ones are there while its feeding thread waits for the GIL
# (the unpacking threads hold it often); small enough that the workers finish together.
_WINDOW = 8


class ByteCompiler:
    """One streaming byte-compile worker per core, each pulling the next path from one shared queue."""

    def __init__(self, python: str, workers: int, *, lazy: bool = False):
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._python, self._workers = python, max(1, workers)
        self._errs: list = []
        self._procs: list[subprocess.Popen] = []
        self._done: list[int] = []
        self._feeders: list[threading.Thread] = []
        self._closed = False
        self._starting = threading.Lock()
        if not lazy:  # lazy: the workers start with the first path (bytecode carried by the wheelhouse may cover all)
            self._start()

    def _start(self) -> None:
        with self._starting:
            if self._procs or self._closed:
                return
            self._errs = [tempfile.TemporaryFile() for _ in range(self._workers)]
            self._procs = [
                subprocess.Popen([self._python, "-c", _COMPILE_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=err, bufsize=0)
                for err in self._errs
            ]
            self._done = [0] * len(self._procs)
            self._feeders = [threading.Thread(target=self._feed, args=(i,), daemon=True, name=f"wh-compile-{i}")
                             for i in range(len(self._procs))]
            for t in self._feeders:
                t.start()

    def _feed(self, i: int) -> None:
        proc, held, ending = self._procs[i], 0, False
        try:
            while True:
                while not ending and held < _WINDOW:
                    path = self._queue.get()
                    if path is None:
                        ending = True
                    else:
                        proc.stdin.write(os.fsencode(path) + b"\n")
                        held += 1
                if held == 0:
                    break
                if not proc.stdout.readline():  # the worker died: finish() reports it
                    break
                held -= 1
                self._done[i] += 1
        except (BrokenPipeError, ValueError, OSError):
            pass
        finally:
            try:
                proc.stdin.close()  # "no more": the worker ends after its last path
            except OSError:
                pass

    def submit(self, path: str) -> None:
        """Queue ``path`` for compilation (never raises: a dead worker is reported by ``finish``)."""
        if "\n" not in path:  # one path per line; such a name is left uncompiled
            if not self._procs:
                self._start()
            self._queue.put(path)

    def _stop_feeding(self) -> None:
        with self._starting:
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
