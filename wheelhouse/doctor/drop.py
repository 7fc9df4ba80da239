"""``wh drop``: uninstall what is findable but broken, prove it is gone, remember it.

Only distributions whose EXECUTED probe failed are dropped (an import that
raised, crashed or hung; a JIT probe that failed to compile). Never on a
guess (issue 4): a manifest ``[[drop]]`` entry with ``force = true`` whose
probe passed (or did not run) is only reported, and is dropped only when the
caller asks for it (``--include-forced``), recorded as "forced by manifest".
After uninstalling, a NEW process confirms ``importlib.util.find_spec`` is
None for every import name; the drop is recorded in
``<platlib>/.wh/dropped.json`` with the wheelhouse it came from, so
``wh drop --restore NAME`` can reinstall it offline (from ``--wheelhouse DIR`` when
given, e.g. after the wheelhouse moved). The record follows what is installed: an
entry whose distribution was reinstalled by other means (pip install of the wheel)
is removed when drops are listed or restored. A file another installed distribution's RECORD lists too
(opencv-python's ``cv2/`` beside opencv-contrib-python's) is never removed: the drop keeps it, says so,
and uninstalls with the guarded uninstaller, which can leave a file in place (pip cannot).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.utils import canonicalize_name

from wheelhouse.atomic import write_atomic
from wheelhouse.datafile import load_json
from wheelhouse.folderlock import FolderLock, lockable
from wheelhouse.faults import checkpoint
from wheelhouse.install.transaction import recover
from wheelhouse.install.uninstall import remove_distribution
from wheelhouse.errors import UsageError, WhError
from wheelhouse.progress import NullReporter, Reporter
from wheelhouse.recordfile import read_installed_record
from wheelhouse.script_answer import PRINT_ANSWER, read_answer
from .report import DoctorReport
from wheelhouse.install.installed import find_installed
from wheelhouse.install.sharedfiles import SharedFile, shared_with_others

__all__ = ["DropPlan", "DropRecord", "DropFailed", "FORCED_REASON", "FORCED_NOT_DROPPED", "plan_drops", "forced_kept",
           "drop_distributions", "dropped_path", "read_dropped", "restore_dropped", "find_spec_many", "DroppedList",
           "RestoreResult", "list_dropped"]

_SCHEMA = "wh-dropped/1"

FORCED_REASON = "forced by manifest"
FORCED_NOT_DROPPED = ("listed in the manifest as force-drop; its probe passed (or did not run): not dropped; "
                      "pass --include-forced to drop it")


class DropFailed(WhError):
    code = "drop-failed"


class NotDropped(UsageError):
    code = "not-dropped"


@dataclass(frozen=True)
class DropPlan:
    distribution: str
    version: str
    modules: tuple[str, ...]
    reason: str
    evidence: str
    check_id: str | None
    forced: bool = False
    dependents: tuple[str, ...] = ()  # installed distributions that require it (directly or not)


@dataclass(frozen=True)
class DropRecord:
    name: str
    version: str
    reason: str
    evidence: str
    time: str
    wheelhouse: str | None
    modules: tuple[str, ...] = ()
    method: str = ""  # "record" (the guarded uninstaller; a record written before 45: "pip")
    forced: bool = False
    check_id: str | None = None
    confirmed: bool = False  # find_spec is None for every module, in a new process
    still_found: tuple[str, ...] = field(default=())
    dependents: tuple[str, ...] = ()  # installed distributions that required it: they lose it
    kept: tuple[SharedFile, ...] = ()  # its files another installed distribution lists too: left in place

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["modules"] = list(self.modules)
        d["still_found"] = list(self.still_found)
        d["dependents"] = list(self.dependents)
        d["kept"] = [k.to_json() for k in self.kept]
        return d


def _failed_plans(report: DoctorReport) -> dict[str, DropPlan]:
    out: dict[str, DropPlan] = {}
    for r in report.results:
        drop = (r.data or {}).get("drop")
        if r.verdict != "fail" or not drop:
            continue
        key = canonicalize_name(drop["distribution"])
        if key not in out:
            out[key] = DropPlan(drop["distribution"], drop.get("version", ""), tuple(drop.get("modules") or ()),
                                drop.get("reason") or r.title, r.evidence, r.id)
    return out


def forced_kept(report: DoctorReport) -> list[DropPlan]:
    """Manifest ``force = true`` entries whose probe did not fail: dropped only with ``include_forced``.

    They come from the report's ``forced_drops`` fact (installed distributions named by a manifest
    ``[[drop]]`` with ``force = true``). An entry whose executed probe failed is not here: it is
    dropped for that failure, like any other.
    """
    failed = _failed_plans(report)
    out: dict[str, DropPlan] = {}
    for f in (report.facts or {}).get("forced_drops", []) or []:
        key = canonicalize_name(f["distribution"])
        if key in failed or key in out:
            continue
        why = f.get("reason") or ""
        out[key] = DropPlan(f["distribution"], f.get("version", ""), tuple(f.get("modules") or ()), FORCED_REASON,
                            "manifest [[drop]] force = true" + (f": {why}" if why else "")
                            + "; its probe passed (or did not run)", None, True)
    return list(out.values())


def plan_drops(report: DoctorReport, *, include_forced: bool = False) -> list[DropPlan]:
    """What to drop: the distributions whose executed probe failed; forced manifest entries only if asked.

    Never on a guess (issue 4): without ``include_forced`` a ``force = true`` entry whose probe
    passed stays installed (see :func:`forced_kept` for what to report instead).
    """
    plans = list(_failed_plans(report).values())
    return plans + forced_kept(report) if include_forced else plans


def dropped_path(platlib: str | Path) -> Path:
    return Path(platlib) / ".wh" / "dropped.json"


def read_dropped(platlib: str | Path) -> list[dict[str, Any]]:
    """The entries of ``<platlib>/.wh/dropped.json`` as recorded (empty when there is none)."""
    path = dropped_path(platlib)
    if not os.path.lexists(path):
        return []
    data = load_json(path, what="drop record", error=DropFailed, expect=object, hint="inspect or remove it")
    entries = data.get("dropped", []) if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("name"), str) for e in entries):
        raise DropFailed(f"{dropped_path(platlib)} is not a wh drop record (a list of dropped names)",
                         hint="inspect or remove it")
    return list(entries)


def _write_dropped(platlib: str | Path, entries: list[dict[str, Any]]) -> None:
    body = {"schema": _SCHEMA, "dropped": entries}
    write_atomic(dropped_path(platlib), json.dumps(body, indent=2) + "\n")


_FIND_SPEC = (
    "import importlib.util, json, sys\n"
    "out = {}\n"
    "for m in sys.argv[1:]:\n"
    "    try:\n"
    "        out[m] = importlib.util.find_spec(m) is not None\n"
    "    except Exception:\n"
    "        out[m] = True\n"
    "answer = out\n" + PRINT_ANSWER + "\n"
)


def find_spec_many(python: str, modules: Sequence[str], env: Mapping[str, str] | None = None) -> dict[str, bool]:
    """``find_spec(m) is not None`` for each module, asked in a NEW process of ``python``."""
    if not modules:
        return {}
    with tempfile.TemporaryDirectory(prefix="wh-findspec-") as cwd:  # an empty cwd shadows nothing
        proc = subprocess.run([python, "-c", _FIND_SPEC, *modules], capture_output=True, text=True, timeout=120,
                              cwd=cwd, env=dict(env) if env is not None else None)
    if proc.returncode != 0:
        raise DropFailed(f"{python} could not run find_spec", detail=proc.stderr[-2000:], hint="check the interpreter")
    try:
        return read_answer(proc.stdout)
    except ValueError as exc:  # something printed after the answer (an atexit hook): no confirmation either way
        raise DropFailed(f"{python} did not answer find_spec on a line of its own", detail=proc.stdout[-2000:],
                         hint="check what prints when the interpreter exits (sitecustomize, .pth files)") from exc


def _dist_info(site_dirs: Sequence[str], name: str) -> Path | None:
    want = canonicalize_name(name)
    for site in site_dirs:
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        for e in entries:
            if e.endswith(".dist-info") and canonicalize_name(e[: -len(".dist-info")].partition("-")[0]) == want:
                return Path(site) / e
    return None


def _confirm_names(info: Path, modules: Sequence[str], kept: Sequence[SharedFile] = ()) -> tuple[str, ...]:
    """The names whose ``find_spec`` must be None once the distribution at ``info`` is gone.

    A name the distribution provides only as a portion of a namespace package (``nspkg/a/...``, no
    ``nspkg/__init__.py``) is shared: another distribution's ``nspkg/b`` keeps ``find_spec('nspkg')``
    alive, which says nothing about this drop. Its own names under it are confirmed instead. So is a
    name whose files the drop keeps (``kept``: another distribution lists them): that one still serves it.
    """
    shared = {k.path for k in kept}
    paths = [p for p, _, _ in read_installed_record(info).rows if not p.startswith("..") and "__pycache__/" not in p]

    def expand(module: str) -> list[str]:
        prefix = module.replace(".", "/")
        own = [p[len(prefix) + 1:] for p in paths if p.startswith(prefix + "/")]
        files = [p for p in paths if p == f"{prefix}.py"
                 or (p.startswith(prefix + ".") and p.endswith(".so") and "/" not in p[len(prefix):])]
        if files:
            return [] if all(p in shared for p in files) else [module]
        if not own or ("__init__.py" in own and f"{prefix}/__init__.py" not in shared):
            return [module]
        children = dict.fromkeys(c.split("/", 1)[0].split(".", 1)[0] for c in own)
        names = [n for c in children if c.isidentifier() for n in expand(f"{module}.{c}")]
        return names if names or "__init__.py" in own else [module]

    return tuple(dict.fromkeys(n for m in modules for n in expand(m)))


def _wheelhouse_of(platlib: str, name: str, wheelhouse: Path | None) -> str | None:
    if wheelhouse:
        return str(wheelhouse)
    from wheelhouse.install import read_install_state

    rec = read_install_state(platlib).get("packages", {}).get(canonicalize_name(name))
    return rec.get("wheelhouse") if rec else None


def drop_distributions(
    python: str,
    plans: Sequence[DropPlan],
    *,
    dry_run: bool = False,
    wheelhouse: Path | None = None,
    reporter: Reporter = NullReporter(),
) -> list[DropRecord]:
    """Uninstall each planned distribution, confirm find_spec is None in a new process, record it."""
    from wheelhouse.target.interpreter import inspect_interpreter

    interp = inspect_interpreter(python)
    records: list[DropRecord] = []
    reporter.start("drop", total=len(plans))
    with ExitStack() as held:
        if not dry_run:
            # The target's lock for the whole drop: a `wh install` waits, and so does a second drop, whose
            # read-and-extend of dropped.json would otherwise lose this one's entries (nothing to restore).
            held.enter_context(FolderLock(lockable(interp.platlib), on_wait=reporter.note))
        try:
            for p in plans:
                record = _drop_one(interp, p, dry_run=dry_run, wheelhouse=wheelhouse)
                if record is not None:
                    records.append(record)
                reporter.advance("drop")
        finally:
            # Also when a later uninstall fails (or Ctrl-C): what is gone is recorded (it was, before it went).
            if not dry_run and records:
                records = _confirm(interp, records)
    reporter.finish("drop")
    return records


def _drop_one(interp, p: DropPlan, *, dry_run: bool, wheelhouse: Path | None) -> DropRecord | None:
    """Record, then uninstall ``p``'s distribution (unless ``dry_run``); None when it is not installed.

    The record comes first, like a journal (issue 29.5): a kill at any point after it leaves an entry, either
    for a distribution that is gone (``--restore`` brings it back) or for one still installed, because the
    uninstall had not begun or was rolled back (the entry is reconciled away: ``_reconcile``). Written after
    the uninstall, a kill between the two lost it: the distribution gone, ``--restore`` saying "was not dropped".
    """
    info = _dist_info(list(interp.site_dirs), p.distribution)
    if info is None:
        return None
    # The uninstall removes every installed copy of the name (a stale second dist-info an interrupted upgrade
    # left): what another distribution lists is kept whichever copy's RECORD names it, not only the first's.
    copies = [d for d, _ in find_installed(list(interp.site_dirs), p.distribution)] or [info]
    shared = shared_with_others(copies, list(interp.site_dirs), {p.distribution})
    kept_by: dict[str, SharedFile] = {}
    for c in copies:
        for k in shared[c]:
            rel = k.path if c == info else os.path.relpath(os.path.join(c.parent, k.path), info.parent)
            was = kept_by.get(rel)
            kept_by[rel] = SharedFile(rel, tuple(dict.fromkeys((*(was.listed_by if was else ()), *k.listed_by))))
    kept = tuple(kept_by.values())
    keep = [str(info.parent / k.path) for k in kept]
    # Always the guarded uninstaller, never the target's pip: pip removes every path a RECORD lists inside the
    # prefix (a row ``../../../bin/python`` took the venv's interpreter; a row naming a folder, another package)
    # and keeps nothing another distribution lists; without a RECORD it uninstalls nothing either.
    method = "record"
    modules = _confirm_names(info, p.modules, kept)  # read before the RECORD goes
    record = DropRecord(
        name=p.distribution, version=p.version, reason=p.reason, evidence=p.evidence[:4000],
        time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        wheelhouse=_wheelhouse_of(interp.platlib, p.distribution, wheelhouse), modules=modules,
        method=method, forced=p.forced, check_id=p.check_id, dependents=p.dependents, kept=kept,
    )
    if dry_run:
        return record
    before = read_dropped(interp.platlib)
    _write_dropped(interp.platlib, before + [record.to_json()])  # unconfirmed until find_spec says so
    checkpoint("drop.recorded")
    try:
        # The one guarded uninstaller (install's): only paths inside the environment, never ../../outside.txt or
        # wh's own .wh/ records, all or nothing (issue 11.6). The caller holds the lock.
        remove_distribution(p.distribution, interp.scheme(), keep=keep)
    except BaseException:
        if _dist_info(list(interp.site_dirs), p.distribution) is not None:  # nothing was uninstalled
            _write_dropped(interp.platlib, before)
        raise
    checkpoint("drop.uninstalled")
    return record


def _confirm(interp, records: list[DropRecord]) -> list[DropRecord]:
    """Ask a new process whether find_spec is None for each record's names; note it in their entries."""
    found = find_spec_many(interp.executable, [m for r in records for m in r.modules])  # failing: left unconfirmed
    confirmed = []
    for r in records:
        still = tuple(m for m in r.modules if found.get(m))
        confirmed.append(replace(r, confirmed=not still, still_found=still))
    mine = {(r.name, r.time): r.to_json() for r in confirmed}
    _write_dropped(interp.platlib, [mine.get((e.get("name"), e.get("time")), e) for e in read_dropped(interp.platlib)])
    return confirmed


@dataclass(frozen=True)
class DroppedList:
    """What is recorded as dropped from one interpreter, after reconciling with what is installed."""

    entries: tuple[Mapping[str, Any], ...]
    reinstalled: tuple[str, ...] = ()  # recorded as dropped, installed again by other means: entry removed


@dataclass(frozen=True)
class RestoreResult:
    name: str
    version: str | None
    wheelhouse: str | None
    already_installed: bool = False  # reinstalled by other means: only the record was updated
    install: Any = None  # the InstallResult of the reinstall

    def to_json(self) -> dict[str, Any]:
        return {"restored": self.name, "version": self.version, "wheelhouse": self.wheelhouse,
                "already_installed": self.already_installed,
                "install": self.install.to_json() if self.install is not None else None}


def _reconcile(interp) -> DroppedList:
    """Drop entries whose distribution is installed again (a manual pip install, or an uninstall that a kill
    stopped and the next run rolled back): the record follows reality. Under the target's lock: a drop
    records its entry before it uninstalls."""
    site_dirs = list(interp.site_dirs)
    with FolderLock(lockable(interp.platlib)):
        recover(interp.platlib, interp.scheme())  # an uninstall a kill left half-done is rolled back first
        entries = read_dropped(interp.platlib)
        back = [e for e in entries if _dist_info(site_dirs, e["name"]) is not None]
        if back:
            keys = {canonicalize_name(e["name"]) for e in back}
            entries = [e for e in entries if canonicalize_name(e["name"]) not in keys]
            _write_dropped(interp.platlib, entries)
    return DroppedList(tuple(entries), tuple(e["name"] for e in back))


def _forget(interp, keys: set[str]) -> list[dict[str, Any]]:
    """Remove the entries named ``keys`` from dropped.json, under the target's lock (a drop may be appending)."""
    with FolderLock(lockable(interp.platlib)):
        keep = [e for e in read_dropped(interp.platlib) if canonicalize_name(e["name"]) not in keys]
        _write_dropped(interp.platlib, keep)
    return keep


def list_dropped(python: str) -> DroppedList:
    """What was dropped from ``python`` and is still not installed (the record is reconciled first)."""
    from wheelhouse.target.interpreter import inspect_interpreter

    return _reconcile(inspect_interpreter(python))


def _recorded_source(recorded: str, held) -> Path | None:
    """An archive or oci:// source (recorded, or given with --wheelhouse), materialized (verified); None when it is a
    folder or gone."""
    from wheelhouse.carry import OCI_SCHEME, is_archive, materialize

    if recorded.startswith(OCI_SCHEME) or (Path(recorded).is_file() and is_archive(recorded) is not None):
        return materialize([recorded], held)[0]
    return None


def _source_wheelhouse(entry: Mapping[str, Any], wheelhouse: Path | None, python: str, held) -> Path:
    if wheelhouse is not None:  # a folder, a `wh pack` archive or an oci:// reference (as --help says)
        given = _recorded_source(str(wheelhouse), held)
        if given is not None:
            return given
        if not (Path(wheelhouse) / "wh.json").is_file():
            raise NotDropped(f"--wheelhouse {wheelhouse} is not a wheelhouse (no wh.json)",
                             hint="give the folder `wh stage -o` wrote (it holds wh.json and pylock.toml), "
                                  "a `wh pack` archive or an oci:// reference")
        return Path(wheelhouse)
    if not entry.get("wheelhouse"):
        raise NotDropped(f"no wheelhouse was recorded when {entry['name']} was dropped",
                         hint=f"name one: `wh drop --restore {entry['name']} --wheelhouse WHEELHOUSE --python {python}`")
    from_archive = _recorded_source(entry["wheelhouse"], held)
    if from_archive is not None:
        return from_archive
    if not (Path(entry["wheelhouse"]) / "wh.json").is_file():
        raise NotDropped(f"{entry['name']} was installed from {entry['wheelhouse']}, which is no longer there",
                         hint=f"restore it from a copy: `wh drop --restore {entry['name']} --wheelhouse WHEELHOUSE "
                              f"--python {python}` (or `wh install WHEELHOUSE --only {entry['name']} --python {python}`)")
    return Path(entry["wheelhouse"])


def restore_dropped(python: str, name: str, *, wheelhouse: Path | None = None,
                    reporter: Reporter = NullReporter()) -> RestoreResult:
    """Reinstall a dropped distribution from ``wheelhouse``, else from the one recorded when it was dropped.

    The entry leaves the record only once the distribution is installed again; one that was
    reinstalled by other means is only removed from the record (``already_installed``).
    """
    from wheelhouse.carry import origin_of
    from wheelhouse.install import InstallOptions, install_wheelhouses
    from wheelhouse.target.interpreter import inspect_interpreter

    interp = inspect_interpreter(python)
    with FolderLock(lockable(interp.platlib)):
        recover(interp.platlib, interp.scheme())  # a drop a kill stopped mid-uninstall: rolled back, then judged
    entries = read_dropped(interp.platlib)
    key = canonicalize_name(name)
    match = [e for e in entries if canonicalize_name(e["name"]) == key]
    if not match:
        known = ", ".join(sorted({e["name"] for e in entries})) or "nothing"
        raise NotDropped(f"{name} was not dropped from {interp.executable} (dropped: {known})",
                         hint=f"list drops with `wh drop --list --python {python}`")
    entry = match[-1]
    if _dist_info(list(interp.site_dirs), entry["name"]) is not None:
        _forget(interp, {key})
        return RestoreResult(entry["name"], entry.get("version"), None, already_installed=True)
    with ExitStack() as held:  # an archive or registry source lives in a temporary folder until installed
        source = _source_wheelhouse(entry, wheelhouse, interp.executable, held)
        result = install_wheelhouses([source], InstallOptions(python=interp.executable, only=frozenset({entry["name"]}),
                                                              links=False, patches=False), reporter=reporter)
        recorded = origin_of(source)
    checkpoint("drop.restored")  # installed, still recorded: a kill here is reconciled by the next list or restore
    there = find_installed(list(interp.site_dirs), entry["name"])
    if not there:
        raise NotDropped(f"{entry['name']} is not in {source}: nothing was restored",
                         hint=f"give the wheelhouse it came from: `wh drop --restore {entry['name']} --wheelhouse "
                              f"WHEELHOUSE --python {interp.executable}`")
    _forget(interp, {key})
    # the version the wheelhouse holds now, which is what was installed (its lock may have moved since the drop)
    return RestoreResult(entry["name"], there[0][1] or entry.get("version"), recorded, install=result)
