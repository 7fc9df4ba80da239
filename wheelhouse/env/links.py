"""Soname links for NVIDIA wheels: plan, apply, record, undo.

NVIDIA wheels ship only versioned sonames (``libcudart.so.13``); anything that
links at runtime with ``-lcudart`` needs the bare ``libcudart.so``, and some
builds hard-code ``-L<pkg>/lib64``. A ``libcuda.so`` inside the environment
that is a stub (or links to one) shadows the real driver and must go.

Planning is pure (``plan_links`` reads the tree, changes nothing); applying
writes every change, with its absolute path, to a JSON record in the environment
so ``undo_links`` reverses exactly those changes and nothing else. Removed stubs
are moved into ``<site>/.wh/removed/`` rather than unlinked, so undo can put them back.

A record is data a wheel could have planted (issue 11.8), so undo trusts none of
it: each entry must name a change wh can make (a bare soname link beside its
versioned name, ``lib64 -> lib``, a ``libcuda.so*`` moved into the record's own
``removed/``) inside the NVIDIA library folders of the roots it manages, and the
thing on disk must still be what wh made. Anything else is refused, named, and
kept in the record: a record is deleted only once every entry in it was undone.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

from wheelhouse.atomic import write_atomic
from wheelhouse.datafile import load_json
from wheelhouse.errors import WhError

__all__ = [
    "LinkChange",
    "LinkError",
    "UndoRefusal",
    "UndoResult",
    "nvidia_lib_dirs",
    "link_loops",
    "plan_links",
    "apply_links",
    "undo_links",
    "LinksResult",
    "run_links",
    "read_record",
    "record_path",
    "is_stub",
]

# Driver libraries come from the system, never from a wheel: never create their bare names.
_DRIVER_LIBS = ("libcuda.so", "libnvidia-ml.so", "libnvcuvid.so", "libnvidia-encode.so")
_VERSIONED = re.compile(r"^(lib[^/]*?\.so)\.\d[\w.]*$")
# A real libcuda.so.1 is tens of MB; the toolkit's stub is well under one.
_STUB_MAX_BYTES = 2 << 20


class LinkError(WhError):
    code = "links"


@dataclass(frozen=True)
class LinkChange:
    """One change to the tree. ``target``: the symlink's content, or where a removed stub was moved."""

    action: Literal["symlink", "lib64", "remove-stub"]
    path: str
    target: str | None
    reason: str

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class UndoRefusal:
    """A recorded change that undo left alone, and why (it stays in the record)."""

    change: LinkChange
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {**self.change.to_json(), "refused": self.reason}


@dataclass(frozen=True)
class UndoResult:
    """What ``undo_links`` did with one record."""

    record: Path
    undone: tuple[LinkChange, ...] = ()
    refused: tuple[UndoRefusal, ...] = ()
    gone: tuple[LinkChange, ...] = ()  # already reverted by someone else: nothing left to undo

    def to_json(self) -> dict[str, Any]:
        return {"record": str(self.record), "undone": [c.to_json() for c in self.undone],
                "refused": [r.to_json() for r in self.refused], "gone": [c.to_json() for c in self.gone]}


def record_path(site_dir: Path) -> Path:
    """Where the links record of one site-packages lives."""
    return Path(site_dir) / ".wh" / "links.json"


def nvidia_lib_dirs(roots: Sequence[Path]) -> list[Path]:
    """Every library folder of the NVIDIA packages under ``roots`` (site-packages-like folders).

    ``<root>/nvidia/<pkg>/lib`` and ``lib64`` (``nvidia/cu13/lib``, ``nvidia/cuda_runtime/lib``); a
    ``lib64`` that is a link to its sibling ``lib`` is listed once; ``stubs`` folders never.
    """
    out: list[Path] = []
    seen: set[str] = set()
    for root in roots:
        base = Path(os.path.abspath(root)) / "nvidia"
        if not base.is_dir():
            continue
        for pkg in sorted(base.iterdir()):
            if not pkg.is_dir():
                continue
            for lib in sorted(pkg.glob("lib*")):
                if not lib.is_dir() or lib.name == "stubs":
                    continue
                real = os.path.realpath(lib)
                if real in seen:
                    continue
                seen.add(real)
                out.append(lib)
    return out


def is_stub(path: Path) -> bool:
    """Whether a ``libcuda.so*`` entry is the toolkit stub or resolves to one."""
    real = Path(os.path.realpath(path))
    if "stubs" in real.parts:
        return True
    try:
        return real.is_file() and real.stat().st_size < _STUB_MAX_BYTES
    except OSError:
        return False


def _best_versioned(names: list[str]) -> str:
    # The soname is the shortest versioned name (libcudart.so.13 over libcudart.so.13.0.96).
    return sorted(names, key=lambda n: (len(n), n))[0]


def _is_loop(entry: os.DirEntry) -> bool:
    try:
        entry.is_file()
    except OSError:  # ELOOP: is_file follows the link
        return True
    return False


def link_loops(roots: Sequence[Path]) -> list[Path]:
    """Symlinks in the NVIDIA library folders under ``roots`` that never resolve (a loop); plan_links skips them."""
    return [Path(e.path) for lib in nvidia_lib_dirs(roots) for e in sorted(os.scandir(lib), key=lambda e: e.name)
            if e.is_symlink() and _is_loop(e)]


def plan_links(roots: Sequence[Path]) -> list[LinkChange]:
    """What ``apply_links`` would change under ``roots`` (absolute paths); reads the tree, changes nothing.

    A symlink loop in a library folder is skipped (``link_loops`` names them): no link is made to it.
    """
    roots = [Path(os.path.abspath(r)) for r in roots]
    changes: list[LinkChange] = []
    for lib in nvidia_lib_dirs(roots):
        versions: dict[str, list[str]] = {}
        for entry in os.scandir(lib):
            m = _VERSIONED.match(entry.name)
            if m and not _is_loop(entry) and (entry.is_file() or entry.is_symlink()):
                versions.setdefault(m.group(1), []).append(entry.name)
        for bare, names in sorted(versions.items()):
            if bare in _DRIVER_LIBS or os.path.lexists(lib / bare):
                continue
            chosen = _best_versioned(names)
            changes.append(LinkChange("symlink", str(lib / bare), chosen, f"{bare} missing; the linker's -l needs it"))
    for root in roots:
        base = Path(root) / "nvidia"
        if not base.is_dir():
            continue
        for pkg in sorted(p for p in base.iterdir() if p.is_dir()):
            if (pkg / "lib").is_dir() and not os.path.lexists(pkg / "lib64"):
                changes.append(LinkChange("lib64", str(pkg / "lib64"), "lib", "package has lib but no lib64"))
        # A stub libcuda.so on a library path would be loaded instead of the system driver.
        for lib in nvidia_lib_dirs([root]):
            for entry in sorted(os.scandir(lib), key=lambda e: e.name):
                if entry.name.startswith("libcuda.so") and not _is_loop(entry) and is_stub(Path(entry.path)):
                    kind = "a link to a stub" if entry.is_symlink() else "a stub"
                    changes.append(
                        LinkChange("remove-stub", entry.path, None, f"{entry.name} is {kind}; it would shadow the driver")
                    )
    return changes


def read_record(record: Path) -> list[LinkChange]:
    """The changes recorded so far (empty when there is no record)."""
    if not os.path.lexists(record):
        return []
    data = load_json(record, what="links record", error=LinkError, hint=f"inspect or remove {record}", expect=object)
    changes = data.get("changes", []) if isinstance(data, dict) else None
    if not isinstance(changes, list) or not all(_is_change(c) for c in changes):
        raise LinkError(f"links record {record} is not a wh links record (changes of action, path, target, reason)",
                        hint=f"inspect or remove {record}")
    return [LinkChange(**c) for c in changes]


def _is_change(c: object) -> bool:
    return (isinstance(c, dict) and set(c) == {"action", "path", "target", "reason"}
            and c["action"] in ("symlink", "lib64", "remove-stub") and isinstance(c["path"], str)
            and isinstance(c["target"], (str, type(None))) and isinstance(c["reason"], str))


def _write_record(record: Path, changes: list[LinkChange]) -> None:
    body = {"schema": "wh-links/1", "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "changes": [c.to_json() for c in changes]}
    write_atomic(record, json.dumps(body, indent=2) + "\n")


def _apply_one(change: LinkChange, removed_dir: Path) -> LinkChange | None:
    if not os.path.isabs(change.path):  # a record must hold absolute paths: undo may run from anywhere
        change = LinkChange(change.action, os.path.abspath(change.path), change.target, change.reason)
    path = Path(change.path)
    if change.action in ("symlink", "lib64"):
        if os.path.lexists(path):
            return None  # someone made it meanwhile: not ours, so not recorded
        os.symlink(change.target, path)
        return change
    if change.action == "remove-stub":
        if not os.path.lexists(path):
            return None
        removed_dir.mkdir(parents=True, exist_ok=True)
        dest = removed_dir / f"{time.time_ns()}-{path.name}"
        os.rename(path, dest)
        return LinkChange("remove-stub", change.path, str(dest), change.reason)
    raise LinkError(f"unknown link action {change.action!r}", hint="re-plan with `wh links --check`")


def _managed(change: LinkChange, roots: Sequence[Path], removed_dir: Path) -> str | None:
    """Why ``change`` is not a change wh could have made under ``roots`` (None when it is)."""
    path = change.path
    if not os.path.isabs(path):
        return "its path is not absolute (recorded from another folder); nothing was touched"
    if os.path.normpath(path) != path:
        return "its path is not normalized"
    p = Path(path)
    parent = os.path.realpath(p.parent)
    lib_dirs = {os.path.realpath(d) for d in nvidia_lib_dirs(roots)}
    if change.action == "lib64":
        nvidia = {os.path.realpath(Path(r) / "nvidia") for r in roots}
        if p.name != "lib64" or change.target != "lib" or os.path.realpath(p.parent.parent) not in nvidia:
            return "it is not a lib64 -> lib link of an NVIDIA package under " + ", ".join(map(str, roots))
        return None
    if parent not in lib_dirs:
        return "it is not inside an NVIDIA library folder under " + ", ".join(map(str, roots))
    if change.action == "symlink":
        m = _VERSIONED.match(change.target or "")
        if not m or m.group(1) != p.name or "/" in (change.target or "") or p.name in _DRIVER_LIBS:
            return f"{p.name} -> {change.target} is not a bare soname link to its versioned name"
        return None
    if change.action == "remove-stub":
        t = change.target or ""
        if not p.name.startswith("libcuda.so") or not os.path.isabs(t) or os.path.normpath(t) != t \
                or os.path.realpath(Path(t).parent) != os.path.realpath(removed_dir):
            return f"a moved stub must be a libcuda.so* kept in {removed_dir}"
        return None
    return f"unknown action {change.action!r}"


def _revert_one(change: LinkChange) -> Literal["undone", "gone"] | str:
    """Revert one (already vetted) change: "undone", "gone" (nothing left to undo), or why not."""
    path = Path(change.path)
    if change.action in ("symlink", "lib64"):
        if not os.path.lexists(path):
            return "gone"
        if path.is_symlink() and os.readlink(path) == change.target:
            path.unlink()
            return "undone"
        now = f"a link to {os.readlink(path)}" if path.is_symlink() else "a folder" if path.is_dir() else "a file"
        return f"it is no longer the link wh made (-> {change.target}); it is now {now}"
    if change.action == "remove-stub" and change.target:
        if not os.path.lexists(change.target):
            return "gone"
        if os.path.lexists(path):
            return f"{path.name} exists again; the moved stub stays at {change.target}"
        if os.path.isdir(change.target) and not os.path.islink(change.target):
            return f"{change.target} is a folder, not the stub wh moved"
        os.rename(change.target, path)
        return "undone"
    return "gone"


def apply_links(changes: Sequence[LinkChange], record: Path) -> list[LinkChange]:
    """Make ``changes`` and append them to ``record``. On any failure the ones made are reverted."""
    record = Path(record)
    previous = read_record(record)
    done: list[LinkChange] = []
    try:
        for change in changes:
            made = _apply_one(change, record.parent / "removed")
            if made:
                done.append(made)
        if done:
            _write_record(record, previous + done)
    except OSError as exc:
        for change in reversed(done):
            try:
                _revert_one(change)
            except OSError:
                pass
        raise LinkError(f"could not change {exc.filename or 'the tree'}: {exc.strerror or exc}",
                        hint="check permissions, or run `wh links --check` to see the plan") from exc
    return done


def undo_links(record: Path, roots: Sequence[Path] | None = None) -> UndoResult:
    """Reverse the recorded changes wh made (newest first) inside ``roots``' NVIDIA library folders.

    ``roots`` are the site folders the record may change (default: the one holding the record).
    An entry that is not a change wh makes there, or whose link/stub is no longer what wh left,
    is refused and stays recorded; the record is removed only when nothing is left in it.
    """
    record = Path(os.path.abspath(record))
    roots = [Path(os.path.abspath(r)) for r in (roots if roots is not None else [record.parent.parent])]
    removed_dir = record.parent / "removed"
    undone: list[LinkChange] = []
    refused: list[UndoRefusal] = []
    gone: list[LinkChange] = []
    for change in reversed(read_record(record)):
        why = _managed(change, roots, removed_dir)
        if why is None:
            try:
                outcome = _revert_one(change)
            except OSError as exc:
                outcome = f"{exc.strerror or exc}"
            if outcome == "undone":
                undone.append(change)
                continue
            if outcome == "gone":
                gone.append(change)
                continue
            why = outcome
        refused.append(UndoRefusal(change, why))
    if refused:
        _write_record(record, [r.change for r in reversed(refused)])
    elif record.exists():
        record.unlink()
    for d in (removed_dir, record.parent):  # leave no trace once nothing is recorded
        try:
            d.rmdir()
        except OSError:
            pass
    return UndoResult(record, tuple(undone), tuple(refused), tuple(gone))


@dataclass(frozen=True)
class LinksResult:
    """What ``wh links --check/--fix/--undo`` saw and did under ``roots``."""

    mode: Literal["check", "fix", "undo"]
    roots: tuple[Path, ...]
    lib_dirs: tuple[Path, ...]
    changes: tuple[LinkChange, ...]  # planned (check), made (fix) or undone (undo)
    skipped: tuple[Path, ...] = ()  # symlink loops left alone
    recorded: int = 0  # check: changes recorded so far
    refused: tuple[UndoRefusal, ...] = ()
    gone: tuple[LinkChange, ...] = ()
    records_kept: tuple[Path, ...] = ()  # undo: records still holding refused entries

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "roots": [str(r) for r in self.roots], "lib_dirs": [str(d) for d in self.lib_dirs],
                "changes": [c.to_json() for c in self.changes], "skipped": [str(p) for p in self.skipped],
                "recorded": self.recorded, "refused": [r.to_json() for r in self.refused],
                "gone": [c.to_json() for c in self.gone]}


def run_links(mode: Literal["check", "fix", "undo"], roots: Sequence[Path]) -> LinksResult:
    """Check, fix or undo the links under ``roots`` (each root keeps its own record)."""
    roots = tuple(Path(os.path.abspath(r)) for r in roots)
    base = dict(mode=mode, roots=roots, lib_dirs=tuple(nvidia_lib_dirs(roots)), skipped=tuple(link_loops(roots)))
    if mode == "check":
        return LinksResult(changes=tuple(plan_links(roots)),
                           recorded=sum(len(read_record(record_path(r))) for r in roots), **base)
    if mode == "fix":
        made: list[LinkChange] = []
        for r in roots:
            made += apply_links(plan_links([r]), record_path(r))
        return LinksResult(changes=tuple(made), **base)
    undone: list[LinkChange] = []
    refused: list[UndoRefusal] = []
    gone: list[LinkChange] = []
    kept: list[Path] = []
    for r in roots:
        res = undo_links(record_path(r), roots)
        undone += res.undone
        refused += res.refused
        gone += res.gone
        if res.refused:
            kept.append(res.record)
    return LinksResult(changes=tuple(undone), refused=tuple(refused), gone=tuple(gone), records_kept=tuple(kept), **base)
