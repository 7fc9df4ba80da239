"""Run probe scripts in the TARGET interpreter, each in its own process group, with a timeout.

A probe is a stdlib-only script under ``doctor/probes/`` that prints JSON records
after a marker line. Whatever the probe does (hang, segfault, abort, print junk)
is turned into a :class:`ProbeResult`; nothing here lets it take wh down.

A probe that forks is contained too: its process group is killed, and a child
that left the group (``setsid``) but still holds its output is found and killed;
an interrupt (Ctrl-C) kills every running probe at once. Import probes, batched,
live in :mod:`wheelhouse.doctor.imports`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from wheelhouse.errors import EXIT_INTERNAL, WhError
from wheelhouse.procgroup import kill_group
from wheelhouse.progress import NullReporter, Reporter
from wheelhouse.resources import doctor_dir

__all__ = [
    "MARKER",
    "ProbeError",
    "ProbeInterrupted",
    "interrupt_probes",
    "allow_probes",
    "ProbeResult",
    "probe_script",
    "run_probe",
    "run_probes",
    "default_jobs",
    "run_cached_probe",
]

MARKER = "@@WH-PROBE@@"


class ProbeError(WhError):
    """The doctor itself cannot run probes (the interpreter is missing or not Python)."""

    code = "probe-runner"
    exit_code = EXIT_INTERNAL


@dataclass(frozen=True)
class ProbeResult:
    """What one probe process did."""

    probe: str
    returncode: int | None
    timed_out: bool
    duration: float
    records: tuple[Mapping, ...]
    stdout: str  # without marker lines (tail)
    stderr: str  # tail

    @property
    def signal(self) -> str | None:
        """Name of the signal that killed it (``SIGSEGV``), if one did."""
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    @property
    def data(self) -> Mapping:
        """The last record, or ``{}``."""
        return self.records[-1] if self.records else {}

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and bool(self.records)

    def failure(self, timeout: float | None = None) -> str:
        """One line saying how the process ended, when it did not end well."""
        if self.timed_out:
            return f"timed out after {timeout or self.duration:.0f}s (killed)"
        sig = self.signal
        if sig:
            return f"killed by {sig} (signal {-self.returncode})"
        if self.returncode:
            return f"exited with status {self.returncode}"
        if not self.records:
            return "printed no result"
        return ""

    def tail(self, lines: int = 15) -> str:
        text = (self.stderr.strip() or self.stdout.strip())
        return "\n".join(text.splitlines()[-lines:])


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)


def probe_script(name: str) -> Path:
    """Path of a bundled probe script (``facts`` -> doctor/probes/facts.py)."""
    return doctor_dir() / "probes" / f"{name}.py"


# ---- the probes that are running, so an interrupt can stop them all at once ---------------------------

_LIVE: dict[int, subprocess.Popen] = {}  # pid (= process group id) -> process
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()


class ProbeInterrupted(WhError):
    """The doctor was interrupted (Ctrl-C): no new probe starts, the running ones were killed."""

    code = "interrupted"
    exit_code = 130


def interrupt_probes() -> None:
    """Kill every running probe's process group and refuse new probes (Ctrl-C must not wait for timeouts)."""
    _STOPPING.set()
    with _LIVE_LOCK:
        live = list(_LIVE.values())
    for proc in live:
        _kill_group(proc)


def probes_stopped() -> bool:
    """Was the run interrupted (:func:`interrupt_probes`)? A group that has not started yet then does not."""
    return _STOPPING.is_set()


def allow_probes() -> None:
    """Start accepting probes again (a new doctor run after an interrupted one in the same process)."""
    _STOPPING.clear()


def _kill_group(proc: subprocess.Popen) -> None:
    kill_group(proc.pid, signal.SIGKILL)


def _pipe_inodes(*fds: int) -> set[int]:
    out = set()
    for fd in fds:
        try:
            out.add(os.fstat(fd).st_ino)
        except OSError:
            pass
    return out


def _kill_pipe_holders(inodes: set[int]) -> list[int]:
    """SIGKILL every process (and its group) that still holds one of these pipes: a ``setsid`` escapee.

    It left the probe's process group, so killing the group missed it; holding the probe's stdout is
    what identifies it (Linux /proc).
    """
    if not inodes:
        return []
    wanted = {f"pipe:[{i}]" for i in inodes}
    killed = []
    me, my_group = os.getpid(), os.getpgrp()
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            # Our own children are probes: one another thread is starting holds a copy of every fd of
            # ours between fork and exec. Never them; the escapee's parent is the probe, or init.
            if int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[1]) == me:
                continue
            fds = os.listdir(f"/proc/{entry.name}/fd")
            held = any(os.readlink(f"/proc/{entry.name}/fd/{fd}") in wanted for fd in fds)
        except OSError:
            continue
        if held:
            pid = int(entry.name)
            try:
                group = os.getpgid(pid)
                if group != my_group:
                    os.killpg(group, signal.SIGKILL)
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
    return killed


class _Output:
    """What a probe printed, kept bounded: marker records, a tail of other stdout, a tail of stderr."""

    MAX_RECORD = 64 << 20  # one marker line (the facts record of a large environment is a few MB)
    MAX_OTHER_LINE = 64 << 10  # beyond this a non-record line is junk: only its tail is kept
    TAIL = 8000

    def __init__(self, on_record: Callable[[Mapping], None] | None) -> None:
        self.records: list[Mapping] = []
        self._on_record = on_record
        self._line = bytearray()
        self._discarding = False  # inside an over-long line that is not a record
        self._other = bytearray()
        self._err = bytearray()

    def feed_err(self, chunk: bytes) -> None:
        self._err += chunk
        if len(self._err) > 2 * self.TAIL:
            del self._err[:-self.TAIL]

    def feed_out(self, chunk: bytes) -> int:
        """Take a chunk of stdout; returns how many records it completed."""
        n = 0
        while chunk:
            nl = chunk.find(b"\n")
            part, chunk = (chunk, b"") if nl < 0 else (chunk[:nl + 1], chunk[nl + 1:])
            if self._discarding:
                self._keep_other(part)
            else:
                self._line += part
                if len(self._line) > self._limit():
                    self._discarding = True
                    self._keep_other(bytes(self._line))
                    self._line.clear()
            if nl >= 0:
                if not self._discarding:
                    n += self._end_line(bytes(self._line))
                self._line.clear()
                self._discarding = False
        return n

    def _limit(self) -> int:
        return self.MAX_RECORD if MARKER.encode() in self._line[:4096] else self.MAX_OTHER_LINE

    def _keep_other(self, data: bytes) -> None:
        self._other += data[-2 * self.TAIL:]
        if len(self._other) > 2 * self.TAIL:
            del self._other[:-self.TAIL]

    def _end_line(self, raw: bytes) -> int:
        line = raw.decode("utf-8", "replace")
        idx = line.find(MARKER)
        if idx >= 0:
            try:
                rec = json.loads(line[idx + len(MARKER):])
            except ValueError:
                rec = None
            if isinstance(rec, Mapping):
                self.records.append(rec)
                if self._on_record:
                    self._on_record(rec)
                return 1
        self._keep_other(raw)
        return 0

    def finish(self) -> tuple[str, str]:
        if self._line:
            self._end_line(bytes(self._line))
        return (bytes(self._other).decode("utf-8", "replace")[-self.TAIL:],
                bytes(self._err).decode("utf-8", "replace")[-self.TAIL:])


_DRAIN = 2.0  # after the probe exited, at most this long reading what something it forked keeps writing
_TICK = 0.25  # how often a waiting runner looks at the interrupt flag


_CODE_CACHE_ENV = "WH_PROBE_CODE_CACHE"  # CODE_CACHE_ENV of doctor/probes/_probe_channel.py
_code_cache: list[str] = []
_code_cache_lock = threading.Lock()


def _code_cache_folder() -> str:
    """This process's private folder where probes share the code they compiled when the target writes no byte
    code (``_share_compiled_code`` of the probe channel); removed when wh exits. Not part of any verdict's key:
    it changes no import's result."""
    with _code_cache_lock:
        if not _code_cache:
            import atexit
            import shutil
            import tempfile

            folder = tempfile.mkdtemp(prefix="wh-probe-code-")
            atexit.register(shutil.rmtree, folder, True)
            _code_cache.append(folder)
        return _code_cache[0]


def _spawn(python: str, script: str | Path, args: Sequence[str], env: Mapping[str, str] | None,
           flags: Sequence[str] = ()) -> subprocess.Popen:
    if _STOPPING.is_set():
        raise ProbeInterrupted("interrupted: no new probe is started", hint="run `wh doctor` again")
    try:
        proc = subprocess.Popen(
            [python, *flags, str(script), *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**(os.environ if env is None else env), _CODE_CACHE_ENV: _code_cache_folder()},
            start_new_session=True,  # own process group: a timeout kills its children too
        )
    except OSError as exc:
        raise ProbeError(f"cannot run {python}: {exc.strerror or exc}",
                         hint="pass --python with the path of the target interpreter") from exc
    with _LIVE_LOCK:
        _LIVE[proc.pid] = proc
    if _STOPPING.is_set():  # interrupted between the check and the registration
        _kill_group(proc)
    return proc


def _pump(proc: subprocess.Popen, out: _Output, timeout: float, idle_timeout: bool) -> tuple[bool, bool]:
    """Read the probe's pipes until both close, or it exited and they are empty, or the deadline.

    Returns (timed out, pipes still open: something it forked holds them).
    """
    sel = selectors.DefaultSelector()
    for pipe, is_out in ((proc.stdout, True), (proc.stderr, False)):
        os.set_blocking(pipe.fileno(), False)
        sel.register(pipe.fileno(), selectors.EVENT_READ, is_out)
    deadline = time.monotonic() + timeout
    exited_at = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if _STOPPING.is_set():
                raise ProbeInterrupted("interrupted: the running probes were killed", hint="run `wh doctor` again")
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if now >= deadline or (exited_at is not None and now - exited_at > _DRAIN):
                return now >= deadline and exited_at is None, True
            # Once it exited, all it wrote is already in the pipes: an empty select means nothing more will come
            # from it (whatever holds the pipes now is something it forked), so stop reading -- never block on it.
            ready = sel.select(0.05 if exited_at is not None else min(deadline - now, _TICK))
            if not ready and exited_at is not None:
                return False, True
            for key, _ in ready:
                try:
                    chunk = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(key.fd)
                elif not key.data:
                    out.feed_err(chunk)
                elif out.feed_out(chunk) and idle_timeout:
                    deadline = time.monotonic() + timeout
        return False, False
    finally:
        sel.close()


def _finish(proc: subprocess.Popen, pipes_open: bool) -> int | None:
    """Kill what is left of the probe (its group, a setsid escapee holding its pipes), reap it, close the pipes."""
    inodes = _pipe_inodes(proc.stdout.fileno(), proc.stderr.fileno()) if pipes_open else set()
    _kill_group(proc)  # a timed-out probe, and a finished probe's stray children
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # stuck in the kernel (D state): do not wait for it
        pass
    _kill_pipe_holders(inodes)
    for pipe in (proc.stdout, proc.stderr):
        try:
            pipe.close()  # no other thread reads it: closing cannot block
        except OSError:
            pass
    with _LIVE_LOCK:
        _LIVE.pop(proc.pid, None)
    return proc.returncode


def run_probe(
    python: str,
    script: str | Path,
    args: Sequence[str] = (),
    *,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
    idle_timeout: bool = False,
    on_record: Callable[[Mapping], None] | None = None,
    name: str | None = None,
    flags: Sequence[str] = (),
) -> ProbeResult:
    """Run ``python [flags] script args`` in its own process group and collect its marker records.

    ``timeout`` bounds the whole run, or with ``idle_timeout`` the time between
    two records (so a batch of imports gets ``timeout`` per module). On timeout
    the whole process group is killed, and so is anything it forked that escaped
    the group but still holds its output; what is kept of its output is bounded.
    """
    t0 = time.monotonic()
    proc = _spawn(python, script, args, env, flags)
    out = _Output(on_record)
    timed_out, pipes_open = False, True
    try:
        timed_out, pipes_open = _pump(proc, out, timeout, idle_timeout)
    finally:
        returncode = _finish(proc, pipes_open)
    stdout, stderr = out.finish()
    _trace(name or Path(script).stem, args, t0, returncode)
    return ProbeResult(
        probe=name or Path(script).stem,
        returncode=returncode,
        timed_out=timed_out,
        duration=time.monotonic() - t0,
        records=tuple(out.records),
        stdout=stdout,
        stderr=stderr,
    )


_TRACE_LOCK = threading.Lock()
_EPOCH = time.monotonic()


def _trace(name: str, args: Sequence[str], t0: float, returncode: int | None) -> None:
    """``WH_DOCTOR_TRACE=FILE``: one JSON line per probe process (its name, first argument, how many, start and
    end in seconds since wh started, exit status), to see where a run's time went."""
    trace_line({"probe": name, "first": str(args[0])[:120] if args else None, "args": len(args),
                "start": round(t0 - _EPOCH, 3), "end": round(time.monotonic() - _EPOCH, 3), "rc": returncode})


def trace_span(group: str, t0: float, t1: float | None = None) -> None:
    """A check group's span (``t1`` None: a moment, e.g. ``native:planned``) in the ``WH_DOCTOR_TRACE`` file."""
    trace_line({"group": group, "start": round(t0 - _EPOCH, 3), "end": round((t1 or t0) - _EPOCH, 3)})


_TRACE_BROKEN: list[str] = []  # the trace file that could not be written (said once, then no more tries)


def trace_line(record: Mapping) -> None:
    path = os.environ.get("WH_DOCTOR_TRACE")
    if not path:
        return
    with _TRACE_LOCK:
        if path in _TRACE_BROKEN:
            return
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as exc:  # a timing aid: it never stops the checks
            _TRACE_BROKEN.append(path)
            print(f"wh: WH_DOCTOR_TRACE={path} not written ({exc.strerror or exc}); the run goes on without a trace",
                  file=sys.stderr)


@dataclass(frozen=True)
class ProbeSpec:
    """One probe to run in a pool: a name, the script and its arguments."""

    name: str
    script: Path
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    timeout: float | None = None


def run_probes(
    python: str,
    specs: Iterable[ProbeSpec],
    *,
    jobs: int | None = None,
    timeout: float = 60,
    reporter: Reporter = NullReporter(),
) -> dict[str, ProbeResult]:
    """Run many probes at once (``jobs`` processes); results by probe name."""
    specs = list(specs)
    out: dict[str, ProbeResult] = {}
    if not specs:
        return out
    reporter.start("probes", total=len(specs))
    with ThreadPoolExecutor(max_workers=jobs or default_jobs()) as pool:
        futs = {
            pool.submit(run_probe, python, s.script, s.args, timeout=s.timeout or timeout, env=s.env, name=s.name): s.name
            for s in specs
        }
        for fut in futs:
            out[futs[fut]] = fut.result()
            reporter.advance("probes")
    reporter.finish("probes")
    return out


def _outside(deps: list, folders: Iterable[str]) -> list:
    """The entries of ``deps`` not naming ``folders`` or a path in them (as given, or with links resolved)."""
    names = {g for f in folders for g in (f, os.path.realpath(f))}
    prefixes = tuple(n + os.sep for n in names)
    return [d for d in deps if not (isinstance(d, list) and d and isinstance(d[0], str)
                                    and (d[0] in names or d[0].startswith(prefixes)))]


def run_cached_probe(
    cache,
    python: str,
    script: Path,
    args: Sequence[str] = (),
    *,
    timeout: float,
    env: Mapping[str, str] | None,
    name: str,
    passed: Callable[[ProbeResult], bool],
    fresh: Mapping[str, str] | None = None,
):
    """:func:`run_probe`, or the stored result of its last passing run when nothing it loaded has changed.

    ``cache``: a :class:`wheelhouse.doctor.verdicts.VerdictCache` (None: always execute). The probe's last
    record carries ``deps`` (``Evidence`` of ``_probe_channel``); a run that ``passed`` is stored with them.
    ``fresh``: variables set for this execution only, not part of the verdict's key (folders made for this run).
    Returns (the result, when the reused one was executed: a time, else None)."""
    from .verdicts import probe_digest

    probe = f"{name}:{probe_digest(script)}"
    arg = json.dumps(list(args))
    hit = cache.lookup(probe, arg, env) if cache is not None else None
    if hit is not None:
        return ProbeResult(probe=name, returncode=0, timed_out=False, duration=0.0, records=(hit.record,),
                           stdout="", stderr=""), hit.since
    run_env = {**(os.environ if env is None else env), **fresh} if fresh else env
    res = run_probe(python, script, args, timeout=timeout, env=run_env, name=name)
    deps = res.data.get("deps")
    if not isinstance(deps, list):
        return res, None
    res = dataclasses.replace(res, records=(*res.records[:-1], {k: v for k, v in res.data.items() if k != "deps"}))
    if fresh:  # what the run compiled into its own folders is its product, gone after it: no evidence of a change
        deps = _outside(deps, fresh.values())
    if cache is not None and passed(res):
        cache.store_run(probe, env, deps, [(arg, res.data, len(deps))])
    return res, None
