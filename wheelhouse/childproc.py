"""Helper processes that serve this one over their stdin and stdout: how they start, and the frames.

Used where one GIL is the limit of work that threads already do in parallel: the cold resolve's
page fetches and parses (wheelhouse.index.offload) and the downloads (wheelhouse.fetch.procs).

A helper is ``python -I -S -c BOOT``: isolated from the environment's Python settings and from
``site`` (its start costs ~0.1 s, not ~0.25 s), it reads one config frame on stdin, takes this
process's ``sys.path`` from it (where this wh was imported first: an editable install's finder is
``site``'s, which ``-S`` skips) and calls ``serve(cfg)`` of the module named by its one argument
(so ``ps`` shows what each helper is). Secrets (index
credentials) travel in frames on the pipe, never on a command line or in an environment.

A frame is an 8-byte big-endian length and a pickle. Both ends are this wh, started together:
nothing else writes on these pipes.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import wheelhouse
from wheelhouse.errors import WhError

__all__ = ["spawn", "frame", "write_frame", "read_frame", "flatten", "rebuild", "end", "close_input", "cpus", "mode", "READ_ERRORS"]

_FRAME = struct.Struct(">Q")
_BOOT = ("import pickle,struct,sys\n"
         "i=sys.stdin.buffer\n"
         "n=struct.unpack('>Q',i.read(8))[0]\n"
         "cfg=pickle.loads(i.read(n))\n"
         "sys.path[:]=cfg['path']\n"
         "import importlib\n"
         "importlib.import_module(sys.argv[1]).serve(cfg)\n")
# What reading a frame may raise: a pipe closed mid-frame, a pickle of a class the reader cannot import.
READ_ERRORS = (OSError, ValueError, EOFError, pickle.UnpicklingError, AttributeError, ImportError)


def spawn(module: str, cfg: dict) -> tuple[subprocess.Popen, bytes]:
    """Start a helper that will run ``module.serve(cfg)``; returns it and the config frame, which the
    caller writes on its stdin (after it has started watching it: a stopped child never reads it)."""
    path = [str(Path(wheelhouse.__file__).resolve().parent.parent), *sys.path]
    config = frame({**cfg, "path": path})  # (before the process: a config that cannot be pickled starts none)
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _BOOT, module], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
    return proc, config


def frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _FRAME.pack(len(data)) + data


def write_frame(out: BinaryIO, obj: Any) -> None:
    out.write(frame(obj))
    out.flush()


def read_frame(inp: BinaryIO) -> Any | None:
    """The next frame; None at the end of the pipe (or a frame cut short)."""
    head = inp.read(_FRAME.size)
    if len(head) != _FRAME.size:
        return None
    (n,) = _FRAME.unpack(head)
    data = inp.read(n)
    if len(data) != n:
        return None
    return pickle.loads(data)


def flatten(exc: WhError):
    """A WhError as (class, args, fields), to be raised again on the other side (``rebuild``)."""
    return type(exc), exc.args, {k: v for k, v in vars(exc).items() if not k.startswith("__")}


def rebuild(value) -> BaseException | None:
    """The WhError ``flatten`` sent, unchanged (class, message, hint, fields); None for anything else."""
    try:
        cls, args, fields = value
        if not (isinstance(cls, type) and issubclass(cls, WhError)):
            return None
        exc = cls.__new__(cls)
        Exception.__init__(exc, *args)
        exc.__dict__.update(fields)
        return exc
    except Exception:
        return None


def end(proc: subprocess.Popen, deadline: float | None = None, grace: float = 5.0) -> None:
    """Close the helper's stdin (it ends on its own) and wait for it until ``deadline`` (default:
    ``grace`` seconds from now); then SIGKILL, which ends a stopped process too."""
    close_input(proc)
    try:
        proc.wait(timeout=max(0.0, (time.monotonic() + grace if deadline is None else deadline) - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except BaseException:  # Ctrl-C while waiting: not left behind (a stopped one never sees its stdin end)
        proc.kill()
        raise


def close_input(proc: subprocess.Popen) -> None:
    """Close the helper's stdin without waiting on it: a thread of ours blocked writing to a helper that
    does not read (stopped, wedged; 64 KiB fills the pipe) holds the stream's lock, and ``close`` would
    wait for that write, which ends only once the helper is killed. So the close runs in a thread of its
    own, and completes then."""
    def close() -> None:
        try:
            proc.stdin.close()
        except (OSError, ValueError):
            pass

    if proc.stdin is not None and not proc.stdin.closed:
        threading.Thread(target=close, name="wh-helper-stdin-close", daemon=True).start()


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def mode(env: str) -> str | None:
    """A helper switch's setting (``WH_INDEX_PROCESS``, ``WH_FETCH_PROCESS``): None (off: 0, off, no,
    never, false), "always" (1, on, yes, always, true) or "auto" (the default, and anything else)."""
    raw = os.environ.get(env, "auto").strip().lower()
    if raw in ("0", "off", "no", "never", "false"):
        return None
    if raw in ("1", "on", "yes", "always", "true"):
        return "always"
    return "auto"
