"""The wheelhouse on disk: ``pylock.toml`` (PEP 751) and ``wh.json`` (provenance).

Layout of a wheelhouse folder::

    wh.json             provenance: target profile, inputs, tool version, time, engine builds, patches
    pylock.toml         PEP 751 lock: every file with sha256 and size; the source of truth for install
    wheels/             the stack's wheels (paths in pylock.toml are relative to the wheelhouse)
    simple/             static PEP 503 index over wheels/ (for pip/uv --index-url file://...)
    bootstrap/          wh's own wheel + its dependencies for the target, and BOOTSTRAP.txt
    capture_target.py   stdlib-only profile capture, to run on the box

Reading is pure (``parse_pylock(text)``); file access is separate (``read_pylock``). ``pylock.toml`` is
packaging.pylock's model of PEP 751, written by tomli_w and read through wh's bounded TOML loader
(``wheelhouse.datafile``); wh's own facts live under ``[tool.wh]`` (top level and per package).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from packaging.markers import InvalidMarker, Marker
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelhouse.atomic import write_atomic
from wheelhouse.datafile import MAX_BYTES, load_json, parse_toml, read_text
from wheelhouse.errors import UsageError
from wheelhouse.redact import redact, redact_data

if TYPE_CHECKING:  # packaging.pylock and tomli_w are imported where a lock is read or written, not by `--help`
    from packaging.pylock import Package, PackageWheel, Pylock, PylockValidationError

__all__ = [
    "LockedFile",
    "Lock",
    "WheelhouseNotFound",
    "LockError",
    "PYLOCK",
    "WH_JSON",
    "WH_JSON_SCHEMA",
    "parse_pylock",
    "render_pylock",
    "read_pylock",
    "write_pylock",
    "read_wh_json",
    "wh_json_type_problems",
    "write_wh_json",
]

PYLOCK = "pylock.toml"
WH_JSON = "wh.json"
WH_JSON_SCHEMA = "wh-wheelhouse/1"


class LockError(UsageError):
    code = "bad-lock"


class WheelhouseNotFound(UsageError):
    code = "no-wheelhouse"


@dataclass(frozen=True)
class LockedFile:
    """One wheel of the lock. ``path`` is relative to the wheelhouse root (posix)."""

    name: str  # normalized project name
    version: str
    filename: str
    path: str
    sha256: str
    size: int | None = None
    marker: str | None = None
    requires_python: str | None = None
    index: str | None = None  # where it came from (provenance only)
    tool: Mapping[str, Any] = field(default_factory=dict)  # [packages.tool.wh] extras
    url: str | None = None  # where the wheel is, instead of ``path`` (an exported lock: nothing downloaded)


@dataclass(frozen=True)
class Lock:
    files: tuple[LockedFile, ...]
    environments: tuple[str, ...] = ()
    requires_python: str | None = None
    created_by: str = "wh"
    tool: Mapping[str, Any] = field(default_factory=dict)  # the top-level [tool.wh] table (overrides, excludes)

    def by_name(self) -> dict[str, LockedFile]:
        return {f.name: f for f in self.files}


def _pylock_of(lock: Lock) -> Pylock:
    """``lock`` as packaging's PEP 751 model; packages sorted by name so the file diffs cleanly."""
    from packaging.pylock import Package, PackageWheel, Pylock

    def package(f: LockedFile) -> Package:
        # PEP 751: a wheel names its url or its path (a dry run's export has no local file)
        wheel = PackageWheel(name=f.filename, url=f.url, path=None if f.url else f.path, size=f.size,
                             hashes={"sha256": f.sha256})
        return Package(name=canonicalize_name(f.name), version=Version(f.version),
                       marker=Marker(f.marker) if f.marker else None,
                       requires_python=SpecifierSet(f.requires_python) if f.requires_python else None,
                       index=f.index, wheels=[wheel], tool={"wh": dict(f.tool)} if f.tool else None)

    return Pylock(lock_version=Version("1.0"), environments=[Marker(e) for e in lock.environments] or None,
                  requires_python=SpecifierSet(lock.requires_python) if lock.requires_python else None,
                  created_by=lock.created_by,
                  packages=[package(f) for f in sorted(lock.files, key=lambda f: (f.name, f.version, f.filename))],
                  tool={"wh": dict(lock.tool)} if lock.tool else None)


def render_pylock(lock: Lock) -> str:
    """PEP 751 text for ``lock``, written by packaging.pylock and tomli_w: the same lock gives the same bytes."""
    import tomli_w
    from packaging.pylock import Pylock, PylockValidationError

    try:
        data = _pylock_of(lock).to_dict()
        Pylock.from_dict(data)  # never write a lock that a PEP 751 reader (wh's own included) would refuse
    except (InvalidMarker, InvalidSpecifier, InvalidVersion, PylockValidationError) as exc:
        raise LockError(f"cannot write {PYLOCK}: {exc}", hint="a locked name, version, marker or "
                        "requires-python is not valid PEP 508/440: report it with the wheel it came from") from exc
    return tomli_w.dumps(data)


_REWRITE = "re-run `wh stage` to rewrite it"


def parse_pylock(text: str, origin: str = PYLOCK) -> Lock:
    """Parse PEP 751 text into a Lock (wheels only; sdists are refused: the box builds nothing).

    The TOML goes through wh's bounded loader (size, depth), the lock through packaging.pylock."""
    from packaging.pylock import Pylock, PylockUnsupportedVersionError, PylockValidationError

    try:
        data = parse_toml(text, source=origin, what="lock", error=LockError, hint=_REWRITE)
    except LockError as exc:
        if "is not valid TOML" in exc.message:  # (the message wh always gave for it)
            raise LockError(f"{origin} is not valid TOML: {exc.__cause__}", hint=_REWRITE) from exc
        raise
    if str(data.get("lock-version", "")).split(".")[0] != "1":
        raise LockError(f"{origin} has lock-version {data.get('lock-version')!r}, wh reads 1.x", hint="re-run `wh stage`")
    _refuse_what_wh_cannot_install(data, origin)  # before packaging: these messages name the field more plainly
    try:
        pylock = Pylock.from_dict(data)
    except PylockUnsupportedVersionError as exc:
        raise LockError(f"{origin}: {exc}", hint="re-run `wh stage` to rewrite it with this wh") from exc
    except PylockValidationError as exc:
        raise LockError(f"{origin} is not a valid PEP 751 lock: {_one_line(exc)}",
                        hint=f"{_REWRITE} (a hand edit broke it)") from exc
    return Lock(
        files=tuple(_locked(pkg, wheel, origin) for pkg in pylock.packages for wheel in pkg.wheels or ()),
        environments=tuple(str(m) for m in pylock.environments or ()),
        requires_python=str(pylock.requires_python) if pylock.requires_python is not None else None,
        created_by=pylock.created_by,
        tool=_wh_table(pylock.tool, "tool.wh", origin),
    )


def _one_line(exc: PylockValidationError) -> str:
    """``packages[0].marker: Expected ... (python_version ==)``: packaging's marker errors draw a caret below
    the text; wh's errors are one line."""
    first, *rest = exc.message.splitlines() or [""]
    text = f"{first} ({rest[0].strip()})" if rest and rest[0].strip() else first
    return f"{exc.context}: {text}" if exc.context else text


def _wh_table(tool: Mapping[str, Any] | None, where: str, origin: str) -> Mapping[str, Any]:
    """wh's own table under a PEP 751 ``tool`` table; another type is refused, never read as absent."""
    wh = (tool or {}).get("wh", {})
    if not isinstance(wh, Mapping):
        raise LockError(f"{origin}: {where} must be a table, not {str(wh)[:40]!r}", hint=_REWRITE)
    return wh


def _locked(pkg: Package, wheel: PackageWheel, origin: str) -> LockedFile:
    return LockedFile(
        name=pkg.name, version=str(pkg.version), filename=wheel.filename, path=wheel.path or wheel.url or "",
        sha256=wheel.hashes["sha256"], size=wheel.size, marker=str(pkg.marker) if pkg.marker else None,
        requires_python=str(pkg.requires_python) if pkg.requires_python is not None else None,
        index=pkg.index, tool=_wh_table(pkg.tool, f"package {pkg.name}: tool.wh", origin),
    )


def _refuse_what_wh_cannot_install(data: Mapping[str, Any], origin: str) -> None:
    """What PEP 751 allows but the box cannot use (a package without a wheel, a wheel without sha256), and
    the shapes wh names in its own words; the rest of the spec is packaging.pylock's to judge."""
    packages = data.get("packages", [])
    if not isinstance(packages, list) or not all(isinstance(p, Mapping) for p in packages):
        raise LockError(f"{origin}: packages must be an array of tables ([[packages]])", hint=_REWRITE)
    for i, pkg in enumerate(packages):
        name, wheels = pkg.get("name"), pkg.get("wheels") or []
        if not isinstance(name, str):
            raise LockError(f"{origin}: packages[{i}] needs a name and a version (strings)", hint=_REWRITE)
        if not wheels:
            raise LockError(
                f"{origin}: package {name} has no wheel (sdists and VCS sources are not installable offline)",
                hint="stage it as a wheel, or build it with `wh build`",
            )
        if not isinstance(wheels, list) or not all(isinstance(w, Mapping) for w in wheels):
            raise LockError(f"{origin}: package {name}: wheels must be a list of tables", hint=_REWRITE)
        for w in wheels:
            hashes = w.get("hashes")
            if not (isinstance(hashes, Mapping) and hashes.get("sha256")):
                raise LockError(f"{origin}: {w.get('name')} has no sha256", hint="re-run `wh stage`")


# A lock of thousands of wheels stays far below this; bigger is not a lock wh wrote.
_MAX_RECORD = 4 * MAX_BYTES

def read_pylock(wheelhouse: str | Path) -> Lock:
    path = Path(wheelhouse) / PYLOCK
    if not os.path.lexists(path):
        raise WheelhouseNotFound(f"{path} does not exist", hint="stage a wheelhouse with `wh stage -o DIR`")
    text = read_text(path, what="lock", error=LockError, max_bytes=_MAX_RECORD,
                     hint="check the wheelhouse was copied whole, or re-run `wh stage`")
    return parse_pylock(text, origin=str(path))


def write_pylock(wheelhouse: str | Path, lock: Lock) -> Path:
    # A wheelhouse is carried and shared: URL credentials never reach it (wheelhouse.redact).
    return write_atomic(Path(wheelhouse) / PYLOCK, redact(render_pylock(lock)))


def read_wh_json(wheelhouse: str | Path) -> dict[str, Any]:
    path = Path(wheelhouse) / WH_JSON
    if not os.path.lexists(path):
        raise WheelhouseNotFound(f"{path} does not exist", hint="stage a wheelhouse with `wh stage -o DIR`")
    data = load_json(path, what="wheelhouse record", error=LockError, max_bytes=_MAX_RECORD,
                     hint="check the wheelhouse was copied whole, or re-run `wh stage`")
    if data.get("schema") != WH_JSON_SCHEMA:
        raise LockError(f"{path} has schema {data.get('schema')!r}, wh reads {WH_JSON_SCHEMA}", hint="re-run `wh stage`")
    wrong = wh_json_type_problems(data)
    if wrong:
        raise LockError(f"{path}: {'; '.join(wrong)}", hint="this is not the wh.json wh wrote: re-run `wh stage` "
                                                              "(or copy the wheelhouse again)")
    return data


# The fields of wh.json that wh reads, with their JSON types (None: may be null); a hand edit or a forged
# record with another type is refused by name rather than silently taken as absent.
_WH_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "tool": (dict,), "created": (str,), "name": (str,), "inputs": (dict,),  # (target: target_from_json judges it)
    "count": (int,), "total_size": (int,), "engine": (dict, type(None)), "drops": (list,), "patches": (list,),
    "doctor": (dict,), "serve": (dict, type(None)), "bootstrap": (dict, type(None)), "owned": (list,),
    "bytecode": (dict, type(None)), "assumed_present": (list,), "assumed": (list,),
}
_INNER_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "inputs": {"requirements": (list,), "constraints": (list,), "indexes": (list,), "find_links": (list,)},
    "bootstrap": {"command": (str,), "extras": (list,), "wh_wheel": (str,), "count": (int,)},
    "engine": {"wheel": (str,), "sha256": (str,), "artifacts": (list,)},
}
_JSON_KIND = {dict: "an object", list: "a list", str: "a string", int: "an integer", type(None): "null"}


def wh_json_type_problems(data: Mapping[str, Any]) -> list[str]:
    """One line per field of ``data`` (a wh.json) whose type is not the one wh writes (``patches must be a
    list, not 'x'``); the fields wh does not read are not judged."""
    def wrong(value: Any, kinds: tuple[type, ...]) -> bool:
        return not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)

    out = []
    for key, kinds in _WH_JSON_TYPES.items():
        if key in data and wrong(data[key], kinds):
            out.append(f"{key} must be {' or '.join(_JSON_KIND[k] for k in kinds)}, not {str(data[key])[:40]!r}")
        elif isinstance(data.get(key), dict):
            for inner, inner_kinds in _INNER_TYPES.get(key, {}).items():
                value = data[key].get(inner)
                if value is not None and wrong(value, inner_kinds):
                    out.append(f"{key}.{inner} must be {' or '.join(_JSON_KIND[k] for k in inner_kinds)}, "
                               f"not {str(value)[:40]!r}")
    return out


def write_wh_json(wheelhouse: str | Path, data: Mapping[str, Any]) -> Path:
    body = redact_data({"schema": WH_JSON_SCHEMA, **{k: v for k, v in data.items() if k != "schema"}})
    return write_atomic(Path(wheelhouse) / WH_JSON, json.dumps(body, indent=2, sort_keys=True) + "\n")
