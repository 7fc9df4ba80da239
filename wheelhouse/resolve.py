"""Resolve requirements for a TARGET interpreter: resolvelib does the search, this module adapts.

``resolve(requirements, target, source) -> Resolution``. The provider only adapts: candidates come
from the injected ``PackageSource`` (``find_matches`` reads index pages, never metadata), and
metadata is read only in ``get_dependencies`` (through a ``MetadataReader``: PEP 658 or zip range
requests, never a wheel body).

Rules, all judged for the target and never for the host:
- markers and extras with ``target.evaluate`` (the target's complete marker environment);
- ``Requires-Python`` with ``target.accepts_python``: from the index page when it says, and from
  the wheel's METADATA as a dependency on the virtual ``<python>`` (so a mismatch backtracks);
- wheels only, ranked by ``target.wheel_rank``; for each version the best-ranked wheel is the
  candidate, versions highest first (what uv picks);
- yanked files skipped unless pinned with ``==`` (PEP 592);
- pre-releases only when asked, when a specifier names one, or when a project has nothing else;
- constraints narrow versions and never add a package;
- toolchain groups: each member in the resolution depends on a virtual ``<toolchain:NAME>`` at its
  own major.minor (or exact version), so two members at different releases conflict DURING the
  search and resolvelib backtracks to a consistent set; when none exists, ``ToolchainSkew``.

While the resolver works, a thread pool walks ahead: index pages and metadata of each dependency's
likely pick are fetched in parallel, so the search itself mostly hits memory.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence as SequenceABC
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from resolvelib import AbstractProvider, BaseReporter, Resolver
from resolvelib.resolvers import ResolutionImpossible, ResolutionTooDeep

from .errors import UsageError, WhError
from .index import Distfile, PackageSource
from .metadata import MetadataReader
from .progress import NullReporter, Reporter
from .target import TargetProfile

__all__ = [
    "Pin",
    "Resolution",
    "resolve",
    "ResolveError",
    "InvalidRequirementError",
    "PackageNotFound",
    "NoCompatibleWheel",
    "NoMatchingVersion",
    "ResolutionConflict",
    "ToolchainSkew",
]

PYTHON = "<python>"
_TOOLCHAIN = "<toolchain:"
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


class ToolchainSkew(ResolveError):
    code = "toolchain-skew"

    def __init__(self, message: str, *, group: str, versions: Mapping[str, str], hint: str | None = None):
        super().__init__(message, hint=hint)
        self.group = group
        self.versions = dict(versions)


# --- results ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pin:
    """One resolved project: the version and the wheel chosen for the target."""

    name: str
    version: str
    distfile: Distfile
    parents: tuple[str, ...] = ()  # "name==version" of each dependent, or "(requested)"
    extras: tuple[str, ...] = ()
    requested_by: tuple[str, ...] = ()  # the requirement strings that pulled it in

    def to_json(self) -> dict[str, Any]:
        d = self.distfile
        return {
            "name": self.name,
            "version": self.version,
            "filename": d.filename,
            "url": d.url,
            "sha256": d.sha256,
            "size": d.size,
            "requires_python": d.requires_python,
            "yanked": d.yanked,
            "origin": d.origin,
            "extras": list(self.extras),
            "parents": list(self.parents),
            "requested_by": list(self.requested_by),
        }


@dataclass(frozen=True)
class Resolution:
    pins: tuple[Pin, ...]
    requirements: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()  # requested requirements whose markers exclude the target
    stats: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def pin(self, name: str) -> Pin | None:
        key = canonicalize_name(name)
        return next((p for p in self.pins if p.name == key), None)

    def versions(self) -> dict[str, str]:
        return {p.name: p.version for p in self.pins}

    def to_json(self) -> dict[str, Any]:
        return {
            "requirements": list(self.requirements),
            "constraints": list(self.constraints),
            "skipped": list(self.skipped),
            "pins": [p.to_json() for p in self.pins],
        }


# --- provider's values --------------------------------------------------------------------
@dataclass(frozen=True)
class _Req:
    kind: str  # "pkg" | "python" | "toolchain"
    name: str  # canonical project name, or the group name
    text: str  # as written, for messages
    specifier: SpecifierSet = field(default_factory=SpecifierSet)
    extras: frozenset[str] = frozenset()
    direct: Distfile | None = None

    @property
    def ident(self) -> str:
        if self.kind == "python":
            return PYTHON
        if self.kind == "toolchain":
            return f"{_TOOLCHAIN}{self.name}>"
        return _ident(self.name, self.extras)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class _Cand:
    kind: str
    name: str
    version: Version
    distfile: Distfile | None = None
    extras: frozenset[str] = frozenset()

    @property
    def ident(self) -> str:
        if self.kind == "python":
            return PYTHON
        if self.kind == "toolchain":
            return f"{_TOOLCHAIN}{self.name}>"
        return _ident(self.name, self.extras)

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"


def _ident(name: str, extras: Iterable[str]) -> str:
    ex = sorted(extras)
    return f"{name}[{','.join(ex)}]" if ex else name


def _explicit_prerelease(spec: SpecifierSet) -> bool:
    for s in spec:
        try:
            if Version(s.version.rstrip(".*")).is_prerelease:
                return True
        except InvalidVersion:
            continue
    return False


def _exact_pins(spec: SpecifierSet) -> set[Version]:
    out = set()
    for s in spec:
        if s.operator in ("==", "===") and not s.version.endswith(".*"):
            try:
                out.add(Version(s.version))
            except InvalidVersion:
                pass
    return out


def _spec_of(text: str | None) -> SpecifierSet | None:
    if not text:
        return None
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return None  # pip and uv ignore a malformed requires-python


@dataclass(frozen=True)
class _Group:
    name: str
    patterns: tuple[str, ...]
    exact: bool
    exceptions: frozenset[str]

    def has(self, name: str) -> bool:
        return name not in self.exceptions and any(fnmatch.fnmatchcase(name, p) for p in self.patterns)

    def release(self, version: Version) -> str:
        if self.exact:
            return str(version)
        rel = version.release + (0,)
        return f"{rel[0]}.{rel[1]}"


class _Provider(AbstractProvider):
    def __init__(self, target: TargetProfile, source: PackageSource, reader: MetadataReader, *,
                 constraints: Mapping[str, list[_Req]], groups: Sequence[_Group], prereleases: bool,
                 reporter: Reporter, pool: ThreadPoolExecutor | None):
        self.target = target
        self.source = source
        self.reader = reader
        self.constraints = constraints
        self.groups = groups
        self.prereleases = prereleases
        self.reporter = reporter
        self.pool = pool
        self.python = Version(target.python_full_version)
        self.order: dict[str, int] = {}
        self.parents: dict[str, list[tuple[str, str]]] = {}  # name -> [(requirement text, parent "name==ver")]
        self._lock = threading.Lock()
        self._prefetched: set[str] = set()
        self.root_texts: dict[str, set[str]] = {}
        self._installable_memo: dict[str, dict[Version, list[Distfile]]] = {}
        self._pins: Mapping[str, _Cand] | None = None
        self._deps_memo: dict[tuple, list[_Req]] = {}
        # One callable for the run, so the source memoizes pages filtered for this target.
        self._keep = self.installable_name

    # --- resolvelib API -------------------------------------------------------------------
    def identify(self, requirement_or_candidate):
        return requirement_or_candidate.ident

    def get_preference(self, identifier, resolutions, candidates, information, backtrack_causes):
        # The live pins of this round; find_matches uses them to treat pins as decisions (below).
        self._pins = resolutions
        infos = list(information[identifier])
        virtual = identifier.startswith("<")
        direct = any(i.requirement.direct is not None for i in infos)
        pinned = any(_exact_pins(i.requirement.specifier) for i in infos)
        in_causes = any(c.requirement.ident == identifier or (c.parent is not None and c.parent.ident == identifier) for c in backtrack_causes)
        order = self.order.setdefault(identifier, len(self.order))
        return (not virtual, not direct, not pinned, not in_causes, order, identifier)

    def find_matches(self, identifier, requirements, incompatibilities):
        reqs = list(requirements[identifier])
        bad = {c.version for c in incompatibilities[identifier]}
        if identifier == PYTHON:
            ok = all(r.specifier.contains(self.python, prereleases=True) for r in reqs)
            return [_Cand("python", "python", self.python)] if ok and self.python not in bad else []
        if identifier.startswith(_TOOLCHAIN):
            values = {Version(next(iter(r.specifier)).version.rstrip(".*")) for r in reqs}
            ok = [v for v in values if v not in bad and all(r.specifier.contains(v, prereleases=True) for r in reqs)]
            return [_Cand("toolchain", reqs[0].name, v) for v in sorted(ok, reverse=True)]
        cands = [c for c in self.candidates(reqs[0].name, reqs) if c.version not in bad]
        if len(cands) < 2:
            return cands
        return _Ordered(cands, self._decided_first)

    def _decided_first(self, cands: list[_Cand]):
        """Candidates whose dependencies agree with the current pins first, the others after.

        resolvelib re-pins a project when a later candidate needs another version of it; PubGrub
        (uv) treats a pin as a decision and moves on to the candidate's next version instead. This
        ordering gives uv's answer where several are valid (e.g. cuda-python, whose releases each
        need one cuda-bindings line, after cuda-bindings was decided) and still lets resolvelib
        re-pin when no version agrees. Lazy: resolvelib asks for one candidate at a time, and
        metadata is read only as far as it asks.
        """
        deferred = []
        for c in cands:
            if self._pins and not self._agrees_with_pins(c):
                deferred.append(c)
                continue
            yield c
        yield from deferred

    def _agrees_with_pins(self, cand: _Cand) -> bool:
        try:
            deps = self._deps(cand)
        except WhError:
            return True  # let get_dependencies raise it where resolvelib can report it
        pins = self._pins or {}
        for d in deps:
            if d.kind == "python":
                if not d.specifier.contains(self.python, prereleases=True):
                    return False
            elif d.kind == "pkg":
                pin = pins.get(d.name)
                if pin is not None and pin.kind == "pkg" and not self.is_satisfied_by(d, pin):
                    return False
        return True

    def is_satisfied_by(self, requirement, candidate):
        if requirement.kind != candidate.kind:
            return False
        if requirement.direct is not None:
            return candidate.distfile is not None and candidate.distfile.url == requirement.direct.url
        return requirement.specifier.contains(candidate.version, prereleases=True)

    def get_dependencies(self, candidate):
        if candidate.kind != "pkg":
            return []
        deps = list(self._deps(candidate))
        parent = str(candidate)
        if not candidate.extras:
            for g in self.groups:
                if g.has(candidate.name):
                    value = g.release(candidate.version)
                    spec = f"=={value}" if g.exact else f"=={value}.*"
                    deps.append(_Req("toolchain", g.name, f"{g.name}{spec}", SpecifierSet(spec)))
        with self._lock:
            for d in deps:
                if d.kind == "pkg":
                    self.parents.setdefault(d.name, []).append((d.text, parent))
                elif d.kind == "toolchain":
                    self.parents.setdefault(f"{_TOOLCHAIN}{d.name}>", []).append((d.text, parent))
        self._prefetch([d for d in deps if d.kind == "pkg"])
        return deps

    def _deps(self, candidate: _Cand) -> list[_Req]:
        """Requirements of a candidate from its METADATA, markers judged for the target."""
        key = (candidate.distfile.url, candidate.extras)
        hit = self._deps_memo.get(key)
        if hit is not None:
            return hit
        deps: list[_Req] = []
        if candidate.extras:
            base = candidate.distfile if candidate.distfile.origin == "direct" else None
            deps.append(_Req("pkg", candidate.name, f"{candidate.name}=={candidate.version}", SpecifierSet(f"=={candidate.version}"), direct=base))
        meta = self.reader.read(candidate.distfile)
        if meta.requires_python and not candidate.extras:
            spec = _spec_of(meta.requires_python)
            if spec is not None:
                deps.append(_Req("python", "python", f"Requires-Python {meta.requires_python}", spec))
        for line in meta.requires_dist:
            req = self._parse_dep(line, candidate)
            if req is not None:
                deps.append(req)
        self._deps_memo[key] = deps
        return deps

    # --- candidates -----------------------------------------------------------------------
    def candidates(self, name: str, reqs: Sequence[_Req]) -> list[_Cand]:
        """Best wheel of each allowed version, highest version first."""
        extras = reqs[0].extras if reqs else frozenset()
        directs = {r.direct.url: r.direct for r in reqs if r.direct is not None}
        if directs:
            if len(directs) > 1:
                return []
            d = next(iter(directs.values()))
            v = Version(d.version)
            specs = [r.specifier for r in reqs] + [c.specifier for c in self.constraints.get(name, ())]
            if self.target.wheel_rank(d.filename) is None or not all(s.contains(v, prereleases=True) for s in specs):
                return []
            return [_Cand("pkg", name, v, d, extras)]
        specs = [r.specifier for r in reqs] + [c.specifier for c in self.constraints.get(name, ())]
        by_version = self._installable(name)
        allow_pre = self.prereleases or any(_explicit_prerelease(s) for s in specs) or all(v.is_prerelease for v in by_version)
        pinned = set().union(*(_exact_pins(s) for s in specs)) if specs else set()
        out = []
        for v in sorted(by_version, reverse=True):
            if v.is_prerelease and not allow_pre:
                continue
            if not all(s.contains(v, prereleases=True) for s in specs):
                continue
            files = [f for f in by_version[v] if not f.yanked or v in pinned]
            if not files:
                continue
            best = min(files, key=lambda f: (self.rank(f.filename), _neg_build(f)))
            out.append(_Cand("pkg", name, v, best, extras))
        return out

    def _installable(self, name: str) -> dict[Version, list[Distfile]]:
        """Wheels of ``name`` the target can install (tags and index requires-python), by version."""
        hit = self._installable_memo.get(name)
        if hit is not None:
            return hit
        out: dict[Version, list[Distfile]] = {}
        specs: dict[str, bool] = {}
        versions: dict[str, Version | None] = {}
        for f in self.source.files(name, self._keep):
            if not f.is_wheel or self.rank(f.filename) is None:
                continue
            if f.requires_python:
                ok = specs.get(f.requires_python)
                if ok is None:
                    spec = _spec_of(f.requires_python)
                    ok = specs[f.requires_python] = spec is None or self.target.accepts_python(spec)
                if not ok:
                    continue
            v = versions.get(f.version, False)
            if v is False:
                try:
                    v = versions[f.version] = Version(f.version)
                except InvalidVersion:
                    v = versions[f.version] = None
            if v is None:
                continue
            out.setdefault(v, []).append(f)
        self._installable_memo[name] = out
        return out

    def installable_name(self, filename: str) -> bool:
        return filename.endswith(".whl") and self.rank(filename) is not None

    def rank(self, filename: str) -> int | None:
        """``target.wheel_rank`` without parsing the name: split the tag triple (PEP 425 sets)."""
        parts = filename[:-4].split("-")
        if len(parts) not in (5, 6):
            return self.target.wheel_rank(filename)
        best = None
        tag_rank = self.target.tag_rank
        for py in parts[-3].split("."):
            for abi in parts[-2].split("."):
                for plat in parts[-1].split("."):
                    r = tag_rank(f"{py}-{abi}-{plat}")
                    if r is not None and (best is None or r < best):
                        best = r
        return best

    def _parse_dep(self, line: str, parent: _Cand) -> _Req | None:
        try:
            r = Requirement(line)
        except InvalidRequirement:
            self.reporter.note(f"{parent}: ignoring malformed Requires-Dist {line!r}")
            return None
        if r.marker is not None:
            extras = sorted(parent.extras) or [None]
            if not any(self.target.evaluate(r.marker, e) for e in extras):
                return None
        elif parent.extras:
            return None  # unconditional dependencies come through the base candidate
        direct = self.source.direct(r.url) if r.url else None
        return _Req("pkg", canonicalize_name(r.name), line.split(";")[0].strip(), r.specifier,
                    frozenset(canonicalize_name(e) for e in r.extras), direct)

    # --- walking ahead ----------------------------------------------------------------------
    def _prefetch(self, reqs: Sequence[_Req]) -> None:
        if self.pool is None:
            return
        for r in reqs:
            if r.direct is not None:
                continue
            with self._lock:
                if r.name in self._prefetched:
                    continue
                self._prefetched.add(r.name)
            try:
                self.pool.submit(self._warm, r)
            except RuntimeError:  # pool shut down: the search is over
                return

    def _warm(self, req: _Req) -> None:
        try:
            cands = self.candidates(req.name, [req])
            if not cands:
                return
            best = cands[0]
            meta = self.reader.read(best.distfile)
            nxt = []
            for line in meta.requires_dist:
                r = self._parse_dep(line, _Cand("pkg", best.name, best.version, best.distfile, req.extras))
                if r is not None:
                    nxt.append(r)
            self._prefetch(nxt)
        except Exception:  # a guess that failed; the resolver will ask again and report it
            return


class _Ordered(SequenceABC):
    """Candidates whose order is decided each time resolvelib walks them (at pin time)."""

    def __init__(self, items: list, order):
        self._items, self._order = items, order

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i):
        return self._items[i]

    def __iter__(self):
        return iter(self._order(self._items))


def _neg_build(f: Distfile) -> tuple:
    b = f.build_tag
    return (-b[0], b[1]) if b else (0, "")


# --- the public function ----------------------------------------------------------------------
class _ProgressReporter(BaseReporter):
    def __init__(self, reporter: Reporter):
        self.reporter = reporter

    def pinning(self, candidate):
        if candidate.kind == "pkg" and not candidate.extras:
            self.reporter.advance("resolve", 1)


def _parse_root(text: str, source: PackageSource) -> _Req:
    raw = text.strip()
    named = "@" in raw.split("/")[0] or " @ " in raw  # "name @ url" is a PEP 508 direct reference
    if not named and (raw.endswith(".whl") or raw.startswith(("file:", "http://", "https://", "./", "../", "/", "~"))):
        d = source.direct(raw)
        return _Req("pkg", d.name, raw, SpecifierSet(), direct=d)
    try:
        r = Requirement(raw)
    except InvalidRequirement as exc:
        raise InvalidRequirementError(f"requirement {raw!r} is not valid: {exc}", hint="write it like `name`, `name==1.2`, `name[extra]>=1`, or a path to a .whl") from exc
    direct = source.direct(r.url) if r.url else None
    if direct is not None and direct.name != canonicalize_name(r.name):
        raise InvalidRequirementError(f"requirement {raw!r} names {r.name} but the file is {direct.name}", hint="fix the name before the @")
    return _Req("pkg", canonicalize_name(r.name), raw, r.specifier, frozenset(canonicalize_name(e) for e in r.extras), direct)


def resolve(
    requirements: Sequence[str],
    target: TargetProfile,
    source: PackageSource,
    *,
    constraints: Sequence[str] = (),
    toolchains: Sequence[Any] = (),
    prereleases: bool = False,
    reporter: Reporter | None = None,
    metadata: MetadataReader | None = None,
    jobs: int = 16,
    max_rounds: int = 20000,
) -> Resolution:
    """Pin the closure of ``requirements`` for ``target`` (see the module docstring for the rules).

    ``toolchains`` are ``manifest.ToolchainGroup`` values (name, packages, exact, exceptions);
    package names may use shell wildcards (``nvidia-cuda-*``). Raises a ResolveError subclass
    that says what to change when no consistent set exists.
    """
    reporter = reporter or NullReporter()
    reader = metadata or MetadataReader(source.client)
    roots: list[_Req] = []
    skipped: list[str] = []
    for text in requirements:
        if not text.strip():
            continue
        req = _parse_root(text, source)
        try:
            marker = Requirement(text).marker
        except InvalidRequirement:
            marker = None
        if marker is not None and not target.evaluate(marker):
            skipped.append(text)
            continue
        roots.append(req)
    cons: dict[str, list[_Req]] = {}
    for text in constraints:
        try:
            r = Requirement(text)
        except InvalidRequirement as exc:
            raise InvalidRequirementError(f"constraint {text!r} is not valid: {exc}", hint="write it like `name<2` or `name==1.2`") from exc
        if r.url:
            raise InvalidRequirementError(f"constraint {text!r} names a URL", hint="constraints restrict versions: `name==1.2`")
        if r.marker is not None and not target.evaluate(r.marker):
            continue
        cons.setdefault(canonicalize_name(r.name), []).append(_Req("pkg", canonicalize_name(r.name), f"{text} (constraint)", r.specifier))
    groups = [
        _Group(g.name, tuple(canonicalize_name(p) for p in g.packages), bool(g.exact), frozenset(canonicalize_name(e) for e in g.exceptions))
        for g in toolchains
    ]
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="wh-prefetch") if jobs > 1 else None
    provider = _Provider(target, source, reader, constraints=cons, groups=groups, prereleases=prereleases, reporter=reporter, pool=pool)
    for r in roots:
        provider.root_texts.setdefault(r.name, set()).add(r.text)
    reporter.start("resolve", None, "packages")
    try:
        provider._prefetch(roots)
        result = Resolver(provider, _ProgressReporter(reporter)).resolve(roots, max_rounds=max_rounds)
    except ResolutionImpossible as exc:
        reporter.finish("resolve", "failed")
        raise _explain(exc, provider, target, source, roots) from None
    except ResolutionTooDeep as exc:
        reporter.finish("resolve", "failed")
        raise ResolutionConflict(
            f"gave up after {exc.round_count} resolution rounds",
            hint="pin the packages that backtrack the most (`name==version`) or add constraints (-c)",
        ) from None
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    pins = _pins(result, provider)
    reporter.finish("resolve", f"{len(pins)} packages")
    return Resolution(
        pins=pins,
        requirements=tuple(requirements),
        constraints=tuple(constraints),
        skipped=tuple(skipped),
        stats={"requests": source.client.requests, **reader.stats},
    )


def _pins(result, provider: _Provider) -> tuple[Pin, ...]:
    by_name: dict[str, dict[str, Any]] = {}
    for ident, cand in result.mapping.items():
        if cand.kind != "pkg":
            continue
        entry = by_name.setdefault(cand.name, {"cand": cand, "extras": set(), "parents": set()})
        entry["extras"] |= set(cand.extras)
        if not cand.extras:
            entry["cand"] = cand
        for parent in result.graph.iter_parents(ident):
            if parent is None:
                entry["parents"].add(ROOT)
            else:
                pc = result.mapping[parent]
                if pc.name != cand.name:
                    entry["parents"].add(f"{pc.name}=={pc.version}")
    pins = []
    for name in sorted(by_name):
        e = by_name[name]
        c = e["cand"]
        parents = e["parents"]
        requested = sorted({text for text, p in provider.parents.get(name, ()) if p in parents} | provider.root_texts.get(name, set()))
        pins.append(Pin(name, str(c.version), c.distfile, tuple(sorted(parents)), tuple(sorted(e["extras"])), tuple(requested)))
    return tuple(pins)


# --- explaining failure ------------------------------------------------------------------------
def _chain(provider: _Provider, name: str, limit: int = 6) -> str:
    """"b==2 <- a==1 <- (requested)": who pulled ``name`` in, following the first recorded parent."""
    parts: list[str] = []
    seen = {name}
    cur = name
    while len(parts) < limit:
        if cur in provider.root_texts:
            parts.append(ROOT)
            break
        recs = provider.parents.get(cur)
        if not recs:
            break
        parent = recs[0][1]
        parts.append(parent)
        cur = parent.split("==")[0]
        if cur in seen:
            break
        seen.add(cur)
    return " <- ".join(parts) or ROOT


def _explain(exc: ResolutionImpossible, provider: _Provider, target: TargetProfile, source: PackageSource, roots) -> WhError:
    causes = list(exc.causes)
    tool = [c for c in causes if c.requirement.kind == "toolchain"]
    if tool:
        group = tool[0].requirement.name
        versions: dict[str, str] = {}
        lines = []
        for c in tool:
            if c.parent is None:
                continue
            versions[c.parent.name] = str(c.parent.version)
            lines.append(f"  {c.parent.name} {c.parent.version} <- {_chain(provider, c.parent.name)}")
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
        who = ROOT if c.parent is None else f"{c.parent} <- {_chain(provider, c.parent.name)}"
        lines.append(f"  {c.requirement.text} <- {who}")
    names = sorted({c.requirement.name for c in causes})
    return ResolutionConflict(
        f"conflicting requirements on {', '.join(names)}:\n" + "\n".join(lines),
        hint="loosen or change one of these requirements (or its parent's version), then run again",
    )


def _explain_empty(req: _Req, parent, provider: _Provider, target: TargetProfile, source: PackageSource) -> WhError:
    who = "" if parent is None else f" (required by {parent} <- {_chain(provider, parent.name)})"
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
    wheels = [f for f in in_range if f.is_wheel]
    if not wheels:
        return NoCompatibleWheel(
            f"{req.name} publishes only source distributions for {' and '.join(texts)}{who}; wh stages wheels only",
            name=req.name,
            hint=f"build a wheel for the target (`wh build` or `pip wheel {req.name}`) and pass it with --find-links",
        )
    tagged = [f for f in wheels if target.wheel_rank(f.filename) is not None]
    if not tagged:
        newest = max((Version(f.version) for f in wheels), default=None)
        published = sorted({t for f in wheels if Version(f.version) == newest for t in f.tags}, key=lambda t: (target.machine not in t, t))
        shown = ", ".join(published[:8]) + (" ..." if len(published) > 8 else "")
        return NoCompatibleWheel(
            f"{req.name} has no wheel for the target {target.describe()}{who}: {req.name} {newest} publishes {shown}; "
            f"the target accepts {_accepts(target)}",
            name=req.name, published=published,
            hint=f"pin a version that has a wheel for the target (`{req.name}<{newest}`), stage for another target "
            "(--platform / --target), or build the wheel yourself (`wh build`)",
        )
    py_ok = [f for f in tagged if (s := _spec_of(f.requires_python)) is None or target.accepts_python(s)]
    if not py_ok:
        f = max(tagged, key=lambda f: Version(f.version))
        return NoMatchingVersion(
            f"every {req.name} wheel for {' and '.join(texts)} needs another Python ({f.filename}: Requires-Python {f.requires_python}); "
            f"the target has {target.python_full_version}{who}",
            hint=f"pin an older {req.name}, or stage for another --python-version",
        )
    if all(f.yanked for f in py_ok):
        f = py_ok[0]
        return NoMatchingVersion(
            f"every matching {req.name} file is yanked ({f.filename}: {f.yanked_reason or 'no reason given'}){who}",
            hint=f"pin it exactly (`{req.name}=={f.version}`) to use a yanked release anyway",
        )
    if all(Version(f.version).is_prerelease for f in py_ok):
        return NoMatchingVersion(
            f"only pre-releases of {req.name} match {' and '.join(texts)}{who}",
            hint="pass --pre, or name the pre-release in the requirement",
        )
    return NoMatchingVersion(f"no installable version of {req.name} for {' and '.join(texts)}{who}", hint="loosen the requirement")


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
