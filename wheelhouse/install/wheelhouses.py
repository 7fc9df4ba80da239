"""Finding wheelhouses on the box: folders holding ``wh.json`` and a ``pylock.toml``.

Mounts move, so nothing is hard-coded: a wheelhouse is looked for below the paths
given, the same one mounted twice counts once, and two staged for the same target
that disagree on a package's version are refused. Two staged for different targets
(one stack for cp311 and cp312 under one root) are not a disagreement here: the
install keeps those that fit its interpreter, then asks again (``check_unambiguous``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .errors import AmbiguousWheelhouse
from .installed import canonical_name
from wheelhouse.fileidentity import file_identity
from wheelhouse.lock import WH_JSON, LockedFile, WheelhouseNotFound, read_pylock, read_wh_json
from wheelhouse.errors import TargetError
from wheelhouse.target import TargetProfile, target_from_json

__all__ = ["Wheelhouse", "find_wheelhouses", "load_wheelhouse", "check_unambiguous"]

_MAX_DEPTH = 6
_SKIP_DIRS = {"wheels", "simple", "bootstrap", "__pycache__", ".git", "node_modules", "site-packages"}


@dataclass(frozen=True)
class Wheelhouse:
    path: Path
    files: tuple[LockedFile, ...]
    meta: Mapping[str, Any]

    @property
    def target(self) -> TargetProfile | None:
        data = self.meta.get("target")
        if data and not isinstance(data, Mapping):
            raise TargetError(f"{self.path / 'wh.json'}: target must be an object", hint="re-run `wh stage`")
        return target_from_json(data, where=f"{self.path / 'wh.json'} target") if data else None

    @property
    def patches(self) -> tuple[str, ...]:
        return tuple(self.meta.get("patches") or ())


def _walk_for(root: Path, name: str, depth: int) -> list[Path]:
    out: list[Path] = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return out
    for e in entries:
        if e.name == name and e.is_file():
            out.append(Path(e.path).parent)
    if (root / name).is_file():
        return out  # a wheelhouse's own folders hold no further wheelhouses
    if depth > 0:
        for e in entries:
            if e.is_dir() and e.name not in _SKIP_DIRS and not e.name.startswith("."):
                out += _walk_for(Path(e.path), name, depth - 1)
    return out


def _fingerprint(path: Path) -> str:
    # The lock AND wh.json (its target): the same files staged for two targets are two wheelhouses.
    try:
        return hashlib.sha256((path / "pylock.toml").read_bytes() + (path / WH_JSON).read_bytes()).hexdigest()
    except OSError:
        return str(path.resolve())


def find_wheelhouses(paths: Sequence[str | Path], search_roots: Sequence[str | Path] = ()) -> list[Path]:
    """Wheelhouse folders (holding ``wh.json``) from explicit ``paths`` and below ``search_roots``.

    An explicit path is a wheelhouse, or a root to search. Mounts move (a dataset may
    appear at ``<root>/<name>/`` or ``<root>/notebooks/<owner>/<name>/``), so nothing is
    hard-coded: wh.json is looked for up to six levels down. The same wheelhouse mounted
    twice counts once; two different wheelhouses offering different files for one
    package are ambiguous and refused with the candidates listed.
    """
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if (p / WH_JSON).is_file():
            found.append(p)
        elif p.is_file() and p.name == WH_JSON:
            found.append(p.parent)
        elif p.is_dir():
            hits = _walk_for(p, WH_JSON, _MAX_DEPTH)
            if not hits:
                raise WheelhouseNotFound(f"no wheelhouse (wh.json) under {p}",
                                         hint="pass the folder `wh stage -o` wrote, or a folder above it")
            found += hits
        elif p.exists():
            raise WheelhouseNotFound(f"{p} is a file, not a wheelhouse folder", hint="pass the folder `wh stage -o` wrote")
        else:
            raise WheelhouseNotFound(f"{p} does not exist", hint="pass the folder `wh stage -o` wrote")
    for root in search_roots:
        root = Path(root)
        if root.is_dir():
            found += _walk_for(root, WH_JSON, _MAX_DEPTH)
    if not found:
        raise WheelhouseNotFound(
            "no wheelhouse found" + (f" under {', '.join(map(str, search_roots))}" if search_roots else ""),
            hint="pass it: `wh install PATH --venv VENV`, or search a mount: `wh install --search /mnt/data --venv VENV`",
        )
    unique: dict[str, Path] = {}
    for p in found:
        unique.setdefault(_fingerprint(p), p)  # the same wheelhouse mounted twice
    result = list(dict.fromkeys(p.resolve() for p in unique.values()))
    houses = [load_wheelhouse(p) for p in result]
    for group in _by_target(houses):  # which target is this box's is the install's to say (fitting_wheelhouses)
        check_unambiguous(group)
    return result


def _by_target(houses: Sequence[Wheelhouse]) -> list[list[Wheelhouse]]:
    """Wheelhouses grouped by the target they were staged for (wh.json's target, as recorded)."""
    groups: dict[str, list[Wheelhouse]] = {}
    for h in houses:
        groups.setdefault(json.dumps(h.meta.get("target"), sort_keys=True, default=str), []).append(h)
    return list(groups.values())


_loaded: dict[Path, tuple[tuple, Wheelhouse]] = {}


def _identity(path: Path) -> tuple | None:
    """What says wh.json and pylock.toml are the ones read before (None: one is not there)."""
    try:
        return tuple(file_identity(st) for st in (os.stat(path / WH_JSON), os.stat(path / "pylock.toml")))
    except OSError:
        return None


def load_wheelhouse(path: str | Path) -> Wheelhouse:
    """The wheelhouse at ``path``: its wh.json and the files of its pylock.toml.

    Remembered while both files stay the same ones (finding wheelhouses and installing them read
    each lock once, not twice: a few thousand lines of TOML for a large stack)."""
    path = Path(path)
    key = _identity(path)
    hit = _loaded.get(path)
    if key is not None and hit is not None and hit[0] == key:
        return hit[1]
    meta = read_wh_json(path)
    lock = read_pylock(path)
    house = Wheelhouse(path=path, files=lock.files, meta=meta)
    if key is not None and key == _identity(path):  # not rewritten while it was read
        if len(_loaded) >= 64:
            _loaded.clear()
        _loaded[path] = (key, house)
    return house


def check_unambiguous(houses: Sequence[Wheelhouse]) -> None:
    """Raise AmbiguousWheelhouse when two wheelhouses offer different versions of one package."""
    seen: dict[str, tuple[Wheelhouse, LockedFile]] = {}
    clashes: list[str] = []
    for wh in houses:
        for f in wh.files:
            key = canonical_name(f.name)
            prev = seen.get(key)
            if prev and prev[0] is not wh and prev[1].version != f.version:
                clashes.append(f"{key}: {prev[1].version} in {prev[0].path}, {f.version} in {wh.path}")
            seen.setdefault(key, (wh, f))
    if clashes:
        raise AmbiguousWheelhouse(
            f"wheelhouses disagree on {len(clashes)} package(s): " + "; ".join(clashes[:5]),
            hint="pass exactly the wheelhouses you mean: `wh install PATH [PATH ...] --venv VENV`",
        )
