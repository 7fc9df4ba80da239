"""native: every installed distribution that ships extension modules is loaded, in separate processes.

find_spec only proves a directory exists; a present-but-unimportable native
package suppresses the fallback written for its absence (seed 000: sgl_kernel's
sm100 .so with an undefined torch symbol). So the verdict is the import itself:
every top-level name the distribution provides (a pure-Python one that raises
counts too), then every extension module it ships by its dotted name
(``pkg.sub._ext``), because engines load theirs lazily on the serving path.

An architecture variant (a module under a folder named for a GPU architecture,
``sgl_kernel/sm100/common_ops.so``) that no GPU here can use is not loaded: the
package never loads it on this card, so its failure would be a false red. Which
GPU it is for comes from its own kernels (the ``.nv_fatbin`` it embeds) when it
has any, else from the folder's name; the evidence says which. Without a GPU
nothing says which variant a package would pick, so everything is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from wheelhouse.doctor.fatbin import device_code, sm_number
from wheelhouse.doctor.imports import ImportOutcome, import_modules
from wheelhouse.doctor.report import CheckResult
from wheelhouse.target.gpu import Gpu
from . import DoctorContext, Distribution

__all__ = ["GROUP", "CHECKS", "run", "native_distributions", "NotLoaded", "variant_for_other_gpu", "load_plan"]

GROUP = "native"
CHECKS = {"native:<distribution>": "every top-level name and every extension module of the distribution loads "
                                   "(executed, batched, each failure confirmed in a process of its own)"}
_ARCH_FOLDER = re.compile(r"^sm_?(\d{2,3})[af]?$")  # sm90, sm_90a, sm100, sm100f


@dataclass(frozen=True)
class NotLoaded:
    """An extension module deliberately left unloaded: an architecture variant for a GPU that is not here."""

    module: str
    path: str
    reason: str  # "built for sm_100; GPU 0 is sm_89"
    decided_by: str  # "its kernels (fatbin)" | "its folder name"

    def to_json(self) -> dict[str, str]:
        return {"module": self.module, "path": self.path, "reason": self.reason, "decided_by": self.decided_by}


def native_distributions(ctx: DoctorContext) -> list[Distribution]:
    """Installed distributions with at least one extension module in their RECORD."""
    return sorted((d for d in ctx.distributions.values() if d.extension_modules), key=lambda d: d.key)


def _gpus_here(gpus: Sequence[Gpu]) -> str:
    return ", ".join(f"GPU {g.index} is {g.sm}" for g in gpus if g.sm)


def variant_for_other_gpu(module: str, path: str | Path, relpath: str, gpus: Sequence[Gpu],
                          driver_cuda: str | None = None) -> NotLoaded | None:
    """Is extension module ``module`` (``relpath`` in its site dir) an architecture variant no GPU here can use?

    None means: load it.
    """
    folders = [p for p in relpath.split("/")[:-1] if _ARCH_FOLDER.match(p)]
    usable = [g for g in gpus if g.compute_capability]
    if not folders or not usable:
        return None
    code = device_code(path)
    if code is not None and (code.sass or code.ptx):
        if any(code.runs_on(g.compute_capability, driver_cuda) for g in usable):
            return None
        return NotLoaded(module, str(path), f"kernels for {code.describe()} only; {_gpus_here(usable)}",
                         "its kernels (fatbin)")
    arch = int(_ARCH_FOLDER.match(folders[-1]).group(1))
    for g in usable:
        sm = sm_number(g.compute_capability)
        if sm // 10 == arch // 10 and sm % 10 >= arch % 10:  # SASS compatibility: same major, minor <= the GPU's
            return None
    return NotLoaded(module, str(path), f"built for sm_{arch}; {_gpus_here(usable)}", "its folder name")


def load_plan(ctx: DoctorContext, d: Distribution) -> tuple[list[str], list[NotLoaded]]:
    """What to load for ``d``: its top-level names (and manifest-named modules), then its extension modules."""
    named = [r.module for r in (ctx.manifest.drops if ctx.manifest else ())
             if r.module and r.distribution.lower().replace("_", "-") == d.key]
    modules = list(dict.fromkeys([*d.import_names, *named]))
    skipped: list[NotLoaded] = []
    for relpath, module in d.extensions:
        if module in modules or not all(p.isidentifier() for p in module.split(".")):
            continue
        variant = variant_for_other_gpu(module, Path(d.location or "") / relpath, relpath, ctx.gpu.gpus,
                                        ctx.gpu.cuda_version)
        if variant is not None:
            skipped.append(variant)
        else:
            modules.append(module)
    return modules, skipped


def _failure_lines(bad: list[ImportOutcome], unloaded: list[str]) -> list[str]:
    """One paragraph per failed module, then the extension modules whose top-level package did not import."""
    parts = []
    for o in bad:
        line = f"import {o.module}: {o.summary}"
        if o.found:
            line += f" -- find_spec({o.module!r}) succeeds ({o.origin}) but the import fails"
        elif o.found is False:
            line += f" -- find_spec({o.module!r}) is None"
        detail = o.traceback or o.output
        parts.append(line + ("\n" + detail.rstrip() if detail else ""))
    by_top: dict[str, list[str]] = {}
    for m in unloaded:
        by_top.setdefault(m.split(".", 1)[0], []).append(m)
    parts += [f"not loaded, as {top} does not import: {', '.join(mods)}" for top, mods in by_top.items()]
    return parts


def _verdict(d: Distribution, mods: list[str], skipped: list[NotLoaded],
             outcomes: dict[str, ImportOutcome]) -> CheckResult:
    cid = f"native:{d.key}"
    title = f"{d.name} {d.version} loads ({d.extension_modules} extension module(s))"
    bad = [outcomes[m] for m in mods if m in outcomes and not outcomes[m].ok]
    unloaded = [m for m in mods if m not in outcomes]  # under a top-level name that failed
    seconds = sum(outcomes[m].seconds for m in mods if m in outcomes)
    tops = list(d.import_names)
    exts = [m for m in mods if m not in tops]
    not_loaded = "; ".join(f"not loaded: {s.module} ({s.reason}; decided by {s.decided_by})" for s in skipped)
    data = {"modules": mods, "not_loaded": [s.to_json() for s in skipped]}
    if not mods:
        return CheckResult(cid, title, "skip", "no importable top-level name found in its RECORD", data=data)
    if not bad and not unloaded:
        ev = (f"imported {', '.join(tops) or 'nothing at top level'} and loaded {len(exts)} extension module(s) "
              "in separate processes" + (f"; {not_loaded}" if not_loaded else ""))
        return CheckResult(cid, title, "ok", ev, data=data, seconds=seconds)
    if any("." not in o.module for o in bad) or not bad:  # not bad: another distribution's package failed
        reason = "import failed"
    else:
        reason = f"extension module {bad[0].module} failed to load"
    drop = {"distribution": d.name, "version": d.version, "modules": tops, "reason": reason}
    evidence = "\n".join(_failure_lines(bad, unloaded) + ([not_loaded] if not_loaded else []))
    return CheckResult(cid, title, "fail", evidence,
                       hint=f"`wh drop` uninstalls {d.name} so code that checks find_spec falls back cleanly "
                            f"(`wh drop --restore {d.key}` brings it back)",
                       fix=f"wh drop {d.key}",
                       data={**data, "drop": drop,
                             "failures": [{"module": o.module, "found": o.found, "error_type": o.error_type,
                                           "error": o.error, "crash": o.crash} for o in bad]},
                       seconds=seconds)


def run(ctx: DoctorContext) -> list[CheckResult]:
    dists = [d for d in native_distributions(ctx) if ctx.wants(f"native:{d.key}")]
    if not dists:
        return [CheckResult("native:none", "no installed distribution ships extension modules", "skip",
                            "nothing to import")] if ctx.wants("native:none") and not ctx.patterns else []
    plan = {d.key: load_plan(ctx, d) for d in dists}
    modules = [m for mods, _ in plan.values() for m in mods]
    # Top-level names first: an extension module under one that fails (or hangs) fails the same way, so it is
    # not loaded at all (a hang then costs one timeout, not one per module under it).
    outcomes = _load([m for m in modules if "." not in m], ctx)
    failed = {m for m, o in outcomes.items() if not o.ok}
    outcomes.update(_load([m for m in modules if "." in m and m.split(".", 1)[0] not in failed], ctx))
    return [_verdict(d, *plan[d.key], outcomes) for d in dists]


def _load(modules: list[str], ctx: DoctorContext) -> dict[str, ImportOutcome]:
    if not modules:
        return {}
    return import_modules(ctx.python, modules, jobs=ctx.jobs, timeout=ctx.timeout, env=ctx.environ,
                          reporter=ctx.reporter)
