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

Which failures are red: any top-level name that does not import, and any
extension module of a distribution wh installed (``<site>/.wh/installed.json``;
every distribution when wh installed nothing here). An extension module of the
image's own distributions (the image's matplotlib lacking tkinter), or one that
fails only because a Python module its distribution does not require is absent
(``No module named '_tkinter'``), is a warning with the same evidence. A missing
shared library, an undefined symbol or a truncated file of the stack is red.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from wheelhouse.doctor.elf import BadElf, exports_pyinit
from wheelhouse.doctor.fatbin import device_code, sm_number
from wheelhouse.doctor.imports import ImportOutcome, import_modules
from wheelhouse.doctor.report import CheckResult
from wheelhouse.target.gpu import Gpu
from . import DoctorContext, Distribution, installed_by_wh, reinstall_command

__all__ = ["GROUP", "CHECKS", "run", "native_distributions", "NotLoaded", "LoadPlan", "variant_for_other_gpu",
           "is_extension_module", "load_plan"]

_SHOWN = 6  # extension modules named in an ok verdict; the JSON data lists every one

GROUP = "native"
CHECKS = {"native:<distribution>": "every top-level name and every extension module of the distribution loads "
                                   "(executed, batched, each failure confirmed in a process of its own)"}
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
    """Installed distributions with at least one extension module in their RECORD."""
    return sorted((d for d in ctx.distributions.values() if d.extension_modules), key=lambda d: d.key)


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


def is_extension_module(path: str | Path) -> bool:
    """Does ``path`` export the init function of the module its file name names (``_C`` for ``_C.abi3.so``)?

    A file the loader cannot map counts as a module: importing it shows the real error.
    """
    try:
        return exports_pyinit(path, Path(path).name.split(".", 1)[0])
    except BadElf:
        return True


def load_plan(ctx: DoctorContext, d: Distribution) -> LoadPlan:
    """What to load for ``d``: its top-level names (and manifest-named modules), then its extension modules."""
    named = [r.module for r in (ctx.manifest.drops if ctx.manifest else ())
             if r.module and r.distribution.lower().replace("_", "-") == d.key]
    location = Path(d.location or "")
    libraries = [rel for rel, _ in d.extensions if not is_extension_module(location / rel)]
    # A top-level name that only a library at the top provides (no package folder, no .py) is no module.
    at_top = {m: rel for rel, m in d.extensions if "/" not in rel}
    library_names = {m for m, rel in at_top.items() if rel in libraries
                     and not any(r not in libraries for r, n in d.extensions if n == m)
                     and not (location / m).is_dir() and not (location / f"{m}.py").is_file()}
    modules = [n for n in dict.fromkeys([*d.import_names, *named]) if n not in library_names]
    skipped: list[NotLoaded] = []
    files: dict[str, str] = {}
    missing: dict[str, str] = {}
    for relpath, module in d.extensions:
        if relpath in libraries or module in modules or not all(p.isidentifier() for p in module.split(".")):
            continue
        if not os.path.lexists(location / relpath):
            # find_spec of its name is None then, which is no reason to call it covered by its package.
            missing[module] = relpath
            modules.append(module)
            continue
        variant = variant_for_other_gpu(module, location / relpath, relpath, ctx.gpu.gpus, ctx.gpu.cuda_version)
        if variant is not None:
            skipped.append(variant)
        else:
            modules.append(module)
            files[module] = str(location / relpath)
    return LoadPlan(tuple(modules), files, tuple(skipped), tuple(libraries), missing)


def _own_or_required(d: Distribution, missing: str, installed: Mapping[str, Distribution]) -> bool:
    """Is module ``missing`` the distribution's own, or one a requirement of it provides?"""
    top = missing.split(".", 1)[0]
    if top in d.import_names:
        return True
    wanted = set()
    for text in d.requires:
        try:
            wanted.add(canonicalize_name(Requirement(text).name))
        except InvalidRequirement:
            continue
    providers = {k for k, other in installed.items() if top in other.import_names}
    return canonicalize_name(top) in wanted or bool(providers & wanted)


def _warning(d: Distribution, o: ImportOutcome, installed: Mapping[str, Distribution], vouched: bool) -> str | None:
    """Why the failure of extension module ``o`` is only a warning; None: it is a fail."""
    if "." not in o.module or o.module in d.import_names:
        return None  # a top-level name that does not import is red whoever installed it
    if o.missing and not o.crash and not _own_or_required(d, o.missing, installed):
        return (f"only {o.module} needs {o.missing}, which is not installed and which {d.name} does not require "
                f"(an optional module)")
    if not vouched:
        return f"{d.name} was not installed by wh (it was in this environment before); a lazily loaded module"
    return None


def _failure_lines(bad: list[ImportOutcome], unloaded: list[str], warnings: dict[str, str]) -> list[str]:
    """One paragraph per failed module, then the extension modules whose top-level package did not import."""
    parts = []
    for o in bad:
        line = f"import {o.module}: {o.summary}"
        if o.found:
            line += f" -- find_spec({o.module!r}) succeeds ({o.origin}) but the import fails"
        elif o.found is False:
            line += f" -- find_spec({o.module!r}) is None"
        if o.shadowed:
            line += f" -- another copy of its package is imported instead, from {o.shadowed}"
        detail = o.traceback or o.output
        why = warnings.get(o.module)
        parts.append(line + ("\n" + detail.rstrip() if detail else "") + (f"\na warning: {why}" if why else ""))
    by_top: dict[str, list[str]] = {}
    for m in unloaded:
        by_top.setdefault(m.split(".", 1)[0], []).append(m)
    parts += [f"not loaded, as {top} does not import: {', '.join(mods)}" for top, mods in by_top.items()]
    return parts


def _not_by_name(plan: LoadPlan, covered: list[ImportOutcome], through: list[ImportOutcome]) -> list[str]:
    """Evidence for what was deliberately not imported by its dotted name."""
    out = [f"not loaded: {s.module} ({s.reason}; decided by {s.decided_by})" for s in plan.skipped]
    out += [f"loaded by its package, not by name: {o.module} ({o.covered})" for o in covered]
    out += [f"loaded through {o.via}: {o.module} (imported first, it is a circular import back into itself)"
            for o in through]
    if plan.libraries:
        out.append("library, link-checked by sharedlibs (no PyInit_, not imported by name): "
                   + ", ".join(plan.libraries))
    return out


def _verdict(d: Distribution, plan: LoadPlan, outcomes: Mapping[str, ImportOutcome], vouched: bool = True,
             installed: Mapping[str, Distribution] | None = None, reinstall: str | None = None) -> CheckResult:
    """``vouched``: wh installed ``d`` (or nothing here); ``installed``: every distribution, by canonical name."""
    cid = f"native:{d.key}"
    mods = list(plan.modules)
    nlib = len(plan.libraries)
    title = f"{d.name} {d.version} loads ({d.extension_modules - nlib} extension module(s)" + (
        f", {nlib} librar{'y' if nlib == 1 else 'ies'})" if nlib else ")")
    bad = [outcomes[m] for m in mods if m in outcomes and not outcomes[m].ok]
    unloaded = [m for m in mods if m not in outcomes]  # under a top-level name that failed
    covered = [outcomes[m] for m in mods if m in outcomes and outcomes[m].covered]
    seconds = sum(outcomes[m].seconds for m in mods if m in outcomes)
    tops = [m for m in d.import_names if m in mods]  # not a name only a library provides
    exts = [m for m in mods if m not in tops and m not in {o.module for o in covered}]
    notes = _not_by_name(plan, covered, [outcomes[m] for m in mods if m in outcomes and outcomes[m].via])
    data = {"modules": mods, "not_loaded": [s.to_json() for s in plan.skipped], "libraries": list(plan.libraries),
            "covered": [{"module": o.module, "reason": o.covered} for o in covered], "installed_by_wh": vouched,
            "through": {m: outcomes[m].via for m in mods if m in outcomes and outcomes[m].via}}
    if not mods:
        return CheckResult(cid, title, "skip", "no importable top-level name found in its RECORD"
                           + "".join(f"; {n}" for n in notes), data=data)
    if not bad and not unloaded:
        shown = ", ".join(exts[:_SHOWN]) + (f", and {len(exts) - _SHOWN} more" if len(exts) > _SHOWN else "")
        ev = (f"imported {', '.join(tops) or 'nothing at top level'} and loaded {len(exts)} extension module(s) "
              f"in separate processes{': ' + shown if exts else ''}" + "".join(f"; {n}" for n in notes))
        return CheckResult(cid, title, "ok", ev, data=data, seconds=seconds)
    warnings = {o.module: w for o in bad if (w := _warning(d, o, installed or {}, vouched))}
    failures = [{"module": o.module, "found": o.found, "error_type": o.error_type, "error": o.error,
                 "missing": o.missing, "crash": o.crash, "severity": "warn" if o.module in warnings else "fail",
                 **({"warning": warnings[o.module]} if o.module in warnings else {})} for o in bad]
    evidence = "\n".join(_failure_lines(bad, unloaded, warnings) + notes)
    red = [o for o in bad if o.module not in warnings]
    if not red and not unloaded:
        return CheckResult(cid, title, "warn", evidence,
                           hint=f"only code that uses {', '.join(warnings)} is affected; install what it needs "
                                f"(or rebuild the image) if the engine takes that path",
                           data={**data, "failures": failures}, seconds=seconds)
    if red and not unloaded and all(o.module in plan.missing for o in red):
        # Files its RECORD lists are gone: a damaged install, which a reinstall mends. A drop would take
        # away a distribution that works once it is whole (install:records names the files too).
        return CheckResult(cid, title, "fail", evidence,
                           hint=f"reinstall {d.name}: `{reinstall or f'wh install WHEELHOUSE --reinstall {d.key}'}`",
                           data={**data, "failures": failures, "reinstall": [d.key]}, seconds=seconds)
    if red and all(o.shadowed for o in red):
        # Another copy of the package, earlier on sys.path, is what fails: uninstalling this distribution
        # (a drop) would take away the healthy copy and leave the broken one in the engine's way.
        shadows = sorted({o.shadowed for o in red})
        return CheckResult(cid, title, "fail", evidence,
                           hint=f"the engine imports {d.name}'s modules from another copy ({', '.join(shadows)}): "
                                f"take that folder off sys.path (PYTHONPATH, a .pth file) or rebuild it",
                           data={**data, "failures": failures, "shadowed_by": shadows}, seconds=seconds)
    if any("." not in o.module for o in red) or not red:  # not red: another distribution's package failed
        reason = "import failed"
    else:
        reason = f"extension module {red[0].module} failed to load"
    drop = {"distribution": d.name, "version": d.version, "modules": tops, "reason": reason}
    return CheckResult(cid, title, "fail", evidence,
                       hint=f"`wh drop` uninstalls {d.name} so code that checks find_spec falls back cleanly "
                            f"(`wh drop --restore {d.key}` brings it back)",
                       fix=f"wh drop {d.key}", data={**data, "drop": drop, "failures": failures}, seconds=seconds)


def run(ctx: DoctorContext) -> list[CheckResult]:
    dists = [d for d in native_distributions(ctx) if ctx.wants(f"native:{d.key}")]
    if not dists:
        return [CheckResult("native:none", "no installed distribution ships extension modules", "skip",
                            "nothing to import")] if ctx.wants("native:none") and not ctx.patterns else []
    plans = {d.key: load_plan(ctx, d) for d in dists}
    modules = [m for p in plans.values() for m in p.modules]
    files = {m: f for p in plans.values() for m, f in p.files.items()}
    # Top-level names first: an extension module under one that fails (or hangs) fails the same way, so it is
    # not loaded at all (a hang then costs one timeout, not one per module under it).
    outcomes = _load([m for m in modules if "." not in m], ctx, files)
    failed = {m for m, o in outcomes.items() if not o.ok}
    gone = {m: (d, rel) for d in dists for m, rel in plans[d.key].missing.items()}
    outcomes.update(_load([m for m in modules if "." in m and m.split(".", 1)[0] not in failed and m not in gone],
                          ctx, files))
    outcomes.update({m: _not_on_disk(m, d, rel) for m, (d, rel) in gone.items()})
    by_wh = installed_by_wh(ctx)
    return [_verdict(d, plans[d.key], outcomes, not by_wh or d.key in by_wh, ctx.distributions,
                     reinstall_command(ctx, d.name)) for d in dists]


def _not_on_disk(module: str, d: Distribution, relpath: str) -> ImportOutcome:
    return ImportOutcome(module=module, ok=False, found=False, error_type="FileNotFoundError",
                         error=f"{relpath}, listed in {d.name}'s RECORD, is not on disk (a half-written or damaged "
                               f"install: reinstall {d.name})", isolated=True)


def _load(modules: list[str], ctx: DoctorContext, files: dict[str, str]) -> dict[str, ImportOutcome]:
    if not modules:
        return {}
    return import_modules(ctx.python, modules, jobs=ctx.jobs, timeout=ctx.timeout, env=ctx.environ,
                          reporter=ctx.reporter, files=files)
