"""What the resolver chooses between: its requirement and candidate values, and the wheels of a
project that a TARGET can install.

``CandidateFinder.candidates(name, requirements)`` lists the best-ranked wheel of each allowed
version, highest version first (what uv picks). It reads index pages through the injected
``PackageSource`` and never metadata. Rules, all judged for the target and never for the host:
wheels only, ranked by ``target.wheel_rank``; ``Requires-Python`` from the index page with
``target.accepts_python``; a yanked file only where the user's own requirements, constraints or
overrides pin its version with a single ``==``/``===`` clause (PEP 592 lets an exact pin select one;
uv's rule: a dependency's ``==`` does not); pre-releases, unless ``--pre``, are listed after every
final release the specifiers admit (uv's default ``if-necessary``: a final release is preferred even
where a specifier names a pre-release, ``>=4.0.0a0``; a pre-release is picked only once every
admitted final release failed, or none exists); constraints narrow versions and never add a package.

Installed-preference (what pip does for installed packages): a distribution the target's image
provides (``TargetProfile.provided``) is offered FIRST, at the image's version, whenever every
specifier and constraint admits that version; the index's versions follow, highest first. The
image's version needs no wheel for the target (the image has it installed): its candidate carries
the target's wheel of that version when the index has one, else any wheel of it (for its metadata
only), else a stand-in with no file (``origin == IMAGE``: no dependencies known).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelhouse.index.distfile import NORMAL_VERSION, Distfile
from wheelhouse.index import PackageSource
from wheelhouse.target import TargetProfile
from .toolchain import toolchain_ident

__all__ = ["PYTHON", "IMAGE", "SDIST_SUFFIXES", "Req", "Cand", "CandidateFinder", "exact_pins", "single_pin", "spec_of"]

PYTHON = "<python>"
IMAGE = "image"  # Distfile.origin of a provided version the index does not publish at all


def _ident(kind: str, name: str, extras: Iterable[str]) -> str:
    """resolvelib's identifier: the virtual ``<python>`` / ``<toolchain:NAME>``, or ``name[extras]``."""
    if kind == "python":
        return PYTHON
    if kind == "toolchain":
        return toolchain_ident(name)
    ex = sorted(extras)
    return f"{name}[{','.join(ex)}]" if ex else name


@dataclass(frozen=True)
class Req:
    """A requirement as the resolver sees it: on a package, on the target's Python, or on a toolchain group."""

    kind: str  # "pkg" | "python" | "toolchain"
    name: str  # canonical project name, or the group name
    text: str  # as written, for messages
    specifier: SpecifierSet = field(default_factory=SpecifierSet)
    extras: frozenset[str] = frozenset()
    direct: Distfile | None = None

    @property
    def ident(self) -> str:
        return _ident(self.kind, self.name, self.extras)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Cand:
    """A candidate: one version (and, for a package, its chosen wheel)."""

    kind: str
    name: str
    version: Version
    distfile: Distfile | None = None
    extras: frozenset[str] = frozenset()
    provided: str | None = None  # the image's version string, as captured: nothing to fetch

    @property
    def ident(self) -> str:
        return _ident(self.kind, self.name, self.extras)

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"


def exact_pins(spec: SpecifierSet) -> set[Version]:
    """The versions ``spec`` pins with ``==`` / ``===`` (not ``==X.*``)."""
    out = set()
    for s in spec:
        if s.operator in ("==", "===") and not s.version.endswith(".*"):
            try:
                out.add(Version(s.version))
            except InvalidVersion:
                pass
    return out


def single_pin(spec: SpecifierSet) -> Version | None:
    """The version ``spec`` pins when it is one ``==``/``===`` clause and nothing else (uv's rule for the
    pins that may select a yanked release: ``lib==1.1`` does, ``lib==1.1,>=1`` does not)."""
    clauses = list(spec)
    if len(clauses) != 1:
        return None
    pins = exact_pins(spec)
    return next(iter(pins)) if pins else None


def spec_of(text: str | None) -> SpecifierSet | None:
    """A Requires-Python value as a SpecifierSet; None when absent or malformed."""
    if not text:
        return None
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return None  # pip and uv ignore a malformed requires-python


def _same_version(text: str, v: Version) -> bool:
    try:
        return Version(text) == v
    except InvalidVersion:
        return False


def _neg_build(f: Distfile) -> tuple:
    b = f.build_tag
    return (-b[0], b[1]) if b else (0, "")


SDIST_SUFFIXES = (".tar.gz", ".zip", ".tar.bz2", ".tar.xz", ".tgz")


class _TagFilter:
    """``keep(filename)`` for ``PackageSource.files``: the wheels the target's tags accept, and the
    source distributions (the resolution's caveats name releases that have only those; ``many``, which
    sees a whole page, leaves out those of releases with a kept wheel). Its ``cache_key`` names the
    tag set, so a page filtered for this target is stored pre-parsed."""

    def __init__(self, target: TargetProfile):
        self._rank = target.wheel_rank
        tags = hashlib.sha256("\n".join(sorted(target.tags)).encode()).hexdigest()[:32]
        self.cache_key = "tags+sdist-only-releases:" + tags
        # A page of a big project lists ~100k files sharing a few hundred tag triples: each triple
        # is judged once (a cold vllm resolve asks ~160k times). Keyed by the text after the
        # version, so the answer is wheel_rank's for any name.
        self._seen: dict[str, bool] = {}
        # A name's last field (its platform tags and ".whl") -> whether any of those platforms is one of
        # the target's: when none is, no tag triple with that field can be accepted (most names of a
        # big page: other systems and architectures), judged with one cut instead of three.
        self._platforms = frozenset(t.rpartition("-")[2] for t in target.tags)
        self._last_seen: dict[str, bool] = {}

    def __call__(self, filename: str) -> bool:
        if not filename.endswith(".whl") or filename.count("-") not in (4, 5):  # PEP 427: 5 or 6 fields
            return filename.endswith(SDIST_SUFFIXES)
        tags = filename[filename.rfind("-", 0, filename.rfind("-", 0, filename.rfind("-"))) + 1:]  # py-abi-plat.whl
        ok = self._seen.get(tags)
        if ok is None:
            ok = self._seen[tags] = self._rank(f"x-0-{tags}") is not None
        return ok

    def many(self, filenames: Sequence[str]) -> list[bool]:
        """``[self(f) for f in filenames]`` for a page's ~100k names at once, less the source
        distributions of releases the page has a kept wheel of (the version text as the page's
        Distfiles carry it: a wheel's second field, an sdist's version when already in normal
        form). Those are the sdists the caveats skip, ~40% of what a cold vllm resolve kept.

        Each name's last three dash-separated fields (the tag triple, as ``__call__`` cuts them) are
        judged once per distinct text; only a name whose triple the target accepts has its field
        count checked (5 or 6); a name with a refused or no triple is kept only as an sdist."""
        seen, rank, sdist = self._seen, self._rank, SDIST_SUFFIXES
        last_seen, platforms = self._last_seen, self._platforms
        out: list[bool] = []
        append = out.append
        wheels, sdists = [], []  # the kept ones
        for f in filenames:
            last = f[f.rfind("-") + 1:]
            possible = last_seen.get(last)
            if possible is None:
                possible = last_seen[last] = last.endswith(".whl") and not platforms.isdisjoint(last[:-4].split("."))
            if not possible:  # no triple ending so is accepted: kept only as an sdist (as below)
                if f.endswith(sdist):
                    sdists.append(len(out))
                    append(True)
                else:
                    append(False)
                continue
            tags = f[f.rfind("-", 0, f.rfind("-", 0, f.rfind("-"))) + 1:]
            ok = seen.get(tags)
            if ok is None:
                ok = seen[tags] = rank(f"x-0-{tags}") is not None
            if ok and f.count("-") in (4, 5):
                wheels.append(f)
            elif ok or not f.endswith(sdist):
                append(False)
                continue
            else:
                sdists.append(len(out))
            append(True)
        if not wheels or not sdists:
            return out
        canonical: dict[str, str] = {}  # a page names one project, spelled a few ways

        def release(name: str, version: str) -> tuple[str, str]:
            key = canonical.get(name)
            if key is None:
                key = canonical[name] = canonicalize_name(name)
            return key, version

        kept = {release(*f.split("-", 2)[:2]) for f in wheels}
        for i in sdists:
            r = _sdist_release(filenames[i])
            if r is not None and release(*r) in kept:
                out[i] = False
        return out


def _sdist_release(filename: str) -> tuple[str, str] | None:
    """A ``.tar.gz`` / ``.zip`` sdist's (name as written, version) when the version text is the one
    its Distfile carries (already in PEP 440 normal form); None otherwise (that sdist is kept)."""
    stem = filename[:-7] if filename.endswith(".tar.gz") else filename[:-4] if filename.endswith(".zip") else ""
    name, sep, version = stem.rpartition("-")
    return (name, version) if sep and name and NORMAL_VERSION.fullmatch(version) else None


class CandidateFinder:
    """The wheels of each project that ``target`` can install, memoized for one resolution.

    Thread-safe enough for the resolver's prefetch threads: a memo miss computes the same value twice.
    """

    def __init__(self, target: TargetProfile, source: PackageSource, *, constraints: Mapping[str, list[Req]],
                 prereleases: bool, provided: Mapping[str, str] | None = None,
                 allowed_yanks: Mapping[str, frozenset[Version]] | None = None):
        self.target = target
        self.source = source
        self.constraints = constraints
        self.prereleases = prereleases
        # name -> versions the user's own requirements pin exactly: the only yanked releases offered
        self.allowed_yanks = dict(allowed_yanks or {})
        self.provided = dict(provided or {})  # canonical name -> the image's version string
        self._installable_memo: dict[str, dict[Version, list[Distfile]]] = {}
        # One callable for the run, so the source memoizes pages filtered for this target.
        self._keep = _TagFilter(target)
        self._file_keys: dict[str, tuple] = {}  # filename -> (rank, build): the ranking key, once
        self._admits_memo: dict[int, tuple[SpecifierSet, Callable[[Version], bool]]] = {}
        self._best_memo: dict[tuple, tuple[tuple[SpecifierSet, ...], list[Cand]]] = {}
        # name -> {version: Requires-Python}: releases with a wheel for the target's tags whose
        # Requires-Python the target's Python fails (explain names them when what is left fails)
        self.python_refused: dict[str, dict[Version, str]] = {}

    def candidates(self, name: str, reqs: Sequence[Req]) -> list[Cand]:
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
            return [Cand("pkg", name, v, d, extras)]
        specs = [r.specifier for r in reqs] + [c.specifier for c in self.constraints.get(name, ())]
        by_version = self._installable(name)
        out = self._best_per_version(name, by_version, specs, extras)
        if not self.prereleases:
            # uv's `if-necessary` (its default since 0.13): every admitted final release first, then the
            # pre-releases, so a pre-release is picked only where no final release works (PEP 440 allows
            # one when no final satisfies; uv and wh also when every final failed while resolving).
            out = [c for c in out if not c.version.is_prerelease] + [c for c in out if c.version.is_prerelease]
        image = self._provided(name, by_version, specs, extras)
        if image is not None:  # installed-preference: first, and the index's copy of that version dropped
            out = [image, *(c for c in out if c.version != image.version)]
        return out

    def _provided(self, name: str, by_version: Mapping[Version, list[Distfile]], specs: Sequence[SpecifierSet],
                  extras: frozenset[str]) -> Cand | None:
        """The image's version of ``name`` as a candidate, when every specifier admits it."""
        raw = self.provided.get(name)
        if raw is None:
            return None
        try:
            v = Version(raw)
        except InvalidVersion:
            return None
        # As pip treats an installed distribution: pre-release or not, yanked or not, it is there.
        if not all(s.contains(v, prereleases=True) for s in specs):
            return None
        files = by_version.get(v)
        if files:
            best = min(files, key=lambda f: (self.target.wheel_rank(f.filename), _neg_build(f)))
        else:
            best = self._any_wheel(name, v) or Distfile(
                name=name, version=raw, filename=f"{name}-{raw} (provided by the image)", url=f"{IMAGE}:{name}=={raw}",
                origin=IMAGE)
        return Cand("pkg", name, v, best, extras, provided=raw)

    def _any_wheel(self, name: str, v: Version) -> Distfile | None:
        """A wheel of ``name`` at ``v`` for any platform: its METADATA stands for the image's copy."""
        for f in self.source.files(name):
            if f.is_wheel and f.version and _same_version(f.version, v):
                return f
        return None

    def _best_per_version(self, name: str, by_version: Mapping[Version, list[Distfile]], specs: Sequence[SpecifierSet],
                          extras: frozenset[str]) -> list[Cand]:
        # resolvelib lists a project's candidates again on every backtrack with the same
        # requirements: the same answer, made of the same Cand objects (the provider's
        # is_satisfied_by remembers verdicts by a candidate's identity). Keyed by the specifiers'
        # identities; the entry holds them, so the ids stay theirs.
        key = (name, extras, *map(id, specs))
        hit = self._best_memo.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], specs)):
            return list(hit[1])
        out = self._best_per_version_of(name, by_version, specs, extras)
        self._best_memo[key] = (tuple(specs), out)
        return list(out)

    def _best_per_version_of(self, name: str, by_version: Mapping[Version, list[Distfile]], specs: Sequence[SpecifierSet],
                             extras: frozenset[str]) -> list[Cand]:
        pinned = self.allowed_yanks.get(name, frozenset())
        out = []
        admits = [self._admits(s) for s in specs]
        for v in by_version:  # highest first (_installable sorts it)
            if not all(admit(v) for admit in admits):
                continue
            files = [f for f in by_version[v] if not f.yanked or v in pinned]
            if not files:
                continue
            best = files[0] if len(files) == 1 else min(files, key=self._file_key)
            out.append(Cand("pkg", name, v, best, extras))
        return out

    def files(self, name: str) -> list[Distfile]:
        """The project's wheels the target's tags accept and its source distributions (the page as filtered for
        this run, memoized by the source)."""
        return self.source.files(name, self._keep)

    def _installable(self, name: str) -> dict[Version, list[Distfile]]:
        """Wheels of ``name`` the target can install (tags and index requires-python), by version."""
        hit = self._installable_memo.get(name)
        if hit is not None:
            return hit
        out: dict[Version, list[Distfile]] = {}
        specs: dict[str, bool] = {}
        versions: dict[str, Version | None] = {}
        refused: dict[Version, str] = {}  # version -> a Requires-Python the target fails
        for f in self.source.files(name, self._keep):
            if not f.is_wheel or self.target.wheel_rank(f.filename) is None:
                continue
            v = versions.get(f.version, False)
            if v is False:
                try:
                    v = versions[f.version] = Version(f.version)
                except InvalidVersion:
                    v = versions[f.version] = None
            if v is None:
                continue
            if f.requires_python:
                ok = specs.get(f.requires_python)
                if ok is None:
                    spec = spec_of(f.requires_python)
                    ok = specs[f.requires_python] = spec is None or self.target.accepts_python(spec)
                if not ok:
                    refused.setdefault(v, f.requires_python)
                    continue
            out.setdefault(v, []).append(f)
        for v, rp in refused.items():
            if v not in out:
                self.python_refused.setdefault(name, {})[v] = rp
        out = dict(sorted(out.items(), key=lambda item: item[0], reverse=True))
        self._installable_memo[name] = out
        return out

    def _admits(self, spec: SpecifierSet) -> Callable[[Version], bool]:
        """``spec.contains(v, prereleases=True)``, remembered per version: the resolver asks again
        about the same requirement each time a project's candidates are listed."""
        hit = self._admits_memo.get(id(spec))
        if hit is None or hit[0] is not spec:
            seen: dict[Version, bool] = {}

            def admit(v: Version) -> bool:
                ok = seen.get(v)
                if ok is None:
                    ok = seen[v] = spec.contains(v, prereleases=True)
                return ok

            hit = self._admits_memo[id(spec)] = (spec, admit)  # holding spec keeps its id unique
        return hit[1]

    def _file_key(self, f: Distfile) -> tuple:
        key = self._file_keys.get(f.filename)
        if key is None:
            key = self._file_keys[f.filename] = (self.target.wheel_rank(f.filename), _neg_build(f))
        return key

    def installable_name(self, filename: str) -> bool:
        return self.target.wheel_rank(filename) is not None
