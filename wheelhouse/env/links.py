"""Soname links for NVIDIA wheels: plan, apply, record, undo.

NVIDIA wheels ship only versioned sonames (``libcudart.so.13``); anything that
links at runtime with ``-lcudart`` needs the bare ``libcudart.so``, and some
builds hard-code ``-L<pkg>/lib64``. A ``libcuda.so`` inside the environment
that is a stub (or links to one) shadows the real driver and must go.

Planning is pure (``plan_links`` reads the tree, changes nothing); applying
writes every change to a JSON record in the environment so ``undo_links``
reverses exactly those changes and nothing else. Removed stubs are moved into
``<site>/.wh/removed/`` rather than unlinked, so undo can put them back.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Sequence

from wheelhouse.atomic import write_atomic
from wheelhouse.errors import WhError

__all__ = [
    "LinkChange",
    "LinkError",
    "nvidia_lib_dirs",
    "plan_links",
    "apply_links",
    "undo_links",
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
        base = Path(root) / "nvidia"
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


def plan_links(roots: Sequence[Path]) -> list[LinkChange]:
    """What ``apply_links`` would change under ``roots``; reads the tree, changes nothing."""
    changes: list[LinkChange] = []
    for lib in nvidia_lib_dirs(roots):
        versions: dict[str, list[str]] = {}
        for entry in os.scandir(lib):
            m = _VERSIONED.match(entry.name)
            if m and (entry.is_file() or entry.is_symlink()):
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
                if entry.name.startswith("libcuda.so") and is_stub(Path(entry.path)):
                    kind = "a link to a stub" if entry.is_symlink() else "a stub"
                    changes.append(
                        LinkChange("remove-stub", entry.path, None, f"{entry.name} is {kind}; it would shadow the driver")
                    )
    return changes


def read_record(record: Path) -> list[LinkChange]:
    """The changes recorded so far (empty when there is no record)."""
    try:
        data = json.loads(Path(record).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except ValueError as exc:
        raise LinkError(f"links record {record} is not valid JSON", hint=f"inspect or remove {record}") from exc
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


def _revert_one(change: LinkChange) -> bool:
    path = Path(change.path)
    if change.action in ("symlink", "lib64"):
        if path.is_symlink() and os.readlink(path) == change.target:
            path.unlink()
            return True
        return False
    if change.action == "remove-stub" and change.target and os.path.lexists(change.target):
        if os.path.lexists(path):
            return False
        os.rename(change.target, path)
        return True
    return False


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
            _revert_one(change)
        raise LinkError(f"could not change {exc.filename or 'the tree'}: {exc.strerror or exc}",
                        hint="check permissions, or run `wh links --check` to see the plan") from exc
    return done


def undo_links(record: Path) -> list[LinkChange]:
    """Reverse exactly the recorded changes (newest first); returns the ones reverted."""
    record = Path(record)
    changes = read_record(record)
    undone: list[LinkChange] = []
    kept: list[LinkChange] = []
    for change in reversed(changes):
        try:
            if _revert_one(change):
                undone.append(change)
            elif change.action == "remove-stub" and change.target and os.path.lexists(change.target):
                kept.append(change)  # its place is taken: keep the backup and its entry
        except OSError:
            kept.append(change)
    if kept:
        _write_record(record, list(reversed(kept)))
    elif record.exists():
        record.unlink()
    for d in (record.parent / "removed", record.parent):  # leave no trace once nothing is recorded
        try:
            d.rmdir()
        except OSError:
            pass
    return undone
