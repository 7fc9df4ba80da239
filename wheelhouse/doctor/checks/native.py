"""native: every installed distribution that ships extension modules is loaded, in separate processes.

find_spec only proves a directory exists; a present-but-unimportable native
package suppresses the fallback written for its absence (the reference deployment:
sgl_kernel's sm100 .so with an undefined torch symbol). So the verdict is the import itself:
every top-level name the distribution provides (a pure-Python one that raises
counts too), then every extension module it ships by its dotted name
(``pkg.sub._ext``), because engines load theirs lazily on the serving path.

An architecture variant (a module under a folder named for a GPU architecture,
``sgl_kernel/sm100/common_ops.so``) that no GPU here can use is not loaded: the
package never loads it on this card, so its failure would be a false red. Which
GPU it is for comes from its own kernels (the ``.nv_fatbin`` it embeds) when it
has any, else from the folder's name; the evidence says which. Without a GPU
nothing says which variant a package would pick, so everything is loaded.

Only a Python extension module is imported by its dotted name: a ``.so`` whose
dynamic symbols lack ``PyInit_<name>`` is a library its package loads by path
(``torch.ops.load_library``, ctypes, dlopen); the sharedlibs check links it, and
the evidence lists it as such. Nor is a module imported by a name the package
never uses for it: when find_spec does not resolve that name to that file, or
the package's import already loaded the file under another name (cv2's loader
imports ``cv2/cv2.abi3.so`` as ``cv2``), the top-level import is what covers it. A
name served by another copy of the package (earlier on sys.path) is imported all the same: that copy is
what the engine loads.
A module that, imported first, is a circular import back into itself is loaded
through the sibling the cycle runs through (``scipy.linalg._matfuncs_sqrtm_triu``
through ``_matfuncs_sqrtm``), as its package loads it; the evidence names it.

Discovery comes from the files (:mod:`wheelhouse.doctor.extensions`): RECORD and the target interpreter's
suffixes, in its order; a ``lib*.so`` exporting ``PyInit_`` is a module; a file built for another target is a
fail naming both targets (no drop: the wheelhouse is to be staged again).

Which failures are red (:mod:`wheelhouse.doctor.severity`): what the stack loads (its entry modules, what
importing them loads, every top-level name), and any lazily loaded module whose failure no data calls
optional. A lazily loaded module nothing reaches whose failure is an optional dependency named in
``doctor/optional.toml`` (the image's matplotlib lacking tkinter, numba's TBB pool) is a warning with the
reason, and so is a build for CPU features this host lacks (faiss's ``_swigfaiss_avx512``: SIGILL imported by
its name, while its package's import does not load it). Who installed a distribution never changes a verdict.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from wheelhouse.elf import BadElf, LoaderFacts, exported_init_functions, exports_pyinit
from wheelhouse.doctor.extensions import (ForeignFile, TargetInterpreter, by_import_order, foreign_by_elf,
                                          foreign_by_name, pyinit_modules, target_interpreter)
from wheelhouse.fatbin import device_code, sm_number
from wheelhouse.doctor.imports import ImportOutcome, import_modules, traceback_files
from wheelhouse.doctor.optional import OptionalData, load_optional_modules
from wheelhouse.doctor.report import CheckResult
from wheelhouse.doctor.severity import Judgement, StackReach, entry_modules, judge_failure, stack_reach
from wheelhouse.doctor.workingfolder import first_path_entry, shadowing_modules
from wheelhouse.install.installed import same_path
from wheelhouse.doctor.loaderevidence import loader_witness
from wheelhouse.doctor.probes import trace_span
from wheelhouse.target.gpu import Gpu
from .context import DoctorContext, Distribution, reinstall_command
from .libraries import judge_libraries, library_probes
from .sharedlibs import gather_loader_facts, load_optional

__all__ = ["GROUP", "CHECKS", "run", "native_distributions", "NotLoaded", "LoadPlan", "variant_for_other_gpu",
           "is_extension_module", "load_plan"]

_SHOWN = 6  # extension modules named in an ok verdict; the JSON data lists every one

GROUP = "native"
CHECKS = {"native:<distribution>": "every top-level name and every extension module of the distribution loads "
                                   "(executed, batched, each failure confirmed in a process of its own)",
          "native:unlisted-code": "what the stack's imports load, under names installed distributions ship, comes "
                                  "from files a RECORD lists",
          "native:working-folder": "the folder the [serve] command searches first holds none of the stack's packages",
          "native:entry:<module>": "an entry module of the stack (manifest [doctor] entry) that no distribution's "
                                   "check covers imports"}
_ARCH_FOLDER = re.compile(r"^sm_?(\d{2,3})[af]?$")  # sm90, sm_90a, sm100, sm100f


@dataclass(frozen=True)
class NotLoaded:
    """An extension module deliberately left unloaded: an architecture variant for a GPU that is not here."""

    module: str
    path: str
    reason: str  # "built for sm_100; GPU 0 is sm_89"
    decided_by: str  # "its kernels (fatbin)" | "its folder name"

    def to_json(self) -> dict[str, str]:
        return {"module": self.module, "path": self.path, "reason": self.reason, "decided_by": self.decided_by}


def native_distributions(ctx: DoctorContext) -> list[Distribution]:
    """Installed distributions with at least one extension module on disk (for this interpreter or another)."""
    return sorted((d for d in ctx.distributions.values()
                   if d.extension_modules or d.foreign_extensions or _pyinit_libraries(d)), key=lambda d: d.key)


def _pyinit_libraries(d: Distribution) -> list[tuple[str, str]]:
    return pyinit_modules(Path(d.location or ""), d.library_candidates) if d.library_candidates else []


def _gpus_here(gpus: Sequence[Gpu]) -> str:
    return ", ".join(f"GPU {g.index} is {g.sm}" for g in gpus if g.sm)


def variant_for_other_gpu(module: str, path: str | Path, relpath: str, gpus: Sequence[Gpu],
                          driver_cuda: str | None = None) -> NotLoaded | None:
    """Is extension module ``module`` (``relpath`` in its site dir) an architecture variant no GPU here can use?

    None means: load it.
    """
    folders = [p for p in relpath.split("/")[:-1] if _ARCH_FOLDER.match(p)]
    usable = [g for g in gpus if g.compute_capability]
    if not folders or not usable:
        return None
    code = device_code(path)
    if code is not None and (code.sass or code.ptx):
        if any(code.runs_on(g.compute_capability, driver_cuda) for g in usable):
            return None
        return NotLoaded(module, str(path), f"kernels for {code.describe()} only; {_gpus_here(usable)}",
                         "its kernels (fatbin)")
    arch = int(_ARCH_FOLDER.match(folders[-1]).group(1))
    for g in usable:
        sm = sm_number(g.compute_capability)
        if sm // 10 == arch // 10 and sm % 10 >= arch % 10:  # SASS compatibility: same major, minor <= the GPU's
            return None
    return NotLoaded(module, str(path), f"built for sm_{arch}; {_gpus_here(usable)}", "its folder name")


@dataclass(frozen=True)
class LoadPlan:
    """What to load of one distribution, and what is deliberately not loaded by name."""

    modules: tuple[str, ...]  # top-level names (and manifest-named modules), then extension modules
    files: dict[str, str]  # extension module -> its file: imported by that name only if that is how it is found
    skipped: tuple[NotLoaded, ...] = ()
    libraries: tuple[str, ...] = ()  # .so files without PyInit_ (RECORD paths): loaded by path, link-checked
    missing: dict[str, str] = field(default_factory=dict)  # extension module -> its RECORD path, not on disk
    relpaths: dict[str, str] = field(default_factory=dict)  # extension module -> the RECORD path of the file loaded
    foreign: tuple[ForeignFile, ...] = ()  # modules whose only file is built for another target: never loadable
    other_builds: tuple[str, ...] = ()  # another target's build beside a loadable one (RECORD paths): never loaded
    shadowed: tuple[tuple[str, str], ...] = ()  # (file never loaded, the file the import system takes instead)
    count: int = 0  # extension module files (for this interpreter or another), libraries not counted
    library_keys: dict[str, str] = field(default_factory=dict)  # "pkg._C@library" -> its RECORD path: load-checked


def is_extension_module(path: str | Path) -> bool:
    """Does ``path`` export the init function of the module its file name names (``_C`` for ``_C.abi3.so``), or
    any other Python init function (``PyInit_core`` in ``_core.abi3.so``: a module built under another name, whose
    import by this name fails)? Else it is a library its package loads by path (torchvision's ``_C.so``).

    A file the loader cannot map counts as a module: importing it shows the real error.
    """
    try:
        return exports_pyinit(path, Path(path).name.split(".", 1)[0]) or bool(exported_init_functions(path))
    except BadElf:
        return True


def _module_of_path(relpath: str) -> str:
    """``pkg/sub/_ext.cpython-312-aarch64-linux-gnu.so`` -> ``pkg.sub._ext``."""
    folder, _, base = relpath.rpartition("/")
    return ".".join([*(folder.split("/") if folder else []), base.split(".", 1)[0]])


def load_plan(ctx: DoctorContext, d: Distribution, here: TargetInterpreter | None = None) -> LoadPlan:
    """What to load for ``d``: its top-level names (and manifest-named modules), then its extension modules.

    ``here``: the target interpreter's loading rules (suffix order, machine); read from ``ctx`` when not given.
    """
    here = here or target_interpreter(ctx.facts, ctx.python)
    named = [r.module for r in (ctx.manifest.drops if ctx.manifest else ())
             if r.module and r.distribution.lower().replace("_", "-") == d.key]
    location = Path(d.location or "")
    libraries = [rel for rel, _ in d.extensions if not is_extension_module(location / rel)]
    extensions = [*d.extensions, *_pyinit_libraries(d)]
    # A top-level name that only a library at the top provides (no package folder, no .py) is no module.
    at_top = {m: rel for rel, m in extensions if "/" not in rel}
    library_names = {m for m, rel in at_top.items() if rel in libraries
                     and not any(r not in libraries for r, n in extensions if n == m)
                     and not (location / m).is_dir() and not (location / f"{m}.py").is_file()}
    modules = [n for n in dict.fromkeys([*d.import_names, *named]) if n not in library_names]
    skipped: list[NotLoaded] = []
    files: dict[str, str] = {}
    missing: dict[str, str] = {}
    relpaths: dict[str, str] = {}
    foreign: list[ForeignFile] = []
    shadowed: list[tuple[str, str]] = []
    # Where several files serve one name, the import system takes the first suffix in its order: that file.
    ordered = by_import_order([(rel, m) for rel, m in extensions if rel not in libraries], here.suffixes)
    for module, (relpath, *others) in ordered.items():
        shadowed += [(o, relpath) for o in others]
        if not all(p.isidentifier() for p in module.split(".")):
            continue
        if not os.path.lexists(location / relpath):
            # find_spec of its name is None then, which is no reason to call it covered by its package.
            missing[module] = relpath
            if module not in modules:
                modules.append(module)
            continue
        alien = foreign_by_elf(relpath, location / relpath, module, here)
        if alien is not None:
            foreign.append(alien)
            continue
        if module in modules:
            continue  # a top-level extension module: its top-level import loads it
        variant = variant_for_other_gpu(module, location / relpath, relpath, ctx.gpu.gpus, ctx.gpu.cuda_version)
        if variant is not None:
            skipped.append(variant)
        else:
            modules.append(module)
            files[module] = str(location / relpath)
            relpaths[module] = relpath
    other_builds = []
    for relpath, tag in d.foreign_extensions:
        module = _module_of_path(relpath)
        if module in ordered:
            other_builds.append(relpath)  # this interpreter's build of the same module is what loads
        else:
            foreign.append(foreign_by_name(relpath, tag, module, here))
    library_keys = library_probes(location, libraries, _module_of_path)
    files.update({key: str(location / rel) for key, rel in library_keys.items()})
    return LoadPlan(tuple(modules), files, tuple(skipped), tuple(libraries), missing, relpaths, tuple(foreign),
                    tuple(other_builds), tuple(shadowed), len(extensions) - len(libraries) + len(d.foreign_extensions),
                    library_keys)


# The reason of a warning --strict does not count (the report says "not counted by --strict", from ``strict``).
_BY_DESIGN = ("optional by design: each module is one nothing in the stack reaches and that its distribution does "
              "without (named optional in doctor/*.toml, a build for another CUDA major or for CPU features this host "
              "lacks, a module its metadata does not require, or a file another distribution replaces)")


def _failure_lines(bad: list[ImportOutcome], unloaded: list[str], judged: Mapping[str, Judgement],
                   plan: LoadPlan) -> list[str]:
    """One paragraph per failed module, then the extension modules whose top-level package did not import."""
    parts = [f"{f.module} cannot load: {f.reason}" for f in plan.foreign]
    for o in bad:
        line = f"import {o.module}: {o.summary}"
        if o.module in plan.relpaths and o.module in {m for m, _ in _shadowing(plan)}:
            line += f" ({plan.relpaths[o.module]})"
        if o.found:
            line += f" -- find_spec({o.module!r}) succeeds ({o.origin}) but the import fails"
        elif o.found is False:
            line += f" -- find_spec({o.module!r}) is None"
        if o.shadowed:
            line += f" -- another copy of its package is imported instead, from {o.shadowed}"
        if o.reused_since:
            line += (f" (a warning stored {o.reused_since}, reused: nothing that could change it changed since; "
                     "--thorough executes it)")
        detail = o.traceback or o.output
        j = judged.get(o.module)
        why = f"\na {'warning' if j.severity == 'warn' else 'fail'}: {j.reason}" if j else ""
        parts.append(line + ("\n" + detail.rstrip() if detail else "") + why)
    by_top: dict[str, list[str]] = {}
    for m in unloaded:
        by_top.setdefault(m.split(".", 1)[0], []).append(m)
    parts += [f"not loaded, as {top} does not import: {', '.join(mods)}" for top, mods in by_top.items()]
    return parts


def _reuse_note(reused: Mapping[str, str], judged: int, ok: bool = True) -> str:
    """Evidence that says which verdicts were not executed this run (the verdict cache, ``--thorough`` re-runs)."""
    since = min(reused.values())
    head = "ok" if ok else "reused, a stored warning among them"
    return (f"{head} (unchanged since {since}): {len(reused)} of {judged} import verdict(s) reused, not executed this "
            "run: every file their import loaded, the interpreter, the environment, the GPU facts, wh and the probe "
            "are as they were (`--thorough` executes them again)")


def _shadowing(plan: LoadPlan) -> list[tuple[str, str]]:
    """(module, the file it is loaded from) for each module another file of the same name stands behind."""
    chosen = {rel: m for m, rel in plan.relpaths.items()}
    return [(chosen[first], first) for _, first in plan.shadowed if first in chosen]


def _not_by_name(plan: LoadPlan, covered: list[ImportOutcome], through: list[ImportOutcome]) -> list[str]:
    """Evidence for what was deliberately not imported by its dotted name."""
    out = [f"not loaded: {s.module} ({s.reason}; decided by {s.decided_by})" for s in plan.skipped]
    out += [f"loaded by its package, not by name: {o.module} ({o.covered})" for o in covered]
    out += [f"loaded through {o.via}: {o.module} (imported first, it is a circular import back into itself)"
            for o in through]
    out += [f"never loaded: the import system takes {first} for that name (its suffix comes first): {rel}"
            for rel, first in plan.shadowed]
    if plan.other_builds:
        out.append("another target's build, never loaded here: " + ", ".join(plan.other_builds))
    if plan.libraries:
        out.append("library its package loads by path (no Python init function, not imported by name; loaded "
                   "after its package's import, links checked by sharedlibs): " + ", ".join(plan.libraries))
    return out


def _verdict(d: Distribution, plan: LoadPlan, outcomes: Mapping[str, ImportOutcome], reach: StackReach,
             data: OptionalData, installed: Mapping[str, Distribution], reinstall: str | None = None,
             sites: Sequence[str] = (), listed: "RecordIndex | None" = None) -> CheckResult:
    """The distribution's verdict on its modules, then on the libraries its package loads by path."""
    return judge_libraries(d, plan.library_keys, outcomes,
                           _outside_copy(d, plan, outcomes, sites, listed or RecordIndex(installed),
                                         _module_verdict(d, plan, outcomes, reach, data, installed, reinstall)))


class RecordIndex:
    """Whether a file is one an installed distribution's RECORD lists (built at the first question; a path spelled
    through a linked folder, ``lib64`` for ``lib``, compared by its folders' real paths, only when the plain
    spelling misses)."""

    def __init__(self, installed: Mapping[str, Distribution]) -> None:
        self._installed = installed
        self._plain: set[str] | None = None
        self._real: set[str] | None = None
        self._folders: dict[str, str] = {}  # same_path's memo: one realpath per folder, not per file
        self._shipped: set[str] | None = None  # the top-level names RECORDs ship (a package folder, a module, an extension)
        self._sites: dict[str, dict[str, str]] = {}  # top-level name -> {distribution: its site folder}
        self._files_of: dict[str, set[str]] = {}  # distribution -> the files its RECORD lists (asked of few)

    def misplaced(self, module: str, path: str) -> bool:
        """Whether ``module`` was loaded from ``path`` although a RECORD ships its top-level name in a site folder,
        ``path`` is not under it there, and no distribution that ships the name lists ``path``: a copy another
        distribution lists at another place (a vendored ``legacy_bundle/vendor/engine/`` a ``.pth`` hook puts
        first), which the engine runs instead. (pytest ships ``py.py`` and serves ``py.error`` from its own
        ``_pytest/_py/error.py``: its own file, not misplaced.)"""
        if not self.ships(module):
            return False
        top = module.split(".", 1)[0]
        shippers = self._sites.get(top)
        if not shippers:
            return False
        where = os.path.normpath(path)
        real = same_path(where, self._folders)
        for key, site in shippers.items():
            base = os.path.join(site, top)
            real_base = same_path(base, self._folders)
            if where.startswith((base + os.sep, base + ".")) or real.startswith((real_base + os.sep, real_base + ".")):
                return False  # under its name's folder, or its module/extension file, there
        for key, site in shippers.items():
            if key not in self._files_of:
                d = self._installed[key]
                self._files_of[key] = {os.path.normpath(os.path.join(site, rel)) for rel, _, _ in d.record.rows}
            if where in self._files_of[key]:
                return False  # the distribution that ships the name serves it from another file of its own
        return True

    def ships(self, module: str) -> bool:
        """Whether an installed RECORD ships ``module``'s top-level name (read once, with where each one ships it)."""
        if self._shipped is None:
            self._shipped = set()
            for d in self._installed.values():
                for rel, _, _ in d.record.rows:
                    head = rel.split("/", 1)[0]
                    if not head.startswith(".") and not head.endswith((".dist-info", ".data", ".pth")):
                        self._shipped.add(head.split(".", 1)[0])
                        if d.location:
                            self._sites.setdefault(head.split(".", 1)[0], {})[d.key] = os.path.normpath(d.location)
        return module.split(".", 1)[0] in self._shipped

    def suspect(self, module: str, path: str) -> bool:
        """Whether ``module``'s file ``path`` is one no RECORD lists, or one listed at another place (:meth:`misplaced`):
        what an import outcome keeps of the files its import reached."""
        return path not in self or self.misplaced(module, path)

    def __contains__(self, path: str) -> bool:
        if self._plain is None:
            self._plain = {os.path.normpath(os.path.join(d.location, rel)) for d in self._installed.values()
                           if d.location for rel, _, _ in d.record.rows}
        if os.path.normpath(path) in self._plain:
            return True
        if self._real is None:
            self._real = {same_path(p, self._folders) for p in self._plain}
        return same_path(path, self._folders) in self._real


def _provides(d: Distribution, module: str) -> bool:
    """Whether ``d``'s RECORD holds ``module`` (its package folder, its ``.py``, an extension file of that name)."""
    path = module.replace(".", "/")
    return any(rel == path + ".py" or rel.startswith(path + "/") or (rel.startswith(path + ".") and ".so" in rel)
               for rel, _, _ in d.record.rows)


def _outside_copy(d: Distribution, plan: LoadPlan, outcomes: Mapping[str, ImportOutcome], sites: Sequence[str],
                  listed: RecordIndex, result: CheckResult) -> CheckResult:
    """An ok where the modules imported come from a copy outside every site folder (the caller's PYTHONPATH, a
    checkout the working folder puts first), or from a file no installed RECORD lists (a copy a ``.pth`` puts
    first, one in a folder merely named site-packages, a stray build beside the listed one): the installed files
    were never loaded, so they are not judged ok."""
    if result.verdict != "ok":
        return result
    roots = [os.path.join(os.path.realpath(s), "") for s in sites]
    outside = sorted({o.shadowed for m in plan.modules if (o := outcomes.get(m)) is not None and o.ok and o.shadowed
                      and not os.path.join(os.path.realpath(o.shadowed), "").startswith(tuple(roots))})
    home = os.path.join(os.path.realpath(d.location), "") if d.location else None
    unlisted = sorted({f"{m} from {o.origin}" for m in plan.modules
                       if (o := outcomes.get(m)) is not None and o.ok and not o.covered and o.origin
                       and os.path.isabs(o.origin) and o.origin not in listed and os.path.isfile(o.origin)
                       and ((home and os.path.realpath(o.origin).startswith(home)) or _provides(d, m))})
    if not outside and not unlisted:
        return result
    lines = []
    if outside:
        lines.append(f"the installed copy was not loaded: {d.name}'s modules are imported from {', '.join(outside)}, "
                     "outside every site folder (PYTHONPATH, the working folder): the installed files are not judged")
    if unlisted:
        lines.append(f"loaded from a file no installed RECORD lists (another copy on sys.path, a .pth's folder, or a "
                     f"stray build beside the listed one): {'; '.join(unlisted[:_SHOWN])}"
                     + (f"; and {len(unlisted) - _SHOWN} more" if len(unlisted) > _SHOWN else "")
                     + f": {d.name}'s installed files are not what the engine loads")
    return replace(
        result, verdict="warn", evidence="\n".join([result.evidence, *lines]),
        hint="take that folder off sys.path (unset PYTHONPATH, or remove the .pth file that adds it), or remove the "
             "stray file, and run the doctor again to judge the installed files",
        data={**result.data, **({"outside_copy": outside} if outside else {}),
              **({"unlisted_origin": unlisted} if unlisted else {})})


def _module_verdict(d: Distribution, plan: LoadPlan, outcomes: Mapping[str, ImportOutcome], reach: StackReach,
                    data: OptionalData, installed: Mapping[str, Distribution],
                    reinstall: str | None = None) -> CheckResult:
    """``installed``: every distribution, by canonical name; ``reach``: what the stack loads."""
    cid = f"native:{d.key}"
    mods = list(plan.modules)
    nlib = len(plan.libraries)
    title = f"{d.name} {d.version} loads ({plan.count} extension module(s)" + (
        f", {nlib} librar{'y' if nlib == 1 else 'ies'})" if nlib else ")")
    bad = [outcomes[m] for m in mods if m in outcomes and not outcomes[m].ok]
    unloaded = [m for m in mods if m not in outcomes]  # under a top-level name that failed
    covered = [outcomes[m] for m in mods if m in outcomes and outcomes[m].covered]
    seconds = sum(outcomes[m].seconds for m in mods if m in outcomes and not outcomes[m].reused_since)
    tops = [m for m in d.import_names if m in mods]  # not a name only a library provides
    exts = [m for m in mods if m not in tops and m not in {o.module for o in covered}]
    notes = _not_by_name(plan, covered, [outcomes[m] for m in mods if m in outcomes and outcomes[m].via])
    reused = {m: outcomes[m].reused_since for m in mods if m in outcomes and outcomes[m].reused_since}
    if reused:
        notes.append(_reuse_note(reused, len([m for m in mods if m in outcomes]),
                                 all(outcomes[m].ok for m in reused)))
    data_out = {"reused": reused, "executed": [m for m in mods if m in outcomes and not outcomes[m].reused_since
                                               and m not in plan.missing],
                "modules": mods, "not_loaded": [s.to_json() for s in plan.skipped], "libraries": list(plan.libraries),
                "covered": [{"module": o.module, "reason": o.covered} for o in covered],
                "through": {m: outcomes[m].via for m in mods if m in outcomes and outcomes[m].via},
                "foreign": [f.to_json() for f in plan.foreign],
                "shadowed": [{"path": rel, "loaded_instead": first} for rel, first in plan.shadowed]}
    if not mods and not plan.foreign:
        return CheckResult(cid, title, "skip", "no importable top-level name found in its RECORD"
                           + "".join(f"; {n}" for n in notes), data=data_out)
    if not bad and not unloaded and not plan.foreign:
        shown = ", ".join(exts[:_SHOWN]) + (f", and {len(exts) - _SHOWN} more" if len(exts) > _SHOWN else "")
        ev = (f"imported {', '.join(tops) or 'nothing at top level'} and loaded {len(exts)} extension module(s) "
              f"in separate processes{': ' + shown if exts else ''}" + "".join(f"; {n}" for n in notes))
        return CheckResult(cid, title, "ok", ev, data=data_out, seconds=seconds)
    judged = {o.module: judge_failure(d, o, plan.relpaths.get(o.module) or plan.missing.get(o.module), reach, data,
                                      installed, plan.relpaths) for o in bad}
    failures = [{"module": o.module, "found": o.found, "error_type": o.error_type, "error": o.error,
                 "missing": o.missing, "crash": o.crash, "severity": judged[o.module].severity,
                 "why": judged[o.module].reason, "files": traceback_files(o.traceback),
                 "cause_files": list(o.cause_files),
                 "causes": [f"{t}: {e}" for t, e, _ in o.chain]} for o in bad]
    failures += [{"module": f.module, "error_type": "ForeignBuild", "error": f.reason, "severity": "fail",
                  "why": "the interpreter can never load it"} for f in plan.foreign]
    evidence = "\n".join(_failure_lines(bad, unloaded, judged, plan) + notes)
    red = [o for o in bad if judged[o.module].severity == "fail"]
    payload = {**data_out, "failures": failures}
    if plan.foreign:
        # Files for another CPython, ABI, machine or libc: a drop would not mend the stack, a wheelhouse for
        # this interpreter would.
        return CheckResult(cid, title, "fail", evidence,
                           hint=f"stage the wheelhouse for this interpreter ({plan.foreign[0].here}): `wh target "
                                "capture` here, then `wh stage --target <that profile>` and `wh install` again",
                           data=payload, seconds=seconds)
    if not red and not unloaded:
        # Every such warning is a module nothing in the stack reaches, which its distribution does without by
        # design (the data, its CUDA or CPU variant builds, its own metadata): --strict does not count it. A
        # SIGILL no data explains (a CPU variant whose name says no feature) is no drop either, but is counted.
        counted = any(j.strict for j in judged.values())
        return CheckResult(cid, title, "warn", evidence + ("" if counted else "\n" + _BY_DESIGN),
                           hint=f"only code that uses {', '.join(judged)} is affected; install what it needs "
                                f"(or rebuild the image) if the engine takes that path",
                           data=payload, seconds=seconds, strict=counted)
    if red and not unloaded and all(o.module in plan.missing for o in red):
        # Files its RECORD lists are gone: a damaged install, which a reinstall mends. A drop would take
        # away a distribution that works once it is whole (install:records names the files too).
        return CheckResult(cid, title, "fail", evidence,
                           hint=f"reinstall {d.name}: `{reinstall or f'wh install WHEELHOUSE --reinstall {d.key}'}`",
                           data={**payload, "reinstall": [d.key]}, seconds=seconds)
    if red and all(o.shadowed for o in red):
        # Another copy of the package, earlier on sys.path, is what fails: uninstalling this distribution
        # (a drop) would take away the healthy copy and leave the broken one in the engine's way.
        shadows = sorted({o.shadowed for o in red})
        return CheckResult(cid, title, "fail", evidence,
                           hint=f"the engine imports {d.name}'s modules from another copy ({', '.join(shadows)}): "
                                f"take that folder off sys.path (PYTHONPATH, a .pth file) or rebuild it",
                           data={**payload, "shadowed_by": shadows}, seconds=seconds)
    if any("." not in o.module for o in red) or not red:  # not red: another distribution's package failed
        reason = "import failed"
    else:
        reason = f"extension module {red[0].module} failed to load"
    drop = {"distribution": d.name, "version": d.version, "modules": tops, "reason": reason}
    return CheckResult(cid, title, "fail", evidence,
                       hint=f"`wh drop` uninstalls {d.name} so code that checks find_spec falls back cleanly "
                            f"(`wh drop --restore {d.key}` brings it back)",
                       fix=f"wh drop {d.key}", data={**payload, "drop": drop}, seconds=seconds)


def run(ctx: DoctorContext, planned: threading.Event | None = None) -> list[CheckResult]:
    """``planned``: set once the imports are planned (the run's other in-process groups wait for it; ``run_checks``
    sets it too when this returns or raises earlier)."""
    dists = [d for d in native_distributions(ctx) if ctx.wants(f"native:{d.key}")]
    entries = entry_modules(ctx)
    if not dists and not entries:
        return ([CheckResult("native:none", "no installed distribution ships extension modules", "skip",
                             "nothing to import")] if ctx.wants("native:none") and not ctx.patterns else []) \
            + _working_folder(ctx)
    here = target_interpreter(ctx.facts, ctx.python)
    plans = {d.key: load_plan(ctx, d, here) for d in dists}
    modules = [m for p in plans.values() for m in p.modules]
    files = {m: f for p in plans.values() for m, f in p.files.items()}
    # One pass: each worker imports its top-level names (and the stack's entry modules) first, what their import
    # loads is what the stack reaches, then the extension modules under them, so a package is imported once per
    # worker. An extension module under a top-level name that fails (or hangs) fails the same way, so it is not
    # loaded at all (a hang then costs one timeout, not one per module under it).
    gone = {m: (d, rel) for d in dists for m, rel in plans[d.key].missing.items()}
    tops = list(dict.fromkeys([*[m for m in modules if "." not in m], *entries]))
    if planned is not None:
        trace_span("native:planned", time.monotonic())
        planned.set()  # from here on this thread mostly waits for its import processes
    libraries = [key for p in plans.values() for key in p.library_keys]
    listed = RecordIndex(ctx.distributions)  # (the reached files an outcome keeps are those no RECORD lists)
    outcomes = _load([*tops, *[m for m in dict.fromkeys(modules) if "." in m and m not in gone and m not in tops],
                      *libraries], ctx, files, listed, always=[m for m in tops if "." in m])
    failed = {m for m, o in outcomes.items() if "." not in m and not o.ok}
    through = _through_requirers(ctx, dists, failed, modules, files, listed)
    outcomes.update(through)
    failed -= set(through)
    outcomes = {m: o for m, o in outcomes.items() if "." not in m or m in tops or m.split(".", 1)[0] not in failed}
    outcomes.update({m: _not_on_disk(m, d, rel) for m, (d, rel) in gone.items()})
    data = _optional_data()

    def judge() -> list[CheckResult]:
        reach = stack_reach(ctx, entries, outcomes)
        return [_verdict(d, plans[d.key], outcomes, reach, data, ctx.distributions, reinstall_command(ctx, d.name),
                         [str(s) for s in ctx.site_dirs], listed) for d in dists]

    results = judge()
    # A stored warning judged a fail now (the data, the manifest's entries or what the stack reaches changed): it
    # is executed again, and only that run decides. A fail is never a reused verdict.
    stale = [m for d, r in zip(dists, results) if r.verdict == "fail" for m in plans[d.key].modules
             if m in outcomes and not outcomes[m].ok and outcomes[m].reused_since]
    if stale and ctx.verdicts is not None:
        for m in stale:
            ctx.verdicts.forget("imports", _arg(m, files), ctx.engine_env)
        outcomes.update(_load(stale, ctx, files, listed, always=stale, reuse=False))
        results = judge()
    _store_warnings(ctx, dists, plans, results, outcomes, files)
    return results + _entry_results(ctx, entries, outcomes, {m for p in plans.values() for m in p.modules}) \
        + _unlisted_code(ctx, outcomes, listed, entries) + _working_folder(ctx)


def _through_requirers(ctx: DoctorContext, dists: Sequence[Distribution], failed: set[str], modules: Sequence[str],
                       files: dict[str, str], listed: RecordIndex) -> dict[str, ImportOutcome]:
    """A top-level name that fails on its own but that a distribution requiring it imports first, by design:
    psycopg-binary's ``psycopg_binary`` raises "the psycopg package should be imported before psycopg_binary", and
    ``import psycopg`` loads it and runs on it. Each such name is imported again right after its requirer's names, in
    one process of their own; where both load, its outcome is that one (``via`` the requirer), else it stays."""
    out: dict[str, ImportOutcome] = {}
    for d in dists:
        names = [n for n in d.import_names if n in failed]
        if not names:
            continue
        requirers = [o for o in ctx.distributions.values() if o.key != d.key and any(
            _requires_name(text, d.key) for text in o.requires)]
        for other in requirers:
            heads = [n for n in other.import_names if n.isidentifier()]
            if not heads:
                continue
            under = [m for m in dict.fromkeys(modules) if "." in m and m.split(".", 1)[0] in names]
            got = _load([*heads, *names, *under], ctx, files, listed, always=names, reuse=False, jobs=1,
                        families={n: heads[0] for n in [*heads[1:], *names]})
            if all(got.get(h) is not None and got[h].ok for h in heads):
                for n in names:
                    o = got.get(n)
                    if o is not None and o.ok and n not in out:
                        out[n] = replace(o, covered=f"imported after {heads[0]} of {other.name}, which requires "
                                                    f"{d.name} and loads it: on its own {n} raises, by its design")
                        out.update({m: got[m] for m in under if m.split(".", 1)[0] == n and m in got})
    return out


def _requires_name(text: str, key: str) -> bool:
    try:
        return canonicalize_name(Requirement(text).name) == key
    except InvalidRequirement:
        return False


def _unlisted_code(ctx: DoctorContext, outcomes: Mapping[str, ImportOutcome], listed: RecordIndex,
                   entries: Sequence[str]) -> list[CheckResult]:
    """``native:unlisted-code``: what importing the top-level names and entry modules loaded, module by module,
    under a top-level name an installed RECORD ships, comes from a file a RECORD lists. Else the engine runs code
    nobody installed: a shadow copy a ``.pth``, ``PYTHONPATH`` or a start-up hook puts first, or a file added
    beside the listed ones (``mypkg/core/__init__.py`` next to the listed ``core.py``, a plugin in its folder)."""
    cid = "native:unlisted-code"
    # an outcome keeps only the reached files no RECORD lists (``_load``): almost always none at all
    if not ctx.wants(cid) or not any(o.reached_files for o in outcomes.values()):
        return []
    found: dict[str, str] = {}
    entries = frozenset(entries)
    judged: set[str] = set()  # each file once: every batch process reaches torch's modules again
    for name, o in outcomes.items():
        if "." in name and name not in entries:
            continue
        for mod, path in o.reached_files.items():
            if path in judged or not listed.ships(mod):
                continue
            judged.add(path)
            if mod not in found and os.path.isfile(path) and path not in listed:
                found[mod] = f"{mod} from {path} (importing {name} loads it)"
            elif mod not in found and os.path.isfile(path) and listed.misplaced(mod, path):
                found[mod] = (f"{mod} from {path}, another distribution's file at another place than its installed "
                              f"{mod.split('.', 1)[0]} (importing {name} loads it)")
    if not found:
        return []
    shown = sorted(found.values())
    # the stack's own entry (the engine the manifest requests) served by such a copy: the staged engine never runs
    served = sorted(m for m in found if m in entries)
    return [CheckResult(cid, "what the stack's imports load comes from files a RECORD lists", "fail" if served else "warn",
                        f"{len(shown)} module(s) under names installed distributions ship were loaded from files no "
                        f"installed RECORD lists at their place: {'; '.join(shown[:_SHOWN])}"
                        + (f"; and {len(shown) - _SHOWN} more" if len(shown) > _SHOWN else "")
                        + ": the engine runs that code, not what was installed and judged"
                        + (f"; {', '.join(served)}, an entry module of the stack, is one of them" if served else ""),
                        hint="take the folder off sys.path (PYTHONPATH, a .pth file, a start-up hook) or remove the "
                             "files, then run the doctor again", data={"unlisted": shown[:200]})]


def _working_folder(ctx: DoctorContext) -> list[CheckResult]:
    """``native:working-folder``: where the ``[serve] command`` searches a folder before site-packages (``python -m``:
    the working folder, the one ``wh serve`` starts the engine in), that folder holds none of the stack's
    packages: else the engine imports that copy (a checkout of its source), not the installed one judged here."""
    serve = ctx.manifest.serve if ctx.manifest is not None else None
    cid = "native:working-folder"
    if serve is None or not ctx.wants(cid):
        return []
    first = first_path_entry(serve.command, ctx.engine_env, os.getcwd())
    if first is None:
        return []
    folder, how = first
    names = {n for d in ctx.distributions.values() for n in d.import_names}
    title = "the folder the [serve] command searches first holds none of the stack's packages"
    shadows = shadowing_modules(folder, names)
    if not shadows:
        return [CheckResult(cid, title, "ok", f"the [serve] command {how}: {folder} comes first on the engine's "
                                              "sys.path and holds none of the installed top-level names")]
    return [CheckResult(cid, title, "fail",
                        f"the [serve] command {how}: {folder} comes first on the engine's sys.path, and it holds "
                        f"{', '.join(shadows[:8])}{' and more' if len(shadows) > 8 else ''}: the engine imports "
                        "those, not the installed distributions this doctor judged",
                        hint="run `wh serve` (and `wh doctor`) from a folder without them, or start the engine with "
                             "`python -P` (Python >= 3.11) so the working folder is not searched",
                        data={"folder": folder, "shadows": shadows})]


def _arg(module: str, files: Mapping[str, str]) -> str:
    """The import probe's argument for ``module`` (as ``import_modules`` makes it): the verdict cache's key."""
    return f"{module}={files[module]}" if module in files else module


def _store_warnings(ctx: DoctorContext, dists: Sequence[Distribution], plans: Mapping[str, LoadPlan],
                    results: Sequence[CheckResult], outcomes: Mapping[str, ImportOutcome],
                    files: Mapping[str, str]) -> None:
    """Keep the failed imports of each check that is a warning every cause of which the data names optional
    (``strict`` false: never a fail, never a warning --strict counts), executed this run alone, lazily loaded
    (a dotted module), keyed by their process's evidence plus what could change their cause
    (:func:`~wheelhouse.doctor.loaderevidence.loader_witness`)."""
    if ctx.verdicts is None:
        return
    facts = None
    for d, r in zip(dists, results):
        if r.verdict != "warn" or r.strict:
            continue
        for m in plans[d.key].modules:
            o = outcomes.get(m)
            if o is None or o.ok or o.reused_since or not o.isolated or o.evidence is None or "." not in m:
                continue
            if facts is None:
                facts = _witness_facts(ctx)
                if facts is None:
                    return  # no loader facts: nothing to key a warning by, it is executed again next run
            deps, record = o.evidence
            witness = loader_witness(files.get(m) or o.origin, facts)
            ctx.verdicts.store_warning("imports", _arg(m, files), ctx.engine_env, [*deps, *witness], record)


def _witness_facts(ctx: DoctorContext) -> LoaderFacts | None:
    """The loader's facts as the import probes met them: the target's loader (its cache, its default folders,
    ``$LIB``: the loader probe sharedlibs runs too, reused within the run) with the probes' ``LD_LIBRARY_PATH``;
    nothing counted as already loaded (a failed import's process had loaded what it had)."""
    facts, _, _ = gather_loader_facts(ctx)
    if facts is None:
        return None
    ld_path = tuple(os.path.abspath(p) for p in (ctx.engine_env.get("LD_LIBRARY_PATH") or "").split(":") if p)
    return replace(facts, ld_library_path=ld_path, loaded={})


def _optional_data() -> OptionalData:
    return load_optional_modules().with_objects(load_optional(), "doctor/sharedlibs.toml")


def _entry_results(ctx: DoctorContext, entries: Sequence[str], outcomes: Mapping[str, ImportOutcome],
                   judged: set[str]) -> list[CheckResult]:
    """A verdict for each entry module no native distribution's verdict covers (a pure-Python engine's)."""
    out = []
    for name in entries:
        o = outcomes.get(name)
        if o is None or name in judged or not ctx.wants(f"native:entry:{name}"):
            continue
        title = f"entry module {name} imports (the stack loads it at start-up)"
        if o.ok:
            out.append(CheckResult(f"native:entry:{name}", title, "ok",
                                   f"imported {name}; it loaded {len(o.reached)} module(s)", seconds=o.seconds))
        else:
            out.append(CheckResult(f"native:entry:{name}", title, "fail",
                                   f"import {name}: {o.summary}" + (f"\n{o.traceback.rstrip()}" if o.traceback else ""),
                                   hint="the engine cannot start: fix what the traceback names, then run "
                                        "`wh doctor` again", data={"module": name, "error": o.error}, seconds=o.seconds))
    return out


def _not_on_disk(module: str, d: Distribution, relpath: str) -> ImportOutcome:
    return ImportOutcome(module=module, ok=False, found=False, error_type="FileNotFoundError",
                         error=f"{relpath}, listed in {d.name}'s RECORD, is not on disk (a half-written or damaged "
                               f"install: reinstall {d.name})", isolated=True)


def _load(modules: list[str], ctx: DoctorContext, files: dict[str, str], listed: RecordIndex,
          always: Sequence[str] = (), reuse: bool = True, jobs: int | None = None,
          families: Mapping[str, str] | None = None) -> dict[str, ImportOutcome]:
    """``families``: the batches' families given (the first import of each process chosen), not estimated."""
    if not modules:
        return {}
    return import_modules(ctx.python, modules, jobs=jobs or ctx.jobs, timeout=ctx.timeout, env=ctx.engine_env,
                          reporter=ctx.reporter, files=files, cache=ctx.verdicts if reuse else None, always=always,
                          estimates=(lambda: ({}, families)) if families is not None else lambda: import_estimates(ctx),
                          keep_file=listed.suspect, flags=ctx.engine_flags)


_BYTES_PER_SECOND = 100e6  # an import-cost estimate from installed bytes: ~1 s per 100 MB (torch's 1.5 GB: ~15)
_SOURCE_BYTES_PER_SECOND = 30e6  # Python source is compiled and run on import: a byte of it costs more
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def import_estimates(ctx: DoctorContext) -> tuple[dict[str, float], dict[str, str]]:
    """(costs, families), cheap (no import): only order and pack the import queue, never a verdict.

    costs: top-level name -> an estimate of its import's seconds: the bytes its distribution's RECORD lists under
    that name, plus the heaviest distribution it requires (torchvision's import is torch's first).
    families: top-level name -> the top-level name of the heavy distribution its import is mostly made of
    (torchvision, torchaudio, functorch -> torch): imported in one worker, that import is paid once."""
    own: dict[str, dict[str, float]] = {}  # distribution -> top-level name -> seconds
    loads: set[str] = set()  # top-level names whose import runs code: not a bare namespace (nvidia/)
    for d in ctx.distributions.values():
        if not d.dist_info:
            continue
        tops = own.setdefault(d.key, {})
        for rel, _, size in d.record.rows:
            top, slash, below = rel.partition("/")
            if below == "__init__.py" or not slash:
                loads.add(top.split(".", 1)[0])
            top = top[:-3] if top.endswith(".py") else top.split(".", 1)[0]
            if size:
                rate = _SOURCE_BYTES_PER_SECOND if rel.endswith(".py") else _BYTES_PER_SECOND
                tops[top] = tops.get(top, 0.0) + size / rate
    own = {k: {t: (v if t in loads else 0.0) for t, v in tops.items()} for k, tops in own.items()}
    total = {k: sum(tops.values()) for k, tops in own.items()}
    main = {k: max(tops, key=tops.__getitem__) for k, tops in own.items() if tops and max(tops.values()) > 0}
    heaviest: dict[str, tuple[float, str | None]] = {}

    def required(key: str, seen: frozenset[str]) -> tuple[float, str | None]:
        """The heaviest distribution ``key`` requires, directly or not (extras' requirements left out)."""
        if key in heaviest:
            return heaviest[key]
        d = ctx.distributions.get(key)
        most: tuple[float, str | None] = (0.0, None)
        for text in d.requires if d is not None else ():
            name, _, marker = text.partition(";")
            found = _REQUIREMENT_NAME.match(name)
            dep = ctx.dist(found.group(1)) if found and "extra" not in marker else None
            if dep is not None and dep.key not in seen:
                most = max(most, (total.get(dep.key, 0.0), dep.key), required(dep.key, seen | {dep.key}),
                           key=lambda m: m[0])
        heaviest[key] = most
        return most

    costs: dict[str, float] = {}
    families: dict[str, str] = {}
    for key, tops in own.items():
        below, under = required(key, frozenset({key}))
        for top, seconds in tops.items():
            costs[top] = max(costs.get(top, 0.0), seconds + below)
            # Mostly its requirement's import (its own under half of it): imported beside that one; a light
            # top-level name beside its distribution's main one (functorch, torchgen: torch's) likewise.
            if under in main and 0 < seconds < below / 2 and main[under] != top:
                families[top] = main[under]
            elif key in main and main[key] != top and seconds < tops[main[key]] / 2:
                families[top] = families.get(main[key], main[key])
    return costs, families
