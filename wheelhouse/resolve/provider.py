"""The resolvelib provider: it only adapts, so the search itself stays resolvelib's.

Candidates come from a ``CandidateFinder`` (``find_matches`` reads index pages, never metadata),
and metadata is read only in ``get_dependencies`` (through a ``MetadataReader``: PEP 658 or zip
range requests, never a wheel body). Markers and extras are judged with ``target.evaluate`` (the
target's complete marker environment); a wheel's ``Requires-Python`` becomes a dependency on the
virtual ``<python>`` (so a mismatch backtracks); toolchain members depend on their group's
virtual project (``wheelhouse.toolchain``).

While the resolver works, a thread pool walks ahead: index pages and metadata of each dependency's
likely pick are fetched in parallel, so the search itself mostly hits memory.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence as SequenceABC
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version
from resolvelib import AbstractProvider, BaseReporter

from .candidates import IMAGE, PYTHON, Cand, CandidateFinder, Req, exact_pins, spec_of
from .overrides import Rewrites
from wheelhouse.errors import WhError
from wheelhouse.index import PackageSource
from wheelhouse.index.metadata import MetadataReader
from wheelhouse.progress import Reporter
from wheelhouse.target import TargetProfile
from .toolchain import TOOLCHAIN_PREFIX, ToolchainRule, toolchain_ident, toolchain_versions

__all__ = ["Provider", "ProgressReporter"]


_READ_AHEAD = 4  # candidates whose metadata is read ahead per disagreeing one (see _decided_first)
# A project in this many conflicts is "hot" (uv's conflict prioritisation uses 5 too): it is decided
# before the others, and a candidate whose requirement on it admits only its releases that already
# failed is tried last (see _decided_first).
_HOT = 5


class Provider(AbstractProvider):
    """resolvelib's provider for one resolution for ``target``."""

    def __init__(self, target: TargetProfile, source: PackageSource, reader: MetadataReader, *,
                 constraints: Mapping[str, list[Req]], groups: Sequence[ToolchainRule], prereleases: bool,
                 reporter: Reporter, pool: ThreadPoolExecutor | None, provided: Mapping[str, str] | None = None,
                 rewrites: Rewrites | None = None, allowed_yanks: Mapping[str, frozenset[Version]] | None = None,
                 preferred: Mapping[str, Version] | None = None):
        self.target = target
        self.preferred = dict(preferred or {})  # name -> a version tried first (a second search, ``resolve``)
        self.rewrites = rewrites or Rewrites()  # the stack's overrides and exclusions
        self.source = source
        self.reader = reader
        self.constraints = constraints
        self.groups = groups
        self.prereleases = prereleases
        self.reporter = reporter
        self.pool = pool
        self.finder = CandidateFinder(target, source, constraints=constraints, prereleases=prereleases, provided=provided,
                                      allowed_yanks=allowed_yanks)
        self.unknown_deps: set[str] = set()  # "name==version" of image versions whose metadata no index has
        self.undeclared_extras: dict[str, tuple[str, ...]] = {}  # "name==version" -> extras asked that it does not declare
        self.invalid_requires_python: dict[str, str] = {}  # filename -> the METADATA Requires-Python packaging refuses
        self.python = Version(target.python_full_version)
        self.order: dict[str, int] = {}
        # name -> {(requirement text, parent "name==ver"): (the requirement, the parent)}, in the order
        # first seen. A dict, not a list: resolvelib asks a candidate's dependencies each time it pins
        # it again, and the repeats made reading the pins' parents a tenth of a cold vllm resolve.
        # explain follows the requirement values (which versions each parent admits).
        self.parents: dict[str, dict[tuple[str, str], tuple[Req, Cand]]] = {}
        self._lock = threading.Lock()
        self._satisfies: dict[int, tuple[SpecifierSet, dict[Version, bool]]] = {}  # id(specifier) -> (it, version -> contains)
        self._pair: dict[tuple[int, int], tuple[Req, Cand, bool]] = {}  # (id(req), id(cand)) -> (req, cand, verdict)
        self._exact: dict[int, tuple[SpecifierSet, bool]] = {}  # id(specifier) -> (it, pins with ==)
        self._prefetched: set[str] = set()
        self._read_ahead_urls: set[str] = set()
        self.root_texts: dict[str, set[str]] = {}
        self._pins: Mapping[str, Cand] | None = None
        self._deps_memo: dict[tuple, list[Req]] = {}
        self._requirements: dict[str, Requirement] = {}  # Requires-Dist line -> parsed
        # (Requires-Dist line, the parent's extras) -> its marker's verdict for the target: the same
        # lines recur across a project's releases, and packaging's marker evaluation (a new marker
        # environment each call) was ~8% of a cold vllm resolve's Python time
        self._marker_ok: dict[tuple[str, frozenset[str]], bool] = {}
        # Filled by ProgressReporter as resolvelib backtracks: project -> conflicts it took part in, and
        # the candidates ("name", version) that were a conflict's parent.
        self.conflicts: Counter[str] = Counter()
        self.failed: set[tuple[str, Version]] = set()
        self.failed_names: set[str] = set()  # the names in ``failed``

    # --- resolvelib API -------------------------------------------------------------------
    def identify(self, requirement_or_candidate):
        return requirement_or_candidate.ident

    def get_preference(self, identifier, resolutions, candidates, information, backtrack_causes):
        # The live pins of this round; find_matches uses them to treat pins as decisions (below).
        self._pins = resolutions
        return self._preference(identifier, information, _cause_idents(backtrack_causes))

    def narrow_requirement_selection(self, identifiers, resolutions, candidates, information, backtrack_causes):
        """The one identifier resolvelib would pick with ``get_preference`` (resolvelib >= 1.1 asks this
        first, and skips its ``min`` over ``get_preference`` when one is left): the same key, in the same
        order, computed here in one pass (the causes once a round, no mapping views made per name)."""
        self._pins = resolutions
        causes = _cause_idents(backtrack_causes)
        return [min(identifiers, key=lambda ident: self._preference(ident, information, causes))]

    def _preference(self, identifier, information, causes: frozenset[str]):
        virtual = identifier.startswith("<")
        direct = pinned = False
        for i in information[identifier]:
            req = i.requirement
            direct = direct or req.direct is not None
            pinned = pinned or self._pins_exactly(req.specifier)
        hot = self.conflicts.get(identifier.split("[")[0], 0) >= _HOT
        order = self.order.setdefault(identifier, len(self.order))
        return (not virtual, not direct, not pinned, identifier not in causes, not hot, order, identifier)

    def find_matches(self, identifier, requirements, incompatibilities):
        reqs = list(requirements[identifier])
        bad = {c.version for c in incompatibilities[identifier]}
        if identifier == PYTHON:
            ok = all(r.specifier.contains(self.python, prereleases=True) for r in reqs)
            return [Cand("python", "python", self.python)] if ok and self.python not in bad else []
        if identifier.startswith(TOOLCHAIN_PREFIX):
            return [Cand("toolchain", reqs[0].name, v) for v in toolchain_versions([r.specifier for r in reqs], bad)]
        cands = [c for c in self.candidates(reqs[0].name, reqs) if c.version not in bad]
        pref = self.preferred.get(reqs[0].name)
        if pref is not None:
            cands.sort(key=lambda c: c.version != pref)  # stable: the rest keep their order
        if len(cands) < 2:
            return cands
        return _Ordered(cands, self._decided_first)

    def _decided_first(self, cands: list[Cand]):
        """Candidates whose dependencies agree with the current pins first, the others after.

        resolvelib re-pins a project when a later candidate needs another version of it; PubGrub
        (uv) treats a pin as a decision and moves on to the candidate's next version instead. This
        ordering gives uv's answer where several are valid (e.g. cuda-python, whose releases each
        need one cuda-bindings line, after cuda-bindings was decided) and still lets resolvelib
        re-pin when no version agrees. Lazy: resolvelib asks for one candidate at a time, and
        metadata is read only as far as it asks.
        """
        deferred, doomed = [], []
        hot = any(n >= _HOT for n in self.conflicts.values())
        for i, c in enumerate(cands):
            if hot and self._only_failed(c):
                doomed.append(c)
                self._read_ahead(cands[i + 1:i + 1 + _READ_AHEAD * len(doomed)])  # the walk goes on: as below
                continue
            if self._pins and not self._agrees_with_pins(c):
                deferred.append(c)
                # Walking past a disagreeing version reads the next one's metadata: read a few
                # ahead in the pool, so a long walk (cuda-python: ~20 releases) is not ~20 serial
                # round trips on the resolver's thread. Only once one disagreed: most agree at once.
                self._read_ahead(cands[i + 1:i + 1 + _READ_AHEAD * len(deferred)])
                continue
            yield c
        yield from deferred
        yield from doomed

    def _only_failed(self, cand: Cand) -> bool:
        """Whether a requirement of ``cand`` admits only releases that already failed (or are doomed so).

        uv's answer to a package that backtracks many times: try the releases of the package that
        requests it whose requirements exclude the conflict. resolvelib names only the innermost
        conflict (np>=2 <- cv==2.2), so a candidate found doomed joins ``failed`` too: its own
        requesters (mid needs cv>=2, top needs mid>=2) are then found doomed when they are ordered.
        Only an ordering (the doomed are tried last, not dropped), so the search stays complete.
        """
        key = (cand.name, cand.version)
        if key in self.failed:
            return True
        try:
            deps = self._deps(cand)
        except WhError:
            return False
        names = self.failed_names
        for d in deps:
            if d.kind != "pkg" or d.direct is not None or d.name not in names:
                continue
            admitted = self.candidates(d.name, [d])
            if all((d.name, c.version) in self.failed for c in admitted):
                self.failed.add(key)
                names.add(cand.name)
                return True
        return False

    def _read_ahead(self, cands: Sequence[Cand]) -> None:
        if self.pool is None:
            return
        for c in cands:
            d = c.distfile
            if d is None or d.origin == IMAGE:
                continue
            if not self._submit_once(self._read_ahead_urls, d.url, self._quiet_read, d):
                return

    def _submit_once(self, seen: set, key, fn, arg) -> bool:
        """Run ``fn(arg)`` in the pool unless ``key`` was submitted before; False once the pool is shut down
        (the search is over)."""
        with self._lock:
            if key in seen:
                return True
            seen.add(key)
        try:
            self.pool.submit(fn, arg)
        except RuntimeError:
            return False
        return True

    def _quiet_read(self, d) -> None:
        try:
            self.reader.read(d)
        except Exception:  # the resolver reads it again and reports it
            return

    def _agrees_with_pins(self, cand: Cand) -> bool:
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

    def _pins_exactly(self, spec: SpecifierSet) -> bool:
        """Whether ``spec`` pins a version with == (asked ~20k times a resolve: kept by identity)."""
        hit = self._exact.get(id(spec))
        if hit is None or hit[0] is not spec:
            hit = self._exact[id(spec)] = (spec, bool(exact_pins(spec)))
        return hit[1]

    def is_satisfied_by(self, requirement, candidate):
        # resolvelib asks the same (requirement, candidate) pair over and over (138k calls, a few
        # thousand pairs on the vllm closure): answered by the pair's identity first (the entry
        # holds both, so their ids are not reused while it lives); Version's hash is Python code.
        hit = self._pair.get((id(requirement), id(candidate)))
        if hit is not None and hit[0] is requirement and hit[1] is candidate:
            return hit[2]
        found = self._satisfied(requirement, candidate)
        self._pair[(id(requirement), id(candidate))] = (requirement, candidate, found)
        return found

    def _satisfied(self, requirement, candidate) -> bool:
        if requirement.kind != candidate.kind:
            return False
        if requirement.direct is not None:
            return candidate.distfile is not None and candidate.distfile.url == requirement.direct.url
        # resolvelib asks the same pair ~100k times on a big closure. Keyed by the specifier's
        # identity (hashing a SpecifierSet re-canonicalizes each of its clauses); the entry holds
        # the specifier, so its id is not reused while the entry lives.
        spec = requirement.specifier
        entry = self._satisfies.get(id(spec))
        if entry is None or entry[0] is not spec:
            entry = self._satisfies[id(spec)] = (spec, {})
        seen = entry[1]
        found = seen.get(candidate.version)
        if found is None:
            found = seen[candidate.version] = spec.contains(candidate.version, prereleases=True)
        return found

    def get_dependencies(self, candidate):
        if candidate.kind != "pkg":
            return []
        deps = list(self._deps(candidate))
        parent = str(candidate)
        if not candidate.extras:
            for g in self.groups:
                if g.has(candidate.name):
                    spec = g.specifier(candidate.version)
                    deps.append(Req("toolchain", g.name, f"{g.name}{spec}", SpecifierSet(spec)))
        with self._lock:
            for d in deps:
                if d.kind == "pkg":
                    self.parents.setdefault(d.name, {})[(d.text, parent)] = (d, candidate)
                elif d.kind == "toolchain":
                    self.parents.setdefault(toolchain_ident(d.name), {})[(d.text, parent)] = (d, candidate)
        self.prefetch([d for d in deps if d.kind == "pkg"])
        return deps

    def _deps(self, candidate: Cand) -> list[Req]:
        """Requirements of a candidate from its METADATA, markers judged for the target.

        The image's version (``candidate.provided``) is installed there: its Requires-Python is not
        asked again, and when no index has its metadata it is taken to need nothing more (recorded
        in ``unknown_deps`` so the stage says so)."""
        key = (candidate.distfile.url, candidate.extras, candidate.provided)
        hit = self._deps_memo.get(key)
        if hit is not None:
            return hit
        deps: list[Req] = []
        if candidate.extras:
            base = candidate.distfile if candidate.distfile.origin == "direct" else None
            deps.append(Req("pkg", candidate.name, f"{candidate.name}=={candidate.version}", SpecifierSet(f"=={candidate.version}"), direct=base))
        if candidate.distfile.origin == IMAGE:
            with self._lock:
                self.unknown_deps.add(str(candidate))
            self._deps_memo[key] = deps
            return deps
        meta = self.reader.read(candidate.distfile)
        if candidate.extras:
            declared = {canonicalize_name(e) for e in meta.provides_extra}
            if candidate.extras - declared:
                with self._lock:
                    self.undeclared_extras[str(candidate)] = tuple(sorted(candidate.extras - declared))
        if meta.requires_python and not candidate.extras and candidate.provided is None:
            spec = spec_of(meta.requires_python)
            if spec is None:
                with self._lock:
                    self.invalid_requires_python[candidate.distfile.filename] = meta.requires_python
            else:
                deps.append(Req("python", "python", f"Requires-Python {meta.requires_python}", spec))
                if not spec.contains(self.python, prereleases=True):
                    with self._lock:
                        self.finder.python_refused.setdefault(candidate.name, {})[candidate.version] = meta.requires_python
        for line in meta.requires_dist:
            req = self._parse_dep(line, candidate)
            if req is not None:
                deps += self.rewrites.apply(req, str(candidate)) if self.rewrites else [req]
        self._deps_memo[key] = deps
        return deps

    # --- candidates -----------------------------------------------------------------------
    def candidates(self, name: str, reqs: Sequence[Req]) -> list[Cand]:
        """Best wheel of each allowed version, highest version first (``CandidateFinder``)."""
        return self.finder.candidates(name, reqs)

    def _parse_dep(self, line: str, parent: Cand) -> Req | None:
        # The same lines recur across a project's versions (packaging's parser is ~a tenth of a
        # cold resolve's worker CPU): parsed once per resolution. Requirement is not mutated here.
        r = self._requirements.get(line)
        if r is None:
            try:
                r = self._requirements[line] = Requirement(line)
            except InvalidRequirement:
                self.reporter.note(f"{parent}: ignoring malformed Requires-Dist {line!r}")
                return None
        if r.marker is not None:
            ok = self._marker_ok.get((line, parent.extras))
            if ok is None:
                extras = sorted(parent.extras) or [None]
                ok = self._marker_ok[(line, parent.extras)] = any(self.target.evaluate(r.marker, e) for e in extras)
            if not ok:
                return None
        elif parent.extras:
            return None  # unconditional dependencies come through the base candidate
        direct = self.source.direct(r.url) if r.url else None
        return Req("pkg", canonicalize_name(r.name), line.split(";")[0].strip(), r.specifier,
                   frozenset(canonicalize_name(e) for e in r.extras), direct)

    # --- walking ahead ----------------------------------------------------------------------
    def prefetch(self, reqs: Sequence[Req]) -> None:
        """Fetch index pages and likely metadata of ``reqs`` (and onwards) in the pool."""
        if self.pool is None:
            return
        for r in reqs:
            if r.direct is not None:
                continue
            if not self._submit_once(self._prefetched, r.name, self._warm, r):
                return

    def _warm(self, req: Req) -> None:
        try:
            cands = self.candidates(req.name, [req])
            if not cands:
                return
            best = cands[0]
            if best.distfile.origin == IMAGE:
                return
            meta = self.reader.read(best.distfile)
            nxt = []
            for line in meta.requires_dist:
                r = self._parse_dep(line, Cand("pkg", best.name, best.version, best.distfile, req.extras))
                if r is not None and not self.rewrites.touches(r.name):  # (what replaces it is walked as asked)
                    nxt.append(r)
            self.prefetch(nxt)
        except Exception:  # a guess that failed; the resolver will ask again and report it
            return


def _cause_idents(backtrack_causes) -> frozenset[str]:
    """The identifiers a round's backtrack causes name (each requirement's and its parent's)."""
    return frozenset(ident for c in backtrack_causes
                     for ident in (c.requirement.ident, c.parent.ident if c.parent is not None else None) if ident is not None)


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


class ProgressReporter(BaseReporter):
    """resolvelib's reporter: one step of wh's ``resolve`` progress per pinned project, and a count of the
    conflicts each project took part in (``backtracks``: what a search that gives up names)."""

    def __init__(self, reporter: Reporter, provider: Provider | None = None):
        self.reporter = reporter
        self.provider = provider
        self.backtracks: Counter[str] = provider.conflicts if provider is not None else Counter()

    def resolving_conflicts(self, causes):
        names = set()
        for c in causes:
            if c.requirement.kind == "pkg":
                names.add(c.requirement.name)
            if c.parent is not None and c.parent.kind == "pkg":
                names.add(c.parent.name)
                if self.provider is not None:
                    self.provider.failed.add((c.parent.name, c.parent.version))
                    self.provider.failed_names.add(c.parent.name)
        self.backtracks.update(names)

    def pinning(self, candidate):
        if candidate.kind == "pkg" and not candidate.extras:
            self.reporter.advance("resolve", 1)
