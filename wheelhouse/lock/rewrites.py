"""The overrides and exclusions a wheelhouse was staged with, as its wh.json records them (``inputs``).

The box honours them as the resolver did: ``wh install``'s closure check, ``wh verify``'s pin check and
the doctor's deps check read them here.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

__all__ = ["rewrites_of", "requested_with_extras"]


def rewrites_of(metas: Iterable[Mapping]) -> tuple[frozenset[str], dict[str, tuple[str, ...]]]:
    """The exclusions (canonical names) and overrides (name -> texts) that wheelhouses' wh.json record."""
    excluded: set[str] = set()
    overrides: dict[str, list[str]] = {}
    for meta in metas:
        inputs = meta.get("inputs") if isinstance(meta, Mapping) else None
        if not isinstance(inputs, Mapping):
            continue
        for e in inputs.get("excludes") or ():
            if isinstance(e, Mapping) and isinstance(e.get("distribution"), str):
                excluded.add(canonicalize_name(e["distribution"]))
        for text in inputs.get("overrides") or ():
            req = _requirement(text)
            if req is not None:
                overrides.setdefault(canonicalize_name(req.name), []).append(text)
    return frozenset(excluded), {k: tuple(v) for k, v in overrides.items()}


def _requirement(text) -> Requirement | None:
    try:
        return Requirement(text) if isinstance(text, str) else None
    except InvalidRequirement:
        return None



def requested_with_extras(metas: Iterable[Mapping]) -> list[Requirement]:
    """The wheelhouses' requirements (wh.json's inputs) that ask for extras (``app[gpu]``): what those extras require
    is part of what was asked for. Markers are the caller's to judge, for its target."""
    out = []
    for meta in metas:
        inputs = meta.get("inputs") if isinstance(meta, Mapping) else None
        for text in (inputs.get("requirements") or ()) if isinstance(inputs, Mapping) else ():
            req = _requirement(text)
            if req is not None and req.extras:
                out.append(req)
    return out
