"""deps: every installed distribution's requirements are met by what the interpreter imports.

A native check that imports ``freetoken`` proves nothing about ``freetoken.layers``,
which needs ``zmq``: an engine installed without its requirements imported fine
and died on the serving path (issue 10.3). So every ``Requires-Dist`` of every
distribution the interpreter imports (its venv, a parent venv, the base, in its
own ``sys.path`` order: :func:`wheelhouse.target.installed.installed_distributions`)
is judged: markers for that interpreter (its full marker environment, asked of
it), extras once something that is installed asks for them, the version against
the specifier, with ``packaging`` in wh's process (the target may not have it).

A base system carries packages whose metadata is not the stack's concern (Debian's
``python3-gi`` without ``pycairo``, Kaggle's hundreds of conflicting packages). The
verdict follows from what the stack is and what it requires, not from who installed what:

- the stack: every distribution in the install record or in the lock of a wheelhouse
  installed here (``<site>/.wh/installed.json``); where wh installed nothing, the
  distributions in the interpreter's own site folders (a base or parent site folder is
  the base system); where those hold nothing either, everything;
- an unmet requirement of the stack, or of a distribution the stack requires (directly
  or not, markers and extras judged for this interpreter), fails;
- one of a distribution outside the stack that nothing in the stack requires is a warn
  (listed, with where it lives): it does not block ``wh serve``'s preflight.

The stack's overrides and exclusions (its manifest, or the wheelhouse's wh.json) hold here as they
held when it was resolved: a requirement on an excluded project is ok, listed with the manifest's
reason (``deps:excluded``), never missing; one on an overridden project is judged by the override.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from wheelhouse.doctor.report import CheckResult
from wheelhouse.errors import WhError
from wheelhouse.install.closure import EXCLUDED, Dist, asked_extras, unmet
from wheelhouse.install.state import read_install_state
from wheelhouse.target import TargetProfile
from wheelhouse.target.installed import InstalledDistribution, InstalledListError, installed_distributions
from wheelhouse.target.interpreter import InterpreterError, inspect_interpreter
from .context import DoctorContext, installed_by_wh

__all__ = ["GROUP", "CHECKS", "run", "stack_names", "required_by"]

GROUP = "deps"
CHECKS = {
    "deps:requirements": "every installed distribution's Requires-Dist is met (markers and extras judged for this "
                         "interpreter), by what it imports",
    "deps:<distribution>": "the requirements this distribution declares that nothing installed meets (fail for the "
                           "stack and what it requires, warn for the base system's)",
    "deps:excluded": "requirements on distributions the stack manifest excludes (ok, with the manifest's reason)",
}


def _locked(ctx: DoctorContext) -> frozenset[str]:
    """Canonical names in the lock of every wheelhouse the install record names (that is still readable)."""
    from wheelhouse.lock import read_pylock

    sites = dict.fromkeys([*(p for p in (ctx.facts.get("platlib"), ctx.facts.get("purelib")) if p),
                           *map(str, ctx.site_dirs)])
    names: set[str] = set()
    for house in dict.fromkeys(w for site in sites for w in read_install_state(site).get("wheelhouses", [])):
        try:
            names |= {canonicalize_name(f.name) for f in read_pylock(house).files}
        except (WhError, OSError):
            continue  # an archive, an oci:// reference, or moved since: the record's packages still count
    return frozenset(names)


def stack_names(ctx: DoctorContext, dists: Mapping[str, InstalledDistribution]) -> tuple[frozenset[str], str]:
    """(the stack's canonical names, how they were found: for the evidence)."""
    recorded = installed_by_wh(ctx) | _locked(ctx)
    if recorded:
        return frozenset(recorded), "the install record and lock of the wheelhouses installed here"
    own = {os.path.realpath(p) for p in (ctx.facts.get("purelib"), ctx.facts.get("platlib")) if p}
    mine = frozenset(k for k, d in dists.items() if d.location and os.path.realpath(d.location) in own)
    if mine:
        return mine, "wh installed nothing here: the distributions in this interpreter's own site folders"
    return frozenset(dists), "wh installed nothing here: every distribution"


def required_by(roots: frozenset[str], view: Mapping[str, Dist], target: TargetProfile,
                asked: Mapping[str, set[str]] | None = None) -> dict[str, str]:
    """Every installed name the ``roots`` require, directly or not -> the chain that reaches it (``a 1 -> b``).
    ``asked``: the extras the wheelhouse asks of a name (``app[gpu]``): what they require is required too."""
    chain = {k: "" for k in roots if k in view}
    extras: dict[str, set[str]] = {k: set((asked or {}).get(k, ())) for k in view}
    queue = list(chain)
    while queue:
        key = queue.pop(0)
        dist = view[key]
        for text in dist.requires:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            try:
                if req.marker is not None and not any(target.evaluate(req.marker, extra=e)
                                                      for e in ("", *sorted(extras[key]))):
                    continue
            except ValueError:
                pass  # a marker that cannot be judged counts: a false red over a false green
            dep = canonicalize_name(req.name)
            if dep not in view:
                continue
            new = set(req.extras) - extras[dep]
            if dep not in chain or new:
                extras[dep] |= new
                chain.setdefault(dep, (chain[key] + " -> " if chain[key] else f"{dist.name} {dist.version} -> ")
                                 + view[dep].name)
                queue.append(dep)
    return chain


def run(ctx: DoctorContext) -> list[CheckResult]:
    pool = ThreadPoolExecutor(max_workers=1)
    asked = pool.submit(inspect_interpreter, ctx.python)  # the two questions to the interpreter at once
    pool.shutdown(wait=False)
    try:
        dists = installed_distributions(ctx.python, env=ctx.environ)
        target = asked.result().target
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
    # The extras the manifest asks for (fastpkg[fast]) count, where the requirement is for this target.
    asked = asked_extras([r for r in map(_requirement, manifest.requirements if manifest else ()) if r], target)
    found = unmet(view, target, excluded=reasons, overrides=overrides, asked=asked)
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
    stack, how = stack_names(ctx, dists)
    reached = required_by(stack, view, target, asked)
    for who, reqs in by_dist.items():
        d, key = view[key_of[who]], key_of[who]
        part = key in stack
        chain = reached.get(key)
        lines = [f"{d.name} {d.version} requires {req}: {why}" for req, why in reqs]
        if part:
            lines.append(f"{d.name} is part of the stack ({how})")
        elif chain:
            lines.append(f"{d.name} is required by the stack: {chain}")
        else:
            lines.append(f"{d.name} is not part of the stack ({how}; it lives in {dists[key].location or '?'}) and "
                         "nothing in the stack requires it: a requirement of the base system, a warning")
        out.append(CheckResult(
            f"deps:{key}", f"{d.name} {d.version}: requirements met", "fail" if part or chain else "warn",
            "\n".join(lines),
            hint="stage the missing distributions into the wheelhouse (`wh stage` on the networked host), then "
                 f"`wh install` it into {ctx.python}" if part or chain else
                 f"fine for the stack; install what {d.name} lacks with the system's package manager to use {d.name}",
            data={"unmet": [{"requirement": req, "why": why} for req, why in reqs], "part_of_stack": part,
                  "required_by_stack": chain or None}))
    return out


def _excluded_result(excluded: dict[tuple[str, str], str], reasons: dict[str, str]) -> CheckResult:
    """One ok verdict naming each requirement the manifest excludes, with its reason."""
    lines = []
    for who, req in sorted(excluded):
        why = reasons.get(_name(req) or "")
        lines.append(f"{who} requires {req}: {EXCLUDED}" + (f" ({why})" if why else ""))
    return CheckResult("deps:excluded", CHECKS["deps:excluded"], "ok", "\n".join(lines),
                       data={"excluded": [{"requirer": who, "requirement": req} for who, req in sorted(excluded)]})


def _requirement(text: str) -> Requirement | None:
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def _name(text: str) -> str | None:
    req = _requirement(text)
    return canonicalize_name(req.name) if req is not None else None
