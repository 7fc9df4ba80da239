"""sharedlibs: every shared object a distribution ships finds every library it needs (read, never loaded).

An extension module that is only imported on the serving path, or a plain
library beside it, is never exercised by the import checks; its missing
``libfoo.so.12`` shows only when the engine first takes that path. This check
reads each ``.so`` of every installed distribution (from its RECORD) and
resolves its DT_NEEDED entries the way the target's loader would
(:mod:`wheelhouse.doctor.elf`), with the facts of the target environment from
``doctor/probes/loader.py``: the loader cache, the loader's default folders,
LD_LIBRARY_PATH as ``wh env`` computes it, and the libraries the interpreter
and ``import torch`` have already mapped. No code of the distributions runs.
"""

from __future__ import annotations

import csv
import fnmatch
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.utils import canonicalize_name

from wheelhouse.doctor.elf import BadElf, ElfInfo, Found, LoaderFacts, find_needed, is_shared_object, read_elf
from wheelhouse.doctor.probes import probe_script, run_probe
from wheelhouse.datafile import check_keys, get_value, load_toml
from wheelhouse.doctor.report import CheckResult
from wheelhouse.errors import WhError
from wheelhouse.resources import doctor_dir
from wheelhouse.install.wheel.record import read_record
from . import DoctorContext, Distribution, reinstall_command

__all__ = ["GROUP", "CHECKS", "run", "shared_objects", "loader_facts", "gather_loader_facts", "OptionalObject",
           "load_optional"]

GROUP = "sharedlibs"
CHECKS = {
    "sharedlibs:<distribution>": "every shared object it ships finds each library it needs (read, not loaded: "
                                 "RUNPATH/RPATH, LD_LIBRARY_PATH, ldconfig, default folders, already loaded)",
    "sharedlibs:loader": "the loader facts of the target environment could be gathered (ldconfig, ld.so)",
}
# The NVIDIA driver's own libraries: installed with the driver, absent on a machine without one.
_DRIVER_LIBS = ("libcuda.so", "libnvidia-", "libnvcuvid.so")
_SHOWN = 4  # needers named per missing library before "+N more"


@functools.lru_cache(maxsize=4096)
def _record_objects(dist_info: str, _mtime: int) -> tuple[str, ...]:
    try:
        with open(os.path.join(dist_info, "RECORD"), newline="", encoding="utf-8") as fh:
            rows = read_record(fh.read())  # the one RECORD reader
    except (OSError, UnicodeDecodeError, csv.Error):
        return ()
    return tuple(dict.fromkeys(path for path, _, _ in rows if is_shared_object(path)))


def shared_objects(d: Distribution) -> list[tuple[str, Path]]:
    """(RECORD path, file) of every shared object ``d`` ships that is on disk."""
    if not d.dist_info or not d.location:
        return []
    try:
        mtime = os.stat(os.path.join(d.dist_info, "RECORD")).st_mtime_ns
    except OSError:
        return []
    out = []
    for rel in _record_objects(d.dist_info, mtime):
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


def gather_loader_facts(ctx: DoctorContext) -> tuple[LoaderFacts | None, Mapping[str, Any], str | None]:
    """(facts, the probe's record, why not) from the loader probe run in the engine environment."""
    timeout = max(ctx.timeout, 120) if ctx.dist("torch") else max(ctx.timeout, 30)
    res = run_probe(ctx.python, probe_script("loader"), timeout=timeout, env=ctx.engine_env, name="loader")
    if not res.records:
        return None, {}, f"the loader probe {res.failure(timeout)}\n{res.tail()}"
    return loader_facts(res.data), res.data, None


def _is_driver_lib(name: str) -> bool:
    return name.startswith(_DRIVER_LIBS)


@dataclass
class _Scan:
    """One shared object: its ELF facts (or why the loader could not map it) and where its needs resolve."""

    info: ElfInfo | None
    error: str | None = None
    found: list[Found] = field(default_factory=list)
    foreign: bool = False  # built for another machine: the loader never maps it into this interpreter


def _scan(paths: list[Path], facts: LoaderFacts) -> dict[Path, _Scan]:
    """Resolve every shipped object's needs; a miss is retried with the RPATH of the shipped objects that load it."""
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
    parents: dict[str, list[ElfInfo]] = {}  # realpath -> the shipped objects that need it
    for s in scans.values():
        for f in s.found:
            if f.path and s.info is not None:
                parents.setdefault(os.path.realpath(f.path), []).append(s.info)
    for path, s in scans.items():
        if s.info is not None and not s.info.runpath and any(f.path is None for f in s.found):
            chain = _ancestors(os.path.realpath(path), parents)
            if chain:
                s.found = find_needed(s.info, facts, chain)
    return scans


def _ancestors(real: str, parents: Mapping[str, list[ElfInfo]]) -> list[ElfInfo]:
    """Every shipped object that loads ``real``, directly or not, nearest first (glibc's l_loader chain)."""
    out: list[ElfInfo] = []
    queue, seen = [real], {real}
    while queue:
        for p in parents.get(queue.pop(0), ()):
            key = os.path.realpath(p.path)
            if key not in seen:
                seen.add(key)
                out.append(p)
                queue.append(key)
    return out


@dataclass(frozen=True)
class OptionalObject:
    """A ``[[optional]]`` entry of ``doctor/sharedlibs.toml``: a miss the distribution itself tolerates."""

    distribution: str
    objects: str
    libraries: tuple[str, ...]
    reason: str

    def covers(self, dist_key: str, rel: str, library: str) -> bool:
        return (dist_key == canonicalize_name(self.distribution) and fnmatch.fnmatchcase(rel, self.objects)
                and any(fnmatch.fnmatchcase(library, g) for g in self.libraries))


class SharedlibsDataError(WhError):
    code = "sharedlibs-data"


def load_optional(path: Path | None = None) -> tuple[OptionalObject, ...]:
    """The ``[[optional]]`` entries of ``doctor/sharedlibs.toml`` (or ``path``)."""
    path = path or doctor_dir() / "sharedlibs.toml"
    data = load_toml(path, what="sharedlibs data file", error=SharedlibsDataError)
    check_keys(data, ["optional"], str(path), error=SharedlibsDataError)
    out = []
    for i, t in enumerate(data.get("optional") or ()):
        where = f"{path} [[optional]] #{i + 1}"
        check_keys(t, ["distribution", "objects", "libraries", "reason"], where, error=SharedlibsDataError)
        out.append(OptionalObject(str(get_value(t, "distribution", (str,), where, error=SharedlibsDataError)),
                                  str(get_value(t, "objects", (str,), where, error=SharedlibsDataError)),
                                  tuple(get_value(t, "libraries", (list,), where, error=SharedlibsDataError) or ()),
                                  str(get_value(t, "reason", (str,), where, error=SharedlibsDataError, default=""))))
    return tuple(out)


def _variant_of(rel: str, clean: set[str], suffixes: Sequence[str]) -> str | None:
    """A sibling the package can load instead, whose needs are all found: the same file name in another
    folder (``sm100/common_ops.so``), or in the same folder the same first name part when this file is not
    what ``import`` picks by that name (``MPI.mpich.*.so`` beside ``MPI.openmpi.*.so``; never ``_core.*.so``)."""
    folder, _, base = rel.rpartition("/")
    stem = base.split(".", 1)[0]
    importable = any(base == stem + sfx for sfx in suffixes)
    for other in sorted(clean):
        of, _, ob = other.rpartition("/")
        if other == rel:
            continue
        if (ob == base and of != folder) or (of == folder and not importable and ob.split(".", 1)[0] == stem):
            return other
    return None


def _verdict(ctx: DoctorContext, d: Distribution, objects: list[tuple[str, Path]], scans: Mapping[Path, _Scan],
             note: str, optional: Sequence[OptionalObject]) -> CheckResult:
    cid = f"sharedlibs:{d.key}"
    title = f"{d.name} {d.version}: its {len(objects)} shared object(s) find the libraries they need (read, not loaded)"
    bad: list[str] = []
    missing: dict[str, list[tuple[str, Found]]] = {}
    via: dict[str, int] = {}
    foreign = checked = 0
    clean: set[str] = set()
    for rel, path in objects:
        s = scans[path]
        if s.error is not None:
            bad.append(f"{rel}: {s.error}")
            continue
        if s.foreign:
            foreign += 1
            continue
        checked += 1
        if all(f.path is not None for f in s.found):
            clean.add(rel)
        for found in s.found:
            if found.path is None:
                missing.setdefault(found.name, []).append((rel, found))
            else:
                via[found.via] = via.get(found.via, 0) + 1
    no_driver = not ctx.gpu.gpus
    hard: dict[str, list[tuple[str, Found]]] = {}
    soft: dict[str, list[tuple[str, Found]]] = {}
    notes: list[str] = []
    for name, needers in missing.items():
        for rel, found in needers:
            rule = next((o for o in optional if o.covers(d.key, rel, name)), None)
            sibling = None if rule else _variant_of(rel, clean, ctx.facts.get("extension_suffixes") or (".so",))
            if rule:
                notes.append(f"{rel} needs {name}: not found -- optional: {rule.reason}")
            elif sibling:
                notes.append(f"{rel} needs {name}: not found -- an alternative build: {sibling} finds all it needs")
            else:
                (soft if no_driver and _is_driver_lib(name) else hard).setdefault(name, []).append((rel, found))
    lines = list(bad)
    for name, needers in {**hard, **soft}.items():
        shown = ", ".join(rel for rel, _ in needers[:_SHOWN]) + (f" (+{len(needers) - _SHOWN} more)"
                                                                 if len(needers) > _SHOWN else "")
        where = ", ".join(needers[0][1].searched) or "nowhere to search"
        extra = " (the NVIDIA driver's library; this machine has no GPU driver)" if name in soft else ""
        lines.append(f"{shown} needs {name}: not found{extra}; searched {where}")
    data = {"objects": len(objects), "checked": checked, "other_machine": foreign, "found_via": via,
            "missing": {n: [rel for rel, _ in v] for n, v in missing.items()}, "unloadable": bad, "notes": notes}
    if bad or hard:
        return CheckResult(cid, title, "fail", "\n".join(lines + notes) + note,
                           hint=("install what provides the missing library (an nvidia-* wheel in the wheelhouse, or "
                                 "the system package) and re-run `wh doctor --check sharedlibs`" if hard else "")
                           + ("; " if hard and bad else "")
                           + (f"an empty or truncated .so is a broken install of {d.name}: reinstall it: "
                              f"`{reinstall_command(ctx, d.name)}`" if bad else ""),
                           data={**data, **({"reinstall": [d.key]} if bad else {})})
    if soft:
        return CheckResult(cid, title, "warn", "\n".join(lines + notes),
                           hint="on the GPU box the driver provides it; run `wh doctor` there", data=data)
    total = sum(via.values())
    how = ", ".join(f"{n} {_VIA.get(k, k)}" for k, n in sorted(via.items(), key=lambda kv: -kv[1]))
    ev = f"{checked} shared object(s), {total} needed librar{'y' if total == 1 else 'ies'} found" + (
        f": {how}" if how else "")
    if foreign:
        ev += f"; {foreign} built for another machine, not checked"
    return CheckResult(cid, title, "ok", "\n".join([ev, *notes]), data=data)


_VIA = {"loaded": "already loaded", "rpath": "via RPATH", "runpath": "via RUNPATH", "ld_library_path": "via LD_LIBRARY_PATH",
        "cache": "via the ldconfig cache", "default": "in the default folders", "path": "by path"}


def run(ctx: DoctorContext) -> list[CheckResult]:
    dists = [(d, objs) for d in sorted(ctx.distributions.values(), key=lambda d: d.key)
             if ctx.wants(f"sharedlibs:{d.key}") for objs in [shared_objects(d)] if objs]
    if not dists:
        return []
    facts, record, why = gather_loader_facts(ctx)
    if facts is None:
        return [CheckResult("sharedlibs:loader", CHECKS["sharedlibs:loader"], "fail", why or "",
                            hint="check that the interpreter starts in the engine environment: `eval \"$(wh env)\"`")]
    note = "".join(f"\n(import {mod} failed in the loader probe: {err}; the libraries it would have loaded are "
                   f"not counted as loaded, see native:{mod})" for mod, err in (record.get("import_errors") or {}).items())
    scans = _scan([path for _, objs in dists for _, path in objs], facts)
    optional = load_optional()
    return [_verdict(ctx, d, objs, scans, note, optional) for d, objs in dists]
