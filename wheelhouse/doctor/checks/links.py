"""links: unversioned sonames, lib64, and which libcuda the loader really picks (stub? compat?).

A missing ``libcudart.so -> libcudart.so.13`` or ``lib64 -> lib`` in an NVIDIA wheel's folder breaks only
what asks for that name: a build that links ``-lcudart`` or searches ``-L<pkg>/lib64``. So
``links:sonames`` and ``links:lib64`` fail only where something in the stack needs them, and name it:

- a shared object installed here whose DT_NEEDED names the unversioned soname, or whose RUNPATH/RPATH
  names the missing lib64 folder;
- the stack's manifest (``[doctor] links``), or its engine recipe (``link-sonames``, recorded in
  wh.json by ``wh build``: the engine's build and its run-time kernel builds link ``-lcudart``);
- an installed distribution that ``doctor/links.toml`` names (flashinfer's JIT links ``-lcudart``).

Otherwise they are ok, and the evidence lists what is missing (``wh links --fix`` adds it).
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

from wheelhouse.datafile import get_value, load_tables, load_toml
from wheelhouse.elf import BadElf, read_elf
from wheelhouse.env.cuda import removed_entries
from wheelhouse.doctor.probes import probe_script, run_probe
from wheelhouse.doctor.report import CheckResult
from wheelhouse.errors import WhError
from wheelhouse.manifest import DOCTOR_LINKS
from wheelhouse.resources import doctor_dir
from .context import DoctorContext
from .sharedlibs import shared_objects

__all__ = ["GROUP", "CHECKS", "run", "LinkBuild", "load_link_builds", "link_needs"]

_STUB_MAX_BYTES = 2 << 20  # the toolkit's stub is tens of KB; a real libcuda tens of MB

GROUP = "links"
CHECKS = {
    "links:sonames": "NVIDIA lib folders have the unversioned sonames that something in the stack links against",
    "links:lib64": "lib64 exists where something in the stack searches it",
    "links:stubs": "no stub libcuda.so inside the environment",
    "links:libcuda": "dlopen(libcuda.so.1) resolves to the real driver, not a stub (executed)",
    "links:ld-library-path": "no stubs folder on LD_LIBRARY_PATH",
}


class LinksDataError(WhError):
    code = "links-data"


@dataclass(frozen=True)
class LinkBuild:
    """A ``[[build]]`` entry of ``doctor/links.toml``: a distribution whose run-time builds need the links."""

    distribution: str
    needs: tuple[str, ...]
    reason: str


def load_link_builds(path: Path | None = None) -> tuple[LinkBuild, ...]:
    """The ``[[build]]`` entries of ``doctor/links.toml`` (or ``path``)."""
    path = path or doctor_dir() / "links.toml"
    out = []
    for where, t in load_tables(path, "build", ["distribution", "needs", "reason"], what="links data file",
                                error=LinksDataError):
        needs = tuple(str(x) for x in get_value(t, "needs", (list,), where, error=LinksDataError) or ())
        if not needs or any(n not in DOCTOR_LINKS for n in needs):
            raise LinksDataError(f"{where}: needs must list {' and/or '.join(DOCTOR_LINKS)}", hint='needs = ["sonames"]')
        out.append(LinkBuild(str(get_value(t, "distribution", (str,), where, error=LinksDataError)), needs,
                             str(get_value(t, "reason", (str,), where, error=LinksDataError, default=""))))
    return tuple(out)


def _recipe_links(ctx: DoctorContext) -> str | None:
    """Why the manifest's engine recipe needs the links (a recipe builds with link-sonames unless it says
    ``link-sonames = false``), or None."""
    m = ctx.manifest
    if m is None or m.engine_recipe is None:
        return None
    if m.path is None:  # from wh.json: named only when `wh build` recorded link_sonames
        return f"the engine {m.engine_recipe.name} was built with link-sonames (-lcudart from lib and lib64)"
    try:
        build = ((load_toml(m.engine_recipe, what="engine recipe").get("engine") or {}).get("build") or {})
    except WhError:
        build = {}
    if build.get("link-sonames", True) is False:
        return None
    return f"the engine recipe {m.engine_recipe.name} builds with link-sonames (-lcudart from lib and lib64)"


def link_needs(ctx: DoctorContext, plan) -> dict[str, list[str]]:
    """What in the stack needs the links ``plan`` would add, per kind (``"sonames"``, ``"lib64"``); empty: nothing."""
    needs: dict[str, list[str]] = {n: [] for n in DOCTOR_LINKS}
    m = ctx.manifest
    if m is not None:
        where = str(m.path) if m.path else (ctx.target_source or "the wheelhouse's wh.json")
        for n in m.doctor.links:
            needs[n].append(f"{where} asks for them ([doctor] links = {', '.join(m.doctor.links)})")
    recipe = _recipe_links(ctx)
    if recipe:
        for n in DOCTOR_LINKS:
            needs[n].append(recipe)
    for rule in load_link_builds():
        for d in ctx.distributions.values():
            if fnmatch.fnmatchcase(d.key, rule.distribution):
                for n in rule.needs:
                    needs[n].append(f"{d.name} {d.version}: {rule.reason}")
    for n, why in _object_needs(ctx, plan).items():
        needs[n] += why
    return needs


def _object_needs(ctx: DoctorContext, plan) -> dict[str, list[str]]:
    """Installed shared objects that name a missing link: the unversioned soname in DT_NEEDED, the missing
    ``lib64`` folder in RUNPATH/RPATH."""
    names = {c.path.rpartition("/")[2] for c in plan if c.action == "symlink"}
    lib64s = {os.path.normpath(c.path) for c in plan if c.action == "lib64"}
    out: dict[str, list[str]] = {"sonames": [], "lib64": []}
    if not (names or lib64s):
        return out
    for d in sorted(ctx.distributions.values(), key=lambda d: d.key):
        for rel, path in shared_objects(d):
            try:
                info = read_elf(path)
            except BadElf:
                continue
            out["sonames"] += [f"{d.name}'s {rel} needs {n} (DT_NEEDED)" for n in info.needed if n in names]
            for kind, entries in (("RUNPATH", info.runpath), ("RPATH", info.rpath)):
                out["lib64"] += [f"{d.name}'s {rel} searches {e} ({kind})" for e in entries
                                 if _expand(e, info.origin) in lib64s]
    return out


def _expand(entry: str, origin: str) -> str:
    return os.path.normpath(entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin))


def _needed_result(cid: str, missing_text: str, missing: list, why: list[str], data_key: str) -> CheckResult:
    """fail when something in the stack needs what is missing (named), else ok with the note."""
    data = {data_key: [c.to_json() for c in missing], "needed_by": list(why)}
    if why:
        shown = why[:6] + ([f"+{len(why) - 6} more"] if len(why) > 6 else [])
        return CheckResult(cid, CHECKS[cid], "fail", f"{missing_text}; needed by: " + "; ".join(shown),
                           hint="`wh links --fix` (or `wh doctor --fix`) adds them; `wh links --undo` reverts",
                           fix="wh links --fix", data=data)
    return CheckResult(cid, CHECKS[cid], "ok",
                       f"{missing_text} -- nothing in the stack needs them (no installed .so names them in DT_NEEDED "
                       "or RUNPATH, no manifest or engine recipe asks for them): `wh links --fix` adds them for a "
                       "build that links -lcudart", fix="wh links --fix", data=data)


def run(ctx: DoctorContext) -> list[CheckResult]:
    from wheelhouse.env.links import nvidia_lib_dirs, plan_links

    out: list[CheckResult] = []
    roots = list(ctx.site_dirs)
    plan = plan_links(roots)
    libdirs = nvidia_lib_dirs(roots)
    missing = [c for c in plan if c.action == "symlink"]
    lib64 = [c for c in plan if c.action == "lib64"]
    needs = link_needs(ctx, plan) if libdirs and (missing or lib64) else {}
    if not libdirs:
        out.append(CheckResult("links:sonames", CHECKS["links:sonames"], "skip", "no NVIDIA wheel lib folders installed"))
    elif missing:
        by_dir: dict[str, list[str]] = {}
        for c in missing:
            d, _, name = c.path.rpartition("/")
            by_dir.setdefault(d, []).append(f"{name} -> {c.target}")
        ev = "; ".join(f"{d} lacks {', '.join(names)}" for d, names in by_dir.items())
        out.append(_needed_result("links:sonames", ev, missing, needs["sonames"], "missing"))
    else:
        out.append(CheckResult("links:sonames", CHECKS["links:sonames"], "ok",
                               f"{len(libdirs)} lib folder(s) have their unversioned names"))
    if not libdirs:
        out.append(CheckResult("links:lib64", CHECKS["links:lib64"], "skip", "no NVIDIA wheel lib folders installed"))
    elif lib64:
        out.append(_needed_result("links:lib64", "; ".join(f"{c.path} missing" for c in lib64), lib64, needs["lib64"],
                                  "missing"))
    else:
        out.append(CheckResult("links:lib64", CHECKS["links:lib64"], "ok", "lib64 present where lib is"))
    stubs = [c for c in plan if c.action == "remove-stub"]
    out.append(CheckResult("links:stubs", CHECKS["links:stubs"], "fail" if stubs else "ok",
                           "; ".join(f"{c.path}: {c.reason}" for c in stubs) or "no libcuda.so stub in the NVIDIA lib folders",
                           hint="`wh links --fix` moves them aside (undo: `wh links --undo`)" if stubs else None,
                           fix="wh links --fix" if stubs else None))
    res = run_probe(ctx.python, probe_script("libcuda"), timeout=ctx.timeout, env=ctx.engine_env, name="libcuda")
    if not res.ok:
        out.append(CheckResult("links:libcuda", CHECKS["links:libcuda"], "fail",
                               f"the libcuda probe {res.failure(ctx.timeout)}\n{res.tail()}",
                               hint="a crash inside dlopen(libcuda.so.1) means a broken driver install"))
        return out
    d = res.data
    out.append(_libcuda_verdict(ctx, d))
    stub_dirs = d.get("stub_dirs_on_ld_library_path") or []
    n_ld = len(d.get("ld_library_path") or [])
    # The caller's own stubs folders are taken off for the engine (wh serve, `wh env`): true of the engine, said of the
    # shell, where an engine started by hand would map the stub first.
    caller = [e.entry for e in removed_entries(ctx.environ)]
    note = (f"; note: the caller's LD_LIBRARY_PATH has {', '.join(caller)}, taken off for the engine (`wh serve`, "
            "`eval \"$(wh env)\"`): an engine started by hand from this shell would map the stub first") if caller else ""
    out.append(CheckResult("links:ld-library-path", CHECKS["links:ld-library-path"], "fail" if stub_dirs else "ok",
                           ("stubs folder(s) on LD_LIBRARY_PATH: " + ", ".join(stub_dirs)) if stub_dirs else
                           f"LD_LIBRARY_PATH (engine environment) has {n_ld} {'entry' if n_ld == 1 else 'entries'}, "
                           f"no stubs{note}",
                           hint="remove them from LD_LIBRARY_PATH; use `eval \"$(wh env)\"`, which never adds stubs"
                           if stub_dirs else None,
                           data={"ld_library_path": d.get("ld_library_path"), "ldconfig": d.get("ldconfig")}))
    return out


def _libcuda_verdict(ctx: DoctorContext, d: dict) -> CheckResult:
    title = CHECKS["links:libcuda"]
    order = d.get("libcuda_on_ld_library_path") or []
    ahead = "; ".join(f"{x['path']} ({x.get('size')} bytes)" for x in order)
    ldc = d.get("ldconfig")
    search = f"LD_LIBRARY_PATH candidates: {ahead or 'none'}; ldconfig: {', '.join(ldc) if ldc else 'none'}"
    if d.get("dlopen_error"):
        verdict = "fail" if ctx.gpu.gpus else "skip"
        return CheckResult("links:libcuda", title, verdict, f"dlopen(libcuda.so.1) failed: {d['dlopen_error']}; {search}",
                           hint="install the NVIDIA driver, or expose its libcuda.so.1 to the container" if verdict == "fail"
                           else None, data=dict(d))
    ld = d.get("loaded") or {}
    where = ld.get("realpath") or ld.get("path")
    ev = (f"dlopen(libcuda.so.1) -> {where} ({ld.get('size')} bytes); cuDriverGetVersion={ld.get('cuDriverGetVersion')} "
          f"({ld.get('driver_cuda_version')}), cuInit={ld.get('cuInit')}; {search}")
    if ld.get("is_stub"):
        return CheckResult("links:libcuda", title, "fail", "a STUB libcuda is loaded ahead of the driver: " + ev,
                           hint="remove the stubs folder from LD_LIBRARY_PATH and run `wh links --fix`", data=dict(d))
    if ld.get("in_compat_dir"):
        # The toolkit's compat/ libcuda is a real forward-compatibility driver library, not a stub:
        # it works only with a matching kernel driver on supported (datacenter) GPUs.
        verdict = "warn" if ld.get("cuInit") not in (0, None) else "info"
        return CheckResult("links:libcuda", title, verdict,
                           "the CUDA forward-compat libcuda is loaded (a real driver library, not a stub): " + ev,
                           hint="fine when cuInit is 0; otherwise take compat/ off LD_LIBRARY_PATH to use the system driver"
                           if verdict == "warn" else None, data=dict(d))
    stubs_ahead = [x["path"] for x in order if x.get("in_stubs_dir") or (x.get("size") or 1 << 30) < _STUB_MAX_BYTES]
    if stubs_ahead:
        return CheckResult("links:libcuda", title, "warn",
                           "libcuda.so.1 is the driver, but a stub is on LD_LIBRARY_PATH ahead of it (anything that "
                           f"dlopens the unversioned libcuda.so gets the stub): {', '.join(stubs_ahead)}; " + ev,
                           hint="take the stubs folder off LD_LIBRARY_PATH", data=dict(d))
    if ld.get("cuInit") not in (0, None) and ctx.gpu.gpus:
        return CheckResult("links:libcuda", title, "fail", "the driver library loads but cuInit fails: " + ev,
                           hint="check `nvidia-smi`; a driver/kernel-module mismatch needs a reboot or container restart",
                           data=dict(d))
    return CheckResult("links:libcuda", title, "ok", ev, data=dict(d))
