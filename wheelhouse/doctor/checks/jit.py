"""jit: for JIT libraries that are installed, execute something small (compile + launch).

"Imports cleanly" is not "works" for a library that compiles at run time (the
reference deployment: flashinfer imported fine, then its tvm_ffi headers failed to compile
mid-generation). The registry is data: built-in probes below, plus any listed in
a TOML file named by ``WH_DOCTOR_JIT_PROBES`` (os.pathsep-separated), e.g.::

    [[jit]]
    id = "fakejit"                    # check id jit:fakejit
    distribution = ["fakejit"]        # runs when any of these is installed
    script = "probe_fakejit.py"       # relative to the TOML file
    needs_gpu = false
    droppable = true                  # a failure makes `wh drop` uninstall the distribution
    title = "fakejit compiles a kernel"

A probe script prints one marker record: ``{"ok": true}``, ``{"ok": false,
"error": ..., "compiler_output": ...}`` or ``{"skip": "why"}``.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from wheelhouse.datafile import check_keys, get_value, load_toml
from wheelhouse.errors import UsageError
from wheelhouse.doctor.probes import ProbeSpec, probe_script, run_cached_probe
from wheelhouse.doctor.report import CheckResult
from .context import DoctorContext

__all__ = ["GROUP", "CHECKS", "JitProbe", "BUILTIN_JIT_PROBES", "JIT_ENV", "load_jit_probes", "run"]

GROUP = "jit"
JIT_ENV = "WH_DOCTOR_JIT_PROBES"


@dataclass(frozen=True)
class JitProbe:
    id: str
    title: str
    distributions: tuple[str, ...]
    script: Path
    needs_gpu: bool = True
    # Triton is what everything else falls back to: a failure there is a toolchain problem to fix, not to drop.
    droppable: bool = True
    args: tuple[str, ...] = ()


BUILTIN_JIT_PROBES: tuple[JitProbe, ...] = (
    JitProbe("triton", "Triton compiles and launches a kernel", ("triton", "pytorch-triton"),
             probe_script("jit_triton"), needs_gpu=True, droppable=False),
    JitProbe("flashinfer", "flashinfer JIT-compiles and runs RMSNorm", ("flashinfer-python", "flashinfer"),
             probe_script("jit_flashinfer"), needs_gpu=True, droppable=True),
)
CHECKS = {f"jit:{p.id}": p.title for p in BUILTIN_JIT_PROBES}


# A JIT library keeps what it compiled (Triton's kernel cache, flashinfer's workspace, torch's extensions) and
# answers the next compile of the same kernel from there: a probe answered so proves nothing about the compiler
# the engine's new kernels will need. Each probe compiles into folders made for this run, removed after.
FRESH_CACHES = ("TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TORCH_EXTENSIONS_DIR")


def _scratch_parent() -> str | None:
    """Where the probes' fresh folders go: under wh's cache folder (the user's home, as the libraries' own caches
    are), not the temporary folder, which hardened hosts mount noexec: a launcher compiled there would not load."""
    from wheelhouse.cachedir import default_cache_dir

    parent = default_cache_dir() / "jit-scratch"
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # a read-only home: the temporary folder it is
    _remove_stale(parent)
    return str(parent)


_STALE_SECONDS = 86400  # a probe's folder untouched this long is a killed doctor's leftover, never a running one's


def _remove_stale(parent: Path) -> None:
    import shutil
    import time

    now = time.time()
    for entry in parent.glob("jit-*"):
        try:
            if now - entry.lstat().st_mtime > _STALE_SECONDS:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue


class JitRegistryError(UsageError):
    code = "bad-jit-registry"


def load_jit_probes(environ: Mapping[str, str] | None = None) -> list[JitProbe]:
    """The built-in probes plus those in the files named by WH_DOCTOR_JIT_PROBES."""
    env = os.environ if environ is None else environ
    out = list(BUILTIN_JIT_PROBES)
    for f in [p for p in env.get(JIT_ENV, "").split(os.pathsep) if p]:
        path = Path(f)
        data = load_toml(path, what=f"{JIT_ENV} file", error=JitRegistryError, hint=f"fix or unset {JIT_ENV}")
        check_keys(data, {"jit"}, f"{path}", error=JitRegistryError, noun="section")
        entries = data.get("jit", []) or []
        if not isinstance(entries, list) or not all(isinstance(j, Mapping) for j in entries):
            raise JitRegistryError(f"{path}: jit must be an array of tables", hint="write each probe as [[jit]]")
        for i, j in enumerate(entries):
            out.append(_jit_probe(j, path, f"{path}: jit[{i}]"))
    return out


_JIT_KEYS = {"id", "title", "distribution", "script", "needs_gpu", "droppable", "args"}


def _jit_probe(j: Mapping, path: Path, where: str) -> JitProbe:
    """One [[jit]] entry, every key and type checked (``script = 7`` is a clear error, not a crash)."""
    check_keys(j, _JIT_KEYS, f"{where} [[jit]]", error=JitRegistryError)
    if not j.get("id") or not j.get("script") or not j.get("distribution"):
        raise JitRegistryError(f"{where} needs id, distribution and script", hint="see `wh doctor --help`, and docs/doctor.md#jit-probe-registry in wh's source repository for the registry format")
    pid = get_value(j, "id", (str,), f"{where}.id", error=JitRegistryError)
    script = get_value(j, "script", (str,), f"{where}.script", error=JitRegistryError)
    dists = get_value(j, "distribution", (str, list), f"{where}.distribution", error=JitRegistryError)
    dists = [dists] if isinstance(dists, str) else dists
    args = get_value(j, "args", (list,), f"{where}.args", error=JitRegistryError, default=[])
    for name, values in (("distribution", dists), ("args", args)):
        if not all(isinstance(v, str) for v in values):
            raise JitRegistryError(f"{where}.{name} must be a list of strings", hint=f'write {name} = ["..."]')
    return JitProbe(
        pid, get_value(j, "title", (str,), f"{where}.title", error=JitRegistryError, default=f"{pid} JIT probe"),
        tuple(dists), (path.parent / script).resolve(),
        get_value(j, "needs_gpu", (bool,), f"{where}.needs_gpu", error=JitRegistryError, default=True),
        get_value(j, "droppable", (bool,), f"{where}.droppable", error=JitRegistryError, default=True),
        tuple(args),
    )


# What a probe says when torch finds no card (the bundled probes' skip): no excuse where nvidia-smi lists some.
_NO_DEVICE = "no CUDA device"


def _verdict(probe: JitProbe, dist, res, timeout: float, gpus: int) -> CheckResult:
    """``gpus``: the cards nvidia-smi lists that the engine's CUDA_VISIBLE_DEVICES leaves."""
    cid = f"jit:{probe.id}"
    d = res.data
    drop = {"distribution": dist.name, "version": dist.version, "modules": list(dist.import_names),
            "reason": "JIT probe failed"}
    if res.ok and d.get("skip") and probe.needs_gpu and gpus and _NO_DEVICE in str(d["skip"]):
        # The engine would not find them either: a driver or torch problem, nothing dropping this library fixes.
        return CheckResult(cid, probe.title, "fail", f"{d['skip']} though nvidia-smi lists {gpus}",
                           hint="see gpu:driver-cuda and links:libcuda", data={"distribution": dist.name},
                           seconds=res.duration)
    if res.ok and d.get("skip"):
        return CheckResult(cid, probe.title, "skip", str(d["skip"]))
    if res.ok and d.get("ok"):
        extra = ", ".join(f"{k}={v}" for k, v in d.items() if k not in ("ok", "error") and isinstance(v, (str, int)))
        return CheckResult(cid, probe.title, "ok", f"executed {probe.script.name}: {extra or 'ok'}",
                           seconds=res.duration)
    if not res.ok:
        ev = f"{probe.script.name} {res.failure(timeout)}\n{res.tail()}"
    else:
        ev = f"{d.get('error') or 'failed'}\n{(d.get('compiler_output') or d.get('traceback') or '').rstrip()}"
    data = {"distribution": dist.name}
    if probe.droppable:
        data["drop"] = drop
    return CheckResult(cid, probe.title, "fail", ev.rstrip(),
                       hint=(f"`wh drop` uninstalls {dist.name} so the engine falls back (e.g. to Triton)"
                             if probe.droppable else "fix the toolchain (see toolchain:* and links:*); do not drop it"),
                       fix=f"wh drop {dist.key}" if probe.droppable else None, data=data, seconds=res.duration)


def run(ctx: DoctorContext, probes: Sequence[JitProbe] | None = None) -> list[CheckResult]:
    probes = list(probes) if probes is not None else load_jit_probes(ctx.environ)
    out: list[CheckResult] = []
    specs, owners = [], {}
    for p in probes:
        cid = f"jit:{p.id}"
        if not ctx.wants(cid):
            continue
        dist = next((ctx.dist(n) for n in p.distributions if ctx.dist(n)), None)
        if dist is None:
            out.append(CheckResult(cid, p.title, "skip", f"{' / '.join(p.distributions)} not installed"))
            continue
        if p.needs_gpu and not ctx.gpu.gpus:
            out.append(CheckResult(cid, p.title, "skip", f"{dist.name} {dist.version} installed; no GPU to run it on"))
            continue
        specs.append(ProbeSpec(cid, p.script, p.args, env=ctx.engine_env, timeout=max(ctx.timeout, 120 if p.needs_gpu else 0)))
        owners[cid] = (p, dist)
    if not specs:
        return out

    def one(s: ProbeSpec, scratch: str):
        fresh = {var: os.path.join(scratch, s.name.replace(":", "-"), var.lower()) for var in FRESH_CACHES}
        for folder in fresh.values():
            os.makedirs(folder)
        try:
            return run_cached_probe(ctx.verdicts, ctx.python, s.script, s.args, timeout=s.timeout or ctx.timeout,
                                    env=s.env, name=s.name, passed=lambda r: r.ok and r.data.get("ok") is True,
                                    fresh=fresh)
        finally:
            ctx.reporter.advance("probes")

    ctx.reporter.start("probes", total=len(specs))
    with tempfile.TemporaryDirectory(prefix="jit-", dir=_scratch_parent()) as scratch, \
            ThreadPoolExecutor(max_workers=max(1, min(ctx.jobs, len(specs)))) as pool:
        results = dict(zip([s.name for s in specs], pool.map(lambda s: one(s, scratch), specs)))
    ctx.reporter.finish("probes")
    for cid, (res, since) in results.items():
        p, dist = owners[cid]
        verdict = _verdict(p, dist, res, max(ctx.timeout, 120 if p.needs_gpu else 0), len(ctx.gpu.gpus))
        if since:  # never "executed" when it was not: the stored pass, and why it still stands
            verdict = dataclasses.replace(verdict, evidence=f"ok (unchanged since {since}): {p.script.name} passed "
                                          "then and nothing it loaded, nor the interpreter, environment, GPU facts, wh "
                                          f"or the probe, changed since; {verdict.evidence}",
                                          data={**verdict.data, "reused_since": since})
        out.append(verdict)
    return out
