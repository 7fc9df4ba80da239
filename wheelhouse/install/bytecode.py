"""Streaming byte-compilation in the receiving interpreter, overlapping extraction.

``wh install --compile`` starts one worker per core in the receiving interpreter
(its bytecode magic, not wh's) and feeds it each ``.py`` file as soon as the
unpacker has verified it.
"""

from __future__ import annotations

import subprocess
import threading

from .errors import InstallFailed

__all__ = ["ByteCompiler"]

# Runs in the RECEIVING interpreter (its bytecode magic): compiles each path as soon as it arrives
# on stdin, so compilation overlaps extraction. compileall's own -j only parallelises directory
# walks, and `-i -` reads the whole list before starting.
_COMPILE_WORKER = r"""
import compileall, sys
n = bad = 0
for line in sys.stdin:
    path = line.rstrip("\n")
    if path:
        n += 1
        try:
            bad += not compileall.compile_file(path, quiet=2)
        except Exception:
            bad += 1
sys.stdout.write(f"{n} {bad}\n")
"""


class ByteCompiler:
    """One streaming byte-compile worker per core, fed round-robin."""

    def __init__(self, python: str, workers: int):
        self._procs = [
            subprocess.Popen([python, "-c", _COMPILE_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, bufsize=1 << 16)
            for _ in range(max(1, workers))
        ]
        self._locks = [threading.Lock() for _ in self._procs]
        self._next = 0
        self._turn = threading.Lock()

    def submit(self, path: str) -> None:
        """Queue ``path`` for compilation (never raises: a dead worker is reported by ``finish``)."""
        with self._turn:
            i = self._next = (self._next + 1) % len(self._procs)
        with self._locks[i]:
            try:
                # Flushed at once: a path left in this side's buffer reaches its worker only at finish(),
                # which is what made compilation start after the last file was written.
                self._procs[i].stdin.write(path + "\n")
                self._procs[i].stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass

    def abort(self) -> None:
        """Kill every worker (the install is being rolled back)."""
        for p in self._procs:
            p.kill()
        for p in self._procs:
            p.communicate()

    def finish(self) -> int:
        """Wait for the workers; returns how many files they compiled, raises InstallFailed if one failed."""
        total = 0
        failed = []
        # Every worker hears "no more" first, then each is waited for: closing one stdin at a time and
        # waiting for that worker ran the workers one after another (5x uv's time on 16 cores).
        for i, p in enumerate(self._procs):
            with self._locks[i]:
                try:
                    p.stdin.close()
                except (BrokenPipeError, OSError):
                    pass
                p.stdin = None  # communicate() must not flush a closed pipe
        for p in self._procs:
            out, err = p.communicate()
            if p.returncode != 0:
                failed.append(err[-3000:])
            else:
                total += int((out.split() or ["0"])[0])
        if failed:
            raise InstallFailed("byte-compilation failed", hint="re-run without --compile", detail=failed[0])
        return total
