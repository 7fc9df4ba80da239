"""A project's ``pyproject.toml`` as a stack: its PEP 621 dependencies, extras, and PEP 735 groups.

``wh stage pyproject.toml [--extra E] [--group G]`` stages what the project needs, not the project
itself (a local source: build it with ``wh build`` or ``pip wheel`` and stage the wheel beside):

- ``[project] dependencies``, plus ``[project.optional-dependencies]`` of each ``--extra`` (a
  dependency on the project itself, ``me[cuda]``, stands for those extras' requirements);
- ``[dependency-groups]`` of each ``--group``, ``{include-group = "..."}`` entries expanded (PEP 735:
  names compared normalized; a cycle or an unknown group is an error);
- ``[tool.uv] constraint-dependencies`` and ``override-dependencies``, which mean there what
  constraints and overrides mean to wh.

Parsing is pure (``parse_pyproject(data, path, extras, groups)``); ``load_pyproject`` reads the file.
Dependencies the build backend computes (``dynamic = ["dependencies"]``) cannot be read here: an
error says how to export them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from wheelhouse.datafile import load_toml
from .model import ManifestError, StackManifest

__all__ = ["is_pyproject_name", "parse_pyproject", "load_pyproject"]


def is_pyproject_name(path: str | Path) -> bool:
    return Path(path).name == "pyproject.toml"


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ManifestError(f"{where} must be a list of strings", hint="fix the pyproject.toml (PEP 621)")
    return list(value)


def _extras(project: Mapping[str, Any], name: str, asked: Sequence[str], where: str) -> list[str]:
    """The requirements of the ``asked`` extras, a dependency on the project itself expanded."""
    table = project.get("optional-dependencies") or {}
    if not isinstance(table, Mapping):
        raise ManifestError(f"{where}project.optional-dependencies must be a table", hint="fix the pyproject.toml")
    known = {canonicalize_name(k): k for k in table}
    out: list[str] = []
    todo, seen = [canonicalize_name(e) for e in asked], set()
    while todo:
        extra = todo.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        if extra not in known:
            raise ManifestError(f"{where}the project has no extra {extra!r}",
                                hint=f"its extras: {', '.join(sorted(known)) or 'none'}")
        for text in _strings(table[known[extra]], f"{where}project.optional-dependencies.{known[extra]}"):
            req = _requirement(text, where)
            if canonicalize_name(req.name) == name:  # `me[cuda]`: the project's own extras
                todo += sorted(canonicalize_name(e) for e in req.extras)
            else:
                out.append(text)
    return out


def _groups(data: Mapping[str, Any], asked: Sequence[str], where: str) -> list[str]:
    """PEP 735: the requirements of the ``asked`` groups, ``include-group`` entries expanded."""
    table = data.get("dependency-groups") or {}
    if not isinstance(table, Mapping):
        raise ManifestError(f"{where}dependency-groups must be a table", hint="fix the pyproject.toml (PEP 735)")
    known = {canonicalize_name(k): k for k in table}

    def expand(group: str, chain: tuple[str, ...]) -> list[str]:
        if group not in known:
            raise ManifestError(f"{where}no dependency group {group!r}" + (f" (included by {chain[-1]})" if chain else ""),
                                hint=f"its groups: {', '.join(sorted(known)) or 'none'}")
        if group in chain:
            raise ManifestError(f"{where}dependency group {group!r} includes itself: {' -> '.join((*chain, group))}",
                                hint="PEP 735 forbids cycles of include-group")
        entries = table[known[group]]
        if not isinstance(entries, list):
            raise ManifestError(f"{where}dependency-groups.{known[group]} must be a list", hint="fix the pyproject.toml")
        out: list[str] = []
        for entry in entries:
            if isinstance(entry, str):
                out.append(entry)
            elif isinstance(entry, Mapping) and set(entry) == {"include-group"} and isinstance(entry["include-group"], str):
                out += expand(canonicalize_name(entry["include-group"]), (*chain, group))
            else:
                raise ManifestError(f"{where}dependency-groups.{known[group]}: {entry!r} is neither a requirement "
                                    "nor {include-group = \"name\"}", hint="fix the pyproject.toml (PEP 735)")
        return out

    return [r for g in asked for r in expand(canonicalize_name(g), ())]


def _requirement(text: str, where: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise ManifestError(f"{where}{text!r} is not a valid requirement: {exc}",
                            hint="fix the pyproject.toml (PEP 508)") from exc


def parse_pyproject(data: Mapping[str, Any], path: Path | None = None, extras: Sequence[str] = (),
                    groups: Sequence[str] = ()) -> StackManifest:
    """The stack a pyproject.toml asks for (module docstring); reads no file."""
    where = f"{path}: " if path else ""
    project = data.get("project")
    if not isinstance(project, Mapping) and not data.get("dependency-groups"):
        raise ManifestError(f"{where}has neither a [project] table (PEP 621) nor [dependency-groups] (PEP 735)",
                            hint="give the pyproject.toml of a project, or a stack manifest")
    project = project if isinstance(project, Mapping) else {}
    if "dependencies" in (project.get("dynamic") or ()):
        raise ManifestError(f"{where}the project's dependencies are dynamic (computed by its build backend)",
                            hint="export them and stage the result: uv export --format pylock.toml -o pylock.toml "
                                 "&& wh stage pylock.toml, or pip-compile pyproject.toml && wh stage -r "
                                 "requirements.txt")
    name = canonicalize_name(str(project.get("name") or "project"))
    reqs = _strings(project.get("dependencies"), f"{where}project.dependencies")
    reqs += _extras(project, name, extras, where)
    reqs += _groups(data, groups, where)
    for text in reqs:
        _requirement(text, where)
    uv = ((data.get("tool") or {}).get("uv") or {}) if isinstance(data.get("tool"), Mapping) else {}
    return StackManifest(
        path=None, name=name, requirements=tuple(dict.fromkeys(reqs)),
        constraints=tuple(_strings(uv.get("constraint-dependencies"), f"{where}tool.uv.constraint-dependencies")),
        overrides=tuple(_strings(uv.get("override-dependencies"), f"{where}tool.uv.override-dependencies")),
        files_read=True,
    )


def load_pyproject(path: str | Path, extras: Sequence[str] = (), groups: Sequence[str] = ()) -> StackManifest:
    p = Path(path)
    data = load_toml(p, what="pyproject.toml", error=ManifestError, hint="give the path of a project's pyproject.toml")
    return parse_pyproject(data, p.resolve(), extras, groups)
