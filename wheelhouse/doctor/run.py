"""``wh doctor``: gather facts in the TARGET interpreter, run every check, return one report.

Facts come from probes run by the target interpreter (never from wh's own
process), GPU facts from nvidia-smi. Checks live in ``wheelhouse.checks.*``;
known-bug rules are data (``doctor/rules/*.toml``). A check that crashes is an
``error`` verdict, never a crashed doctor; only an interpreter that cannot run
at all stops the doctor (``DoctorCannotRun``, exit 3; one that does not exist is
bad input, ``InterpreterError``, exit 2).
"""

from __future__ import annotations

import dataclasses
import functools

import os
import shutil
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from packaging.utils import canonicalize_name

from .checks import DoctorContext, Distribution, selected
from wheelhouse.errors import EXIT_INTERNAL, UsageError, WhError
from wheelhouse.target.gpu import VISIBLE_ENV, GpuFacts, facts_from_json, query_gpu_facts
from wheelhouse.manifest import StackManifest
from .probes import allow_probes, default_jobs, interrupt_probes, probe_script, probes_stopped, run_probe, trace_line, trace_span
from wheelhouse.progress import NullReporter, Reporter
from .inventory import installed_inventory, node_identity
from .stackfacts import wheelhouse_facts
from wheelhouse.install.digests import FileDigests
from .verdicts import VerdictCache, context_digest
from .report import CheckResult, DoctorReport, Fix
from .imports import FLAGS_ENV
from .workingfolder import interpreter_flags
from wheelhouse import __version__
from wheelhouse.resources import capture_script, doctor_dir
from .rules import InstalledPackage, RuleFacts, evaluate_rules, load_rules

__all__ = ["DoctorCannotRun", "DoctorInterrupted", "interrupted_report", "run_doctor", "gather_context", "run_checks", "list_checks", "apply_fixes", "with_fixes",
           "manifest_from_wh_json", "RULES_ENV", "GROUPS"]

RULES_ENV = "WH_DOCTOR_RULES"  # extra rule folders (os.pathsep-separated), searched after doctor/rules
GROUPS = ("platform", "install", "stack", "gpu", "toolchain", "links", "native", "deps", "sharedlibs", "kernels", "jit",
          "rule", "model")


class DoctorCannotRun(WhError):
    """The doctor itself could not run (the interpreter is missing, or not a working Python)."""

    code = "doctor-cannot-run"
    exit_code = EXIT_INTERNAL


def _rule_dirs(environ: Mapping[str, str]) -> list[Path]:
    return [doctor_dir() / "rules"] + [Path(p) for p in environ.get(RULES_ENV, "").split(os.pathsep) if p]


def list_checks(environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Every check id (or id pattern) with its title, for ``--list-checks``."""
    from .checks import deps
    from .checks import gpu
    from .checks import install
    from .checks import jit
    from .checks import kernels
    from .checks import links
    from .checks import native
    from .checks import platform
    from .checks import sharedlibs
    from .checks import stack
    from .checks import toolchain

    env = os.environ if environ is None else environ
    out: list[tuple[str, str]] = []
    for mod in (platform, install, stack, gpu, toolchain, links, native, deps, sharedlibs, kernels):
        out += list(mod.CHECKS.items())
    out += [(f"jit:{p.id}", p.title) for p in jit.load_jit_probes(env)]
    out += [(f"rule:{r.id}", r.title) for r in load_rules(_rule_dirs(env))]
    out += [("model:tp-<key>", "--tp divides heads / kv heads / vocab / MoE intermediate size (with --model)"),
            ("model:fit-dense", "dense weights per GPU fit in free VRAM (with --model)"),
            ("model:fit-experts", "expert weights fit in host RAM (with --model)")]
    return out


# ---- facts ----------------------------------------------------------------------------------------


def _distributions(records: Sequence[Mapping[str, Any]]) -> dict[str, Distribution]:
    out = {}
    for r in records:
        if not r.get("name") or r.get("error"):
            continue
        d = Distribution(
            name=r["name"], version=str(r.get("version") or ""), location=r.get("location"),
            dist_info=r.get("dist_info"), top_level=tuple(r.get("top_level") or ()),
            extension_modules=int(r.get("extension_modules") or 0),
            extension_top_level=tuple(r.get("extension_top_level") or ()),
            extension_sample=tuple(r.get("extension_sample") or ()),
            extensions=tuple((str(f), str(m)) for f, m in (r.get("extensions") or ()) if f and m),
            requires=tuple(str(x) for x in (r.get("requires") or ())),
            library_candidates=tuple((str(f), str(m)) for f, m in (r.get("library_candidates") or ()) if f and m),
            foreign_extensions=tuple((str(f), str(t)) for f, t in (r.get("foreign_extensions") or ()) if f and t),
        )
        if out.setdefault(d.key, d) is d:
            d.record  # noqa: B018 - read here, once, before the checks' threads share it
    return out


def _in_background(fn: Callable[[], Any]) -> Future:
    """``fn()`` on a daemon thread: a run that stops early (a failed facts probe, Ctrl-C) does not wait for it."""
    future: Future = Future()

    def call() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - raised where the result is asked for
            future.set_exception(exc)

    threading.Thread(target=call, daemon=True).start()
    return future


def _apply_overrides(facts: dict[str, Any], gpu: GpuFacts | None, override: Mapping[str, Any]) -> tuple[dict, GpuFacts | None]:
    """``facts_override`` keys: gpu (nvidia-smi facts as JSON), environ, memory, packages {name: version}."""
    facts = dict(facts)
    if "gpu" in override:
        gpu = facts_from_json(override["gpu"], source="override")
    if "environ" in override:
        facts["environ"] = {**facts.get("environ", {}), **override["environ"]}
    if "memory" in override:
        facts["memory"] = {**facts.get("memory", {}), **override["memory"]}
    if "packages" in override:
        dists = [d for d in facts.get("distributions", [])
                 if canonicalize_name(d.get("name") or "") not in {canonicalize_name(n) for n in override["packages"]}]
        for name, spec in override["packages"].items():
            spec = {"version": spec} if isinstance(spec, str) else dict(spec)
            dists.append({"name": name, "version": spec.get("version", "0"), "location": spec.get("location"),
                          "top_level": spec.get("top_level", []), "extension_modules": 0})
        facts["distributions"] = dists
    for k, v in override.items():
        if k not in ("gpu", "environ", "memory", "packages"):
            facts[k] = v
    return facts, gpu


def manifest_from_wh_json(data: Mapping[str, Any]) -> StackManifest:
    """The doctor-relevant parts of the manifest a wheelhouse was staged from ([doctor], [[drop]], [[toolchain]],
    [serve] command and env: the environment the engine gets; overrides and [[exclude]])."""
    from wheelhouse.manifest import DoctorExpectations, DropRule, Exclusion, ServeSpec, ToolchainGroup

    doc = data.get("doctor") or {}
    inputs = data.get("inputs") or {}
    groups = inputs.get("toolchains") or []
    engine = data.get("engine") if isinstance(data.get("engine"), Mapping) else {}
    # An engine built by `wh build` with link-sonames links -lcudart from lib and lib64 (its run-time kernel
    # builds too): named as the manifest's engine recipe, which the links check reads as needing them.
    built = bool((engine.get("build") or {}).get("link_sonames"))
    serve = data.get("serve") if isinstance(data.get("serve"), Mapping) else None
    return StackManifest(
        path=None, name=str(data.get("name") or "stack"),
        # What was requested: its top-level names are the stack's entry modules (native) unless [doctor] entry says.
        requirements=tuple(str(r) for r in inputs.get("requirements") or ()),
        overrides=tuple(str(t) for t in inputs.get("overrides") or ()),
        excludes=tuple(Exclusion(str(e["distribution"]), str(e.get("reason") or ""))
                       for e in inputs.get("excludes") or () if isinstance(e, Mapping) and e.get("distribution")),
        toolchains=tuple(ToolchainGroup(str(t["name"]), tuple(t["packages"]), bool(t.get("exact")),
                                        tuple(t.get("exceptions") or ())) for t in groups),
        drops=tuple(DropRule(str(d["distribution"]), d.get("module"), str(d.get("reason") or ""), bool(d.get("force")))
                    for d in data.get("drops") or []),
        doctor=DoctorExpectations(gpus=doc.get("gpus"), sm=doc.get("sm"), max_used_mib=doc.get("max_used_mib"),
                                  toolchain_exact=bool(doc.get("toolchain_exact")),
                                  checks=tuple(doc.get("checks") or ()), entry=tuple(doc.get("entry") or ()),
                                  links=tuple(doc.get("links") or ())),
        engine_recipe=Path(str(engine.get("recipe") or "engine")) if built else None,
        serve=ServeSpec(command=tuple(str(c) for c in serve.get("command") or ()),
                        env={str(k): str(v) for k, v in (serve.get("env") or {}).items()}) if serve else None,
    )


def _check_patterns(patterns: Sequence[str], environ: Mapping[str, str], where: str) -> None:
    """Every --check pattern selects some check: a typo would otherwise run nothing and pass."""
    ids = [i for i, _ in list_checks(environ)]
    # native:<distribution> and model:tp-<key> name checks made per distribution / per key.
    open_ended = [i.split("<", 1)[0] for i in ids if "<" in i]
    unknown = [p for p in patterns
               if not any(i.startswith(p) for i in ids) and not any(p.startswith(o) for o in open_ended)]
    if unknown:
        raise UsageError(f"{where} {', '.join(unknown)}: no such check",
                         hint=f"list them with `wh doctor --list-checks`; groups: {', '.join(GROUPS)}")


def gather_context(
    python: str | None = None,
    *,
    manifest: StackManifest | None = None,
    wheelhouse: Path | str | None = None,
    checks: Sequence[str] | None = None,
    jobs: int | None = None,
    timeout: float = 60,
    model: Path | None = None,
    tp: int | None = None,
    facts_override: Mapping[str, Any] | None = None,
    reporter: Reporter = NullReporter(),
    environ: Mapping[str, str] | None = None,
    thorough: bool = False,
) -> DoctorContext:
    """Run the facts probe in ``python`` and query the GPUs: everything checks share.

    ``thorough``: hash every installed file again (``stack:files``), not only those changed since hashed,
    and execute every probe again (no verdict is reused from the verdict cache)."""
    env = dict(os.environ if environ is None else environ)
    if checks:
        _check_patterns(checks, env, "--check")
    elif manifest is not None and manifest.doctor.checks:
        _check_patterns(manifest.doctor.checks, env, f"{manifest.path or 'manifest'}: doctor.checks")
    exe = python or sys.executable
    if os.sep not in exe:  # a bare name, as a shell would run it
        exe = shutil.which(exe) or exe
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        # Bad input, as for install, env and links (exit 2); DoctorCannotRun (3) is an interpreter that cannot run.
        from wheelhouse.target.interpreter import InterpreterError

        raise InterpreterError(f"interpreter {exe} does not exist or is not executable",
                               hint="pass the target interpreter: `wh doctor --python /path/to/venv/bin/python`")
    reporter.note(f"gathering facts from {exe}")
    t0 = time.monotonic()
    # nvidia-smi (three calls on a GPU host) runs while the facts probe does, for the cards the engine will see:
    # its CUDA_VISIBLE_DEVICES is the manifest's [serve] env over the caller's (engine_env below)
    gpu_env = {**env, **(manifest.serve.env if manifest and manifest.serve else {})}
    asked = None if facts_override and "gpu" in facts_override else _in_background(lambda: query_gpu_facts(environ=gpu_env))
    res = run_probe(exe, probe_script("facts"), [str(capture_script())], timeout=max(timeout, 30), env=env,
                    name="facts")
    if not res.ok:
        raise DoctorCannotRun(f"{exe} could not run the facts probe: {res.failure(max(timeout, 30))}",
                              hint=f"check that it starts: {exe} -c 'import sys; print(sys.version)'",
                              detail=res.tail())
    facts: dict[str, Any] = dict(res.data)
    gpu: GpuFacts | None = None
    if facts_override:
        facts, gpu = _apply_overrides(facts, gpu, facts_override)
    if gpu is None:
        gpu = asked.result() if asked is not None else query_gpu_facts(environ=gpu_env)
    facts["gather_seconds"] = round(time.monotonic() - t0, 3)
    from wheelhouse.target.interpreter import visible_site_dirs

    own = [p for p in dict.fromkeys([facts.get("purelib"), facts.get("platlib")]) if p]
    # Every site folder the target imports from: a parent venv's or the system's NVIDIA libs count too.
    site_dirs = tuple(Path(p) for p in visible_site_dirs(own, facts.get("sys_path") or ()))
    from wheelhouse.env.cuda import serving_variables

    meta, meta_source = wheelhouse_facts(wheelhouse, site_dirs)
    target, target_source = None, None
    if meta and meta.get("target"):
        from wheelhouse.target import target_from_json

        if not isinstance(meta["target"], Mapping):
            raise UsageError(f"{meta_source}: target must be an object", hint="re-run `wh stage`")
        target, target_source = target_from_json(meta["target"], where=f"{meta_source} target"), meta_source
    if manifest is None and meta:
        manifest = manifest_from_wh_json(meta)
    elif manifest is not None and meta:
        # What the installed wheelhouses left out or replaced stays so whatever manifest is given (the serve
        # preflight passes the serve manifest): an excluded requirement is never "missing" for one caller only.
        recorded = manifest_from_wh_json(meta)
        names = {canonicalize_name(e.distribution) for e in manifest.excludes}
        manifest = dataclasses.replace(
            manifest,
            excludes=(*manifest.excludes, *(e for e in recorded.excludes if canonicalize_name(e.distribution) not in names)),
            overrides=(*manifest.overrides, *(o for o in recorded.overrides if o not in manifest.overrides)))
    # The engine's environment, as `wh serve` gives it (serve.lifecycle.engine_env): the caller's, `wh env`'s
    # variables over it (stub folders off LD_LIBRARY_PATH, the NVIDIA folders appended), then `[serve] env`. The
    # import, JIT, libcuda and toolchain probes run in it: a library the manifest's [serve] env makes findable is
    # found there too (judged without it, a working package was dropped).
    serve_env = manifest.serve.env if manifest and manifest.serve else None
    engine_env = {**env, **serving_variables(list(site_dirs), env, serve_env)}
    # What `python -OO -I -m engine.server` runs under: the import probes are run so too (-OO strips the docstrings
    # an import may read, -I takes [serve] env's PYTHONPATH away).
    engine_flags = interpreter_flags(manifest.serve.command) if manifest and manifest.serve else ()
    if engine_flags:
        engine_env[FLAGS_ENV] = " ".join(engine_flags)
    if asked is not None and engine_env.get(VISIBLE_ENV) != gpu_env.get(VISIBLE_ENV):
        gpu = query_gpu_facts(environ=engine_env)  # the installed wheelhouse's [serve] env names the engine's cards
    patterns = tuple(checks or (manifest.doctor.checks if manifest else ()) or ())
    return DoctorContext(
        python=exe, facts=facts, gpu=gpu, distributions=_distributions(facts.get("distributions", [])),
        site_dirs=site_dirs, environ=env, engine_env=engine_env, engine_flags=engine_flags, manifest=manifest, target=target, target_source=target_source,
        jobs=jobs or default_jobs(), timeout=timeout, patterns=patterns, model=model, tp=tp, reporter=reporter,
        digests=FileDigests(thorough=thorough, environ=env, jobs=jobs or default_jobs()),
        verdicts=VerdictCache(facts.get("platlib") or facts.get("purelib"), context_digest(exe, gpu.to_json()),
                              thorough=thorough, environ=env),
    )


# ---- groups that are small enough to live here -------------------------------------------------


def _rules(ctx: DoctorContext) -> list[CheckResult]:
    rules = load_rules(_rule_dirs(ctx.environ))
    packages = {k: InstalledPackage(d.name, d.version, d.location) for k, d in ctx.distributions.items()}
    facts = RuleFacts(gpus=ctx.gpu.gpus, packages=packages, environ=ctx.facts.get("environ") or ctx.environ)
    return evaluate_rules([r for r in rules if ctx.wants(f"rule:{r.id}")], facts)


def _model(ctx: DoctorContext) -> list[CheckResult]:
    from .modelfit import fit_results, summarize_model, tp_results

    if ctx.model is None:
        return []
    summary = summarize_model(ctx.model)
    tp = ctx.tp or max(1, len(ctx.gpu.gpus))
    out = [CheckResult("model:summary", f"checkpoint {ctx.model.name}", "info",
                       f"{summary.files} shard(s), {summary.tensors} tensors: dense {summary.dense_bytes / 2**30:.2f} GiB, "
                       f"experts {summary.expert_bytes / 2**30:.2f} GiB (headers only)", data=summary.to_json())]
    out += tp_results(summary.config, tp)
    free = [g.memory_free_mib for g in ctx.gpu.gpus if g.memory_free_mib is not None]
    out += fit_results(summary, tp, free, (ctx.facts.get("memory") or {}).get("MemAvailable"))
    return out


def _group_runner(group: str, planned: threading.Event) -> Callable[[DoctorContext], list[CheckResult]]:
    if group == "rule":
        return _rules
    if group == "model":
        return _model
    import importlib

    run = importlib.import_module(f"wheelhouse.doctor.checks.{group}").run
    return functools.partial(run, planned=planned) if group == "native" else run


_SLOWEST_FIRST = ("jit", "native", "stack", "toolchain", "sharedlibs", "kernels")
# Groups whose work is Python in this process (ELF and fatbin parsing, hashing, RECORD reading): they start once
# the native group has planned its imports and started them. Sharing the interpreter lock with them, its plan
# (1.3 s alone on the box's image) took 8-15 s, and the imports, the run's longest path, waited for it.
_AFTER_NATIVE_PLAN = ("stack", "links", "deps", "sharedlibs", "kernels", "install", "platform", "rule")
_PLAN_WAIT = 60.0  # seconds, at most: a plan that never says so does not hold the other groups for ever


def run_checks(ctx: DoctorContext, spans: dict[str, list[float]] | None = None,
               t0: float | None = None) -> list[CheckResult]:
    """Every selected group, concurrently (their probes are processes); results in group order.

    ``spans``: filled with each group's [start, end] in seconds after ``t0`` (default: now), for the report."""
    t0 = time.monotonic() if t0 is None else t0
    spans = {} if spans is None else spans
    groups = [g for g in GROUPS if selected(g, ctx.patterns) and (g != "model" or ctx.model is not None)]

    planned = threading.Event()  # the native group's imports are planned and started
    if "native" not in groups:
        planned.set()

    def one(group: str) -> list[CheckResult]:
        if group in _AFTER_NATIVE_PLAN:
            planned.wait(_PLAN_WAIT)
            if probes_stopped():
                raise KeyboardInterrupt  # interrupted while it waited: it never started
        began = time.monotonic()
        spans[group] = [round(began - t0, 3)]
        try:
            results = _group_runner(group, planned)(ctx)
        except WhError:
            raise
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
            return [CheckResult(f"{group}:internal", f"the {group} checks could not run", "error",
                                f"{type(exc).__name__}: {exc}", hint="re-run with WH_DEBUG=1 and report it")]
        finally:
            spans[group].append(round(time.monotonic() - t0, 3))
            trace_span(group, began, time.monotonic())
            if group == "native":
                planned.set()  # whatever happened to it, the others go on
        if results and not any(r.seconds for r in results):
            share = (time.monotonic() - began) / len(results)
            results = [CheckResult(**{**r.__dict__, "seconds": share}) for r in results]
        return [r for r in results if ctx.wants(r.id) or r.id.endswith(":internal")]

    # The groups whose probes take longest (a JIT compile, the import workers) start first; the others overlap them.
    first = [g for g in _SLOWEST_FIRST if g in groups]
    with ThreadPoolExecutor(max_workers=len(groups) or 1) as pool:
        started = {g: pool.submit(one, g) for g in [*first, *(g for g in groups if g not in first)]}
        futures = [started[g] for g in groups]
        try:
            per_group = [f.result() for f in futures]
        except BaseException as exc:
            # What finished before the interrupt, read BEFORE the kill below fails what still runs.
            done = [f.result() if f.done() and not f.exception() else None for f in futures]
            # Ctrl-C (or a WhError) must not wait out every running probe's timeout: kill them all now,
            # and let no queued probe start, so the pool below winds down in well under a second.
            interrupt_probes()
            planned.set()  # the groups still waiting for the native plan see the interrupt and return
            if isinstance(exc, KeyboardInterrupt):
                raise _ChecksInterrupted(
                    [r for rs in done if rs for r in rs]
                    + [_interrupted(g) for g, rs in zip(groups, done) if rs is None]) from None
            raise
    return [r for rs in per_group for r in rs]


class _ChecksInterrupted(KeyboardInterrupt):
    def __init__(self, results: list[CheckResult]) -> None:
        super().__init__()
        self.results = results


def _interrupted(what: str) -> CheckResult:
    return CheckResult(f"{what}:interrupted", f"the {what} checks finished", "error",
                       "interrupted (Ctrl-C or SIGTERM) before they finished; their probes were killed",
                       hint="give the doctor more time (a CI job's timeout), or find the probe that hangs with "
                            f"`wh doctor --check {what} -v`")


class DoctorInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the doctor; ``report`` has what finished before and an error for the rest.

    A KeyboardInterrupt, so wh still exits 130; the CLI first writes ``report`` as the JSON and JUnit
    (never green: it holds an error), so CI is not left with nothing, or an earlier run's file.
    """

    def __init__(self, report: DoctorReport) -> None:
        super().__init__()
        self.report = report


def interrupted_report(python: str, checks: Sequence[str] = (), model: bool = False) -> DoctorReport:
    """The report of a doctor stopped before its checks finished (while gathering facts, or in ``--fix``)."""
    groups = [g for g in GROUPS if selected(g, checks) and (g != "model" or model)]
    # Nothing was gathered: the facts the report's shape asks for are there, unknown (None), never made up.
    facts = {"interpreter": {"executable": python, "python_full_version": None, "machine": None},
             "distributions": 0, "native_distributions": 0,
             "gpu": {"gpus": [], "driver_version": None, "source": "none", "error": "not queried: interrupted"},
             "interrupted": "before the facts were gathered"}
    return DoctorReport(python, tuple(_interrupted(g) for g in groups), facts)


def run_doctor(python: str | None = None, **options: Any) -> DoctorReport:
    """Run the doctor against ``python`` (default: this interpreter) and return the report.

    ``options`` are :func:`gather_context`'s (manifest, wheelhouse, checks, jobs, timeout, model, tp,
    facts_override, reporter, thorough).
    """
    started = time.time()
    t0 = time.monotonic()
    allow_probes()  # a doctor interrupted earlier in this process stopped its probes, not this run's
    ctx = gather_context(python, **options)
    spans: dict[str, list[float]] = {}
    try:
        results = run_checks(ctx, spans, t0)
    except _ChecksInterrupted as exc:
        raise DoctorInterrupted(_report(ctx, exc.results, started, t0, spans)) from None
    results = list(results) + _unmatched(ctx.patterns, results)
    report = _report(ctx, results, started, t0, spans)
    for note in ctx.digests.save():  # what was hashed this run is not hashed again next run
        ctx.reporter.note(note)
    for run_id, why in (ctx.verdicts.changed if ctx.verdicts is not None else {}).items():
        trace_line({"stale": run_id, **why})  # why a stored verdict was executed again (WH_DOCTOR_TRACE)
    for note in ctx.verdicts.save() if ctx.verdicts is not None else ():  # what passed, with its evidence
        ctx.reporter.note(note)
    return report


def _unmatched(patterns: Sequence[str], results: Sequence[CheckResult]) -> list[CheckResult]:
    """A fail for each ``--check`` pattern that judged nothing: ``native:vllm`` once vllm is gone (or ``native:vlm``,
    a typo the per-distribution names let through) ran no check, and a CI gated on it passed."""
    out = []
    for p in patterns:
        if p.rstrip(":") in GROUPS:
            continue  # a whole group with nothing to judge here (no extension module anywhere: native) is no typo
        if not any(selected(r.id, [p]) for r in results):
            out.append(CheckResult(f"selection:{p}", f"--check {p} judges something", "fail",
                                   f"--check {p} selected no check here: nothing of that name is installed or applies",
                                   hint="list what runs here with `wh doctor --list-checks`; a distribution's checks "
                                        "exist only while it is installed"))
    return out


def _report(ctx: DoctorContext, results: Sequence[CheckResult], started: float, t0: float,
            spans: Mapping[str, Sequence[float]] | None = None) -> DoctorReport:
    f = ctx.facts
    summary = {
        "interpreter": {k: f.get(k) for k in ("executable", "implementation", "python_full_version", "soabi", "machine",
                                               "glibc", "prefix", "platlib")},
        "distributions": len(ctx.distributions),
        "native_distributions": sum(1 for d in ctx.distributions.values() if d.extension_modules),
        "gpu": ctx.gpu.to_json(),
        "target": ctx.target.describe() if ctx.target else None,
        "target_source": ctx.target_source,
        "memory": f.get("memory"),
        "facts_seconds": f.get("gather_seconds"),  # the facts probe and nvidia-smi, before any check started
        # Where the run's time went: each check group's [start, end], seconds after the doctor started (the groups
        # run at once; the one that ends last is the run's critical path).
        "group_seconds": {g: list(span) for g, span in (spans or {}).items()},
        # For `wh doctor compare` (reports from many nodes): who this is, and what is installed, with hashes.
        "node": node_identity(ctx.environ),
        "wh_version": __version__,
        "installed": installed_inventory(ctx.distributions, ctx.site_dirs, ctx.digests),
        # Manifest [[drop]] force = true entries that are installed. Issue 4: a passing probe keeps them;
        # only `wh drop --include-forced` / `--fix --include-forced` drop them without a failed probe.
        "forced_drops": [
            {"distribution": d.name, "version": d.version,
             "modules": [rule.module] if rule.module else list(d.import_names),
             "reason": rule.reason}
            for rule in (ctx.manifest.drops if ctx.manifest else ()) if rule.force
            for d in [ctx.dist(rule.distribution)] if d is not None
        ],
    }
    return DoctorReport(python=ctx.python, results=tuple(results), facts=summary, started=started,
                        seconds=time.monotonic() - t0)


def roll_back_unfinished(python: str | None) -> Fix | None:
    """``--fix``, before the doctor runs: roll back an install into ``python``'s environment that a kill left
    unfinished (as the next ``wh install`` would), under its lock. Judged half-done, its install records read as
    empty, and every reinstall of ``--fix`` found no wheelhouse (a killed ``--fix`` was never mended by the next)."""
    from wheelhouse.folderlock import FolderLock, lockable
    from wheelhouse.install.transaction import recover, unfinished_transaction
    from wheelhouse.target.interpreter import inspect_interpreter

    interp = inspect_interpreter(python or sys.executable)
    found = unfinished_transaction(interp.platlib)
    if found is None or found.running:
        return None
    with FolderLock(lockable(interp.platlib)):
        found = recover(interp.platlib, interp.scheme())
    return Fix("rollback", found.describe(), reason="a killed `wh install` or `--fix` left it half-done",
               check="install:transaction") if found is not None else None


def apply_fixes(report: DoctorReport, python: str | None, *, wheelhouse: Path | None = None,
                include_forced: bool = False, include_requested: bool = False,
                reporter: Reporter = NullReporter()) -> list[Fix]:
    """``--fix``: add the missing soname links (``wh links --fix``), reinstall what is damaged, then drop what
    cannot work even in a correct install (``repair``: the owner of a broken file is reinstalled, a missing
    requirement installed, a shadowing copy or a failing requirement never drops the installed one).

    Manifest ``force = true`` entries whose probe passed are dropped only with ``include_forced``; what the
    wheelhouse requested only with ``include_requested``; each kept one is a ``not-dropped`` entry saying why.
    """
    from .drop import FORCED_NOT_DROPPED, drop_distributions, forced_kept
    from .repair import plan_repair, reinstall_distributions
    from wheelhouse.target.interpreter import inspect_interpreter
    from wheelhouse.env.links import apply_links, plan_links, record_path

    interp = inspect_interpreter(python or sys.executable)
    done: list[Fix] = []
    if any(r.fix == "wh links --fix" for r in report.results):
        changes = apply_links(plan_links([Path(d) for d in interp.visible_site_dirs]), record_path(Path(interp.platlib)))
        done += [Fix("links", f"{c.action} {c.path}" + (f" -> {c.target}" if c.target else "")) for c in changes]
    plan = plan_repair(report, interp, include_forced=include_forced, protect_requested=True,
                       include_requested=include_requested, wheelhouse=wheelhouse)
    why = {r.name: r for r in plan.reinstall}
    for r in (reinstall_distributions(interp.executable, plan.reinstall, wheelhouse=wheelhouse, reporter=reporter)
              if plan.reinstall else ()):
        if r.error:
            done.append(Fix("not-repaired", r.name, reason=f"{why[r.name].reason}; could not reinstall: {r.error}",
                            check=why[r.name].check_id))
        else:
            done.append(Fix("reinstall", f"{r.name} {r.version or ''}".strip(), reason=why[r.name].reason,
                            check=why[r.name].check_id))
    done += [Fix("not-dropped", f"{k.distribution} {k.version}", reason=k.reason, check=k.check_id)
             for k in plan.kept]
    for r in drop_distributions(interp.executable, plan.drops, wheelhouse=wheelhouse, reporter=reporter):
        done.append(Fix("drop", f"{r.name} {r.version}", forced=r.forced, confirmed=r.confirmed, reason=r.reason,
                        check=r.check_id, still_found=r.still_found, dependents=r.dependents, kept=r.kept))
    if not include_forced:
        done += [Fix("not-dropped", f"{p.distribution} {p.version}", forced=True, reason=FORCED_NOT_DROPPED)
                 for p in forced_kept(report)]
    return done


def with_fixes(report: DoctorReport, fixes: Sequence[Fix]) -> DoctorReport:
    """``report`` (the run after ``--fix``) with what was fixed, and a failure for each drop not confirmed.

    A drop whose names ``find_spec`` still finds (another copy on sys.path, one without a ``.dist-info``
    that no check probes) has not cured "findable but broken": where the re-run has no verdict for the
    check that caused the drop, the unconfirmed drop fails that check, as ``wh drop`` exits 1.
    """
    probed = {r.id for r in report.results}  # the re-run probed the copy find_spec finds now: its verdict speaks
    unconfirmed = [
        CheckResult(f.check or f"native:{canonicalize_name(f.what.split(' ', 1)[0])}", f"{f.what} dropped: find_spec is None",
                    "fail", f"uninstalled {f.what}, but find_spec still finds {', '.join(f.still_found) or 'it'}: "
                            "another copy is on sys.path (a second site folder, a .pth, PYTHONPATH)",
                    hint="remove the other copy by hand, then run `wh doctor` again", data={"fix": f.to_json()})
        for f in fixes if f.action == "drop" and f.confirmed is False and (f.check or "") not in probed]
    return DoctorReport(report.python, report.results + tuple(unconfirmed), report.facts, report.started,
                        report.seconds, tuple(fixes))
