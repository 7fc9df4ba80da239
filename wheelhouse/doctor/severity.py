"""Whether a module that failed to load is a fail or a warning: by what the stack loads, never by who installed it.

What the engine will load must load. A failure is a **fail** when the module is

- a top-level name (an engine finds it with ``find_spec`` and imports it: the reference deployment's trap); in a
  namespace package, the distribution's own packages below it (``acme.fast``), and a module whose import fails there,
- one of the stack's entry modules (the manifest's ``[doctor] entry``, and the top-level names of what it requests),
- reached from them: importing the entries loaded it (``sys.modules`` after their import, in the target), or
- a lazily loaded module whose failure no data calls optional: its package loads it by name when used.

It is a **warning** only when nothing in the stack reaches the module *and* the failure is an optional
dependency: named in ``doctor/optional.toml`` or ``doctor/sharedlibs.toml`` (tkinter, libtbb, cuTENSOR,
MPI/RDMA plugins), a build for another CUDA major than the stack's (``cu12/`` beside the ``cu13/`` a CUDA 13 stack
loads), or a Python module its distribution does not require (its own metadata says so). Every exception of the
failure counts: a fallback import's missing module does not excuse the broken build it fell back from. The reason
is the evidence.

A build for CPU features this host lacks is the CPU's side of the CUDA variant: faiss ships
``_swigfaiss_avx512`` beside ``_swigfaiss`` and imports the AVX-512 build only where /proc/cpuinfo says
``avx512f``. Imported by its name on a CPU without it, it dies of SIGILL, while the package's own import, which
does not load it, works. Such a module (SIGILL when imported by name; its top-level package imported without
loading it; a sibling build the package can pick on this CPU) is a warning, never a drop; without such a sibling
(an AVX-512-only build) its package's code imports it here, a fail. ``--strict`` leaves it out only when its name
says which feature (a ``[[cpu-variant]]`` of ``doctor/optional.toml``) and this CPU's flags lack it; a SIGILL its
name does not explain (a trap, a feature the host has) is a warning ``--strict`` counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from .checks import DoctorContext, Distribution
from .imports import ImportOutcome
from .optional import OptionalData
from .verdicts import cpu_facts
from .workingfolder import command_module

__all__ = ["StackReach", "Judgement", "judge_failure", "entry_modules", "stack_reach", "own_names"]


@dataclass(frozen=True)
class StackReach:
    """What the stack loads: its entry modules and, for each module their import loaded, the entry that did."""

    entries: tuple[str, ...] = ()
    reached: Mapping[str, str] = field(default_factory=dict)  # module -> the entry whose import loaded it
    loaded: frozenset[str] = frozenset()  # modules that loaded when imported by name (a variant's sibling)
    cuda_major: int | None = None  # the stack's CUDA major (its cuda-bindings / CUDA runtime wheel)
    cuda_source: str | None = None  # where that came from
    cpu_flags: frozenset[str] = frozenset()  # this host's CPU feature flags (/proc/cpuinfo)
    extras: Mapping[str, frozenset[str]] = field(default_factory=dict)  # name -> the extras the stack asks of it
    markers: Mapping[str, str] = field(default_factory=dict)  # the TARGET interpreter's marker environment


@dataclass(frozen=True)
class Judgement:
    severity: Literal["fail", "warn"]
    reason: str
    strict: bool = False  # a warning --strict counts (nothing says the distribution does without it by design)


def own_names(paths: Iterable[str], names: Sequence[str],
              extensions: Iterable[tuple[str, str]] = ()) -> tuple[str, ...]:
    """``names`` (a distribution's top-level names) with each one it provides only as a portion of a namespace package
    (``acme/engine/...`` in its RECORD ``paths``, no ``acme/__init__.py``) replaced by its own packages and modules
    below it (``acme.engine``): importing the bare namespace runs none of its code, ``find_spec('acme.engine')``
    finds it.
    ``extensions``: its (RECORD path, dotted name) extension modules. A name with nothing importable below it stays."""
    rows = [p for p in paths if not p.startswith("..") and "__pycache__/" not in p]
    have = set(rows)
    by_path = {rel: m for rel, m in extensions}
    modules = set(by_path.values())
    # dotted folder -> (its entry, whether more follows, the row) in RECORD order: built once, so a namespace of
    # thousands of files (nvidia/) is walked once, not once per file below it
    index: dict[str, list[tuple[str, bool, str]]] = {}
    for rel in rows:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            index.setdefault(".".join(parts[:i]), []).append((parts[i], i < len(parts) - 1, rel))
    memo: dict[str, list[str]] = {}

    def is_module(name: str) -> bool:
        prefix = name.replace(".", "/")
        return f"{prefix}/__init__.py" in have or f"{prefix}.py" in have or name in modules

    def below(name: str) -> list[str]:
        if name in memo:
            return memo[name]
        memo[name] = out = []
        seen: set[str] = set()
        for head, sep, rel in index.get(name, ()):
            child = head if sep else (head[:-3] if head.endswith(".py") else by_path.get(rel, "").rpartition(".")[2])
            if not child.isidentifier() or child in seen:
                continue
            seen.add(child)
            if is_module(f"{name}.{child}"):
                out.append(f"{name}.{child}")
            elif sep:
                out += [n for n in below(f"{name}.{child}") if n not in out]  # a namespace inside the namespace
        return out

    return tuple(dict.fromkeys(n for top in names for n in ([top] if is_module(top) else below(top) or [top])))


def _own_names(d: Distribution) -> tuple[str, ...]:
    """:func:`own_names` of ``d`` from its RECORD (a distribution without one keeps its top-level names)."""
    if not d.dist_info:
        return d.import_names
    return own_names((rel for rel, _, _ in d.record.rows), d.import_names, d.extensions)


def _own_or_required(d: Distribution, missing: str, installed: Mapping[str, Distribution],
                     extras: frozenset[str] = frozenset(), markers: Mapping[str, str] | None = None) -> bool:
    """Is module ``missing`` the distribution's own, or one a requirement of it provides (a requirement of an extra
    does not count: without the extra it is optional)?"""
    top = missing.split(".", 1)[0]
    if top in d.import_names:
        return True
    wanted = set()
    for text in d.requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if not _holds(req, set(extras), markers):
            continue  # wanted only with an extra nothing asks for (greenlet's `psutil; extra == "test"`), or not on
            # this target (`; python_version < "3.12"` on 3.12): pip did not install it, the module is optional
        wanted.add(canonicalize_name(req.name))
    providers = {k for k, other in installed.items() if top in other.import_names}
    return canonicalize_name(top) in wanted or bool(providers & wanted)


_EXTRA_IN_MARKER = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


def _extra_needing(d: Distribution, missing: str, extras: frozenset[str],
                   markers: Mapping[str, str] | None) -> str | None:
    """The extra of ``d``, not asked for, under which ``d`` requires the distribution of module ``missing``
    (duckdb's ``adbc-driver-manager; extra == "all"`` for its ``adbc_driver_duckdb``), or None."""
    top = canonicalize_name(missing.split(".", 1)[0])
    for text in d.requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != top or req.marker is None or _holds(req, set(extras), markers):
            continue
        for extra in sorted(set(_EXTRA_IN_MARKER.findall(str(req.marker)))):
            try:
                if req.marker.evaluate({**(markers or {}), "extra": extra}):
                    return extra
            except Exception:  # noqa: BLE001
                continue
    return None


def target_markers(facts: Mapping[str, Any]) -> dict[str, str]:
    """The target interpreter's PEP 508 marker environment, as its facts probe read it (the capture script's
    ``marker_environment``); this interpreter's where the probe could not say."""
    from packaging.markers import default_environment

    markers = facts.get("markers")
    return {**default_environment(), **markers} if isinstance(markers, Mapping) else dict(default_environment())


def requested_extras(ctx: DoctorContext) -> dict[str, frozenset[str]]:
    """name -> the extras the stack asks of it: the manifest's requirements (``fastpkg[fast]``) and every installed
    distribution's Requires-Dist whose marker holds on the target (``fastpkg[fast]; extra == "speed"`` asks nothing of
    fastpkg unless speed is asked of its requirer; ``; python_version < "3.12"`` nothing on 3.12), to a fixed point."""
    markers = target_markers(ctx.facts)
    asked: dict[str, set[str]] = {}
    texts = [("", t) for t in (ctx.manifest.requirements if ctx.manifest else ())]
    texts += [(d.key, t) for d in ctx.distributions.values() for t in d.requires]
    reqs = []
    for who, text in texts:
        try:
            reqs.append((who, Requirement(text)))
        except InvalidRequirement:
            continue
    changed = True
    while changed:
        changed = False
        for who, req in reqs:
            if not req.extras or not _holds(req, asked.get(who, set()), markers):
                continue
            have = asked.setdefault(canonicalize_name(req.name), set())
            if not req.extras <= have:
                have |= req.extras
                changed = True
    return {k: frozenset(v) for k, v in asked.items()}


def _holds(req: Requirement, extras: set[str], markers: Mapping[str, str] | None = None) -> bool:
    """Whether ``req``'s marker holds in ``markers`` (the target's environment; None: this interpreter's) with one of
    its requirer's ``extras`` asked, or none; a marker that cannot be judged holds (a false red over a false green)."""
    if req.marker is None:
        return True
    try:
        return any(req.marker.evaluate({**(markers or {}), "extra": e}) for e in ("", *sorted(extras)))
    except Exception:  # noqa: BLE001
        return True


def _failure_text(o: ImportOutcome) -> str:
    return f"{o.error_type}: {o.error}" if o.error_type else f"import {o.crash or 'failed'}"


def _shipped(d: Distribution, files: Mapping[str, str]) -> list[str]:
    """The RECORD paths ``d`` ships (its extension modules being judged, and its RECORD where it has one)."""
    return [*files.values(), *((rel for rel, _, _ in d.record.rows) if d.dist_info else ())]


def _variant(d: Distribution, o: ImportOutcome, relpath: str | None, reach: StackReach, data: OptionalData,
             files: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(why ``o`` is a build for another CUDA major the package passes over, or None; why it is not although its
    folder says another major: ``d`` ships no build for the stack's CUDA, so the package has only this one)."""
    hit = data.variant_of(relpath) if relpath else None
    if hit is None or relpath is None:
        return None, None
    rule, folder, major = hit
    if reach.cuda_major is not None:
        if major == reach.cuda_major:
            return None, None
        parts = relpath.split("/")
        at = parts.index(folder)
        base = "/".join(parts[:at] + [""])  # "numba_cuda/cext/": where its variant folders are
        # The same module below the folder of the stack's major (cu13/_impl.*.so for cu12/_impl.*.so): the build the
        # package loads instead; any other file there (an empty __init__.py) is no build of it.
        inner = "/".join(parts[at + 1:-1] + [parts[-1].split(".", 1)[0]])
        for rel in _shipped(d, files):
            sibling = data.variant_of(rel)
            if not (sibling and sibling[2] == reach.cuda_major and rel.startswith(f"{base}{sibling[1]}/")):
                continue
            theirs = rel[len(f"{base}{sibling[1]}/"):].split("/")
            if "/".join(theirs[:-1] + [theirs[-1].split(".", 1)[0]]) == inner and rel != relpath:
                return (f"a build for CUDA {major} ({folder}/); the stack's CUDA is {reach.cuda_major} "
                        f"({reach.cuda_source}), whose build of it it ships ({rel}): {rule.reason}"), None
        return None, (f"a build for CUDA {major} ({folder}/), and {d.name} ships no build of it for the stack's CUDA "
                      f"{reach.cuda_major} ({reach.cuda_source}; none beside {base}{folder}/ of {inner}): the "
                      "package has no other build to load, so its code loads this one")
    # No CUDA major known: a build for another major that loads is the one the package picks.
    for module, rel in files.items():
        sibling = data.variant_of(rel)
        if module == o.module or sibling is None or sibling[2] == major or module not in reach.loaded:
            continue
        if rel.replace(f"/{sibling[1]}/", f"/{folder}/") == relpath:
            return (f"a build for CUDA {major} ({folder}/); its build for CUDA {sibling[2]} ({rel}) loads: "
                    f"{rule.reason}"), None
    return None, None


def _siblings(d: Distribution, o: ImportOutcome, relpath: str | None, files: Mapping[str, str]) -> list[str]:
    """The modules ``d`` ships beside ``o`` in its package (extension modules and Python files)."""
    parent = o.module.rpartition(".")[0]
    folder = (relpath or o.module.replace(".", "/")).rpartition("/")[0]
    names = [m for m in files if m.rpartition(".")[0] == parent]
    for rel in _shipped(d, files):
        where, _, base = rel.rpartition("/")
        if where == folder and (base.endswith(".py") or ".so" in base):
            names.append(f"{parent}.{base.split('.', 1)[0]}")
    return [n for n in dict.fromkeys(names) if n != o.module]


def _cpu_variant(d: Distribution, o: ImportOutcome, relpath: str | None, reach: StackReach, data: OptionalData,
                 files: Mapping[str, str]) -> Judgement | None:
    """A warning when ``o`` died of SIGILL imported by its own name while its top-level package imported without
    loading it (a fail, the stack loads it, is decided before): a build for CPU features this host lacks, which
    the package imports only where the CPU has them (faiss's ``_swigfaiss_avx512``), beside a build it picks
    instead (``_swigfaiss``). Without such a sibling the package has nothing else to import: a fail."""
    top = o.module.split(".", 1)[0]
    if not (o.crash or "").startswith("killed by SIGILL") or top not in reach.loaded:
        return None
    lazily = f"nothing in the stack reaches it ({top}'s import does not load it here)"
    named = data.cpu_feature_named(o.module, reach.cpu_flags)
    if named is not None and named[2]:
        # This CPU has what the name says, so a package that picks its build by the CPU picks this one here.
        return Judgement("fail", f"{o.module} dies of SIGILL although its name says {named[1]}, which this CPU has "
                                 "(/proc/cpuinfo): a package that picks its build by the CPU's flags picks this one here")
    if named is not None:
        rule, feature, _ = named
        other = data.cpu_fallback(o.module, _siblings(d, o, relpath, files), reach.cpu_flags)
        if other is None:
            return Judgement("fail", f"{o.module} dies of SIGILL (its name says {feature}, which /proc/cpuinfo's flags "
                                     f"here do not have), and {d.name} ships no other build of it that this CPU runs "
                                     f"(none named {data.cpu_build_stem(o.module) or '_'}* for no feature or for one "
                                     "this CPU has): the package has nothing else to pick, so its code imports "
                                     "this one")
        return Judgement("warn", f"{lazily}: {o.module} is built for CPU features this host lacks (SIGILL; its name "
                                 f"says {feature}, which /proc/cpuinfo's flags here do not have); {other} is the build "
                                 f"it picks here: {rule.reason}")
    return Judgement("warn", f"{lazily}: {o.module} is built for CPU features this host lacks (SIGILL: an "
                             "instruction this CPU cannot execute); its name does not say which feature it needs, so "
                             "--strict counts it (a trap would die of SIGILL too)", strict=True)


def _served_by(d: Distribution, o: ImportOutcome, installed: Mapping[str, Distribution]) -> Distribution | None:
    """The other installed distribution whose folder the import system searches for ``o``'s parent package, when
    that folder has no such module (not a checkout on PYTHONPATH: one installed distribution replacing another)."""
    if not (o.shadowed and o.error_type == "ModuleNotFoundError" and o.missing == o.module):
        return None
    folder = o.shadowed.rstrip("/")
    for other in installed.values():
        if other.key == d.key or not other.location:
            continue
        rel = folder[len(other.location.rstrip("/")) + 1:] if folder.startswith(other.location.rstrip("/") + "/") else ""
        if rel and rel.split("/", 1)[0] in other.import_names:
            return other
    return None


def _top_level(d: Distribution, o: ImportOutcome) -> str | None:
    """Why ``o`` is a top-level name (or failed in one's import), or None."""
    if "." not in o.module or o.module in d.import_names:
        return "a top-level name: find_spec finds it, so code that probes for it imports it"
    own = _own_names(d) if o.module.split(".", 1)[0] in d.import_names else ()
    for name in dict.fromkeys(n for n in (o.module, o.failed_in) if n):
        if name in own:
            where = f" (a package under the namespace {name.rpartition('.')[0]})" if "." in name else ""
            tail = "" if name == o.module else f"; importing {o.module} imports it first, and that import fails"
            return (f"{name} is a top-level name of {d.name}{where}: find_spec finds it, so code that probes for it "
                    f"imports it{tail}")
    return None


def _optional_link(d: Distribution, o: ImportOutcome, relpath: str | None, link: tuple[str, str, str | None],
                   reach: StackReach, data: OptionalData, installed: Mapping[str, Distribution]) -> bool:
    """Is ``link`` (an exception ``o``'s import raised before its last one) an optional dependency's failure?"""
    error_type, error, missing = link
    if data.rule_for(d.key, o.module, relpath, f"{error_type}: {error}") is not None:
        return True
    return bool(missing) and not _own_or_required(d, str(missing), installed, reach.extras.get(d.key, frozenset()),
                                                  reach.markers)


def judge_failure(d: Distribution, o: ImportOutcome, relpath: str | None, reach: StackReach, data: OptionalData,
                  installed: Mapping[str, Distribution], files: Mapping[str, str]) -> Judgement:
    """Fail or warn for module ``o`` of ``d`` that did not load (``relpath``: its file, for an extension module).

    ``files``: every extension module being judged -> its RECORD path (a variant's siblings). Every exception of
    the failure counts, not only the last: a fallback import's missing module does not excuse the broken build it
    fell back from.
    """
    top = _top_level(d, o)
    extra = _extra_needing(d, o.missing, reach.extras.get(d.key, frozenset()), reach.markers) \
        if top is not None and o.missing and not o.crash and not o.chain else None
    if extra is not None and o.module not in reach.entries and o.module not in reach.reached:
        # duckdb's second top-level package adbc_driver_duckdb needs adbc-driver-manager, which duckdb requires only
        # with its [all] extra: an optional part, not a broken duckdb (wh drop would have uninstalled it)
        return Judgement("warn", f"{o.module}, a top-level name of {d.name} nothing in the stack imports, needs "
                                 f"{o.missing}, which {d.name} requires only with its extra [{extra}], not asked for: "
                                 f"an optional part (`{d.name}[{extra}]` brings it)")
    if top is not None:
        return Judgement("fail", top)
    if o.module in reach.entries:
        return Judgement("fail", "an entry module of the stack: the engine imports it at start-up")
    if o.module in reach.reached:
        return Judgement("fail", f"the stack loads it: importing {reach.reached[o.module]} imports it")
    if o.error_type == "FileNotFoundError" and o.found is False:
        return Judgement("fail", "a file its RECORD lists is not on disk: a damaged install, whatever the module")
    lazily = "nothing in the stack reaches it (a lazily loaded module)"
    owner = _served_by(d, o, installed)
    if owner is not None:
        # numba hands its numba.cuda name to numba-cuda's copy when that is installed: the import system takes
        # the name from the other distribution's folder, which has no such module, so this file is never loaded.
        return Judgement("warn", f"{lazily}: {o.module.rpartition('.')[0]} is served by {owner.name} {owner.version} "
                                 f"({o.shadowed}), an installed distribution that replaces it and has no "
                                 f"{o.module.rpartition('.')[2]}: this file of {d.name} is never loaded")
    earlier = next((link for link in o.chain if not _optional_link(d, o, relpath, link, reach, data, installed)), None)
    rule = data.rule_for(d.key, o.module, relpath, _failure_text(o))
    if rule is not None and earlier is None:
        return Judgement("warn", f"{lazily}, and this failure is optional ({rule.source}): {rule.reason}")
    variant, lone = _variant(d, o, relpath, reach, data, files)
    if variant:
        return Judgement("warn", f"{lazily}: {variant}")
    cpu = _cpu_variant(d, o, relpath, reach, data, files)
    if cpu is not None:
        return cpu
    if (o.missing and not o.crash and earlier is None
            and not _own_or_required(d, o.missing, installed, reach.extras.get(d.key, frozenset()), reach.markers)):
        return Judgement("warn", f"{lazily}: only {o.module} needs {o.missing}, which is not installed and which "
                                 f"{d.name} does not require (an optional module)")
    if earlier is not None:
        return Judgement("fail", f"before {_failure_text(o)}, its import raised {earlier[0]}: {earlier[1]} (the "
                                 "exception it fell back from), which no data names optional and which is no optional "
                                 "missing module: its package loads it by this name when that code runs")
    return Judgement("fail", "its package loads it by this name when that code runs (a lazily loaded module), "
                             "and no data names this failure optional" + (f"; {lone}" if lone else ""))


def entry_modules(ctx: DoctorContext) -> list[str]:
    """The stack's entry modules: the manifest's ``[doctor] entry``, the top-level names of what it requests (in
    a namespace package, its own packages below the namespace: :func:`own_names`), and the module its ``[serve]
    command`` starts (:func:`~wheelhouse.doctor.workingfolder.command_module`): a server module that cannot import
    is an engine that cannot start, whatever its package's import does."""
    named = list(ctx.manifest.doctor.entry) if ctx.manifest else []
    for text in (ctx.manifest.requirements if ctx.manifest else ()):
        try:
            d = ctx.dist(Requirement(text).name)
        except InvalidRequirement:
            continue
        named += list(_own_names(d)) if d is not None else []  # acme.engine, not the bare namespace acme
    serve = ctx.manifest.serve if ctx.manifest else None
    if serve is not None and serve.command:
        scripts = {str(s[0]): str(s[1]) for rec in ctx.facts.get("distributions") or () if isinstance(rec, dict)
                   for s in rec.get("scripts") or () if len(s) >= 2}
        module = command_module(serve.command, scripts)  # what `python -m engine.server` / `ft serve` imports
        named += [module] if module else []
    return list(dict.fromkeys(named))


def stack_reach(ctx: DoctorContext, entries: Sequence[str], outcomes: Mapping[str, ImportOutcome]) -> StackReach:
    """What importing the entry modules and every top-level name loaded, and the stack's CUDA major."""
    reached: dict[str, str] = {}
    for name, o in outcomes.items():
        if "." not in name or name in entries:
            for m in o.reached:
                reached.setdefault(m, name)
    major, source = _cuda_major(ctx)
    cpu = cpu_facts()
    return StackReach(tuple(entries), reached, frozenset(m for m, o in outcomes.items() if o.ok and not o.covered),
                      major, source, frozenset((cpu.get("flags") or cpu.get("features") or "").split()),
                      requested_extras(ctx), target_markers(ctx.facts))


_CUDA_WHEELS = ("cuda-bindings", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12",
                "nvidia-cuda-runtime-cu11")


def _cuda_major(ctx: DoctorContext) -> tuple[int | None, str | None]:
    """The CUDA major the stack's packages pick their builds by: its cuda-bindings or CUDA runtime wheel."""
    for name in _CUDA_WHEELS:
        d = ctx.dist(name)
        head = (d.version.split(".", 1)[0] if d else "")
        if head.isdigit():
            return int(head), f"{d.name} {d.version}"
    cuda = getattr(ctx.target, "cuda_version", None) if ctx.target else None
    if cuda and str(cuda).split(".", 1)[0].isdigit():
        return int(str(cuda).split(".", 1)[0]), f"the wheelhouse target's CUDA {cuda}"
    return None, None
