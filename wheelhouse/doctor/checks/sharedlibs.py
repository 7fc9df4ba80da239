"""sharedlibs: every shared object a distribution ships finds every library it needs (read, never loaded).

An extension module that is only imported on the serving path, or a plain
library beside it, is never exercised by the import checks; its missing
``libfoo.so.12`` shows only when the engine first takes that path. This check
reads each ``.so`` of every installed distribution (from its RECORD) and
resolves its DT_NEEDED entries the way the target's loader would
(:mod:`wheelhouse.elf`), with the facts of the target environment from
``doctor/probes/loader.py``: the loader cache, the loader's default folders,
LD_LIBRARY_PATH, and the libraries the interpreter and ``import torch`` have
already mapped. No code of the distributions runs.

The environment is the engine's, the one every probe gets and ``wh serve``
starts the engine with: the caller's, ``wh env``'s over it (its LD_LIBRARY_PATH
kept first: appended to, never replaced), the manifest's ``[serve] env`` over
that. A library found through an LD_LIBRARY_PATH entry only the caller gives is
named in a note (an engine started elsewhere lacks it); a broken copy there that
the search stops at fails, as the engine fails. (Issue 28 asked for the caller's
LD_LIBRARY_PATH to be left out: then an engine ``wh serve`` started from that
shell failed where the doctor said ok.)

Verdicts: a missing library of an object that something links (DT_NEEDED of
a shipped object) or that is a Python extension module fails. A miss in an
object that nothing links (a plugin its package dlopens by name on demand:
nvidia-cufile's ``libcufile_rdma``, nvshmem's bootstrap plugins), or that
``doctor/sharedlibs.toml`` names as optional, is a warn with that reason; one
with an alternative build beside it that finds everything is a note. A warn
whose every miss the data names is optional by design: ``--strict`` does not
count it (``CheckResult.strict`` False). A plugin needing a library its own
package ships as an extension module or links (triton's ``plugins/*.so`` need
``libtriton.so``) finds it loaded: the loader matches the name to that object.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from wheelhouse.elf import BadElf, ElfInfo, Found, LoaderFacts, find_needed, read_elf
from wheelhouse.doctor.extensions import is_python_extension, pyinit_modules
from wheelhouse.env.cuda import serving_variables
from wheelhouse.env.links import is_stub
from wheelhouse.doctor.probes import probe_script, run_cached_probe
from wheelhouse.datafile import get_value, load_tables
from wheelhouse.doctor.report import CheckResult
from wheelhouse.errors import WhError
from wheelhouse.resources import doctor_dir
from .context import DoctorContext, Distribution, reinstall_command

__all__ = ["GROUP", "CHECKS", "run", "shared_objects", "loader_facts", "gather_loader_facts", "OptionalObject",
           "load_optional", "engine_loader_environment"]

GROUP = "sharedlibs"
CHECKS = {
    "sharedlibs:<distribution>": "every shared object it ships finds each library it needs (read, not loaded: "
                                 "RUNPATH/RPATH, LD_LIBRARY_PATH, ldconfig, default folders, already loaded)",
    "sharedlibs:loader": "the loader facts of the target environment could be gathered (ldconfig, ld.so)",
}
# The NVIDIA driver's own libraries: installed with the driver, absent on a machine without one.
_DRIVER_LIBS = ("libcuda.so", "libnvidia-", "libnvcuvid.so")
_SHOWN = 4  # needers named per missing library before "+N more"


def shared_objects(d: Distribution) -> list[tuple[str, Path]]:
    """(RECORD path, file) of every shared object ``d`` ships that is on disk."""
    if not d.dist_info or not d.location:
        return []
    out = []
    for rel in d.shared_object_paths:
        path = Path(os.path.normpath(os.path.join(d.location, rel)))
        if path.is_file():
            out.append((rel, path))
    return out


def loader_facts(record: Mapping[str, Any]) -> LoaderFacts:
    """LoaderFacts from the loader probe's record (``doctor/probes/loader.py``)."""
    cache: dict[str, list[str]] = {}
    for name, _flags, path in record.get("ldconfig") or ():
        cache.setdefault(name, []).append(path)
    loaded: dict[str, str] = {}
    for path in record.get("mapped") or ():
        loaded.setdefault(os.path.basename(path), path)
        try:
            soname = read_elf(path).soname
        except BadElf:
            continue
        if soname:
            loaded.setdefault(soname, path)
    try:
        exe = read_elf(record["executable"]) if record.get("executable") else None
    except BadElf:
        exe = None
    return LoaderFacts(
        ld_library_path=tuple(record.get("ld_library_path") or ()),
        cache={k: tuple(v) for k, v in cache.items()},
        default_dirs=tuple(record.get("default_dirs") or ()),
        loaded=loaded,
        executable=exe,
        lib=str(record.get("lib") or "lib64"),
        platform=str(record.get("platform") or "x86_64"),
    )


def _paths(value: str | None) -> list[str]:
    return [p for p in (value or "").split(os.pathsep) if p]


def engine_loader_environment(ctx: DoctorContext) -> tuple[dict[str, str], tuple[str, ...]]:
    """(the environment the engine's loader sees, the LD_LIBRARY_PATH entries only the caller's environment gives).

    The engine's environment, as the other probes get it and ``wh serve`` starts the engine with it
    (``ctx.engine_env``): the caller's, ``wh env``'s variables over it (its LD_LIBRARY_PATH kept first, stub folders
    off, the NVIDIA folders appended), the manifest's ``[serve] env`` over that. The second value: the caller's own
    entries, which neither ``wh env`` nor ``[serve] env`` gives (an engine started elsewhere lacks them).
    """
    env = dict(ctx.engine_env)
    base = {k: v for k, v in ctx.environ.items() if k != "LD_LIBRARY_PATH"}
    serve = ctx.manifest.serve if ctx.manifest else None
    stack_env = {**base, **serving_variables(list(ctx.site_dirs), base, serve.env if serve else None)}
    theirs = set(_paths(stack_env.get("LD_LIBRARY_PATH")))
    own = tuple(dict.fromkeys(p for p in _paths(env.get("LD_LIBRARY_PATH")) if p not in theirs))
    return env, own


def gather_loader_facts(ctx: DoctorContext, env: Mapping[str, str] | None = None
                        ) -> tuple[LoaderFacts | None, Mapping[str, Any], str | None]:
    """(facts, the probe's record, why not) from the loader probe run in the engine environment."""
    timeout = max(ctx.timeout, 120) if ctx.dist("torch") else max(ctx.timeout, 30)
    env = env if env is not None else engine_loader_environment(ctx)[0]
    res, since = run_cached_probe(ctx.verdicts, ctx.python, probe_script("loader"), timeout=timeout, env=env,
                                  name="loader", passed=lambda r: r.ok and not r.data.get("import_errors"))
    if not res.records:
        return None, {}, f"the loader probe {res.failure(timeout)}\n{res.tail()}"
    return loader_facts(res.data), {**res.data, "reused_since": since}, None


def _is_driver_lib(name: str) -> bool:
    return name.startswith(_DRIVER_LIBS)


@dataclass
class _Scan:
    """One shared object: its ELF facts (or why the loader could not map it) and where its needs resolve."""

    info: ElfInfo | None
    error: str | None = None
    found: list[Found] = field(default_factory=list)
    foreign: bool = False  # built for another machine: the loader never maps it into this interpreter


def _scan(ctx: DoctorContext, paths: list[Path], facts: LoaderFacts,
          by_path: frozenset[str] = frozenset()) -> dict[Path, _Scan]:
    """Resolve every shipped object's needs; a miss is retried with the RPATH of the shipped objects that load it.
    ``by_path``: the real paths of the objects something loads by their path (the extension modules), so each is
    also a root of its own loader chain, with no loader above it."""
    scans: dict[Path, _Scan] = {}
    for path in dict.fromkeys(paths):
        try:
            info = read_elf(path)
        except BadElf as exc:
            scans[path] = _Scan(None, exc.reason)
            continue
        if facts.executable is not None and not facts.executable.compatible(info):
            scans[path] = _Scan(info, foreign=True)
            continue
        scans[path] = _Scan(info, found=find_needed(info, facts))
    # A retry can find a library whose own misses then have a loader chain (faiss-cpu: libopenblas finds libgfortran
    # only through _swigfaiss's RPATH, and libgfortran finds libquadmath only then): again until nothing changes.
    for _ in range(len(scans)):
        graph = _Graph.of(scans, by_path)
        changed = False
        for path, s in scans.items():
            if s.info is not None and not s.info.runpath and any(f.path is None for f in s.found):
                chains, more = graph.loader_chains(os.path.realpath(path))
                if chains:
                    # Found only where every way its loaders reach it finds it: the loader follows the one chain
                    # that loaded the object first, and an object with a RUNPATH passes no RPATH down.
                    results = [find_needed(s.info, facts, chain) for chain in chains]
                    found = [_through_every_chain([r[j] for r in results], chains, more)
                             for j in range(len(results[0]))]
                    changed = changed or [f.path for f in found] != [f.path for f in s.found]
                    s.found = found
        if not changed:
            break
    _other_copies(scans, facts, _Graph.of(scans, by_path))
    return scans


def _other_copies(scans: Mapping[Path, _Scan], facts: LoaderFacts, graph: "_Graph") -> None:
    """A library found lacking a symbol version its needer requires, where another copy of that name that a process
    loading the needer maps (an object loaded from the same root: an extension module, a plugin loaded by path; or
    what the interpreter has loaded) defines it: the loader maps a name once and binds every later need to that
    copy, so which copy loads first decides. Found, with a note: a warning --strict counts, not a fail
    (``pkg.libs/libwhgone.so.1`` loaded for ``_core`` serves ``libmid``, whose own RUNPATH finds an older one: the
    import works). A copy only an unrelated package maps is never in that process: no excuse."""
    for path, s in scans.items():
        if s.info is None:
            continue
        for i, f in enumerate(s.found):
            if f.path is not None or " lacks version" not in f.error:
                continue
            required = {v for file, versions in s.info.version_needs if file == f.name for v in versions}
            lacking = f.error.split(" lacks version", 1)[0]
            copies = {o for o in graph.loaded_with(os.path.realpath(path)) if os.path.basename(o) == f.name
                      or (o in graph.info and graph.info[o].soname == f.name)}
            copies |= {facts.loaded[f.name]} if f.name in facts.loaded else set()
            good = next((c for c in sorted(copies) if c != lacking and _defines(c, required)), None)
            if good is not None:
                s.found[i] = dataclasses.replace(
                    f, path=good, via="some-chains", error="",
                    note=f"{f.error}, but {good} defines it: the copy the process maps first serves every object "
                         f"(an import that maps {lacking} first fails)")


def _defines(path: str, versions: set[str]) -> bool:
    try:
        defined = read_elf(path).version_defs
    except BadElf:
        return False
    return defined is not None and versions <= set(defined)


_ROOTS = 1024  # objects nothing shipped loads (extension modules, plugins loaded by path) followed per object, at most


@dataclass
class _Graph:
    """Who needs whom among the shipped objects: each one's DT_NEEDED that resolved to a shipped object, in order."""

    children: dict[str, list[str]]
    parents: dict[str, list[str]]
    info: dict[str, ElfInfo]
    loaders: dict[str, dict[str, str | None]] = field(default_factory=dict)  # root -> object -> what loads it
    by_path: frozenset[str] = frozenset()  # loaded by their own path too (extension modules): roots whatever needs them

    @classmethod
    def of(cls, scans: Mapping[Path, _Scan], by_path: frozenset[str] = frozenset()) -> "_Graph":
        children: dict[str, list[str]] = {}
        parents: dict[str, list[str]] = {}
        info: dict[str, ElfInfo] = {}
        for path, s in scans.items():
            if s.info is None:
                continue
            key = os.path.realpath(path)
            info[key] = s.info
            for f in s.found:
                if f.path:
                    child = os.path.realpath(f.path)
                    children.setdefault(key, []).append(child)
                    parents.setdefault(child, []).append(key)
        return cls(children, parents, info, by_path=by_path)

    def loader_chains(self, real: str) -> tuple[list[list[ElfInfo]], bool]:
        """The loader chain of ``real`` (nearest first) from each object that reaches it and that nothing shipped
        loads (an extension module, a plugin loaded by path), and whether there were more such roots than _ROOTS.

        From one root the chain is glibc's: dependencies load breadth first in DT_NEEDED order, and an object's
        loader is the first loaded object that needs it (a library two objects of one root need is loaded by the
        nearer one). An object reached only through a cycle with no root above it has no chain. An object loaded by
        its own path (an extension module: :attr:`by_path`) is a root too; ``real`` itself then has the empty
        chain (the import that maps it first: no loader's RPATH helps it)."""
        roots = [r for r in self._roots(real) if r != real]
        chains: list[list[ElfInfo]] = [[]] if real in self.by_path and self.parents.get(real) else []
        for root in sorted(roots)[:_ROOTS]:
            loader = self._loaders_from(root)
            if real in loader:
                chain, key = [], loader[real]
                while key is not None:
                    chain.append(self.info[key])
                    key = loader[key]
                chains.append(chain)
        return chains, len(roots) > _ROOTS

    def loaded_with(self, real: str) -> set[str]:
        """Every shipped object a process that loads ``real`` has mapped by then or after: what each root above it
        (and ``real`` itself, where nothing shipped loads it or it is loaded by its path) loads, breadth first."""
        return self.loaded_from(sorted(self._roots(real))[:_ROOTS])

    def loaded_from(self, roots: Iterable[str]) -> set[str]:
        """``roots`` and every object they load, directly or not."""
        return {o for root in roots for o in self._loaders_from(root)}

    def _roots(self, real: str) -> list[str]:
        """``real`` and every object above it that nothing shipped loads or that is loaded by its own path."""
        roots, seen, todo = [], {real}, [real]
        while todo:
            key = todo.pop()
            above = self.parents.get(key, ())
            if not above or key in self.by_path:
                roots.append(key)
            for p in above:
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        return roots

    def _loaders_from(self, root: str) -> dict[str, str | None]:
        """What loads each object reached from ``root``, breadth first in DT_NEEDED order (once per root: the objects
        with misses under one extension module share it)."""
        loader = self.loaders.get(root)
        if loader is None:
            loader, queue = {root: None}, [root]
            while queue:
                key = queue.pop(0)
                for child in self.children.get(key, ()):
                    if child not in loader:
                        loader[child] = key
                        queue.append(child)
            self.loaders[root] = loader
        return loader


def _through_every_chain(results: list[Found], chains: list[list[ElfInfo]], more: bool = False) -> Found:
    """One need's answer over every loader chain: found by all, the first's; by none, the first miss; by some only
    (or by all of the first _ROOTS of more), found with a note (``via`` "some-chains": a warning --strict counts).
    In a process the chain that loads the object first decides, and which one that is depends on the order of
    imports."""
    good = next((f for f in results if f.path is not None), None)
    bad = next(((f, c) for f, c in zip(results, chains) if f.path is None), None)
    if good is None:
        return bad[0]  # type: ignore[index]
    if bad is None:
        if not more:
            return good
        return dataclasses.replace(good, via="some-chains",
                                   note=f"found through the loader chains of the first {_ROOTS} objects that load it; "
                                        "more load it, and theirs were not followed")
    if not bad[1]:  # the empty chain: an extension module that other shipped objects also load
        return dataclasses.replace(good, via="some-chains",
                                   note="found through the RPATH of the shipped objects that load it, not when the "
                                        "import system maps it by its own path first (importing it before them fails)")
    top = os.path.basename(bad[1][-1].path)
    return dataclasses.replace(good, via="some-chains",
                               note=f"found through its other loaders' RPATH, not when {top} loads it first (no RPATH "
                                    f"passes down that chain: an import that loads {top} first fails)")


@dataclass(frozen=True)
class OptionalObject:
    """A ``[[optional]]`` entry of ``doctor/sharedlibs.toml``: a miss the distribution itself tolerates."""

    distribution: str
    objects: str
    libraries: tuple[str, ...]
    reason: str

    def covers(self, dist_key: str, rel: str, library: str) -> bool:
        return (fnmatch.fnmatchcase(dist_key, canonicalize_name(self.distribution)) and fnmatch.fnmatchcase(rel, self.objects)
                and any(fnmatch.fnmatchcase(library, g) for g in self.libraries))


class SharedlibsDataError(WhError):
    code = "sharedlibs-data"


def load_optional(path: Path | None = None) -> tuple[OptionalObject, ...]:
    """The ``[[optional]]`` entries of ``doctor/sharedlibs.toml`` (or ``path``)."""
    path = path or doctor_dir() / "sharedlibs.toml"
    out = []
    for where, t in load_tables(path, "optional", ["distribution", "objects", "libraries", "reason"],
                                what="sharedlibs data file", error=SharedlibsDataError):
        out.append(OptionalObject(str(get_value(t, "distribution", (str,), where, error=SharedlibsDataError)),
                                  str(get_value(t, "objects", (str,), where, error=SharedlibsDataError)),
                                  tuple(get_value(t, "libraries", (list,), where, error=SharedlibsDataError) or ()),
                                  str(get_value(t, "reason", (str,), where, error=SharedlibsDataError, default=""))))
    return tuple(out)


def _variant_of(rel: str, clean: set[str], suffixes: Sequence[str]) -> str | None:
    """A sibling the package can load instead, whose needs are all found: the same file name in another
    folder (``sm100/common_ops.so``), in the same folder the same first name part when this file is not
    what ``import`` picks by that name (``MPI.mpich.*.so`` beside ``MPI.openmpi.*.so``; never ``_core.*.so``), or
    the same name but the number it ends in (torchcodec's ``libtorchcodec_core4.so`` .. ``core8.so``, one per FFmpeg
    major, the first that loads kept: a host has one FFmpeg)."""
    folder, _, base = rel.rpartition("/")
    stem = base.split(".", 1)[0]
    importable = any(base == stem + sfx for sfx in suffixes)
    for other in sorted(clean):
        of, _, ob = other.rpartition("/")
        if other == rel:
            continue
        if (ob == base and of != folder) or (of == folder and not importable and ob.split(".", 1)[0] == stem):
            return other
        if of == folder and _numbered(stem) and _numbered(ob.split(".", 1)[0]) == _numbered(stem) and \
                ob.split(".", 1)[0] != stem:
            return other  # one build per major of a library it links: libtorchcodec_core4.so .. core8.so (FFmpeg 4-8)
    return None


def _numbered(stem: str) -> str | None:
    """``stem`` without the version number it ends in (``libtorchcodec_core8`` -> ``libtorchcodec_core``), or None."""
    head = stem.rstrip("0123456789")
    return head if head != stem and head and head[-1].isalpha() else None


@dataclass(frozen=True)
class _Stack:
    """What the verdicts share: who links what, the extension modules, the optional data, the caller's extras."""

    linked: frozenset[str]  # realpaths and names (sonames, file names) some shipped object has in DT_NEEDED
    optional: tuple[OptionalObject, ...]
    suffixes: tuple[str, ...]
    caller_extra: tuple[str, ...]  # LD_LIBRARY_PATH entries only the caller's environment gives the engine
    note: str  # import errors of the loader probe
    # The extension modules (real paths) and every shipped object they load: what is in the process once their
    # packages are imported (a plugin that nothing imported links is not).
    imported: frozenset[str] = frozenset()


def _linked(scans: Mapping[Path, _Scan], suffixes: Sequence[str] = (".so",),
            roots: frozenset[str] = frozenset()) -> frozenset[str]:
    """The names and real paths of what the objects that are loaded when their packages run need, and what those
    need, and so on: from every object no package loads by name alone (an extension module: ``roots``, or by its
    file name; an object another such needs). A need of a plugin loaded on demand only counts once something loads
    that plugin: UCX's InfiniBand transport, needed only by its other on-demand transports, is one of them."""
    def names(path: Path, s: _Scan) -> set[str]:
        out = {path.name, os.path.realpath(path)}
        if s.info is not None and s.info.soname:
            out.add(s.info.soname)
        return out

    def a_root(path: Path) -> bool:
        return os.path.realpath(path) in roots or _importable_name(path.name, suffixes)

    by_name: dict[str, list[Path]] = {}
    for path, s in scans.items():
        for n in names(path, s):
            by_name.setdefault(n, []).append(path)
    out: set[str] = set()
    live = {p for p in scans if a_root(p)}
    todo = list(live)
    while todo:
        for f in scans[todo.pop()].found:
            for n in (f.name, os.path.realpath(f.path) if f.path else None):
                if n is None or n in out:
                    continue
                out.add(n)
                for p in by_name.get(n, ()):
                    if p not in live:
                        live.add(p)
                        todo.append(p)
    return frozenset(out)


def _importable_name(base: str, suffixes: Sequence[str]) -> bool:
    """Whether a file named ``base`` is one the import system loads by its name: an extension suffix of this
    interpreter (``.cpython-312-x86_64-linux-gnu.so``, ``.abi3.so``), or ``_core.so`` (a bare ``.so``, not ``lib*``)."""
    return any(base.endswith(sfx) for sfx in suffixes if sfx != ".so") or \
        (not base.startswith("lib") and base.endswith(".so") and ".so" in suffixes)


def _on_demand(d: Distribution, rel: str, path: Path, info: ElfInfo | None, stack: _Stack) -> bool:
    """Nothing links this object and it is no Python extension module: its package dlopens it by name."""
    if rel in {f for f, _ in d.extensions}:
        return False
    base = rel.rpartition("/")[2]
    if _importable_name(base, stack.suffixes):
        return False
    names = {base, os.path.realpath(path), *([info.soname] if info and info.soname else [])}
    return not (names & stack.linked)


def _linker_script(path: Path) -> bool:
    """Whether ``path`` is a GNU ld script (``libmpi.so`` of the mpich wheel: ``INPUT(libmpi.so.12)``), which the
    linker reads for ``-lmpi`` and the loader never maps."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(512)
    except OSError:
        return False
    text = head.lstrip()
    return not head.startswith(b"\x7fELF") and (text.startswith(b"/* GNU ld script") or
                                                text.startswith((b"INPUT(", b"INPUT (", b"GROUP(", b"GROUP (")))


def _provides_with_requirements(ctx: DoctorContext, d: Distribution, objects: Sequence[tuple[str, Path]],
                                scans: Mapping[Path, _Scan], stack: _Stack,
                                objects_of: Mapping[str, list[tuple[str, Path]]]) -> dict[str, tuple[str, str, str]]:
    """:func:`_package_provides` of ``d`` (name -> RECORD path, what it is, its path), then of each distribution
    ``d`` requires: a plugin of xgrammar needs ``libtvm_ffi.so``, which apache-tvm-ffi, its requirement, ships and
    loads when xgrammar imports it, before xgrammar loads the plugin."""
    out = {name: (rel, what, os.path.join(d.location or "", rel))
           for name, (rel, what) in _package_provides(d, objects, scans, stack).items()}
    for text in d.requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is not None and "extra" in str(req.marker):
            continue  # an extra's: installed or not, the package does not import it unasked
        other = ctx.distributions.get(canonicalize_name(req.name))
        if other is None or other.key == d.key or other.key not in objects_of:
            continue
        for name, (rel, what) in _package_provides(other, objects_of[other.key], scans, stack).items():
            out.setdefault(name, (f"{other.name}'s {rel}", f"{what}, a requirement of {d.name}",
                                  os.path.join(other.location or "", rel)))
    return out


def _package_provides(d: Distribution, objects: Sequence[tuple[str, Path]], scans: Mapping[Path, _Scan],
                      stack: _Stack) -> dict[str, tuple[str, str]]:
    """Name -> (RECORD path, what it is) of each object ``d`` ships that is in the process whenever its package
    runs: a Python extension module (``triton/_C/libtriton.so``, PyInit_libtriton) or an object a shipped object
    links. The loader matches a needed name against the SONAME of an object already loaded, so a plugin its
    package loads on demand finds it there (triton's ``plugins/*.so`` need ``libtriton.so`` and name no folder
    that has it: they load, once triton is imported)."""
    out: dict[str, tuple[str, str]] = {}
    for rel, path in objects:
        info = scans[path].info
        if info is None or scans[path].foreign:
            continue
        if rel in {f for f, _ in d.extensions} or is_python_extension(path):
            what = f"a Python extension module of {d.name}, loaded when its package is imported"
            names = (info.soname,)  # mapped by its path: a need matches its SONAME only, never its file name
        elif {rel.rpartition("/")[2], os.path.realpath(path), info.soname} & stack.linked:
            what = f"linked by a shipped object of {d.name}"
            names = (info.soname, rel.rpartition("/")[2])  # loaded by that name: it matches too
        else:
            continue
        for name in names:
            if name:
                out.setdefault(name, (rel, what))
    return out


@dataclass
class _Misses:
    """A distribution's missing libraries, sorted by what they mean for the stack."""

    hard: dict[str, list[tuple[str, Found]]] = field(default_factory=dict)  # library -> (object, lookup): fail
    soft: dict[str, list[tuple[str, Found]]] = field(default_factory=dict)  # the driver's, no GPU here: warn
    warns: list[str] = field(default_factory=list)  # optional (data) or loaded on demand: warn, with the reason
    counted: bool = False  # a warn --strict counts: one no data names optional (inferred on demand, or the driver's)
    notes: list[str] = field(default_factory=list)  # an alternative build finds everything: a note
    on_demand: dict[str, list[str]] = field(default_factory=dict)  # library -> the plugins that lack it


def _sort_misses(ctx: DoctorContext, d: Distribution, missing: Mapping[str, list[tuple[str, Found]]],
                 clean: set[str], paths: Mapping[str, Path], scans: Mapping[Path, _Scan], stack: _Stack) -> _Misses:
    out = _Misses()
    plugins: dict[str, list[str]] = {}  # object -> what it lacks
    optional: dict[tuple[str, str], list[str]] = {}  # (object, the data's reason) -> what it lacks
    for name, needers in missing.items():
        for rel, found in needers:
            rule = next((o for o in stack.optional if o.covers(d.key, rel, name)), None)
            sibling = None if rule else _variant_of(rel, clean, stack.suffixes)
            if rule:
                optional.setdefault((rel, rule.reason), []).append(name)
            elif sibling:
                out.notes.append(f"{rel} needs {name}: not found -- an alternative build: {sibling} finds all it needs")
            elif not ctx.gpu.gpus and _is_driver_lib(name):
                out.soft.setdefault(name, []).append((rel, found))
            elif _on_demand(d, rel, paths[rel], scans[paths[rel]].info, stack):
                out.on_demand.setdefault(name, []).append(rel)
                if found.error:  # found, but the loader fails there: say why, not "not found"
                    out.warns.append(f"{rel} needs {name}: {found.error} -- loaded on demand: no shipped object names "
                                     f"{rel.rpartition('/')[2]} in DT_NEEDED (a plugin its package loads by name)")
                else:
                    plugins.setdefault(rel, []).append(name)
                out.counted = True  # inferred from the links alone: no data says the package does without it
            else:
                out.hard.setdefault(name, []).append((rel, found))
    out.warns += [f"{rel} needs {', '.join(names)}: not found -- optional: {reason}"
                  for (rel, reason), names in optional.items()]
    out.warns += [f"{rel} needs {', '.join(names)}: not found -- loaded on demand: no shipped object names "
                  f"{rel.rpartition('/')[2]} in DT_NEEDED (a plugin its package loads by name, only when that "
                  "feature is used)" for rel, names in plugins.items()]
    return out


def _verdict(ctx: DoctorContext, d: Distribution, objects: list[tuple[str, Path]], scans: Mapping[Path, _Scan],
             stack: _Stack, objects_of: Mapping[str, list[tuple[str, Path]]] | None = None) -> CheckResult:
    cid = f"sharedlibs:{d.key}"
    title = f"{d.name} {d.version}: its {len(objects)} shared object(s) find the libraries they need (read, not loaded)"
    bad: list[str] = []
    missing: dict[str, list[tuple[str, Found]]] = {}
    via: dict[str, int] = {}
    foreign = checked = 0
    clean: set[str] = set()
    provides: dict[str, tuple[str, str]] | None = None
    by_package: list[str] = []
    partial: list[str] = []  # found through some loader chains only
    stubs: list[str] = []  # a stub libcuda the search ends at
    for rel, path in objects:
        s = scans[path]
        if s.error is not None and _linker_script(path) and not ({rel.rpartition("/")[2], os.path.realpath(path)}
                                                                  & stack.linked):
            by_package.append(f"note: {rel} is a linker script (`INPUT(...)`: what `-l` reads when building against "
                              "it), not a shared object, and no shipped object needs it: not judged")
            continue
        if s.error is not None:
            bad.append(f"{rel}: {s.error}")
            continue
        if s.foreign:
            if is_python_extension(path):  # issue 28.5: the interpreter can never load it, so it is no "ok"
                bad.append(f"{rel}: built for another machine ({s.info.machine.removeprefix('EM_').lower()}), a Python "
                           "extension module this interpreter can never load: the wheelhouse was staged for another target")
            else:
                foreign += 1
            continue
        checked += 1
        found_all = True
        for found in s.found:
            if found.path is None and not found.error and _on_demand(d, rel, path, s.info, stack):
                provides = _provides_with_requirements(ctx, d, objects, scans, stack, objects_of or {}) \
                    if provides is None else provides
                own_path = provides[found.name][2] if found.name in provides else ""
                required = {v for file, versions in s.info.version_needs if file == found.name for v in versions}
                if own_path and (not required or _defines(own_path, required)) \
                        and os.path.realpath(own_path) in stack.imported:
                    # its package loaded that object before it loads this plugin (and it has the versions asked)
                    own, what, _ = provides[found.name]
                    by_package.append(f"{rel} needs {found.name}: {own} ({what}), already loaded when its "
                                      "package loads this plugin by name")
                    via["package"] = via.get("package", 0) + 1
                    continue
            if found.path is None:
                found_all = False
                missing.setdefault(found.name, []).append((rel, found))
            else:
                via[found.via] = via.get(found.via, 0) + 1
                if found.name.startswith("libcuda.so") and found.via != "loaded" and is_stub(Path(found.path)):
                    # links:stubs looks in the NVIDIA folders only: a stub in a package's own folder, found through
                    # its RPATH, shadows the driver in every process that imports it (cuInit: CUDA_ERROR_STUB_LIBRARY)
                    stubs.append(f"{rel} needs {found.name}: the loader finds {found.path} ({_VIA.get(found.via, found.via)}), "
                                 "a stub libcuda (it links, and every CUDA call then fails) ahead of the driver's")
                if found.via == "some-chains":
                    partial.append(f"{rel} needs {found.name}: {found.note}")
        if found_all:
            clean.add(rel)
    m = _sort_misses(ctx, d, missing, clean, dict(objects), scans, stack)
    if ctx.gpu.gpus:
        bad += stubs  # with a driver here, the stub is what the engine maps instead of it
    else:
        partial += [f"{s} (no GPU here: on the GPU box the driver's would be shadowed)" for s in stubs]
    lines = list(bad)
    for name, every in {**m.hard, **m.soft}.items():
        by_error: dict[str, list[tuple[str, Found]]] = {}  # "": not found; else the file the loader stops at, and why
        for rel, found in every:
            by_error.setdefault(found.error, []).append((rel, found))
        for error, needers in by_error.items():
            shown = ", ".join(rel for rel, _ in needers[:_SHOWN]) + (f" (+{len(needers) - _SHOWN} more)"
                                                                     if len(needers) > _SHOWN else "")
            where = ", ".join(needers[0][1].searched) or "nowhere to search"
            extra = " (the NVIDIA driver's library; this machine has no GPU driver)" if name in m.soft else ""
            lines.append(f"{shown} needs {name}: {error or f'not found{extra}; searched {where}'}")
    caller = [f"note: {rel} finds {found.name} through {os.path.dirname(found.path)}, an LD_LIBRARY_PATH entry only "
              "the caller's environment gives (`wh serve` keeps it for the engine; an engine started without it misses "
              "it: the manifest's [serve] env makes it part of the stack)"
              for rel, path in objects if scans[path].error is None and not scans[path].foreign
              for found in scans[path].found
              if found.path and found.via == "ld_library_path" and os.path.dirname(found.path) in stack.caller_extra]
    data = {"objects": len(objects), "checked": checked, "other_machine": foreign, "found_via": via,
            "missing": {n: [rel for rel, _ in v] for n, v in missing.items()}, "unloadable": bad, "notes": m.notes,
            "on_demand": m.on_demand, "caller_ld_library_path": list(stack.caller_extra), "by_package": by_package}
    if bad or m.hard:
        return CheckResult(cid, title, "fail", "\n".join(lines + m.warns + m.notes + caller) + stack.note,
                           hint="install what provides the missing library (an nvidia-* wheel in the wheelhouse, or "
                                "the system package) and re-run `wh doctor --check sharedlibs`; a folder the engine "
                                "needs goes in the manifest's [serve] env LD_LIBRARY_PATH; an empty or truncated "
                                f".so is a broken install of {d.name}: reinstall it: `{reinstall_command(ctx, d.name)}`",
                           data={**data, **({"reinstall": [d.key]} if bad else {})})
    if m.soft or m.warns or partial:
        counted = bool(m.soft) or m.counted or bool(partial)
        said = [] if counted else [_BY_DESIGN]
        return CheckResult(cid, title, "warn", "\n".join(lines + partial + m.warns + m.notes + caller + said),
                           hint="on the GPU box the driver provides it; run `wh doctor` there" if m.soft else
                           "the library needs its own RPATH or RUNPATH (a rebuild of the package); until then only an "
                           "import order that loads the chain that finds it first works" if partial and not m.warns else
                           "fine unless the engine uses that feature; install the library it names to use it",
                           data=data, strict=counted)
    total = sum(via.values())
    how = ", ".join(f"{n} {_VIA.get(k, k)}" for k, n in sorted(via.items(), key=lambda kv: -kv[1]))
    ev = f"{checked} shared object(s), {total} needed librar{'y' if total == 1 else 'ies'} found" + (
        f": {how}" if how else "")
    if foreign:
        ev += f"; {foreign} built for another machine, not checked"
    return CheckResult(cid, title, "ok", "\n".join([ev, *by_package, *m.notes, *caller]), data=data)


# A warn every miss of which doctor/sharedlibs.toml names optional: by design, the package does without it here
# (the report says "not counted by --strict", from ``strict``).
_BY_DESIGN = "optional by design: every miss is named optional in doctor/sharedlibs.toml and absent on this host"

_VIA = {"loaded": "already loaded", "rpath": "via RPATH", "runpath": "via RUNPATH", "ld_library_path": "via LD_LIBRARY_PATH",
        "cache": "via the ldconfig cache", "default": "in the default folders", "path": "by path",
        "package": "loaded by its package first", "some-chains": "through some of its loaders' RPATH only"}


def run(ctx: DoctorContext) -> list[CheckResult]:
    dists = [(d, objs) for d in sorted(ctx.distributions.values(), key=lambda d: d.key)
             if ctx.wants(f"sharedlibs:{d.key}") for objs in [shared_objects(d)] if objs]
    if not dists:
        return []
    env, caller_extra = engine_loader_environment(ctx)
    facts, record, why = gather_loader_facts(ctx, env)
    if facts is None:
        return [CheckResult("sharedlibs:loader", CHECKS["sharedlibs:loader"], "fail", why or "",
                            hint="check that the interpreter starts in the engine environment: `eval \"$(wh env)\"`")]
    note = "".join(f"\n(import {mod} failed in the loader probe: {err}; the libraries it would have loaded are "
                   f"not counted as loaded, see native:{mod})" for mod, err in (record.get("import_errors") or {}).items())

    # Every distribution's objects are read (not only the selected ones): who links a plugin may live elsewhere.
    every = dists if not ctx.patterns else [
        (d, objs) for d in sorted(ctx.distributions.values(), key=lambda d: d.key) for objs in [shared_objects(d)] if objs]
    # The import system maps each extension module by its path: a root of its own, whatever else needs it.
    by_path = [os.path.realpath(os.path.join(d.location, rel)) for d, _ in every if d.location
               for rel, _ in (*d.extensions, *pyinit_modules(Path(d.location), d.library_candidates))]
    scans = _scan(ctx, [path for _, objs in every for _, path in objs], facts, frozenset(by_path))
    suffixes = tuple(ctx.facts.get("extension_suffixes") or (".so",))
    stack = _Stack(_linked(scans, suffixes, frozenset(by_path)), load_optional(), suffixes, caller_extra, note,
                   frozenset(_Graph.of(scans).loaded_from(by_path)))
    objects_of = {d.key: objs for d, objs in every}
    results = [_verdict(ctx, d, objs, scans, stack, objects_of) for d, objs in dists]
    since = record.get("reused_since")
    if since:  # the ELF files were read now; the loader's own facts come from an earlier run of its probe
        reused = (f"(the loader's facts are unchanged since {since}, reused: the loader cache, its folders and every "
                  "file the loader probe loaded are as they were)")
        results = [dataclasses.replace(r, evidence=f"{r.evidence}\n{reused}",
                                       data={**r.data, "loader_reused_since": since}) for r in results]
    return results
