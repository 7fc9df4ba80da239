"""deps: every installed distribution's requirements are met by what the interpreter imports.

A native check that imports ``freetoken`` proves nothing about ``freetoken.layers``,
which needs ``zmq``: an engine installed without its requirements imported fine
and died on the serving path (issue 10.3). So every ``Requires-Dist`` of every
distribution the interpreter imports (its venv, a parent venv, the base, in its
own ``sys.path`` order: :func:`wheelhouse.target.installed.installed_distributions`)
is judged: markers for that interpreter (its full marker environment, asked of
it), extras once something that is installed asks for them, the version against
the specifier, with ``packaging`` in wh's process (the target may not have it).

A base image (Kaggle's) carries hundreds of packages whose metadata conflicts
among themselves; they are not the stack. Once wh has installed into one of the
interpreter's site folders, the requirements of what wh installed fail, those of
what was there before are warnings (listed all the same). Where wh installed
nothing, every distribution counts.

The stack's overrides and exclusions (its manifest, or the wheelhouse's wh.json) hold here as they
held when it was resolved: a requirement on an excluded project is ok, listed with the manifest's
reason (``deps:excluded``), never missing; one on an overridden project is judged by the override.
"""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from wheelhouse.doctor.report import CheckResult
from wheelhouse.install.closure import EXCLUDED, Dist, unmet
from wheelhouse.target.installed import InstalledListError, installed_distributions
from wheelhouse.target.interpreter import InterpreterError, inspect_interpreter
from . import DoctorContext, installed_by_wh

__all__ = ["GROUP", "CHECKS", "run"]

GROUP = "deps"
CHECKS = {
    "deps:requirements": "every installed distribution's Requires-Dist is met (markers and extras judged for this "
                         "interpreter), by what it imports",
    "deps:<distribution>": "the requirements this distribution declares that nothing installed meets",
    "deps:excluded": "requirements on distributions the stack manifest excludes (ok, with the manifest's reason)",
}


def run(ctx: DoctorContext) -> list[CheckResult]:
    try:
        dists = installed_distributions(ctx.python, env=ctx.environ)
        target = inspect_interpreter(ctx.python).target
    except (InstalledListError, InterpreterError) as exc:
        # The interpreter could not answer (a .pth that prints at every start, say): a verdict, not a crashed
        # doctor that writes no JSON and no JUnit after its probes ran.
        return [CheckResult("deps:requirements", CHECKS["deps:requirements"], "error",
                            "\n".join(x for x in (exc.message, exc.detail) if x),
                            hint=exc.hint)]
    view = {k: Dist(d.name, d.version, d.requires) for k, d in dists.items()}
    manifest = ctx.manifest
    reasons = {canonicalize_name(e.distribution): e.reason for e in (manifest.excludes if manifest else ())}
    overrides: dict[str, list[str]] = {}
    for text in (manifest.overrides if manifest else ()):
        name = _name(text)
        if name:
            overrides.setdefault(name, []).append(text)
    found = unmet(view, target, excluded=reasons, overrides=overrides)
    excluded = {k: v for k, v in found.items() if v == EXCLUDED}
    problems = {k: v for k, v in found.items() if v != EXCLUDED}
    out = [_excluded_result(excluded, reasons)] if excluded else []
    if not problems:
        nreq = sum(len(d.requires) for d in dists.values())
        return [CheckResult("deps:requirements", CHECKS["deps:requirements"], "ok",
                            f"{len(dists)} distribution{'' if len(dists) == 1 else 's'}, {nreq} declared requirement(s): every one that applies "
                            f"here is met by what {ctx.python} imports"
                            + (f" ({len(excluded)} excluded by the manifest: deps:excluded)" if excluded else ""),
                            data={"distributions": len(dists)}), *out]
    by_dist: dict[str, list[tuple[str, str]]] = {}
    for (who, req), why in sorted(problems.items()):
        by_dist.setdefault(who, []).append((req, why))
    key_of = {d.name: k for k, d in view.items()}
    by_wh = installed_by_wh(ctx)
    for who, reqs in by_dist.items():
        d, key = view[key_of[who]], key_of[who]
        ours = not by_wh or key in by_wh
        lines = [f"{d.name} {d.version} requires {req}: {why}" for req, why in reqs]
        if not ours:
            lines.append(f"{d.name} was not installed by wh (it was in this environment before): a warning")
        out.append(CheckResult(
            f"deps:{key}", f"{d.name} {d.version}: requirements met", "fail" if ours else "warn", "\n".join(lines),
            hint="stage the missing distributions into the wheelhouse (`wh stage` on the networked host), then "
                 f"`wh install` it into {ctx.python}",
            data={"unmet": [{"requirement": req, "why": why} for req, why in reqs], "installed_by_wh": ours}))
    return out


def _excluded_result(excluded: dict[tuple[str, str], str], reasons: dict[str, str]) -> CheckResult:
    """One ok verdict naming each requirement the manifest excludes, with its reason."""
    lines = []
    for who, req in sorted(excluded):
        why = reasons.get(_name(req) or "")
        lines.append(f"{who} requires {req}: {EXCLUDED}" + (f" ({why})" if why else ""))
    return CheckResult("deps:excluded", CHECKS["deps:excluded"], "ok", "\n".join(lines),
                       data={"excluded": [{"requirer": who, "requirement": req} for who, req in sorted(excluded)]})


def _name(text: str) -> str | None:
    try:
        return canonicalize_name(Requirement(text).name)
    except InvalidRequirement:
        return None
