"""native: every installed distribution that ships extension modules is imported, in a separate process.

find_spec only proves a directory exists; a present-but-unimportable native
package suppresses the fallback written for its absence (seed 000: sgl_kernel's
sm100 .so with an undefined torch symbol). So the verdict is the import itself.
"""

from __future__ import annotations

from wheelhouse.doctor.probes import ImportOutcome, import_modules
from wheelhouse.doctor.report import CheckResult
from . import DoctorContext, Distribution

__all__ = ["GROUP", "CHECKS", "run", "native_distributions"]

GROUP = "native"
CHECKS = {"native:<distribution>": "the distribution's extension modules import (executed, one process per failure)"}


def native_distributions(ctx: DoctorContext) -> list[Distribution]:
    """Installed distributions with at least one extension module in their RECORD."""
    return sorted((d for d in ctx.distributions.values() if d.extension_modules), key=lambda d: d.key)


def _modules_for(ctx: DoctorContext, d: Distribution) -> list[str]:
    if ctx.manifest:
        named = [r.module for r in ctx.manifest.drops if r.module and r.distribution.lower().replace("_", "-") == d.key]
        if named:
            return named
    return list(d.import_names)


def _verdict(d: Distribution, mods: list[str], outcomes: dict[str, ImportOutcome]) -> CheckResult:
    cid = f"native:{d.key}"
    title = f"{d.name} {d.version} imports ({d.extension_modules} extension module(s))"
    bad = [outcomes[m] for m in mods if m in outcomes and not outcomes[m].ok]
    seconds = sum(outcomes[m].seconds for m in mods if m in outcomes)
    drop = {"distribution": d.name, "version": d.version, "modules": mods}
    if not mods:
        return CheckResult(cid, title, "skip", "no importable top-level name found in its RECORD")
    if not bad:
        return CheckResult(cid, title, "ok", "imported " + ", ".join(mods) + " in a separate process",
                           data={"modules": mods}, seconds=seconds)
    parts = []
    for o in bad:
        line = f"import {o.module}: {o.summary}"
        if o.found:
            line += f" -- find_spec({o.module!r}) succeeds ({o.origin}) but the import fails"
        elif o.found is False:
            line += f" -- find_spec({o.module!r}) is None"
        detail = o.traceback or o.output
        if detail:
            line += "\n" + detail.rstrip()
        parts.append(line)
    return CheckResult(cid, title, "fail", "\n".join(parts),
                       hint=f"`wh drop` uninstalls {d.name} so code that checks find_spec falls back cleanly "
                            f"(`wh drop --restore {d.key}` brings it back)",
                       fix=f"wh drop {d.key}",
                       data={"modules": mods, "drop": {**drop, "reason": "import failed"},
                             "failures": [{"module": o.module, "found": o.found, "error_type": o.error_type,
                                           "error": o.error, "crash": o.crash} for o in bad]},
                       seconds=seconds)


def run(ctx: DoctorContext) -> list[CheckResult]:
    dists = [d for d in native_distributions(ctx) if ctx.wants(f"native:{d.key}")]
    if not dists:
        return [CheckResult("native:none", "no installed distribution ships extension modules", "skip",
                            "nothing to import")] if ctx.wants("native:none") and not ctx.patterns else []
    plan = {d.key: _modules_for(ctx, d) for d in dists}
    modules = [m for mods in plan.values() for m in mods]
    outcomes = import_modules(ctx.python, modules, jobs=ctx.jobs, timeout=ctx.timeout, env=ctx.environ,
                              reporter=ctx.reporter)
    return [_verdict(d, plan[d.key], outcomes) for d in dists]
