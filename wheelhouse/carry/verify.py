"""`wh verify`: is this wheelhouse whole, and is it what its records say? Offline, before anything is installed.

Every check collects every problem, one line each:

- each wheel of ``pylock.toml``: inside the wheelhouse, its file name naming the entry's name and
  version, there, of the size (and, with ``hashes``, the sha256) the lock says;
- ``simple/`` lists exactly the lock's wheels with the lock's sha256 (pip reads those pages);
- the lock against ``wh.json``: the target's environment, the requirements and constraints it was
  staged from (each satisfied by a pin, or provided by the target's image), the count and size,
  the engine's wheel and exported files, every path wh.json says wh wrote;
- ``bootstrap/``: wh's own wheel there, every file of its lock, and every requirement of those
  wheels that applies on the target's interpreter met inside it;
- every patch spec: readable, its payload there, with the payload sha256 the spec names.

``verify_wheelhouse(path, hashes=False)`` is the structural part: ``wh install`` hashes every wheel
itself before it writes (``install.checks.verify_files``) and calls ``require_intact`` first.
"""

from __future__ import annotations

import html
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Protocol, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from wheelhouse.digest import sha256_of
from wheelhouse.errors import WhError
from wheelhouse.lock import Lock, LockedFile, read_pylock, read_wh_json
from wheelhouse.lock.writer import SIMPLE, WHEELS, environment_marker
from wheelhouse.lock.rewrites import rewrites_of
from wheelhouse.progress import NullReporter, Reporter
from wheelhouse.target import TargetProfile, target_from_json

__all__ = ["ClosureRule", "Verdict", "WheelhouseDamaged", "verify_wheelhouse", "require_intact", "target_summary"]


class ClosureRule(Protocol):
    """How a set of wheels is judged complete for a target: install's rule (the module
    ``wheelhouse.install.closure`` is one). Handed in by the caller, because carry sits below install
    (docs/design.md, layers); without one, bootstrap/'s requirements are not judged."""

    def wheel_dist(self, wheel: Path) -> Any: ...

    def unmet(self, view: Mapping[str, Any], target: TargetProfile) -> Mapping[tuple[str, str], str]: ...

_HREF = re.compile(r'href="([^"]+)"')
_DIST_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".zip", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tar")


def _list(value: Any) -> list:
    """A wh.json field that should be a list (a hand edit may have made it something else: then none)."""
    return value if isinstance(value, list) else []


class WheelhouseDamaged(WhError):
    """A wheelhouse that is not whole or does not match its own records."""

    code = "damaged-wheelhouse"


@dataclass(frozen=True)
class Verdict:
    wheelhouse: Path
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()
    summary: Mapping[str, Any] = field(default_factory=dict)
    hashed: bool = True
    archive: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "wheelhouse": str(self.wheelhouse), "archive": self.archive, "hashed": self.hashed,
                "problems": list(self.problems), "notes": list(self.notes), **dict(self.summary)}


# --- wheels against the lock ------------------------------------------------------------------

def _entry_problems(root: Path, f: LockedFile, where: str) -> list[str]:
    """What is wrong with one lock entry that needs no hashing (empty: its file is there, of its size)."""
    if "://" in f.path:
        return [f"{where}: {f.filename} is listed by URL, not carried in the wheelhouse"]
    rel = PurePosixPath(f.path)
    if not f.path or rel.is_absolute() or ".." in rel.parts:
        return [f"{where}: {f.filename} has the path {f.path!r}, outside the wheelhouse"]
    problems = []
    try:
        name, version, _, _ = parse_wheel_filename(f.filename)
        if canonicalize_name(name) != canonicalize_name(f.name) or Version(str(version)) != Version(f.version):
            problems.append(f"{where}: the entry {f.name} {f.version} names the wheel {f.filename}")
    except (InvalidWheelFilename, InvalidVersion):
        problems.append(f"{where}: {f.filename} is not a wheel file name")
    if rel.name != f.filename:
        problems.append(f"{where}: {f.filename} has the path {f.path}, another file name")
    path = root / f.path
    if not path.is_file():
        problems.append(f"{_shown(root, path)} is missing ({where} lists it)")
    elif f.size is not None and path.stat().st_size != f.size:
        problems.append(f"{_shown(root, path)}: {path.stat().st_size} bytes, {where} says {f.size}")
    return problems


def _shown(root: Path, path: Path) -> str:
    """A path as the user knows it: relative to the wheelhouse (bootstrap/x.whl, wheels/y.whl)."""
    base = root.parent if root.name == "bootstrap" else root
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return str(path)


def _hash_problems(entries: Sequence[tuple[Path, LockedFile, str]], jobs: int, reporter: Reporter) -> list[str]:
    """sha256 of every present file of the right size, against its lock entry."""
    todo = [(root, f, where) for root, f, where in entries
            if (root / f.path).is_file() and (f.size is None or (root / f.path).stat().st_size == f.size)]
    total = sum((root / f.path).stat().st_size for root, f, _ in todo)
    task = f"hashing {len(todo)} wheel{'' if len(todo) == 1 else 's'}"
    reporter.start(task, total=total, unit="B")

    def one(item):
        root, f, where = item
        got = sha256_of(root / f.path)
        reporter.advance(task, (root / f.path).stat().st_size)
        return None if got == f.sha256 else f"{_shown(root, root / f.path)}: sha256 {got[:16]}... is not {where}'s {f.sha256[:16]}..."

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        out = [p for p in pool.map(one, todo) if p]
    reporter.finish(task)
    return out


def _stray_notes(root: Path, lock: Lock) -> list[str]:
    listed = {f.path for f in lock.files}
    folder = root / WHEELS
    strays = sorted(p.name for p in folder.glob("*.whl") if f"{WHEELS}/{p.name}" not in listed) if folder.is_dir() else []
    return [f"{WHEELS}/{n} is not in pylock.toml (it will not be installed)" for n in strays]


def _simple_problems(root: Path, lock: Lock) -> list[str]:
    """simple/ against the lock: pip installing from the pages must get exactly the lock's wheels."""
    folder = root / SIMPLE
    if not folder.is_dir():
        return [f"{SIMPLE} is not a folder (pip's pages of the lock)"] if os.path.lexists(folder) else []
    listed: dict[str, str] = {}
    problems = []
    for page in sorted(folder.glob("*/index.html")):
        try:
            text = page.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:  # a folder of that name (a tar may hold one), unreadable: named, never a crash
            problems.append(f"{page.relative_to(root).as_posix()} is not a readable page ({exc.strerror or exc})")
            continue
        for href in _HREF.findall(text):
            url, _, frag = html.unescape(href).partition("#sha256=")
            if frag:
                listed[url.rsplit("/", 1)[-1]] = frag
    want = {f.filename: f.sha256 for f in lock.files if f.path == f"{WHEELS}/{f.filename}"}
    problems += [f"simple/ lists {n} with sha256 {listed[n][:16]}..., pylock.toml says {sha[:16]}..."
                 for n, sha in sorted(want.items()) if n in listed and listed[n] != sha]
    problems += [f"simple/ does not list {n} (pylock.toml does)" for n in sorted(set(want) - set(listed))]
    problems += [f"simple/ lists {n}, which pylock.toml does not" for n in sorted(set(listed) - set(want))]
    return problems


# --- the lock against wh.json ---------------------------------------------------------------

def _assumed(meta: Mapping[str, Any], target: TargetProfile | None) -> set[str]:
    """Names the stage took as provided by the box's image (a delta): not in the lock, rightly."""
    names = {canonicalize_name(d.name) for d in (target.provided if target else ())}
    for key in ("assumed_present", "assumed"):  # wh.json's record of a delta (install.assumed checks it)
        listed = meta.get(key)
        for item in listed if isinstance(listed, list) else ():
            name = item.get("name") if isinstance(item, Mapping) else item
            if isinstance(name, str):
                names.add(canonicalize_name(name.split("==")[0]))
    return names


def _pin_problems(lock: Lock, meta: Mapping[str, Any], target: TargetProfile | None) -> list[str]:
    """Each requirement and constraint wh.json was staged from, against the lock's pins."""
    inputs = meta.get("inputs") if isinstance(meta.get("inputs"), Mapping) else {}
    pins: dict[str, list[str]] = {}
    for f in lock.files:
        pins.setdefault(canonicalize_name(f.name), []).append(f.version)
    assumed = _assumed(meta, target)
    # an engine `wh build` made from source replaces the staged release on purpose (a dev version)
    built = {canonicalize_name(f.name) for f in lock.files if f.tool.get("source") == "build"}
    excluded, overrides = rewrites_of([meta])  # the stack replaced or left these out on purpose
    problems = []
    for kind in ("requirements", "constraints"):
        for text in _list(inputs.get(kind)):
            try:
                req = Requirement(str(text))
                if req.marker is not None and target is not None and not target.evaluate(req.marker):
                    continue
            except (InvalidRequirement, ValueError):
                continue  # a wheel path or URL: nothing to compare
            name = canonicalize_name(req.name)
            if name in built or name in excluded or name in overrides:
                continue
            versions = pins.get(name)
            if not versions:
                if kind == "requirements" and name not in assumed and not req.url:
                    problems.append(f"wh.json requires {text}, pylock.toml has no {name}")
            elif not any(_contains(req, v) for v in versions):
                problems.append(f"wh.json {kind[:-1]} {text} is not met: pylock.toml pins {name} {', '.join(versions)}")
    return problems


def _contains(req: Requirement, version: str) -> bool:
    try:
        return req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return True


def _record_problems(root: Path, lock: Lock, meta: Mapping[str, Any], target: TargetProfile | None) -> list[str]:
    problems = []
    if target is not None and lock.environments and environment_marker(target) not in lock.environments:
        problems.append(f"pylock.toml is for {' or '.join(lock.environments)}, wh.json's target is {target.describe()}")
    problems += _pin_problems(lock, meta, target)
    engine = meta.get("engine") if isinstance(meta.get("engine"), Mapping) else None
    count, size = meta.get("count"), meta.get("total_size")
    if engine is None and isinstance(count, int) and count != len(lock.files):  # `wh build` adds to the lock later
        problems.append(f"wh.json counts {count} wheels, pylock.toml lists {len(lock.files)}")
    elif engine is None and isinstance(size, int) and size != sum(f.size or 0 for f in lock.files):
        problems.append(f"wh.json says the wheels weigh {size} bytes, pylock.toml's sizes add up to "
                        f"{sum(f.size or 0 for f in lock.files)}")
    if engine is not None and isinstance(engine.get("wheel"), str):
        entry = next((f for f in lock.files if f.path == engine["wheel"]), None)
        if entry is None:
            problems.append(f"wh.json's engine wheel {engine['wheel']} is not in pylock.toml")
        elif engine.get("sha256") and entry.sha256 != engine["sha256"]:
            problems.append(f"wh.json's engine wheel {engine['wheel']} has sha256 {str(engine['sha256'])[:16]}..., "
                            f"pylock.toml says {entry.sha256[:16]}...")
    for art in _list((engine or {}).get("artifacts")):
        if isinstance(art, Mapping) and isinstance(art.get("path"), str):
            problems += _payload_problem(root, art["path"], art.get("sha256"), "wh.json's engine artifact")
    owned = meta.get("owned")
    for rel in owned if isinstance(owned, list) else ():
        if isinstance(rel, str) and not os.path.lexists(root / rel):
            problems.append(f"{rel} is missing (wh.json says wh wrote it)")
    return problems


def _payload_problem(root: Path, rel: str, sha: Any, what: str) -> list[str]:
    path = root / rel
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        return [f"{what} {rel!r} lies outside the wheelhouse"]
    if not path.is_file():
        return [f"{rel} is missing ({what})"]
    if isinstance(sha, str) and sha and sha256_of(path) != sha:
        return [f"{rel}: sha256 {sha256_of(path)[:16]}... is not the {sha[:16]}... of {what}"]
    return []


# --- bootstrap/ and patches -------------------------------------------------------------------

def _bootstrap(root: Path, meta: Mapping[str, Any], target: TargetProfile | None, closure: ClosureRule | None
               ) -> tuple[list[str], list[tuple[Path, LockedFile, str]], Lock | None]:
    """bootstrap/ against wh.json's record and the target: wh's wheel, its lock, its requirements met."""
    record = meta.get("bootstrap")
    if not isinstance(record, Mapping) and os.path.lexists(root / "bootstrap" / "pylock.toml"):
        record = {}  # a bootstrap/ with its own lock (added after staging): judged against that lock
    elif not isinstance(record, Mapping):  # staged --no-bootstrap: a bootstrap/ folder holds nothing wh vouches for
        try:
            found = sorted(p.name for p in (root / "bootstrap").iterdir() if p.name.lower().endswith(_DIST_SUFFIXES))
        except OSError:
            found = []
        return [f"bootstrap/{name} is there, but neither wh.json nor a bootstrap/pylock.toml vouches for it (staged "
                "--no-bootstrap), yet the "
                "bootstrap command (pip --find-links bootstrap/) may install it" for name in found], [], None
    folder, where = root / "bootstrap", "bootstrap/pylock.toml"
    try:
        lock = read_pylock(folder)
    except WhError as exc:
        return [f"bootstrap/: {exc.message}"], [], None
    problems = [p for f in lock.files for p in _entry_problems(folder, f, where)]
    names = {f.filename for f in lock.files}
    # the bootstrap command is `pip install --find-links bootstrap/ wh`: pip takes any distribution file there
    listed = {PurePosixPath(f.path).as_posix() for f in lock.files}
    problems += [f"bootstrap/{p.name} is not in bootstrap/pylock.toml, yet the bootstrap command (pip --find-links "
                 "bootstrap/) may install it" for p in sorted(folder.iterdir())
                 if p.name.lower().endswith(_DIST_SUFFIXES) and p.name not in listed]
    if isinstance(record.get("wh_wheel"), str) and record["wh_wheel"] not in names:
        problems.append(f"bootstrap/ lacks wh's own wheel {record['wh_wheel']}")
    if isinstance(record.get("count"), int) and record["count"] != len(lock.files):
        problems.append(f"wh.json counts {record['count']} bootstrap wheels, bootstrap/pylock.toml lists {len(lock.files)}")
    present = [f for f in lock.files if (folder / f.path).is_file() and "://" not in f.path]
    if target is not None:
        for f in present:
            if target.wheel_rank(f.filename) is None:
                problems.append(f"bootstrap/{f.filename} does not install on the target ({target.describe()})")
    if target is not None and closure is not None:
        try:
            view = {canonicalize_name(d.name): d for d in (closure.wheel_dist(folder / f.path) for f in present)}
            for (who, req), why in sorted(closure.unmet(view, target).items()):
                problems.append(f"bootstrap/ is incomplete for the target: {who} needs {req} ({why})")
            problems += _extras_unmet(folder, lock, record, view, target)
        except WhError as exc:
            problems.append(f"bootstrap/: {exc.message}")
    return problems, [(folder, f, where) for f in lock.files], lock


def _extras_unmet(folder: Path, lock: Lock, record: Mapping[str, Any], view: Mapping[str, Any],
                  target: TargetProfile) -> list[str]:
    """The extras the bootstrap command asks for (``'wh[fast]'``): each of their requirements must be there,
    or pip on the box fails on that line."""
    from wheelhouse.lock.bootstrap import wheel_requirements

    extras = record.get("extras") or []
    own = next((f for f in lock.files if f.filename == record.get("wh_wheel")), None)
    if not isinstance(extras, list) or own is None or not (folder / own.path).is_file():
        return []
    out = []
    for extra in extras:
        for req in wheel_requirements(folder / own.path):
            if req.marker is None or not target.evaluate(req.marker, extra=str(extra)):
                continue
            if target.evaluate(req.marker, extra=None):
                continue  # not the extra's: checked with wh's own requirements
            have = view.get(canonicalize_name(req.name))
            if have is None or not req.specifier.contains(str(have.version), prereleases=True):
                got = f"{req.name} {have.version} is there" if have is not None else "none is there"
                out.append(f"bootstrap/ is incomplete for the target: the bootstrap command asks for wh[{extra}], "
                           f"which needs {req} ({got})")
    return out


def _patches(root: Path, meta: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """Every patch wh.json lists: there; each spec readable, its payload there with the spec's sha256."""
    problems, notes = [], []
    if not isinstance(meta.get("patches") or [], list):
        return [f"wh.json's patches must be a list of paths, not {type(meta['patches']).__name__}"], []
    for rel in meta.get("patches") or ():
        if not isinstance(rel, str) or Path(rel).is_absolute() or ".." in Path(rel).parts:
            problems.append(f"wh.json lists the patch {rel!r}, outside the wheelhouse")
            continue
        if not (root / rel).is_file():
            problems.append(f"{rel} is missing (wh.json lists it as a patch)")
            continue
        if not rel.endswith(".toml"):
            continue
        from wheelhouse.patch.spec import load_patch_spec  # only where a patch is listed (~15 ms of imports)

        try:
            spec = load_patch_spec(root / rel)
        except WhError as exc:
            problems.append(f"{rel}: {exc.message}")
            continue
        payload = spec.payload.resolve()
        shown = payload.relative_to(root.resolve()).as_posix() if root.resolve() in payload.parents else str(payload)
        if not payload.is_file():
            problems.append(f"{rel}: its payload {shown} is missing")
        elif root.resolve() not in payload.parents:
            notes.append(f"{rel}: its payload comes from wh's own engine_src ({payload.name}), not the wheelhouse")
        elif not spec.payload_sha256:
            notes.append(f"{rel}: names no payload-sha256, so {shown} cannot be checked")
        elif sha256_of(payload) != spec.payload_sha256:
            problems.append(f"{rel}: payload {shown} has sha256 {sha256_of(payload)[:16]}..., "
                            f"the spec says {spec.payload_sha256[:16]}...")
    return problems, notes


# --- bytecode/ -----------------------------------------------------------------------------------

def _bytecode(root: Path, meta: Mapping[str, Any], lock: Lock) -> tuple[list[str], list[str], list]:
    """bytecode/ against wh.json's record: each pack there with its size (hashed with the wheels);
    a pack for a wheel the lock no longer has, or has with another sha256, is a note (never used)."""
    from wheelhouse.lock.bytecode import BYTECODE, bytecode_record

    problems: list[str] = []
    notes: list[str] = []
    entries = []
    if meta.get("bytecode") is None:
        return problems, notes, entries
    record = bytecode_record(meta)
    if record is None:
        return ["wh.json's bytecode record is not one this wh reads (its packs will not be used)"], notes, entries
    wheels = {f.filename: f.sha256 for f in lock.files}
    for filename, pack in sorted(record.packs.items()):
        rel = PurePosixPath(pack.path)
        if rel.is_absolute() or ".." in rel.parts or not pack.path.startswith(f"{BYTECODE}/"):
            problems.append(f"wh.json: the bytecode of {filename} has the path {pack.path!r}, outside bytecode/")
            continue
        path = root / pack.path
        if not path.is_file():
            problems.append(f"{pack.path} is missing (wh.json lists it)")
        elif path.stat().st_size != pack.size:
            problems.append(f"{pack.path}: {path.stat().st_size} bytes, wh.json says {pack.size}")
        else:
            entries.append((root, LockedFile(name="bytecode", version="0", filename=rel.name, path=pack.path,
                                             sha256=pack.sha256, size=pack.size), "wh.json"))
        if wheels.get(filename) != pack.wheel_sha256:
            notes.append(f"{pack.path} was compiled from a {filename} the lock does not hold (not used; "
                         "`wh bytecode` makes it again)")
    listed = {p.path for p in record.packs.values()}
    folder = root / BYTECODE
    if folder.is_dir():
        notes += [f"{p.relative_to(root).as_posix()} is not in wh.json's bytecode record (never used)"
                  for p in sorted(folder.rglob("*")) if p.is_file() and p.relative_to(root).as_posix() not in listed]
    return problems, notes, entries


# --- the whole -----------------------------------------------------------------------------------

def target_summary(meta: Mapping[str, Any], target: TargetProfile | None, lock: Lock | None,
                   boot: Lock | None) -> dict[str, Any]:
    """What the wheelhouse is for and holds, for the verify report (``--json``: these keys)."""
    tool = meta.get("tool") if isinstance(meta.get("tool"), Mapping) else {}
    engine = meta.get("engine") if isinstance(meta.get("engine"), Mapping) else {}
    t = None
    if target is not None:
        t = {"describe": target.describe(), "implementation": target.implementation,
             "python_version": target.python_version, "abi": target.abi, "machine": target.machine,
             "platform": target.platforms[0] if target.platforms else None,
             "libc": " ".join(target.libc) if target.libc else None,
             "gpus": [g.to_json() for g in target.gpus], "driver_version": target.driver_version,
             "cuda_version": target.cuda_version, "provided": len(target.provided)}
    return {
        "name": meta.get("name"), "created": meta.get("created"), "tool_version": tool.get("version"),
        "target": t,
        "wheels": len(lock.files) if lock else 0,
        "size": sum(f.size or 0 for f in lock.files) if lock else 0,
        "bootstrap": len(boot.files) if boot else 0,
        "patches": len(_list(meta.get("patches"))),
        "engine": {k: engine.get(k) for k in ("name", "commit", "wheel")} if engine.get("wheel") else None,
        "bytecode": _bytecode_summary(meta),
    }


def _bytecode_summary(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    from wheelhouse.lock.bytecode import bytecode_record

    record = bytecode_record(meta)
    return None if record is None else {"cache_tag": record.cache_tag, "python": record.python,
                                        "packs": len(record.packs)}


def verify_wheelhouse(path: str | Path, *, hashes: bool = True, patches: bool = True, jobs: int | None = None,
                      reporter: Reporter | None = None, closure: ClosureRule | None = None) -> Verdict:
    """Check the wheelhouse at ``path`` (see the module's docstring); never raises for what it finds.

    ``hashes=False`` skips the sha256 of the wheels (sizes are still compared); patch payloads,
    being small, are always hashed. ``closure``: install's rule for bootstrap/'s completeness (carry sits
    below install, so the caller hands it in; every wh command does); None skips that one check.
    Raises WheelhouseNotFound when ``path`` holds no wh.json.
    """
    root = Path(path)
    reporter = reporter or NullReporter()
    try:
        meta = read_wh_json(root)  # no wh.json: not a wheelhouse (bad input, exit 2)
    except WhError as exc:
        if not os.path.lexists(root / "wh.json"):
            raise
        return Verdict(root, (exc.message,), hashed=hashes)  # there but damaged: a problem of this wheelhouse
    problems: list[str] = []
    target = None
    try:
        target = target_from_json(meta["target"], where=f"{root / 'wh.json'} target") if meta.get("target") else None
    except WhError as exc:
        problems.append(exc.message)
    try:
        lock = read_pylock(root)
    except WhError as exc:
        return Verdict(root, (*problems, exc.message), summary=target_summary(meta, target, None, None), hashed=hashes)
    entries = [(root, f, "pylock.toml") for f in lock.files]
    problems += [p for f in lock.files for p in _entry_problems(root, f, "pylock.toml")]
    if target is not None:  # what `wh install` checks on the box first: every wheel fits wh.json's target
        problems += [f"{f.path} does not install on the target ({target.describe()})" for f in lock.files
                     if f.filename.endswith(".whl") and target.wheel_rank(f.filename) is None]
    problems += _simple_problems(root, lock)
    problems += _record_problems(root, lock, meta, target)
    boot_problems, boot_entries, boot = _bootstrap(root, meta, target, closure)
    problems += boot_problems
    patch_problems, notes = _patches(root, meta) if patches else ([], [])
    problems += patch_problems
    pyc_problems, pyc_notes, pyc_entries = _bytecode(root, meta, lock)
    problems += pyc_problems
    if hashes:
        problems += _hash_problems(entries + boot_entries + pyc_entries, jobs or min(8, (os.cpu_count() or 2) * 2),
                                   reporter)
    notes = _stray_notes(root, lock) + notes + pyc_notes
    return Verdict(root, tuple(dict.fromkeys(problems)), tuple(notes), target_summary(meta, target, lock, boot),
                   hashed=hashes)


def require_intact(wheelhouses: Sequence[str | Path], *, patches: bool = True, closure: ClosureRule | None = None) -> None:
    """Raise WheelhouseDamaged naming every structural problem (no hashing: the caller hashes what it installs)."""
    for path in wheelhouses:
        meta = read_wh_json(path)
        if meta.get("target"):  # a target of the wrong shape is bad input, with its own error (exit 2)
            target_from_json(meta["target"], where=f"{Path(path) / 'wh.json'} target")
        verdict = verify_wheelhouse(path, hashes=False, patches=patches, closure=closure)
        if verdict.problems:
            n = len(verdict.problems)
            raise WheelhouseDamaged(
                f"{path} is not whole, nothing was installed: {verdict.problems[0]}"
                + (f" (and {n - 1} more)" if n > 1 else ""),
                hint=f"`wh verify {path}` names every problem; copy the wheelhouse again, or re-run `wh stage`",
                detail="\n".join(verdict.problems),
            )
