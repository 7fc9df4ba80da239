"""Run probe scripts in the TARGET interpreter, each in its own process group, with a timeout.

A probe is a stdlib-only script under ``doctor/probes/`` that prints JSON records
after a marker line. Whatever the probe does (hang, segfault, abort, print junk)
is turned into a :class:`ProbeResult`; nothing here lets it take wh down.

Import probes are batched for speed (one interpreter start per batch, not per
module) but keep isolation semantics: a module whose import fails, crashes or
hangs inside a batch is re-run alone, and only that solo run is its verdict.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from wheelhouse.errors import EXIT_INTERNAL, WhError
from wheelhouse.procgroup import kill_group
from wheelhouse.progress import NullReporter, Reporter
from wheelhouse.resources import doctor_dir

__all__ = [
    "MARKER",
    "ProbeError",
    "ProbeResult",
    "ImportOutcome",
    "probe_script",
    "run_probe",
    "run_probes",
    "import_modules",
    "default_jobs",
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


def _kill_group(proc: subprocess.Popen) -> None:
    kill_group(proc.pid, signal.SIGKILL)


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
) -> ProbeResult:
    """Run ``python script args`` in its own process group and collect its marker records.

    ``timeout`` bounds the whole run, or with ``idle_timeout`` the time between
    two records (so a batch of imports gets ``timeout`` per module). On timeout
    the whole process group is killed.
    """
    cmd = [python, str(script), *args]
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            start_new_session=True,  # own process group: a timeout kills its children too
        )
    except OSError as exc:
        raise ProbeError(f"cannot run {python}: {exc.strerror or exc}",
                         hint="pass --python with the path of the target interpreter") from exc
    lines: queue.Queue = queue.Queue()
    err_chunks: list[bytes] = []

    def _read_out() -> None:
        for raw in iter(proc.stdout.readline, b""):
            lines.put(raw)
        lines.put(None)

    def _read_err() -> None:
        for chunk in iter(lambda: proc.stderr.read(65536), b""):
            err_chunks.append(chunk)
            if sum(len(c) for c in err_chunks) > 1 << 20:
                del err_chunks[0]

    threads = [threading.Thread(target=_read_out, daemon=True), threading.Thread(target=_read_err, daemon=True)]
    for t in threads:
        t.start()
    records: list[Mapping] = []
    other: list[str] = []
    timed_out = False
    deadline = t0 + timeout
    eof = False
    while not eof:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            _kill_group(proc)
            break
        try:
            raw = lines.get(timeout=remaining)
        except queue.Empty:
            continue
        if raw is None:
            eof = True
            break
        line = raw.decode("utf-8", "replace")
        idx = line.find(MARKER)
        if idx < 0:
            other.append(line)
            if len(other) > 400:
                del other[:200]
            continue
        try:
            rec = json.loads(line[idx + len(MARKER):])
        except ValueError:
            other.append(line)
            continue
        records.append(rec)
        if on_record:
            on_record(rec)
        if idle_timeout:
            deadline = time.monotonic() + timeout
    try:
        remaining = max(0.1, deadline - time.monotonic()) if not timed_out else 5
        proc.wait(timeout=remaining)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        proc.wait()
    # A probe's stray children must not outlive it.
    _kill_group(proc)
    for t in threads:
        t.join(timeout=2)
    for pipe in (proc.stdout, proc.stderr):
        try:
            pipe.close()
        except OSError:
            pass
    return ProbeResult(
        probe=name or Path(script).stem,
        returncode=proc.returncode,
        timed_out=timed_out,
        duration=time.monotonic() - t0,
        records=tuple(records),
        stdout="".join(other)[-8000:],
        stderr=b"".join(err_chunks).decode("utf-8", "replace")[-8000:],
    )


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


@dataclass(frozen=True)
class ImportOutcome:
    """The verdict on importing one module, from a process of its own when it failed."""

    module: str
    ok: bool
    found: bool | None = None  # importlib.util.find_spec(module) is not None
    origin: str | None = None
    error_type: str | None = None
    error: str | None = None
    traceback: str | None = None
    crash: str | None = None  # "killed by SIGSEGV (signal 11)", "timed out after 5s (killed)"
    output: str = ""  # stderr tail of the process that crashed
    seconds: float = 0.0
    isolated: bool = False  # the verdict comes from a process that imported only this module

    @property
    def summary(self) -> str:
        if self.ok:
            return "imported"
        if self.crash:
            return f"import {self.crash}"
        return f"{self.error_type}: {self.error}"


@dataclass
class _Pending:
    batches: list[list[str]] = field(default_factory=list)
    solo: list[str] = field(default_factory=list)


def _chunks(items: list[str], n: int) -> list[list[str]]:
    if not items:
        return []
    size = max(1, -(-len(items) // n))
    return [items[i:i + size] for i in range(0, len(items), size)]


def import_modules(
    python: str,
    modules: Sequence[str],
    *,
    jobs: int | None = None,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
    batch_size: int = 24,
    reporter: Reporter = NullReporter(),
) -> dict[str, ImportOutcome]:
    """Import each module in the target interpreter; every failure is confirmed in isolation.

    ``timeout`` applies per module. Batches run ``jobs`` at a time; a module that
    fails, crashes or hangs in a batch is re-run alone, and modules a crash
    prevented from running go into a new batch.
    """
    jobs = jobs or default_jobs()
    mods = list(dict.fromkeys(modules))
    script = probe_script("imports")
    results: dict[str, ImportOutcome] = {}
    nbatches = max(jobs, -(-len(mods) // batch_size))
    pending = _Pending(batches=_chunks(mods, nbatches))
    reporter.start("imports", total=len(mods))

    def _run(batch: list[str], solo: bool) -> tuple[list[str], bool, ProbeResult]:
        return batch, solo, run_probe(python, script, batch, timeout=timeout, env=env, idle_timeout=True, name="imports")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        running: set[Future] = set()

        def _submit() -> None:
            while pending.solo:
                running.add(pool.submit(_run, [pending.solo.pop(0)], True))
            while pending.batches:
                running.add(pool.submit(_run, pending.batches.pop(0), False))

        _submit()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                running.discard(fut)
                batch, solo, res = fut.result()
                started = [r["module"] for r in res.records if r.get("event") == "start"]
                finished = {r["module"]: r for r in res.records if r.get("event") == "result"}
                if not started and not res.ok:
                    # The interpreter died before the first import: judge each module alone.
                    if len(batch) == 1:
                        results[batch[0]] = ImportOutcome(
                            module=batch[0], ok=False, crash=res.failure(timeout) or "the interpreter printed nothing",
                            output=res.tail(), isolated=True, seconds=res.duration,
                        )
                        reporter.advance("imports")
                    else:
                        pending.solo.extend(batch)
                    continue
                unstarted: list[str] = []
                for mod in batch:
                    rec = finished.get(mod)
                    if rec is not None:
                        outcome = ImportOutcome(
                            module=mod, ok=bool(rec.get("ok")), found=rec.get("found"), origin=rec.get("origin"),
                            error_type=rec.get("error_type"), error=rec.get("error"), traceback=rec.get("traceback"),
                            seconds=float(rec.get("seconds") or 0), isolated=solo or len(batch) == 1,
                        )
                        if outcome.ok or outcome.isolated:
                            results[mod] = outcome
                            reporter.advance("imports")
                        else:
                            pending.solo.append(mod)  # confirm alone: another module may have caused it
                    elif mod in started:  # it was importing when the process died or hung
                        if solo or len(batch) == 1:
                            results[mod] = ImportOutcome(
                                module=mod, ok=False, crash=res.failure(timeout), output=res.tail(),
                                isolated=True, seconds=res.duration,
                            )
                            reporter.advance("imports")
                        else:
                            pending.solo.append(mod)
                    else:
                        unstarted.append(mod)
                if unstarted:
                    pending.batches.append(unstarted)
            _submit()
    reporter.finish("imports")
    return {m: results[m] for m in mods if m in results}
