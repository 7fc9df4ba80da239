"""Repairs before drops: who is to blame for a failure, and what mends it (``wh doctor --fix``, ``wh drop``).

The doctor says what fails; a drop takes a distribution away, so it must take the right one, and only
when nothing else mends it (DESIGN: "a repair names the owner of the broken file and reinstalls before
it drops"). For each distribution a report would drop (its executed probe failed):

- **a damaged install** (a file its RECORD lists is gone, or no longer has RECORD's sha256: a truncated
  ``.so``) is reinstalled from the wheelhouse (``wh install --reinstall``), not dropped; so is every
  distribution a check names as damaged (``install:records``, an unloadable ``.so`` in ``sharedlibs``);
- **a library another distribution owns** (``libcublasLt.so.13: cannot open shared object file``, listed in
  nvidia-cublas's RECORD, gone from disk): that owner is reinstalled; the consumer (torch) is kept;
- **an unmet requirement** (threadpoolctl uninstalled under scikit-learn): the requirement is installed from
  the wheelhouse; the consumer is kept;
- **a requirement that fails itself** (scipy, when numpy's OpenBLAS is gone): the consumer is kept and listed
  as a dependent of the one that is mended or dropped;
- **another copy** of the package on ``sys.path`` (PYTHONPATH, a ``.pth``, a checkout) is what the import
  finds: the installed distribution is kept, whatever way that copy fails (an exception, a signal, a hang);
- with ``protect_requested`` (``--fix``): what the wheelhouse requested (wh.json's requirements) and what
  those require is kept, unless ``include_requested``.

What is left is dropped (``drop``), each with the installed distributions that require it (its
dependents), so the report says what loses it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import subprocess
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from wheelhouse.digest import record_digest
from wheelhouse.errors import WhError
from wheelhouse.install.digests import patched_files
from wheelhouse.install.installed import same_path
from wheelhouse.progress import NullReporter, Reporter
from wheelhouse.recordfile import InstalledRecord, read_installed_record
from wheelhouse.script_answer import PRINT_ANSWER, read_answer
from .drop import DropPlan, _dist_info, _recorded_source, plan_drops
from .imports import traceback_files
from .probes import probe_script
from .report import DoctorReport

__all__ = ["Reinstall", "Reinstalled", "Kept", "RepairPlan", "plan_repair", "reinstall_distributions", "dependents_of",
           "damage_of", "requested_names", "describe", "REQUESTED_KEPT"]

REQUESTED_KEPT = ("requested by the wheelhouse (a stack requirement, or required by one): not dropped by --fix; "
                  "pass --include-requested to drop it")
_NO_LIB = re.compile(r"([\w.+\-]+\.so(?:\.[\w.]+)?): cannot open shared object file")


@dataclass(frozen=True)
class Reinstall:
    """A distribution to install (again) from the wheelhouse, and why."""

    name: str
    reason: str
    check_id: str | None = None


@dataclass(frozen=True)
class Kept:
    """A distribution a report would have dropped that stays installed, and why."""

    distribution: str
    version: str
    reason: str
    check_id: str | None = None


@dataclass(frozen=True)
class RepairPlan:
    reinstall: tuple[Reinstall, ...]
    drops: tuple[DropPlan, ...]
    kept: tuple[Kept, ...]


@dataclass(frozen=True)
class _Installed:
    name: str
    version: str
    requires: tuple[str, ...]  # canonical names of the requirements that apply here (markers judged)
    unmet: tuple[str, ...]  # of those, the ones nothing installed satisfies (canonical names)
    info: Path | None  # its .dist-info folder
    # Its requirements that apply only when an extra of it is asked (``gpukern; extra == "gpu"``), and what
    # each asks in turn of its own: (extra, canonical name, the extras it asks).
    extra_requires: tuple[tuple[str, str, frozenset[str]], ...] = ()
    asks: tuple[tuple[str, frozenset[str]], ...] = ()  # of ``requires``, those that ask extras (``lib[fast]``)

    @functools.cached_property
    def record(self) -> InstalledRecord:
        """Its RECORD, read once (``_owner_of`` asks every distribution's, once per missing library)."""
        return read_installed_record(self.info)


# ---- what is installed ---------------------------------------------------------------------------


def _graph(interp) -> dict[str, _Installed]:
    """Every distribution ``interp`` imports, with the requirements that apply to it and those not met."""
    from wheelhouse.install.closure import Dist, unmet
    from wheelhouse.target.installed import installed_distributions

    dists = installed_distributions(interp.executable)
    problems = unmet({k: Dist(d.name, d.version, d.requires) for k, d in dists.items()}, interp.target)
    missing: dict[str, list[str]] = {}
    for (who, text), _why in problems.items():
        missing.setdefault(canonicalize_name(who), []).append(canonicalize_name(Requirement(text).name))
    site_dirs = list(interp.site_dirs)
    out = {}
    for key, d in dists.items():
        reqs, by_extra, asks = [], [], []
        for text in d.requires:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is None or _evaluate(interp.target, req.marker):
                reqs.append(canonicalize_name(req.name))
                if req.extras:
                    asks.append((canonicalize_name(req.name), frozenset(canonicalize_name(e) for e in req.extras)))
            elif "extra" in str(req.marker):  # each extra the marker names, judged with it asked
                for extra in {a or b for a, b in _EXTRA.findall(str(req.marker))}:
                    if _evaluate(interp.target, req.marker, extra):
                        by_extra.append((canonicalize_name(extra), canonicalize_name(req.name), frozenset(req.extras)))
        info = _dist_info([d.location] if d.location else site_dirs, d.name)
        out[key] = _Installed(d.name, d.version, tuple(dict.fromkeys(reqs)), tuple(missing.get(key, ())), info,
                              tuple(dict.fromkeys(by_extra)), tuple(dict.fromkeys(asks)))
    return out


_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]|['"]([^'"]+)['"]\s*==\s*extra\b""")  # either way round


def _evaluate(target, marker, extra: str = "") -> bool:
    try:
        return bool(target.evaluate(marker, extra=extra))
    except Exception:  # noqa: BLE001 - an odd marker counts as applying (as the deps check reads it)
        return True


def _closure(graph: Mapping[str, _Installed], roots: Sequence[str | Requirement]) -> set[str]:
    """Every installed name ``roots`` require, directly or not; a root given as a requirement with extras
    (``app[gpu]``, as the wheelhouse asked for it) brings what those extras require, and so on down."""
    asked: dict[str, set[str]] = {}
    todo = [(canonicalize_name(r.name), {canonicalize_name(e) for e in r.extras}) if isinstance(r, Requirement)
            else (canonicalize_name(r), set()) for r in roots]
    while todo:
        key, extras = todo.pop()
        if key not in graph or (key in asked and extras <= asked[key]):
            continue
        first = key not in asked
        have = asked.setdefault(key, set())
        new = extras - have
        have |= extras
        if first:
            todo += [(k, set()) for k in graph[key].requires]
            todo += [(k, set(wants)) for k, wants in graph[key].asks]
        todo += [(name, {canonicalize_name(e) for e in wants}) for extra, name, wants in graph[key].extra_requires
                 if extra in new]
    return set(asked)


def _declared(d: _Installed) -> list[str]:
    """Every requirement ``d`` declares, those of its extras too: what its code may import. (``midpkg`` imports
    ``basepkg``, which it requires only under ``extra == "fast"``: a failure raised there is basepkg's.)"""
    return list(dict.fromkeys([*d.requires, *(name for _, name, _ in d.extra_requires)]))


def dependents_of(graph: Mapping[str, _Installed], key: str) -> list[str]:
    """The installed distributions that require ``key`` (under an extra too), directly or through others."""
    seen: set[str] = set()
    todo = [key]
    while todo:
        k = todo.pop()
        for other, d in graph.items():
            if k in _declared(d) and other not in seen and other != key:
                seen.add(other)
                todo.append(other)
    return sorted(graph[k].name for k in seen)


def damage_of(info: Path | None, graph: Mapping[str, _Installed] | None = None) -> list[str]:
    """The files ``info``'s RECORD lists that are gone or differ from its sha256, judged as ``stack:files`` judges
    them: the byte-code cache aside (a sourceless ``.pyc`` outside ``__pycache__/`` is code), a file ``wh patch``
    changed to its recorded payload is not damage, nor one that holds the bytes another distribution of ``graph``
    lists for it where that one covers it (two builds of one release, a package shipped whole by both)."""
    from .checks.stack import covers

    if info is None:
        return []
    base = info.parent
    patched = patched_files(base)
    me = next((d for d in (graph or {}).values() if d.info is not None and d.info == info), None)
    listed: dict[str, list[tuple[_Installed, str]]] | None = None  # the others' rows by file, at the first difference
    out = []
    for rel, digest, _size in read_installed_record(info).hashed:
        # a row out of the site folder is judged too, as stack:files judges it: a library or script a wheel's
        # .data/ placed in the environment (``../../../lib/libdep.so``) is the install's as much as its modules
        path = base / rel
        try:
            h = hashlib.sha256()
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        except FileNotFoundError:
            out.append(f"{rel} is gone")
            continue
        except OSError:
            continue
        have = record_digest(h.digest())
        if have == digest:
            continue
        full = os.path.normpath(path)
        if full in patched and h.hexdigest() == patched[full][1]:
            continue  # wh patch's payload, recorded in its journal
        if me is not None:
            if listed is None:
                listed = {}
                for d in graph.values():
                    for rel2, digest2, _ in (d.record.hashed if d is not me and d.info is not None else ()):
                        listed.setdefault(os.path.normpath(d.info.parent / rel2), []).append((d, digest2))
            if any(digest2 == have and covers(d, me, rel) for d, digest2 in listed.get(full, ())):
                continue  # another distribution's bytes for a file both ship, where that one covers it
        out.append(f"{rel} does not match its RECORD sha256")
    return out


_FOUND_AT = re.compile(r"find_spec\('[\w.]+'\) succeeds \(([^()\n]+)\)")


def _unlisted_failing_file(text: str, graph: Mapping[str, _Installed], me: _Installed | None) -> str | None:
    """The file a failure's import took (``find_spec(...) succeeds (PATH)``), in a folder of ``me``'s files, where no
    installed RECORD lists it: a stray build beside the install (a ``_core.cpython-311-*.so`` next to the listed
    ``_core.abi3.so``) fails, and dropping the distribution removes the healthy files and leaves the stray one
    failing. (A copy elsewhere on ``sys.path`` is ``_shadows``' to name.)"""
    paths = [p for p in dict.fromkeys(_FOUND_AT.findall(text)) if os.path.isabs(p) and os.path.isfile(p)]
    if not paths or me is None or me.info is None:
        return None
    folders: dict[str, str] = {}  # one realpath per folder (a RECORD of 20k rows lives in a few hundred)
    mine = {os.path.dirname(same_path(str(me.info.parent / rel), folders)) for rel, _, _ in me.record.rows}
    paths = [p for p in paths if os.path.dirname(same_path(p, folders)) in mine]
    if not paths:
        return None
    listed = _listed_paths(graph, folders)
    return next((p for p in paths if same_path(p, folders) not in listed), None)


def _listed_paths(graph: Mapping[str, _Installed], folders: dict[str, str]) -> set[str]:
    """Every file an installed RECORD lists, spelled by its folder's real path (``same_path``, memo ``folders``)."""
    return {same_path(str(d.info.parent / rel), folders) for d in graph.values() if d.info is not None
            for rel, _, _ in d.record.rows}


_FROM_FILE = re.compile(r"cannot import name '[^']*' from '[\w.]+' \(([^()\n]+)\)")


def _unlisted_copy_in_traceback(text: str, graph: Mapping[str, _Installed]) -> str | None:
    """A file the failure's traceback runs through that belongs under a top-level name an installed distribution
    ships (``helperlib/__init__.py``) but that no installed RECORD lists: a stale copy of a requirement that
    ``PYTHONPATH`` or a ``.pth`` puts first. Dropping the distribution whose import died there removes working
    code and leaves the copy."""
    named = _FROM_FILE.findall(text)  # `cannot import name 'x' from 'helperlib' (/dev/src/helperlib/__init__.py)`
    files = [f for f in dict.fromkeys([*named, *traceback_files(text)]) if os.path.isabs(f) and os.path.isfile(f)]
    if not files:
        return None
    names: set[str] = set()
    for d in graph.values():
        for rel, _, _ in d.record.rows:
            top = rel.split("/", 1)[0]
            top = top[:-3] if top.endswith(".py") else top
            if top.isidentifier():  # not "" of an absolute row, nor "..", nor a .dist-info folder
                names.add(top)
    own = os.path.join(os.path.realpath(str(probe_script("imports").parent)), "")  # the probe's frames: wh's own
    folders: dict[str, str] = {}
    listed: set[str] | None = None
    for f in files:
        if os.path.realpath(f).startswith(own) or "/wh-probe-code-" in f:
            continue  # the probe's own frames (run from wh's folder or its private copy)
        parts = os.path.normpath(f).split(os.sep)
        if not any(p in names for p in parts[:-1]) and parts[-1][:-3] not in names:
            continue
        if listed is None:
            listed = _listed_paths(graph, folders)
        if same_path(f, folders) not in listed:
            return f
    return None


def _owner_of(graph: Mapping[str, _Installed], soname: str) -> tuple[str, str] | None:
    """The distribution whose RECORD lists a file named ``soname`` that is not on disk, and that path."""
    for key, d in graph.items():
        if d.info is None:
            continue
        for rel, _, _ in d.record.rows:
            if rel.rsplit("/", 1)[-1] == soname and not os.path.lexists(d.info.parent / rel):
                return key, rel
    return None


_ORIGINS = (
    "import importlib.util, json, sys\n"
    "answer = {}\n"
    "for m in sys.argv[1:]:\n"
    "    try:\n"
    "        s = importlib.util.find_spec(m)\n"
    "    except BaseException as exc:\n"
    "        answer[m] = None\n"
    "        continue\n"
    "    if s is None:\n"
    "        answer[m] = None\n"
    "    elif s.origin and s.origin != 'namespace':\n"
    "        answer[m] = s.origin\n"
    "    else:\n"
    "        answer[m] = (list(s.submodule_search_locations or []) or [None])[0]\n" + PRINT_ANSWER + "\n"
)


def _shadows(python: str, plan: DropPlan, info: Path | None) -> dict[str, str]:
    """``{module: where}`` for each of the plan's names that the import system finds outside the distribution's
    own files (another copy earlier on sys.path). Asked of a new process: only ``find_spec``, nothing imported
    (the copy may crash the interpreter)."""
    if info is None or not plan.modules:
        return {}
    own = {os.path.normpath(info.parent / rel) for rel, _, _ in read_installed_record(info).rows}
    # Every folder that holds its files, up to the site folder: a namespace package's spec names its folder
    # (site/acme for acme/fast/...), which is this distribution's too, not another copy's.
    base = os.path.normpath(info.parent)
    own_dirs = {d for p in own for d in _parents(p, base)}
    try:
        with tempfile.TemporaryDirectory(prefix="wh-origins-") as cwd:
            proc = subprocess.run([python, "-c", _ORIGINS, *plan.modules], capture_output=True, text=True,
                                  timeout=120, cwd=cwd)
        origins = read_answer(proc.stdout) if proc.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return {}
    out = {}
    for module, origin in (origins or {}).items():
        if not origin:
            continue
        where = os.path.normpath(origin)
        if where not in own and where not in own_dirs:
            out[module] = os.path.dirname(where) if os.path.isfile(where) else where
    return out


def _parents(path: str, base: str) -> list[str]:
    """The folders above ``path`` up to, not including, ``base`` (all of them when ``path`` is not below it: one)."""
    out, d = [], os.path.dirname(path)
    while d.startswith(base + os.sep):
        out.append(d)
        d = os.path.dirname(d)
    return out or [os.path.dirname(path)]


def requested_names(interp, wheelhouse: Path | None) -> list[Requirement]:
    """The requirements of the wheelhouse (given, else every one the install records name), with the extras they
    ask for (``app[gpu]``: what the gpu extra requires is requested too): ``wh.json``'s inputs as the doctor reads
    them (``stackfacts.wheelhouse_facts``), so an archive or oci:// install, whose facts its record holds, protects
    what it asked for too."""
    from .stackfacts import wheelhouse_facts

    try:
        meta, _ = wheelhouse_facts(wheelhouse, [Path(d) for d in interp.visible_site_dirs])
    except WhError:
        meta = None
    inputs = meta.get("inputs") if isinstance(meta, Mapping) else None
    names = []
    for text in (inputs.get("requirements") or () if isinstance(inputs, Mapping) else ()):
        try:
            names.append(Requirement(str(text)))
        except InvalidRequirement:
            continue
    return names


# ---- the plan ------------------------------------------------------------------------------------


def _damaged_by_checks(report: DoctorReport) -> dict[str, Reinstall]:
    out: dict[str, Reinstall] = {}
    for r in report.results:
        if r.verdict != "fail":
            continue
        for name in (r.data or {}).get("reinstall") or ():
            key = canonicalize_name(str(name))
            out.setdefault(key, Reinstall(key, f"a damaged install ({r.first_line})", r.id))
    return out


def _failures(report: DoctorReport, check_id: str | None) -> tuple[str, list[Mapping[str, Any]]]:
    """The evidence of check ``check_id`` and its failure records (``data.failures``)."""
    for r in report.results:
        if r.id == check_id:
            return r.evidence, [f for f in (r.data or {}).get("failures") or () if isinstance(f, dict)]
    return "", []


def _failure_text(report: DoctorReport, check_id: str | None) -> str:
    evidence, failures = _failures(report, check_id)
    return "\n".join([evidence, *(str(f.get("error") or "") for f in failures)]) if evidence or failures else ""


def plan_repair(report: DoctorReport, interp, *, include_forced: bool = False, protect_requested: bool = False,
                include_requested: bool = False, wheelhouse: Path | None = None) -> RepairPlan:
    """What to reinstall, what to drop and what to keep, for ``report``'s failures (see the module docstring)."""
    plans = plan_drops(report, include_forced=include_forced)
    reinstall = _damaged_by_checks(report)
    if not plans:
        return RepairPlan(tuple(reinstall.values()), (), ())
    graph = _graph(interp)
    failing = {canonicalize_name(p.distribution) for p in plans} | set(reinstall)
    requested = _closure(graph, requested_names(interp, wheelhouse)) if protect_requested and not include_requested \
        else set()
    drops, kept = [], []
    for p in plans:
        key = canonicalize_name(p.distribution)
        d = graph.get(key)
        info = d.info if d is not None else _dist_info(list(interp.site_dirs), p.distribution)
        why = _not_a_drop(p, key, d, info, graph, failing, reinstall, report, interp)
        if why is not None:
            kept.append(Kept(p.distribution, p.version, why, p.check_id))
        elif key in requested and not p.forced:
            kept.append(Kept(p.distribution, p.version, REQUESTED_KEPT, p.check_id))
        else:
            drops.append(replace(p, dependents=tuple(dependents_of(graph, key))))
    return RepairPlan(tuple(reinstall.values()), tuple(drops), tuple(kept))


def _names_a_failing_file(text: str, key: str, failing: set[str],
                          graph: Mapping[str, _Installed]) -> tuple[str, str] | None:
    """(name, path) when the failure's text names a shared object of another failing distribution (a framework
    that imports every plugin fails on the broken plugin's ``.so``, and so does each plugin that imports it)."""
    for other in sorted(failing - {key}):
        d = graph.get(other)
        if d is None or d.info is None:
            continue
        for rel, _, _ in d.record.rows:
            if rel.endswith((".so", ".pyd")) or ".so." in rel:
                path = os.path.normpath(d.info.parent / rel)
                if path in text:
                    return d.name, path
    return None


_NO_MODULE = re.compile(r"No module named '([\w.]+)'")


def _raised_in_dependent(report: DoctorReport, check_id: str | None, key: str,
                         graph: Mapping[str, _Installed]) -> tuple[str, str] | None:
    """(name, where) when the failure comes from a distribution that requires ``key``: a plugin the framework loads
    through its entry points at import (torch >= 2.5 loads every ``torch.backends`` entry point and re-raises its
    failure). Its code raised, or the module its entry point names is not there: the plugin is what breaks, and
    dropping the framework removes working code and leaves the plugin."""
    plugins = [k for k in dependents_of(graph, key) if graph[k].info is not None]
    if not plugins:
        return None
    _, failures = _failures(report, check_id)
    text = _failure_text(report, check_id)
    files = [os.path.normpath(str(x)) for f in failures for x in [*(f.get("files") or ()), *(f.get("cause_files") or ())]]
    files += [os.path.normpath(f) for f in traceback_files(text)]
    text = "\n".join([text, *(str(c) for f in failures for c in f.get("causes") or ())])
    for k in plugins:
        d = graph[k]
        own = {os.path.normpath(str(d.info.parent / rel)) for rel, _, _ in d.record.rows}
        hit = next((f for f in reversed(files) if f in own), None)
        if hit is not None:
            return d.name, hit
        tops = {rel.split("/", 1)[0].removesuffix(".py") for rel, _, _ in d.record.rows}
        gone = next((m for m in _NO_MODULE.findall(text) if m.split(".", 1)[0] in tops), None)
        if gone is not None:
            return d.name, f"the module {gone} its entry point names, which it does not ship"
    return None


def _raised_in_requirement(report: DoctorReport, check_id: str | None, key: str, d: _Installed | None,
                           graph: Mapping[str, _Installed], python: str) -> tuple[str, str] | None:
    """(name, file) when the failure's traceback was raised in a file of one of ``d``'s requirements (directly or
    not) *and* that requirement fails to import in a process of its own: a pure-Python requirement gets no import
    probe of its own, so its failure shows only in its importers'. A requirement that imports alone (torch, whose
    ``torch.ops.load_library`` raises for a broken extension's library) is not to blame: ``d`` is dropped."""
    if d is None:
        return None
    files = [str(x) for f in _failures(report, check_id)[1] for x in f.get("files") or ()]
    if not files:
        return None
    innermost = os.path.normpath(files[-1])
    for req in sorted(_closure(graph, _declared(d)) - {key}):
        info = graph[req].info
        if info is None:
            continue
        rows = [rel for rel, _, _ in graph[req].record.rows]
        if innermost in {os.path.normpath(info.parent / rel) for rel in rows}:
            own = {os.path.normpath(d.info.parent / rel) for rel, _, _ in d.record.rows} if d.info else set()
            return (graph[req].name, innermost) if _fails_alone(python, _top_names(rows), own) else None
    return None


def _top_names(rows: Sequence[str]) -> list[str]:
    """The top-level names a RECORD's files make importable (a package folder with ``__init__.py``, a module)."""
    names = []
    for rel in rows:
        top, slash, rest = rel.partition("/")
        if (slash and rest == "__init__.py") or (not slash and rel.endswith(".py")):
            name = top[:-3] if not slash else top
            if name.isidentifier():
                names.append(name)
    return sorted(set(names))


def _fails_alone(python: str, names: Sequence[str], own: set[str]) -> bool:
    """Does importing ``names`` fail in a fresh process of ``python`` by itself: not through a file of ``own``
    (the distribution being judged: a framework that imports its plugins fails through the broken plugin)?"""
    if not names:
        return False
    try:
        with tempfile.TemporaryDirectory(prefix="wh-alone-") as cwd:
            proc = subprocess.run([python, "-c", "".join(f"import {n}\n" for n in names)], capture_output=True,
                                  text=True, timeout=120, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if proc.returncode == 0:
        return False
    through = {os.path.normpath(f) for f in traceback_files(proc.stderr)}
    # The loader names the file it could not map in the error line, not in a frame: look for own files there too.
    return not (through & own) and not any(f in proc.stderr for f in own if f.endswith((".so", ".pyd")))


def _not_a_drop(p: DropPlan, key: str, d: _Installed | None, info: Path | None, graph, failing: set[str],
                reinstall: dict[str, Reinstall], report: DoctorReport, interp) -> str | None:
    """Why ``p``'s distribution is not to be dropped (adding what mends it to ``reinstall``), or None."""
    if key in reinstall:
        return "a damaged install: reinstalled from the wheelhouse, not dropped"
    damage = damage_of(info, graph)
    if damage:
        reinstall[key] = Reinstall(key, "a damaged install: " + "; ".join(damage[:3])
                                   + (f"; and {len(damage) - 3} more" if len(damage) > 3 else ""), p.check_id)
        return f"a damaged install ({'; '.join(damage[:3])}): reinstalled instead"
    stray = _unlisted_failing_file(_failure_text(report, p.check_id), graph, d)
    if stray is not None:
        return (f"the failing file {stray} is listed by no installed distribution's RECORD (a stray build beside the "
                f"install, which the import system takes first): remove it; {p.distribution} is kept")
    for soname in dict.fromkeys(_NO_LIB.findall(_failure_text(report, p.check_id))):
        owner = _owner_of(graph, soname)
        if owner is not None and owner[0] != key:
            name = graph[owner[0]].name
            reinstall.setdefault(owner[0], Reinstall(owner[0], f"{owner[1]}, listed in its RECORD, is gone "
                                                               f"({p.distribution} needs it)", p.check_id))
            return f"{soname} is missing from {name} (its RECORD lists {owner[1]}): {name} is reinstalled instead"
    if d is not None and d.unmet:
        for req in d.unmet:
            reinstall.setdefault(req, Reinstall(req, f"required by {d.name} and not installed", p.check_id))
        return f"its requirement {', '.join(d.unmet)} is not met: installed from the wheelhouse instead"
    upstream = sorted((_closure(graph, _declared(d)) & failing) - {key}) if d is not None else []
    if upstream:
        return (f"it fails because its requirement {', '.join(graph[u].name for u in upstream)} fails: "
                "that one is mended or dropped, not this one")
    blamed = _names_a_failing_file(_failure_text(report, p.check_id), key, failing, graph)
    if blamed is not None:
        name, path = blamed
        return (f"its failure is in {path}, a file of {name}, which fails itself: {name} is mended or dropped, "
                "not this one")
    plugin = _raised_in_dependent(report, p.check_id, key, graph)
    if plugin is not None:
        name, where = plugin
        return (f"its import fails in {name}, which requires it (a plugin it loads at import): {where}; {name} is what "
                f"to mend or drop (`wh drop {name}`), not this one")
    raised_in = _raised_in_requirement(report, p.check_id, key, d, graph, interp.executable)
    if raised_in is not None:
        name, path = raised_in
        return (f"it fails in the code of its requirement {name} ({path} raised): {name} is what to mend "
                f"(`wh install --reinstall {name}`, or drop it); not dropped")
    shadows = _shadows(interp.executable, p, info)
    if shadows:
        where = ", ".join(sorted(set(shadows.values())))
        return (f"the failing copy of {', '.join(sorted(shadows))} is {where}, not the installed one: take that "
                "folder off sys.path (PYTHONPATH, a .pth file); the installed distribution is kept")
    copy = _unlisted_copy_in_traceback(_failure_text(report, p.check_id), graph)
    if copy is not None:
        return (f"its import fails in {copy}, a copy no installed distribution's RECORD lists (PYTHONPATH, a .pth file "
                "puts it first): take it off sys.path; the installed distribution is kept")
    return None


# ---- mending -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reinstalled:
    name: str
    version: str | None
    wheelhouse: str | None
    error: str | None = None  # why it could not be reinstalled (then nothing changed for it)


def _wheelhouses_for(interp, names: Sequence[str], wheelhouse: Path | None) -> dict[str, list[str]]:
    """``{wheelhouse: [names]}``: the given one, else the one installed.json records for each name, else the
    first recorded wheelhouse whose lock holds it (a requirement that was never installed)."""
    from wheelhouse.install import read_install_state

    if wheelhouse is not None:
        return {str(wheelhouse): list(names)}
    state = read_install_state(interp.platlib)
    out: dict[str, list[str]] = {}
    for name in names:
        rec = state.get("packages", {}).get(name) or {}
        house = rec.get("wheelhouse") or next((h for h in state.get("wheelhouses", []) if _holds(h, name)), None)
        out.setdefault(house or "", []).append(name)
    return out


def _holds(house: str, name: str) -> bool:
    from wheelhouse.install import load_wheelhouse

    try:
        return any(canonicalize_name(f.name) == name for f in load_wheelhouse(Path(house)).files)
    except (WhError, OSError):
        return False


def reinstall_distributions(python: str, items: Sequence[Reinstall], *, wheelhouse: Path | None = None,
                            reporter: Reporter = NullReporter()) -> list[Reinstalled]:
    """Install each item again from its wheelhouse (``wh install --reinstall``), one transaction per wheelhouse.

    A failure (no wheelhouse, not in it, a hash that does not match) leaves that wheelhouse's names as they were
    and is returned as an ``error``, for the report; the others go on.
    """
    from wheelhouse.install import InstallOptions, install_wheelhouses
    from wheelhouse.target.interpreter import inspect_interpreter

    interp = inspect_interpreter(python)
    out: list[Reinstalled] = []
    for house, names in _wheelhouses_for(interp, [i.name for i in items], wheelhouse).items():
        if not house:
            out += [Reinstalled(n, None, None, f"no wheelhouse holds it: `wh install WHEELHOUSE --reinstall {n} "
                                               f"--python {python}`") for n in names]
            continue
        try:
            with ExitStack() as held:
                source = _recorded_source(house, held) or Path(house)
                result = install_wheelhouses([source], InstallOptions(python=interp.executable,
                                                                      reinstall=frozenset(names), links=False),
                                             reporter=reporter)
        except WhError as exc:
            out += [Reinstalled(n, None, house, f"{exc.message}" + (f" (hint: {exc.hint})" if exc.hint else ""))
                    for n in names]
            continue
        versions = {canonicalize_name(d.name): d.version for d in result.installed}
        out += [Reinstalled(n, versions.get(n), house) for n in names]
    return out


def describe(plan: RepairPlan) -> dict[str, Any]:
    """The plan as JSON (``--dry-run``, reports)."""
    return {"reinstall": [{"name": r.name, "reason": r.reason, "check": r.check_id} for r in plan.reinstall],
            "drop": [{"name": p.distribution, "version": p.version, "dependents": list(p.dependents)}
                     for p in plan.drops],
            "kept": [{"name": k.distribution, "version": k.version, "reason": k.reason, "check": k.check_id}
                     for k in plan.kept]}

