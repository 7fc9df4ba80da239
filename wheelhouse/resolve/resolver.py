"""Resolve requirements for a TARGET interpreter: resolvelib does the search, this module adapts.

``resolve(requirements, target, source) -> Resolution`` (``result``). The provider only adapts: candidates come
from the injected ``PackageSource`` (``find_matches`` reads index pages, never metadata), and
metadata is read only in ``get_dependencies`` (through a ``MetadataReader``: PEP 658 or zip range
requests, never a wheel body).

Rules, all judged for the target and never for the host:
- markers and extras with ``target.evaluate`` (the target's complete marker environment);
- ``Requires-Python`` with ``target.accepts_python``: from the index page when it says, and from
  the wheel's METADATA as a dependency on the virtual ``<python>`` (so a mismatch backtracks);
- wheels only, ranked by ``target.wheel_rank``; for each version the best-ranked wheel is the
  candidate, versions highest first (what uv picks);
- yanked files skipped unless the user's own requirements, constraints or overrides pin them with one
  ``==`` clause (PEP 592; uv's rule: a dependency's pin does not select a yanked release);
- pre-releases, unless asked for, only after every final release the specifiers admit (uv's ``if-necessary``);
- constraints narrow versions and never add a package;
- toolchain groups: each member in the resolution depends on a virtual ``<toolchain:NAME>`` at its
  own major.minor (or exact version), so two members at different releases conflict DURING the
  search and resolvelib backtracks to a consistent set; when none exists, ``ToolchainSkew``;
- ``provided`` (what the target's image already has, ``TargetProfile.provided``): treated as
  installed, as pip treats installed packages: the image's version is tried first whenever the
  requirements admit it, and its pin is marked ``provided`` (nothing to download). Empty: the
  pins are exactly those without it.

While the resolver works, a thread pool walks ahead: index pages and metadata of each dependency's
likely pick are fetched in parallel, so the search itself mostly hits memory.

The parts: ``wheelhouse.provider`` (the resolvelib adapter and the walk ahead),
``wheelhouse.candidates`` (which wheels a target can install), ``wheelhouse.toolchain`` (groups),
``wheelhouse.image`` (what the image keeps and what the stack changes of it) and
``wheelhouse.explain`` (the errors, and why a resolution failed).
"""

from __future__ import annotations

import gc
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from resolvelib import ResolutionImpossible, ResolutionTooDeep, Resolver

from .candidates import Req, single_pin
from .explain import ROOT, InvalidRequirementError, explain_failure, search_limit
from wheelhouse.index import PackageSource
from wheelhouse.index.http.cache import sweep_temp
from wheelhouse.index.metadata import MetadataReader
from wheelhouse.progress import NullReporter, Reporter
from .provider import ProgressReporter, Provider
from wheelhouse.target import TargetProfile
from .caveats import caveats
from .parity import with_parity_notes
from .image import image_changes, provided_versions
from .overrides import Rewrites
from .result import Pin, Resolution
from .toolchain import toolchain_rules
from .why import BacktrackLog, explain_pins

__all__ = ["resolve"]


# --- the public function ----------------------------------------------------------------------
def _parse_root(text: str, source: PackageSource) -> Req:
    raw = text.strip()
    named = "@" in raw.split("/")[0] or " @ " in raw  # "name @ url" is a PEP 508 direct reference
    if not named and (raw.endswith(".whl") or raw.startswith(("file:", "http://", "https://", "./", "../", "/", "~"))):
        d = source.direct(raw)
        return Req("pkg", d.name, raw, SpecifierSet(), direct=d)
    try:
        r = Requirement(raw)
    except InvalidRequirement as exc:
        raise InvalidRequirementError(f"requirement {raw!r} is not valid: {exc}", hint="write it like `name`, `name==1.2`, `name[extra]>=1`, or a path to a .whl") from exc
    direct = source.direct(r.url) if r.url else None
    if direct is not None and direct.name != canonicalize_name(r.name):
        raise InvalidRequirementError(f"requirement {raw!r} names {r.name} but the file is {direct.name}", hint="fix the name before the @")
    return Req("pkg", canonicalize_name(r.name), raw, r.specifier, frozenset(canonicalize_name(e) for e in r.extras), direct)


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
    provided: Sequence[Any] = (),
    overrides: Sequence[str] = (),
    excludes: Sequence[str] = (),
    explain: bool = False,
    keep: Sequence[tuple[str, str]] = (),
) -> Resolution:
    """Pin the closure of ``requirements`` for ``target`` (see the module docstring for the rules).

    ``toolchains`` are ``manifest.ToolchainGroup`` values (name, packages, exact, exceptions);
    package names may use shell wildcards (``nvidia-cuda-*``). ``provided``: ``ProvidedDist``
    values (or ``(name, version)`` pairs) the target already has installed; usually
    ``target.provided``, left to the caller so that ``wh stage --full`` can pass nothing.
    ``overrides``: requirement strings that replace every requirement on their project; ``excludes``:
    project names removed from the closure wherever required (``wheelhouse.resolve.overrides``).
    Raises a ResolveError subclass that says what to change when no consistent set exists.
    ``explain``: the reporter is also told why each pin was chosen and what was backtracked (``why``).
    ``keep``: (name, the image's version) pairs held as hard constraints ``name==version`` (``--keep-image``);
    an error that they cause names them as ``torch==2.11.0 (kept from the image)``.
    """
    reporter = reporter or NullReporter()
    reader = metadata or MetadataReader(source.client)
    rewrites = _rewrites(overrides, excludes, target, source)
    roots: list[Req] = []
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
        roots += rewrites.apply(req, ROOT)
    cons: dict[str, list[Req]] = {}
    for text in constraints:
        try:
            r = Requirement(text)
        except InvalidRequirement as exc:
            raise InvalidRequirementError(f"constraint {text!r} is not valid: {exc}", hint="write it like `name<2` or `name==1.2`") from exc
        if r.url:
            raise InvalidRequirementError(f"constraint {text!r} names a URL", hint="constraints restrict versions: `name==1.2`")
        if r.marker is not None and not target.evaluate(r.marker):
            continue
        cons.setdefault(canonicalize_name(r.name), []).append(Req("pkg", canonicalize_name(r.name), f"{text} (constraint)", r.specifier))
    for name, version in keep:
        key = canonicalize_name(name)
        cons.setdefault(key, []).append(Req("pkg", key, f"{key}=={version} (kept from the image)", SpecifierSet(f"=={version}")))
    groups = toolchain_rules(toolchains)
    # Offline, every page and METADATA is a cache read: threads fetching ahead only contend for the
    # GIL with the resolver (an offline vllm resolve: ~1.1 s with 16 of them, ~1.0 s with none).
    if getattr(source.client, "offline", False):
        jobs = 1
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="wh-prefetch") if jobs > 1 else None
    image = provided_versions(provided)
    yanks = _allowed_yanks([*roots, *(c for cs in cons.values() for c in cs), *(o for os_ in rewrites.overrides.values() for o in os_)])

    def new_provider(preferred: Mapping[str, Version] | None = None) -> Provider:
        p = Provider(target, source, reader, constraints=cons, groups=groups, prereleases=prereleases, reporter=reporter,
                     pool=pool, provided=image, rewrites=rewrites, allowed_yanks=yanks, preferred=preferred)
        for r in roots:
            p.root_texts.setdefault(r.name, set()).add(r.text)
        return p

    provider = new_provider()
    reporter.start("resolve", None, "packages")
    # The cyclic collector off while resolving: pages and candidates allocate millions of objects
    # that live to the end, and each collection walked all of them (~7% of a cold run's CPU,
    # measured with perf); what is garbage here is freed by reference counting.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        provider.prefetch(roots)
        progress = ProgressReporter(reporter, provider)
        events = BacktrackLog(progress) if explain else progress
        result = Resolver(provider, events).resolve(roots, max_rounds=max_rounds)
        settled = _settled_roots(result, provider, roots)
        if settled:
            result, provider, events = _search_again(result, provider, events, roots, new_provider(settled), max_rounds)
    except ResolutionImpossible as exc:
        reporter.finish("resolve")  # the error that follows says what failed
        raise explain_failure(exc, provider, target, source, roots) from None
    except KeyboardInterrupt:
        # Ctrl-C: requests still in flight (the walk ahead's, on a slow index) are cut now; else the pool's
        # shutdown below would wait for each to be answered.
        abort = getattr(source.client, "abort", None)
        if abort is not None:
            abort()
        raise
    except ResolutionTooDeep as exc:
        reporter.finish("resolve")  # the error that follows says what failed
        raise search_limit(exc.round_count, progress.backtracks) from None
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        sweep_temp(getattr(source.client, "cache_dir", None))  # what killed writers left (never a live one's)
        if gc_was_on:
            # What the search allocated (pages, candidates: millions of objects, most alive until the
            # end) goes straight to the oldest generation: re-enabled as it was, the collector's next
            # young-generation pass walked all of it (~0.17 s at the end of a cold sglang resolve).
            gc.freeze()
            gc.unfreeze()
            gc.enable()
    pins = with_parity_notes(_pins(result, provider), provider.finder)
    reporter.finish("resolve", f"{len(pins)} package{'' if len(pins) == 1 else 's'}")
    if explain:
        for line in explain_pins(result, provider, events):
            reporter.note(line)
    warnings = caveats(pins, provider, source)
    for line in warnings:
        reporter.note(line)
    return Resolution(
        pins=pins,
        requirements=tuple(requirements),
        constraints=tuple(constraints),
        skipped=tuple(skipped),
        stats={"requests": source.client.requests, **reader.stats},
        changes=image_changes(pins, image),
        unknown_deps=_kept_blind(pins, provider.unknown_deps),
        rewritten=rewrites.report([ROOT, *(f"{p.name}=={p.version}" for p in pins)]),
        warnings=tuple(warnings),
    )


def _rewrites(overrides: Sequence[str], excludes: Sequence[str], target: TargetProfile,
              source: PackageSource) -> Rewrites:
    """The overrides (parsed; those whose marker the target fails left out) and exclusions of one resolution."""
    by_name: dict[str, list[Req]] = {}
    texts: dict[str, list[str]] = {}
    for text in overrides:
        try:
            r = Requirement(text)
        except InvalidRequirement as exc:
            raise InvalidRequirementError(f"override {text!r} is not valid: {exc}",
                                          hint="write it like `name==1.2` or `name>=2; python_version >= \"3.11\"`") from exc
        name = canonicalize_name(r.name)
        texts.setdefault(name, []).append(text)
        by_name.setdefault(name, [])
        if r.marker is None or target.evaluate(r.marker):
            direct = source.direct(r.url) if r.url else None
            by_name[name].append(Req("pkg", name, f"{text.split(';')[0].strip()} (override)", r.specifier,
                                     frozenset(canonicalize_name(e) for e in r.extras), direct))
    return Rewrites(overrides=by_name, overridden_by={k: tuple(v) for k, v in texts.items()},
                    excludes=frozenset(canonicalize_name(n) for n in excludes))


def _settled_roots(result, provider: Provider, roots: Sequence[Req]) -> dict[str, Version]:
    """The requested projects' versions, when the search settled one of them below the newest release its
    requirement admits (else nothing).

    resolvelib keeps, after backjumping, the releases it gave up under a requested project's newer release
    (vllm 0.33.0) as excluded under the older one it settles on (vllm 0.14.0): with `numpy<2` it pinned
    mistral-common 1.11.5 where 1.13.1 fits, and uv, deciding that conflict early, picks 1.13.1. Searching
    again with the requested versions tried first answers as a resolve given `vllm==0.14.0` does."""
    chosen: dict[str, Version] = {}
    moved = False
    for r in roots:
        cand = result.mapping.get(r.ident)
        if r.direct is not None or cand is None or cand.kind != "pkg" or cand.provided is not None:
            continue
        chosen[cand.name] = cand.version
        newest = provider.candidates(r.name, [r])
        moved = moved or (bool(newest) and newest[0].version != cand.version)
    return chosen if moved else {}


def _search_again(result, provider: Provider, events, roots: Sequence[Req], again: Provider, max_rounds: int):
    """The second search of ``_settled_roots``, with the first answer's requested versions tried first. The
    first answer stands if this one fails (it cannot where resolvelib is complete, and then only on a limit)."""
    progress = ProgressReporter(again.reporter, again)
    log = BacktrackLog(progress, events.rejected) if isinstance(events, BacktrackLog) else progress
    try:
        second = Resolver(again, log).resolve(roots, max_rounds=max_rounds)
    except (ResolutionImpossible, ResolutionTooDeep):
        return result, provider, events
    # the releases the first search found the target's Python refuses (facts about releases, which the
    # second search, trying the settled versions first, may never read): the pins' notes name them
    for name, refused in provider.finder.python_refused.items():
        again.finder.python_refused.setdefault(name, {}).update(refused)
    return second, again, log


def _allowed_yanks(reqs: Sequence[Req]) -> dict[str, frozenset[Version]]:
    """The versions the user's own requirements, constraints and overrides pin with a single ``==`` clause:
    the only yanked releases a resolution may select (uv's ``AllowedYanks``: a dependency's pin does not)."""
    out: dict[str, set[Version]] = {}
    for r in reqs:
        v = single_pin(r.specifier) if r.direct is None else None
        if v is not None:
            out.setdefault(r.name, set()).add(v)
    return {k: frozenset(v) for k, v in out.items()}


def _kept_blind(pins: Sequence[Pin], unknown: set[str]) -> tuple[str, ...]:
    """The kept image versions whose dependencies no index could tell ("name==version")."""
    kept = {f"{p.name}=={Version(p.version)}" for p in pins if p.provided}
    return tuple(sorted(unknown & kept))


def _pins(result, provider: Provider) -> tuple[Pin, ...]:
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
        pins.append(Pin(name, c.provided or str(c.version), c.distfile, tuple(sorted(parents)), tuple(sorted(e["extras"])),
                        tuple(requested), provided=c.provided is not None))
    return tuple(pins)
