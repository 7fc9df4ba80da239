"""Import modules in the TARGET interpreter, batched for speed, every failure confirmed alone.

One interpreter start per batch, not per module, with isolation semantics: a
module whose import fails, crashes or hangs inside a batch is re-run in a process
of its own, and only that solo run is its verdict. A module still importing after
a short grace inside a batch is started alone at once, beside the batch, so a hang
costs one timeout (issue 10.7); the batch goes on, so a slow import (torch, 8 s on
the H200 image) is not thrown away and imported again by every batch after it:
where it passes in the batch, that is its verdict.

Batches follow the import graph: the modules of one top-level package stay in one
worker process, so a heavy parent (torch, scipy) is imported once per worker that
needs it, not once per module. The batches wait in one queue, heaviest first by an
estimate of each top-level package's import cost (the doctor's: its installed bytes),
and ``jobs`` run at a time, each worker that finishes taking the next (:func:`plan_batches`). A passing verdict whose
evidence is unchanged comes from the verdict cache (:mod:`wheelhouse.doctor.verdicts`)
instead of a process, and says so (``reused_since``).
"""

from __future__ import annotations

import re
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from wheelhouse.progress import NullReporter, Reporter
from .probes import ProbeResult, default_jobs, probe_script, run_probe
from .verdicts import VerdictCache

__all__ = ["ImportOutcome", "import_modules", "plan_batches", "traceback_files", "BATCH_GRACE", "FLAGS_ENV"]

# Set in the engine's environment where its command gives the interpreter options (wheelhouse.doctor.workingfolder.
# interpreter_flags): the verdict cache keys by the environment, so what passed under other options is executed again.
FLAGS_ENV = "WH_ENGINE_PYTHON_FLAGS"


@dataclass(frozen=True)
class ImportOutcome:
    """The verdict on importing one module, from a process of its own when it failed."""

    module: str
    ok: bool
    found: bool | None = None  # importlib.util.find_spec(module) is not None
    origin: str | None = None
    error_type: str | None = None
    error: str | None = None
    missing: str | None = None  # ModuleNotFoundError's name: the module that is not there
    # The exceptions it was raised from or while handling, earliest first, each (type, message, missing module): a
    # fallback import (`except ImportError: from numexpr import ...`) hides a broken build behind its last link.
    chain: tuple[tuple[str, str, str | None], ...] = ()
    cause_files: tuple[str, ...] = ()  # the files the earlier exceptions' tracebacks pass through
    failed_in: str | None = None  # the package above it whose own import failed (acme.fast for acme.fast._core)
    covered: str | None = None  # why an extension module file was not imported by its dotted name (still ok)
    via: str | None = None  # imported through this sibling: imported first, it is a circular import back into itself
    shadowed: str | None = None  # the folder another copy of the package serves this name from (imported instead)
    reached: tuple[str, ...] = ()  # the modules its import loaded (new in sys.modules), for a name without a file
    # of those, the file each was loaded from (the standard library's left out), where the probe says
    reached_files: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    traceback: str | None = None
    crash: str | None = None  # "killed by SIGSEGV (signal 11)", "timed out after 5s (killed)"
    output: str = ""  # stderr tail of the process that crashed
    seconds: float = 0.0
    isolated: bool = False  # the verdict comes from a process that imported only this module
    reused_since: str | None = None  # from the verdict cache: executed then, nothing it loaded changed since
    library_load: str | None = None  # a library loaded by path (MOD@library): how it loaded, or why it did not
    # A failure in a process of its own: (the files that process loaded until it failed, its record), what keys
    # it in the verdict cache should its check judge it an optional warning (VerdictCache.store_warning).
    evidence: tuple[tuple, Mapping] | None = field(default=None, compare=False, repr=False)

    @property
    def summary(self) -> str:
        if self.covered:
            return f"not imported by this name: {self.covered}"
        if self.ok:
            return "imported"
        if self.crash:
            return f"import {self.crash}"
        return f"{self.error_type}: {self.error}"


_TRACEBACK_FILE = re.compile(r'^\s*File "([^"<][^"]*)", line \d+', re.MULTILINE)


def traceback_files(traceback: str | None) -> list[str]:
    """The source files a traceback passes through, innermost last (where it was raised): whose code failed."""
    return list(dict.fromkeys(_TRACEBACK_FILE.findall(traceback or "")))


BATCH_GRACE = 4.0  # seconds one module may import inside a batch before a run of it alone starts beside it
_TICK = 0.25  # how often the runner looks for a module past its grace


_MODULE_COST = 0.02  # seconds: a guess for one module under a package already imported
_BATCHES_PER_JOB = 3  # the queue holds about this many batches per worker: the last ones are light
# Light packages packed into one batch, at most: an estimate from bytes misses what an import pulls in (fastapi:
# pydantic, starlette, anyio), and the last batch of the queue is the run's tail.
_PACKED_AT_MOST = 8


def plan_batches(modules: Sequence[str], jobs: int, costs: Mapping[str, float] | None = None,
                 families: Mapping[str, str] | None = None) -> list[list[str]]:
    """Batches for a queue that ``jobs`` workers take from, heaviest first; the modules of one top-level package
    stay together, and so do the packages whose import is mostly another's (``families``: top-level name -> that
    one's, torchvision -> torch): the heavy import is paid once, by one worker, not by each at once.

    ``costs``: top-level name -> its estimated import seconds (the doctor's: its distribution's installed
    bytes); a package whose modules alone outweigh a worker's share is split, each part paying its parent's
    import again. Packages lighter than a third of a worker's share are packed together, at most
    ``_PACKED_AT_MOST`` to a batch (each batch is one interpreter start). Taken from one queue, heaviest first, a worker that drew torch is not also handed
    a third of the rest: the light batches at the end go to whichever worker is free.
    """
    costs = dict(costs or {})
    families = families or {}
    groups: dict[str, list[str]] = {}
    def root(top: str) -> str:
        seen = {top}
        while families.get(top, top) not in seen:  # a family of a family: its root's (a cycle: where it closes)
            top = families[top]
            seen.add(top)
        return top

    # A family's members join its root's batch lightest first while their own parts add up to no more than the
    # root's import (a batch at most twice it); the rest pay the root's import again in batches of their own.
    tops = list(dict.fromkeys(m.split(".", 1)[0] for m in modules))
    member_of: dict[str, str] = {}
    extra: dict[str, float] = {}
    for top in sorted(tops, key=lambda t: costs.get(t, _MODULE_COST)):
        head = root(top)
        if head == top:
            continue
        base = costs.get(head, _MODULE_COST)
        part = max(costs.get(top, _MODULE_COST) - base, _MODULE_COST)
        if extra.get(head, 0.0) + part <= base:
            member_of[top] = head
            extra[head] = extra.get(head, 0.0) + part
    for m in modules:
        top = m.split(".", 1)[0]
        groups.setdefault(member_of.get(top, top), []).append(m)
    if not groups:
        return []
    for head, more in extra.items():  # a family: its root's import once, then each member's own part
        costs[head] = costs.get(head, _MODULE_COST) + more
    weight = {t: costs.get(t, _MODULE_COST) + _MODULE_COST * len(ms) for t, ms in groups.items()}
    share = sum(weight.values()) / max(1, jobs)
    parts: list[tuple[float, list[str]]] = []
    for top, ms in groups.items():
        pieces = max(1, min(len(ms), int(_MODULE_COST * len(ms) // max(share, 1e-9))))
        size = -(-len(ms) // pieces)
        parts += [(costs.get(top, _MODULE_COST) + _MODULE_COST * len(chunk), chunk)
                  for chunk in (ms[i:i + size] for i in range(0, len(ms), size))]
    target = share / _BATCHES_PER_JOB if jobs > 1 else float("inf")  # one worker: one batch (nothing to balance)
    batches: list[tuple[float, list[str]]] = []
    open_cost, open_mods, packed = 0.0, [], 0  # the batch light packages are packed into, and how many
    for cost, chunk in sorted(parts, key=lambda p: -p[0]):
        if cost >= target:
            batches.append((cost, chunk))
            continue
        if open_mods and (open_cost + cost > target or (jobs > 1 and packed >= _PACKED_AT_MOST)):
            batches.append((open_cost, open_mods))
            open_cost, open_mods, packed = 0.0, [], 0
        open_cost, open_mods, packed = open_cost + cost, open_mods + chunk, packed + 1
    if open_mods:
        batches.append((open_cost, open_mods))
    # Top-level names first in each batch (a family's root first of all): what importing them loads is traced
    # before anything else is loaded.
    roots = set(groups)
    return [sorted(b, key=lambda m: ("." in m, m not in roots)) for _, b in sorted(batches, key=lambda b: -b[0])]


def _outcome(mod: str, rec: Mapping, *, isolated: bool, reused_since: str | None = None) -> ImportOutcome:
    return ImportOutcome(
        module=mod, ok=bool(rec.get("ok")), found=rec.get("found"), origin=rec.get("origin"),
        error_type=rec.get("error_type"), error=rec.get("error"), missing=rec.get("missing"),
        chain=tuple((str(c.get("error_type")), str(c.get("error")), c.get("missing")) for c in rec.get("chain") or ()
                    if isinstance(c, Mapping)),
        failed_in=rec.get("failed_in"),
        cause_files=tuple(str(f) for f in rec.get("cause_files") or () if isinstance(f, str)),
        covered=rec.get("covered"), via=rec.get("via"), shadowed=rec.get("shadowed"), traceback=rec.get("traceback"),
        reached=tuple(str(m) for m in rec.get("reached") or ()), library_load=rec.get("library_load"),
        reached_files={str(k): str(v) for k, v in (rec.get("reached_files") or {}).items()}
        if isinstance(rec.get("reached_files"), Mapping) else {},
        seconds=float(rec.get("seconds") or 0), isolated=isolated, reused_since=reused_since,
    )


@dataclass
class _ImportRun:
    """The bookkeeping of one :func:`import_modules` call: what is pending, what has a verdict."""

    timeout: float
    reporter: Reporter
    cache: VerdictCache | None = None
    env: Mapping[str, str] | None = None
    args: Mapping[str, str] = field(default_factory=dict)  # module -> the probe's argument for it
    batches: list[list[str]] = field(default_factory=list)
    solo: list[str] = field(default_factory=list)
    results: dict[str, ImportOutcome] = field(default_factory=dict)
    alone: set[str] = field(default_factory=set)  # started alone beside its batch (past the grace there)
    waiting: dict[str, list[str]] = field(default_factory=dict)  # top-level name -> modules skipped until it passes
    always: frozenset[str] = frozenset()  # loaded even where their top-level package does not import
    rechecked: set[str] = field(default_factory=set)  # run alone again: its run alone and its batch disagreed
    unloaded: dict[str, list[str]] = field(default_factory=dict)  # failed package -> modules left unloaded
    # which reached files a verdict keeps (``reached_files``): the caller's question (no RECORD lists it); None:
    # none kept. Every other is left out of the outcome and the stored verdict (a box: ~100k per run)
    keep_file: Callable[[str, str], bool] | None = None  # (module, its file): kept in the outcome?

    def take(self) -> list[tuple[list[str], bool]]:
        """Runs to start now: every module to confirm alone, then every batch."""
        out = [([m], True) for m in self.solo] + [(b, False) for b in self.batches]
        self.solo, self.batches = [], []
        return out

    def _verdict(self, outcome: ImportOutcome) -> None:
        mod = outcome.module
        if mod in self.results:
            first = self.results[mod]
            if outcome.ok and not first.ok and mod in self.alone and mod not in self.rechecked:
                # Its run alone, started beside its batch past the grace, failed while the batch was still
                # importing it, and the batch then imported it: the two raced (a cache the first import writes as
                # it goes). One more run alone, now that the batch is done, is the verdict.
                self.rechecked.add(mod)
                del self.results[mod]
                self.solo.append(mod)
                if self.unloaded.get(mod):
                    self.waiting[mod] = self.unloaded.pop(mod)
            return  # else: its batch and its run alone both answered: the first answer stands (see judge)
        self.results[mod] = outcome
        if mod not in self.rechecked:
            self.reporter.advance("imports")
        under = self.waiting.pop(mod, [])
        # It failed among others only: now its modules are loaded. Else a package that does not import: the modules
        # under it are not loaded (no verdict of their own), except those asked for in any case (entry modules).
        if not outcome.ok:
            self.unloaded[mod] = [m for m in under if m not in self.always]
        under = under if outcome.ok else [m for m in under if m in self.always]
        if under:
            self.batches.append(under)

    def _skipped(self, mod: str, top: str) -> None:
        if top in self.results:
            if self.results[top].ok or mod in self.always:
                self.batches.append([mod])
            return
        self.waiting.setdefault(top, []).append(mod)

    def _confirm_alone(self, mod: str) -> None:
        if mod not in self.alone:  # already running alone: that run gives the verdict
            self.solo.append(mod)

    def judge(self, batch: list[str], solo: bool, res: ProbeResult) -> None:
        """Turn one run into verdicts; a module that failed, crashed or hung among others is confirmed alone."""
        isolated = solo or len(batch) == 1
        keep = self.keep_file
        for r in res.records:
            reached = r.get("reached_files")
            if isinstance(reached, dict):
                r["reached_files"] = {k: v for k, v in reached.items() if isinstance(v, str) and keep(k, v)} \
                    if keep else {}
        started = [r["module"] for r in res.records if r.get("event") == "start"]
        finished = {r["module"]: r for r in res.records if r.get("event") == "result"}
        if not started and not res.ok:  # the interpreter died before the first import
            if isolated:
                self._verdict(ImportOutcome(module=batch[0], ok=False, output=res.tail(), isolated=True,
                                            crash=res.failure(self.timeout) or "the interpreter printed nothing",
                                            seconds=res.duration))
            else:
                for mod in batch:
                    self._confirm_alone(mod)
            return
        failed_deps = self._remember(res, isolated)
        skipped = {r["module"]: str(r.get("because")) for r in res.records if r.get("event") == "skipped"}
        unstarted = []
        for mod in batch:
            if mod in skipped:
                self._skipped(mod, skipped[mod])
                continue
            rec = finished.get(mod)
            if rec is not None:
                outcome = _outcome(mod, rec, isolated=isolated)
                if isolated and not outcome.ok and mod in failed_deps:
                    outcome = replace(outcome, evidence=failed_deps[mod])
                if isolated or (outcome.ok and not rec.get("borrowed")):
                    self._verdict(outcome)
                else:
                    # another module may have caused its failure, or its pass: it used a module an earlier import
                    # of this process put in sys.modules that no file on sys.path serves (a name one package
                    # registers for another): imported first, in a process of its own, it may fail
                    self._confirm_alone(mod)
            elif mod in started:  # it was importing when the process died, or hung
                if isolated and mod in self.results:
                    pass  # its batch answered while this run alone was still importing it
                elif isolated:
                    # os._exit(0) inside the import ends the process "well": say what happened, not "None: None".
                    crash = res.failure(self.timeout) or (f"ended the interpreter (exit status {res.returncode}) "
                                                          "before the import returned")
                    self._verdict(ImportOutcome(module=mod, ok=False, crash=crash,
                                                output=res.tail(), isolated=True, seconds=res.duration))
                else:
                    self._confirm_alone(mod)
            else:
                unstarted.append(mod)
        ready = []
        for mod in unstarted:  # what a crash or a hang kept from running goes into a new batch, but:
            top = mod.split(".", 1)[0]
            if "." not in mod or mod in self.always or top not in self.args:
                ready.append(mod)
            elif top not in self.results:
                self.waiting.setdefault(top, []).append(mod)  # its package has no verdict yet (it may hang again)
            elif self.results[top].ok:
                ready.append(mod)
            # else: its package does not import; it is not loaded
        if ready:
            self.batches.append(ready)

    def _remember(self, res: ProbeResult, isolated: bool) -> dict[str, tuple[tuple, Mapping]]:
        """Store the passing verdicts of this process with the files each depended on (all loaded before it).

        Returns, per failed module, the files the process had loaded until it failed and its record: the
        evidence a warning is stored with, once its check has judged it (never here: a failure is not a pass)."""
        if self.cache is None:
            return {}
        files: list = []
        keep = []
        failed: dict[str, tuple[tuple, Mapping]] = {}
        # A file the process wrote (after a record read it, say from a thread) is its own output, not evidence.
        written = {str(p) for r in res.records if r.get("event") == "done" for p in r.get("written") or ()}
        for rec in res.records:
            if rec.get("event") != "result":
                continue
            deps = rec.get("deps")
            if not isinstance(deps, list):
                return {}  # a probe that does not name its evidence: nothing is stored
            files += [f for f in deps if not (written and isinstance(f, list) and f and f[0] in written)]
            mod = rec.get("module")
            if mod in self.args:
                record = {k: v for k, v in rec.items() if k != "deps"}
                if rec.get("ok") and not (rec.get("borrowed") and not isolated):
                    keep.append((self.args[mod], record, len(files)))
                else:
                    failed[str(mod)] = (tuple(files), record)
        self.cache.store_run("imports", self.env, files, keep)
        return failed


def import_modules(
    python: str,
    modules: Sequence[str],
    *,
    jobs: int | None = None,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
    reporter: Reporter = NullReporter(),
    files: Mapping[str, str] | None = None,
    cache: VerdictCache | None = None,
    estimates: Callable[[], tuple[Mapping[str, float], Mapping[str, str]]] | None = None,
    always: Sequence[str] = (),
    keep_file: Callable[[str, str], bool] | None = None,
    flags: Sequence[str] = (),
) -> dict[str, ImportOutcome]:
    """Import each module in the target interpreter; every failure is confirmed in isolation.

    ``timeout`` applies per module. Batches run ``jobs`` at a time; a module that fails
    or crashes in a batch is re-run alone; one still importing after :data:`BATCH_GRACE`
    seconds there is started alone at once beside the batch (a hang costs one timeout,
    not two; a slow import that passes in the batch has its verdict there); modules a
    crash or a hang prevented from running go into a new batch.

    ``files``: extension module -> its file. Such a module is imported by its name only when
    find_spec resolves that name to that file and its package has not already loaded the file
    under another name; otherwise its outcome is ok with ``covered`` saying why (its package's
    import is what loads it).

    A dotted module under a top-level name that failed earlier in its worker is loaded only once that
    name passes alone (it failed among others only); where it fails alone, the module gets no outcome
    (its package does not import), unless it is in ``always``.

    ``cache``: passing verdicts whose evidence is unchanged are taken from it (``reused_since``),
    and new passing verdicts are stored in it. ``estimates``: a function giving :func:`plan_batches`' costs and
    families, called only when something is left to import. ``flags``: the interpreter options the engine runs
    under (``-OO``, ``-I``), given to every import process; ``env`` names them too (:data:`FLAGS_ENV`), so a verdict
    stored under other options is not reused.
    """
    jobs = jobs or default_jobs()
    mods = list(dict.fromkeys(modules))
    script = probe_script("imports")
    args = {m: f"{m}={files[m]}" if files and m in files else m for m in mods}
    state = _ImportRun(timeout=timeout, reporter=reporter, cache=cache, env=env, args=args, always=frozenset(always),
                       keep_file=keep_file)
    reporter.start("imports", total=len(mods))
    for m in mods:
        hit = cache.lookup("imports", args[m], env) if cache is not None else None
        if hit is not None:
            # A stored failure (a warning, VerdictCache.store_warning) came from a process of its own.
            state._verdict(_outcome(m, hit.record, isolated=not hit.record.get("ok"), reused_since=hit.since))
    todo = [m for m in mods if m not in state.results]
    # An estimate that reads files: only when something is to be imported (not a reused re-run).
    costs, families = estimates() if estimates is not None and todo else (None, None)
    state.batches = plan_batches(todo, jobs, costs, families)

    def grace_of(mod: str) -> float:
        """How long ``mod`` imports inside its batch before its run alone starts: BATCH_GRACE, or for a package whose
        import is estimated longer, that estimate (at most the timeout). torch, ~8 s on the box's cold disk, was
        imported a second time alone beside its batch, both reading the same cold files: the first run of the
        stock image took 32 s, 29 s with this (COLD=1 A/B on the box, docs/benchmarks.md). A hang there costs its
        estimate more, never more than a second timeout."""
        return min(timeout, max(BATCH_GRACE, (costs or {}).get(mod.split(".", 1)[0], 0.0)))

    importing: dict[int, tuple[str, float]] = {}  # batch -> (the module it is importing now, since when)

    def _run(batch: list[str], solo: bool) -> tuple[list[str], bool, ProbeResult]:
        key = id(batch)

        def on_record(rec: Mapping) -> None:
            if rec.get("event") == "start":
                importing[key] = (str(rec.get("module")), time.monotonic())
            else:
                importing.pop(key, None)

        try:
            return batch, solo, run_probe(python, script, [args[m] for m in batch], timeout=timeout, env=env,
                                          idle_timeout=True, name="imports", flags=flags,
                                          on_record=None if solo or len(batch) == 1 else on_record)
        finally:
            importing.pop(key, None)

    # One queue, heaviest first: at most `jobs` batches run at once, each worker that finishes takes the next.
    # The runs to confirm alone go first; room beside them for the runs started alone past the grace.
    queue: list[tuple[list[str], bool]] = []
    batch_runs: set[Future] = set()

    def start(pool: ThreadPoolExecutor) -> set[Future]:
        new = state.take()
        queue[:0] = [run for run in new if run[1]]  # a module to confirm alone: ahead of the waiting batches
        queue.extend(run for run in new if not run[1])
        started = set()
        while queue and len(batch_runs) < jobs:
            fut = pool.submit(_run, *queue.pop(0))
            batch_runs.add(fut)
            started.add(fut)
        return started

    with ThreadPoolExecutor(max_workers=2 * jobs) as pool:
        running: set[Future] = start(pool)
        while running:
            done, running = wait(running, timeout=_TICK, return_when=FIRST_COMPLETED)
            for fut in done:
                batch_runs.discard(fut)
                state.judge(*fut.result())
            now = time.monotonic()
            for mod, since in list(importing.values()):
                if now - since > grace_of(mod) and mod not in state.alone and mod not in state.results:
                    state.alone.add(mod)  # a hang costs one timeout: its run alone starts now
                    running.add(pool.submit(_run, [mod], True))
            running |= start(pool)
    reporter.finish("imports")
    return {m: state.results[m] for m in mods if m in state.results}
