"""What a resolution is: a pin per project (the version and the wheel chosen for the target), and the whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from packaging.utils import canonicalize_name

from wheelhouse.index.distfile import Distfile
from .image import ImageChange
from .overrides import Rewritten

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

__all__ = ["Pin", "PinNote", "Resolution"]


@dataclass(frozen=True)
class PinNote:
    """Why a pin may differ from another resolver's: a stable ``code`` and one sentence (``parity``)."""

    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class Pin:
    """One resolved project: the version and the wheel chosen for the target."""

    name: str
    version: str
    distfile: Distfile
    parents: tuple[str, ...] = ()  # "name==version" of each dependent, or "(requested)"
    extras: tuple[str, ...] = ()
    requested_by: tuple[str, ...] = ()  # the requirement strings that pulled it in
    provided: bool = False  # the image's own copy is kept: ``version`` is the image's, nothing to fetch
    notes: tuple[PinNote, ...] = ()  # a rule of wh's that uv does not share decided this pin (``parity``)

    def specifiers(self) -> list[SpecifierSet]:
        """The version specifiers of the requirements that pulled it in (``requested_by``)."""
        from packaging.requirements import InvalidRequirement, Requirement  # here: a stored answer parses none

        out = []
        for text in self.requested_by:
            try:
                out.append(Requirement(text.removesuffix(" (constraint)").removesuffix(" (override)")).specifier)
            except InvalidRequirement:
                continue
        return out

    def to_json(self) -> dict[str, Any]:
        d = self.distfile
        if self.provided:
            return {"name": self.name, "version": self.version, "provided": True, "extras": list(self.extras),
                    "parents": list(self.parents), "requested_by": list(self.requested_by),
                    "notes": [n.to_json() for n in self.notes]}
        return {
            "name": self.name,
            "version": self.version,
            "filename": d.filename,
            "url": d.url,
            "sha256": d.sha256,
            "size": d.size,
            "requires_python": d.requires_python,
            "yanked": d.yanked,
            "yanked_reason": d.yanked_reason if d.yanked else None,
            "origin": d.origin,
            "extras": list(self.extras),
            "parents": list(self.parents),
            "requested_by": list(self.requested_by),
            "notes": [n.to_json() for n in self.notes],
        }


@dataclass(frozen=True)
class Resolution:
    pins: tuple[Pin, ...]
    requirements: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()  # requested requirements whose markers exclude the target
    stats: Mapping[str, Any] = field(default_factory=dict, compare=False)
    changes: tuple[ImageChange, ...] = ()  # image distributions the stack moves to another version
    unknown_deps: tuple[str, ...] = ()  # kept image versions no index has metadata of: no dependencies read
    rewritten: tuple[Rewritten, ...] = ()  # requirements an override replaced or an exclusion removed
    warnings: tuple[str, ...] = ()  # what the pins' user should know though nothing failed (``caveats``)

    def pin(self, name: str) -> Pin | None:
        key = canonicalize_name(name)
        return next((p for p in self.pins if p.name == key), None)

    def versions(self) -> dict[str, str]:
        return {p.name: p.version for p in self.pins}

    def to_json(self) -> dict[str, Any]:
        return {
            "requirements": list(self.requirements),
            "constraints": list(self.constraints),
            "skipped": list(self.skipped),
            "pins": [p.to_json() for p in self.pins],
            "changes": [c.to_json() for c in self.changes],
            "unknown_deps": list(self.unknown_deps),
            "rewritten": [r.to_json() for r in self.rewritten],
            "warnings": list(self.warnings),
        }

    @property
    def kept(self) -> tuple[Pin, ...]:
        """Pins the image already provides at the pinned version (nothing to stage)."""
        return tuple(p for p in self.pins if p.provided)
