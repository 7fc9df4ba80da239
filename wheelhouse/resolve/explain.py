"""Why a resolution failed: the ``ResolveError`` family, and resolvelib's causes turned into one
of them with a message that names the packages and a hint that says what to change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version
from resolvelib import ResolutionImpossible

from .candidates import Req, spec_of
from wheelhouse.errors import UsageError, WhError
from wheelhouse.index.distfile import Distfile
from wheelhouse.index import PackageSource
from wheelhouse.target import TargetProfile

if TYPE_CHECKING:
    from .provider import Provider

__all__ = [
    "ROOT",
    "ResolveError",
    "InvalidRequirementError",
    "PackageNotFound",
    "NoCompatibleWheel",
    "NoMatchingVersion",
    "ResolutionConflict",
    "SearchLimit",
    "ToolchainSkew",
    "explain_failure",
    "search_limit",
]

ROOT = "(requested)"


# --- errors -------------------------------------------------------------------------------
class ResolveError(WhError):
    code = "resolve"


class InvalidRequirementError(UsageError):
    code = "bad-requirement"


class PackageNotFound(ResolveError):
    code = "not-found"


class NoCompatibleWheel(ResolveError):
    """A project (or the versions allowed of it) publishes nothing the target can install."""

    code = "no-compatible-wheel"

    def __init__(self, message: str, *, name: str, published: Sequence[str] = (), hint: str | None = None):
        super().__init__(message, hint=hint)
        self.name = name
        self.published = tuple(published)


class NoMatchingVersion(ResolveError):
    code = "no-matching-version"


class ResolutionConflict(ResolveError):
    code = "conflict"


class SearchLimit(ResolveError):
    """resolvelib's round limit was reached: the search gave up, which says nothing of whether an answer exists."""

    code = "search-limit"

    def __init__(self, message: str, *, rounds: int, backtracks: Mapping[str, int], hint: str | None = None):
        super().__init__(message, hint=hint)
        self.rounds = rounds
        self.backtracks = dict(backtracks)


def search_limit(rounds: int, backtracks: Mapping[str, int], shown: int = 5) -> SearchLimit:
    """The error of a search that gave up after ``rounds``, naming the projects in most conflicts."""
    top = sorted(backtracks.items(), key=lambda kv: (-kv[1], kv[0]))[:shown]
    named = ", ".join(f"{n} ({k})" for n, k in top)
    most = f": the packages it backtracked on most (conflicts each took part in) are {named}" if top else ""
    pin = f"`{top[0][0]}==VERSION`" if top else "`name==version`"
    return SearchLimit(
        f"the search gave up after {rounds} rounds without an answer (a search limit, not a proven conflict){most}",
        rounds=rounds, backtracks=dict(top),
        hint=f"pin one of them ({pin}) or narrow it with a constraint (-c), then run again",
    )


class ToolchainSkew(ResolveError):
    code = "toolchain-skew"

    def __init__(self, message: str, *, group: str, versions: Mapping[str, str], hint: str | None = None):
        super().__init__(message, hint=hint)
        self.group = group
        self.versions = dict(versions)



# --- explaining failure ------------------------------------------------------------------------
def _chain(provider: Provider, cand, limit: int = 6) -> str:
    """"b==2 <- a==1 <- (requested)": who pulled the candidate ``cand`` in (``_links``)."""
    return " <- ".join(str(c) for c in _links(provider, cand, limit)) or ROOT


def _links(provider: Provider, cand, limit: int = 6) -> list:
    """The candidates that pulled ``cand`` in, nearest first, ending with ``ROOT`` when the chain reaches the request.

    Each link is a parent whose requirement admits the version of the link below it (cf-top 2.0,
    which needs cf-mid-x==2.0, never explains cf-mid-x 1.0); of several, the one recorded last (the
    search's latest state). A candidate the request names is ``(requested)``.
    """
    parts: list = []
    seen = {cand.name}
    cur = cand
    while len(parts) < limit:
        if cur.name in provider.root_texts:
            parts.append(ROOT)
            break
        parent = _parent_of(provider, cur)
        if parent is None:
            break
        parts.append(parent)
        if parent.name in seen:
            break
        seen.add(parent.name)
        cur = parent
    return parts


def _parent_of(provider: Provider, cand):
    """The last recorded parent whose requirement on ``cand``'s project admits ``cand``'s version."""
    recs = provider.parents.get(cand.ident if cand.kind == "toolchain" else cand.name) or {}
    # A project's extras depend on its base at the same version: that is not who pulled it in.
    fitting = [parent for req, parent in recs.values() if parent.name != cand.name and provider.is_satisfied_by(req, cand)]
    return fitting[-1] if fitting else None


def explain_failure(exc: ResolutionImpossible, provider: Provider, target: TargetProfile, source: PackageSource, roots) -> WhError:
    """The ResolveError that says why resolvelib found no consistent set.

    When a project on the way (a cause's parent or its chain) had newer releases the target's Python
    refused, those releases are the reason: the older one left is what failed, so the error leads
    with them (crewai 0.11.3-1.15.30 skipped for ``Requires-Python <3.14``) instead of blaming the old
    release's dependency."""
    causes = list(exc.causes)
    err = _explain(causes, provider, target, source)
    return _python_refusals(err, causes, provider, target)


def _explain(causes: list, provider: Provider, target: TargetProfile, source: PackageSource) -> WhError:
    tool = [c for c in causes if c.requirement.kind == "toolchain"]
    if tool:
        group = tool[0].requirement.name
        versions: dict[str, str] = {}
        lines = []
        for c in tool:
            if c.parent is None:
                continue
            versions[c.parent.name] = str(c.parent.version)
            lines.append(f"  {c.parent.name} {c.parent.version} <- {_chain(provider, c.parent)}")
        g = next(g for g in provider.groups if g.name == group)
        rule = "identical versions" if g.exact else "one major.minor release"
        return ToolchainSkew(
            f"toolchain group {group!r} needs {rule}, but no consistent set exists: "
            + ", ".join(f"{n} {v}" for n, v in versions.items()) + "\n" + "\n".join(lines),
            group=group,
            versions=versions,
            hint="pin the members to one release with a constraint (e.g. `-c` with `name==X.Y.*`), "
            "or list the package under `exceptions` of that [[toolchain]] if it may differ",
        )
    py = [c for c in causes if c.requirement.kind == "python"]
    # A requirement that has no candidate even on its own: say why, for that package.
    seen = set()
    for c in causes:
        r = c.requirement
        if r.kind != "pkg" or r.ident in seen:
            continue
        seen.add(r.ident)
        if not provider.candidates(r.name, [r]):
            return _explain_empty(r, c.parent, provider, target, source)
    if py and len(py) == len(causes):
        needs = "; ".join(f"{c.parent} needs {c.requirement.text}" for c in py)
        return NoMatchingVersion(f"{needs}; the target has Python {provider.python}",
                                 hint="pin an older release that supports the target's Python, or stage for another --python-version")
    lines = []
    for c in causes:
        who = ROOT if c.parent is None else f"{c.parent} <- {_chain(provider, c.parent)}"
        lines.append(f"  {c.requirement.text} <- {who}")
    names = sorted({c.requirement.name for c in causes})
    return ResolutionConflict(
        f"conflicting requirements on {', '.join(names)}:\n" + "\n".join(lines),
        hint="loosen or change one of these requirements (or its parent's version), then run again",
    )


def _python_refusals(err: WhError, causes: list, provider: Provider, target: TargetProfile) -> WhError:
    """``err`` led by the newer releases the target's Python refused, of each project on the failing chains."""
    refused = provider.finder.python_refused
    on_chain: dict[str, Version] = {}
    wanted: dict[str, list] = {}  # name -> the specifiers of the requirements that pulled it in on the chain
    for c in causes:
        if c.parent is None or c.parent.kind != "pkg":
            continue
        chain = [c.parent, *_links(provider, c.parent)]
        for cand, above in zip(chain, [*chain[1:], None]):
            # the release that was left (a refused one is a cause of its own, not what failed)
            if cand != ROOT and cand.name in refused and cand.version not in refused[cand.name]:
                on_chain[cand.name] = max(on_chain.get(cand.name, cand.version), cand.version)
                wanted.setdefault(cand.name, []).extend(_specifiers_on(provider, cand, above))
    notes, newest = [], None
    for name, chosen in on_chain.items():
        # only releases the requirements admit (crewai==0.11.2 asked for exactly: nothing newer was skipped)
        newer = {v: rp for v, rp in refused[name].items()
                 if v > chosen and all(s.contains(v, prereleases=True) for s in wanted.get(name, ()))}
        if not newer:
            continue
        lo, hi = min(newer), max(newer)
        clauses = sorted({str(s) for rp in newer.values() for s in (spec_of(rp) or ())
                          if not s.contains(provider.python, prereleases=True)})
        span = f"{name} {lo} was" if lo == hi else f"{name} {lo}\u2013{hi} were"
        notes.append(f"{span} skipped for Requires-Python {','.join(clauses)}")
        newest = newest or (name, hi, newer[hi])
    if not notes:
        return err
    name, version, rp = newest
    fits = _python_that_fits(spec_of(rp), target)
    where = f"stage for Python {fits} (--python-version {fits}), which {name} {version} accepts, or " if fits else ""
    return NoMatchingVersion(
        f"{'; '.join(notes)} (the target has Python {target.python_full_version}); what is left fails: {err.message}",
        hint=f"{where}pin {name} to a release whose dependencies have wheels for the target",
    )


def _specifiers_on(provider: Provider, cand, above) -> list:
    """The specifiers that asked for ``cand``'s project: the request's (``above`` is ROOT) or the parent link's."""
    if above == ROOT or above is None:
        out = []
        for text in provider.root_texts.get(cand.name, ()):
            try:
                out.append(Requirement(text).specifier)
            except InvalidRequirement:
                continue
        return out
    recs = provider.parents.get(cand.name) or {}
    return [req.specifier for req, parent in recs.values() if parent == above]


def _python_that_fits(spec, target: TargetProfile) -> str | None:
    """The newest CPython 3.x below the target's that ``spec`` admits ("3.13"), if any."""
    if spec is None:
        return None
    minor = Version(target.python_full_version).minor
    for m in range(minor - 1, 6, -1):
        if spec.contains(Version(f"3.{m}.99"), prereleases=True) or spec.contains(Version(f"3.{m}"), prereleases=True):
            return f"3.{m}"
    return None


def _explain_empty(req: Req, parent, provider: Provider, target: TargetProfile, source: PackageSource) -> WhError:
    who = "" if parent is None else f" (required by {parent} <- {_chain(provider, parent)})"
    if req.direct is not None:
        d = req.direct
        if target.wheel_rank(d.filename) is None:
            return NoCompatibleWheel(
                f"{d.filename} is not installable on the target {target.describe()}: its tags are {', '.join(d.tags)}",
                name=d.name, published=d.tags,
                hint="use a wheel built for the target, or stage for another target (--platform / --target)",
            )
        return ResolutionConflict(f"{req.text} does not satisfy the other requirements on {d.name}{who}", hint="remove the conflicting requirement")
    files = source.files(req.name)
    if not files:
        return PackageNotFound(
            f"no project named {req.name} on {', '.join(source.locations()) or 'any index'}{who}",
            hint="check the spelling, or add the index that has it with --extra-index-url / --find-links",
        )
    specs = [req.specifier] + [c.specifier for c in provider.constraints.get(req.name, ())]
    texts = [req.text] + [c.text for c in provider.constraints.get(req.name, ())]

    def matches(f: Distfile) -> bool:
        try:
            v = Version(f.version)
        except InvalidVersion:
            return False
        return all(s.contains(v, prereleases=True) for s in specs)

    in_range = [f for f in files if matches(f)]
    if not in_range:
        avail = sorted({Version(f.version) for f in files if _valid(f.version)}, reverse=True)
        shown = ", ".join(str(v) for v in avail[:8]) + (" ..." if len(avail) > 8 else "")
        return NoMatchingVersion(
            f"no version of {req.name} matches {' and '.join(texts)}{who}; available: {shown}",
            hint="loosen the requirement or constraint",
        )
    # "for pycrypto" says nothing a bare name did not: only a specifier or constraint is worth repeating.
    wanted = f" for {' and '.join(texts)}" if any(str(s) for s in specs) else ""
    wheels = [f for f in in_range if f.is_wheel]
    if not wheels:
        return NoCompatibleWheel(
            f"{req.name} publishes only source distributions{wanted}{who}; wh stages wheels only",
            name=req.name,
            hint=f"build its wheel for the target with its interpreter (`wh build` with a recipe for {req.name}, "
            "or a builder running on the target's platform) and pass it with --find-links",
        )
    tagged = [f for f in wheels if target.wheel_rank(f.filename) is not None]
    if not tagged:
        return _no_wheel_for_target(req, wheels, files, target, who)
    py_ok = [f for f in tagged if (s := spec_of(f.requires_python)) is None or target.accepts_python(s)]
    if not py_ok:
        f = max(tagged, key=lambda f: Version(f.version))
        return NoMatchingVersion(
            f"every {req.name} wheel for {' and '.join(texts)} needs another Python ({f.filename}: Requires-Python {f.requires_python}); "
            f"the target has {target.python_full_version}{who}",
            hint=f"pin an older {req.name}, or stage for another --python-version",
        )
    if all(f.yanked for f in py_ok):
        return _only_yanked(req, py_ok, texts, who)
    return NoMatchingVersion(f"no installable version of {req.name} for {' and '.join(texts)}{who}", hint="loosen the requirement")


def _no_wheel_for_target(req, wheels: list[Distfile], files: list[Distfile], target: TargetProfile,
                         who: str) -> NoCompatibleWheel:
    """No version in range has a wheel for the target: name the newest one that has, or say none has."""
    newest = max(Version(f.version) for f in wheels)
    published = sorted({t for f in wheels if Version(f.version) == newest for t in f.tags}, key=lambda t: (target.machine not in t, t))
    shown = ", ".join(published[:8]) + (" ..." if len(published) > 8 else "")
    fitting = [Version(f.version) for f in files if _valid(f.version) and target.wheel_rank(f.filename) is not None]
    elsewhere = "stage for another target (--platform / --target), or build the wheel yourself (`wh build`)"
    if fitting:
        best = max(fitting)
        hint = f"{req.name}=={best} is the newest version with a wheel for the target: loosen the requirement to allow it, or {elsewhere}"
        none = ""
    else:
        # Pinning an older version would loop (uv: "all versions of X have no usable wheels").
        hint = elsewhere[0].upper() + elsewhere[1:]
        none = f"; no version of {req.name} has a wheel for the target"
    return NoCompatibleWheel(
        f"{req.name} has no wheel for the target {target.describe()}{who}: {req.name} {newest} publishes {shown}; "
        f"the target accepts {_accepts(target)}{none}",
        name=req.name, published=published, hint=hint,
    )


def _only_yanked(req, files: list[Distfile], texts: list[str], who: str) -> NoMatchingVersion:
    """Every release in range is yanked (PEP 592): name each, with its reason."""
    reasons: dict[Version, str] = {}
    for f in sorted(files, key=lambda f: Version(f.version)):
        reasons.setdefault(Version(f.version), f.yanked_reason or "no reason given")
    listed = ", ".join(f"{v} (yanked: {why})" for v, why in reasons.items())
    newest = max(reasons)
    return NoMatchingVersion(
        f"{' and '.join(texts)} matches only yanked releases of {req.name}{who}: {listed}",
        hint=f"pin it yourself, exactly (the requirement or the constraint `{req.name}=={newest}`), to use a yanked release "
             "anyway; a dependency's pin does not select one (PEP 592, as uv)",
    )


def _valid(v: str) -> bool:
    try:
        Version(v)
        return True
    except InvalidVersion:
        return False


def _accepts(target: TargetProfile) -> str:
    plats = [p for p in target.platforms if p != "any"]
    # The portable policy tag says more than linux_<arch> (locally built wheels only).
    best = next((p for p in plats if p.startswith(("manylinux_", "musllinux_"))), plats[0] if plats else "any")
    interp = sorted({t.split("-")[1] for t in target.tags} - {"none"})
    return f"{'/'.join(interp) or 'none'} wheels for platforms up to {best} (and pure-Python wheels)"
