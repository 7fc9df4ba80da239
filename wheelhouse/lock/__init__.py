"""The wheelhouse on disk: ``pylock.toml`` (PEP 751) and ``wh.json`` (provenance).

Layout of a wheelhouse folder::

    wh.json             provenance: target profile, inputs, tool version, time, engine builds, patches
    pylock.toml         PEP 751 lock: every file with sha256 and size; the source of truth for install
    wheels/             the stack's wheels (paths in pylock.toml are relative to the wheelhouse)
    simple/             static PEP 503 index over wheels/ (for pip/uv --index-url file://...)
    bootstrap/          wh's own wheel + its dependencies for the target, and BOOTSTRAP.txt
    capture_target.py   stdlib-only profile capture, to run on the box

Reading is pure (``parse_pylock(text)``); file access is separate (``read_pylock``).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from wheelhouse.atomic import write_atomic
from wheelhouse.datafile import MAX_BYTES, load_json, parse_toml, read_text
from wheelhouse.errors import UsageError
from wheelhouse.redact import redact, redact_data

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 boxes
    import tomli as tomllib

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


def _toml_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _toml_key(key: str) -> str:
    return key if key.replace("-", "").replace("_", "").isalnum() else _toml_str(key)


def render_pylock(lock: Lock) -> str:
    """PEP 751 text for ``lock``; packages sorted by name so the file diffs cleanly."""
    out = ['lock-version = "1.0"']
    if lock.environments:
        out.append(f"environments = {_toml_value(list(lock.environments))}")
    if lock.requires_python:
        out.append(f"requires-python = {_toml_str(lock.requires_python)}")
    out.append(f"created-by = {_toml_str(lock.created_by)}")
    if lock.tool:
        out.append(f"tool.wh = {_toml_value(dict(lock.tool))}")
    if not lock.files:  # PEP 751 requires the key; [[packages]] tables cannot say "none"
        out.append("packages = []")
    for f in sorted(lock.files, key=lambda f: (f.name, f.version, f.filename)):
        out += ["", "[[packages]]", f"name = {_toml_str(f.name)}", f"version = {_toml_str(f.version)}"]
        if f.marker:
            out.append(f"marker = {_toml_str(f.marker)}")
        if f.requires_python:
            out.append(f"requires-python = {_toml_str(f.requires_python)}")
        if f.index:
            out.append(f"index = {_toml_str(f.index)}")
        # PEP 751: a wheel names its url or its path (a dry run's export has no local file)
        wheel = {"name": f.filename, **({"url": f.url} if f.url else {"path": f.path})}
        if f.size is not None:
            wheel["size"] = f.size
        wheel["hashes"] = {"sha256": f.sha256}
        out.append(f"wheels = [{_toml_value(wheel)}]")
        if f.tool:
            out.append(f"tool.wh = {_toml_value(dict(f.tool))}")
    return "\n".join(out) + "\n"


def parse_pylock(text: str, origin: str = PYLOCK) -> Lock:
    """Parse PEP 751 text into a Lock (wheels only; sdists are refused: the box builds nothing)."""
    try:
        data = parse_toml(text, source=origin, what="lock", error=LockError, hint="re-run `wh stage` to rewrite it")
    except LockError as exc:
        if "is not valid TOML" in exc.message:  # (the message wh always gave for it)
            raise LockError(f"{origin} is not valid TOML: {exc.__cause__}", hint="re-run `wh stage` to rewrite it") from exc
        raise
    if str(data.get("lock-version", "")).split(".")[0] != "1":
        raise LockError(f"{origin} has lock-version {data.get('lock-version')!r}, wh reads 1.x", hint="re-run `wh stage`")
    files = []
    packages = data.get("packages", [])
    if not isinstance(packages, list) or not all(isinstance(p, Mapping) for p in packages):
        raise LockError(f"{origin}: packages must be an array of tables ([[packages]])", hint="re-run `wh stage` to rewrite it")
    for i, pkg in enumerate(packages):
        name, version = pkg.get("name"), pkg.get("version")
        if not isinstance(name, str) or not isinstance(version, (str, type(None))):
            raise LockError(f"{origin}: packages[{i}] needs a name and a version (strings)", hint="re-run `wh stage` to rewrite it")
        wheels = pkg.get("wheels") or []
        if not wheels:
            raise LockError(
                f"{origin}: package {name} has no wheel (sdists and VCS sources are not installable offline)",
                hint="stage it as a wheel, or build it with `wh build`",
            )
        if not isinstance(wheels, list) or not all(isinstance(w, Mapping) for w in wheels):
            raise LockError(f"{origin}: package {name}: wheels must be a list of tables", hint="re-run `wh stage` to rewrite it")
        for w in wheels:
            hashes = w.get("hashes")
            sha = hashes.get("sha256") if isinstance(hashes, Mapping) else None
            if not sha:
                raise LockError(f"{origin}: {w.get('name')} has no sha256", hint="re-run `wh stage`")
            if not (isinstance(sha, str) and isinstance(w.get("name", ""), str) and isinstance(w.get("path", ""), str)
                    and isinstance(w.get("size", 0), int)):
                raise LockError(f"{origin}: package {name}: a wheel's name, path, size or sha256 has the wrong type",
                                hint="re-run `wh stage` to rewrite it")
            files.append(
                LockedFile(
                    name=name,
                    version=str(version),
                    filename=w.get("name") or Path(w.get("path", "")).name,
                    path=w.get("path") or w.get("url", ""),
                    sha256=sha,
                    size=w.get("size"),
                    marker=pkg.get("marker"),
                    requires_python=pkg.get("requires-python"),
                    index=pkg.get("index"),
                    tool=(pkg.get("tool") or {}).get("wh", {}),
                )
            )
    _validate_pep751(data, origin)  # after wh's own checks, whose messages name the field more plainly
    return Lock(
        files=tuple(files),
        environments=tuple(data.get("environments", ())),
        requires_python=data.get("requires-python"),
        created_by=data.get("created-by", ""),
        tool=(data.get("tool") or {}).get("wh", {}) if isinstance(data.get("tool"), Mapping) else {},
    )


def _validate_pep751(data: dict[str, Any], origin: str) -> None:
    """PEP 751 as packaging reads it (markers, specifiers, names, versions, hashes); wh's own data
    lives under [tool.wh], which the spec leaves to the tool."""
    from packaging.pylock import Pylock, PylockUnsupportedVersionError, PylockValidationError

    try:
        Pylock.from_dict(data)
    except PylockUnsupportedVersionError as exc:
        raise LockError(f"{origin}: {exc}", hint="re-run `wh stage` to rewrite it with this wh") from exc
    except PylockValidationError as exc:
        raise LockError(f"{origin} is not a valid PEP 751 lock: {exc}",
                        hint="re-run `wh stage` to rewrite it (a hand edit broke it)") from exc


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
