"""Overrides and exclusions: requirements the stack rewrites wherever they appear.

- An **override** replaces every requirement on its project, the stack's own and each
  dependency's, whatever version range that requirement asked for (uv's
  ``override-dependencies``: absolute, where a constraint only narrows). Several overrides of
  one project all apply (each with its marker judged for the target); the requirement's own
  marker still decides whether it is there at all, so the two markers combine. An override
  adds nothing to the closure by itself: it only takes the place of a requirement that is there.
- An **exclusion** removes a project from the closure wherever it is required: the requirement
  is dropped, and so is everything only it pulled in.

``Rewrites.apply`` is called for each requirement the resolver reads; it records who asked for
what it rewrote, so the stage can say so (``excluded``/``overridden``, filtered to the final pins).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

if TYPE_CHECKING:  # the search loads it; a stored answer reads Rewritten alone
    from .candidates import Req

__all__ = ["Rewrites", "Rewritten"]


@dataclass(frozen=True)
class Rewritten:
    """One project the stack rewrote: ``by`` the override texts (none: excluded), for ``parents``."""

    name: str
    by: tuple[str, ...]  # the overrides that took the requirement's place; () for an exclusion
    requested: tuple[tuple[str, str], ...]  # (parent "name==version" or "(requested)", requirement as written)

    @property
    def excluded(self) -> bool:
        return not self.by

    def to_json(self) -> dict:
        return {"name": self.name, **({"override": list(self.by)} if self.by else {"excluded": True}),
                "replaced": [{"parent": p, "requirement": t} for p, t in self.requested]}


@dataclass
class Rewrites:
    """The stack's overrides (canonical name -> the ``Req`` values that hold for the target; an empty
    list: every override of that project has a marker the target fails, so the requirement goes) and
    exclusions (canonical names)."""

    overrides: Mapping[str, Sequence[Req]] = field(default_factory=dict)
    overridden_by: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # name -> override texts, as written
    excludes: frozenset[str] = frozenset()
    _seen: dict[str, dict[tuple[str, str], None]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __bool__(self) -> bool:
        return bool(self.overrides or self.overridden_by or self.excludes)

    def touches(self, name: str) -> bool:
        """Whether a requirement on ``name`` is replaced or removed."""
        return name in self.excludes or name in self.overridden_by

    def apply(self, req: Req, parent: str) -> list[Req]:
        """What stands in the place of ``req`` (required by ``parent``): itself, its overrides, or nothing."""
        if req.kind != "pkg":
            return [req]
        if req.name in self.excludes:
            self._note(req, parent)
            return []
        if req.name in self.overridden_by:
            self._note(req, parent)
            return list(self.overrides.get(req.name, ()))
        return [req]

    def _note(self, req: Req, parent: str) -> None:
        with self._lock:
            self._seen.setdefault(req.name, {})[(parent, req.text)] = None

    def report(self, parents_kept: Iterable[str]) -> tuple[Rewritten, ...]:
        """What was rewritten for the requirements of ``parents_kept`` (the final pins and the root)."""
        kept = set(parents_kept)
        out = []
        for name in sorted(self._seen):
            asked = tuple(sorted(k for k in self._seen[name] if k[0] in kept))
            if asked:
                out.append(Rewritten(name, () if name in self.excludes else self.overridden_by.get(name, ()), asked))
        return tuple(out)
