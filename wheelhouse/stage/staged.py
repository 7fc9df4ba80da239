"""One pinned wheel as a stage keeps it: what was chosen, from where, and why.

Its own module (``writer`` re-exports it): a dry run, and a stage answered from its stored
resolution, list pins without loading the wheelhouse writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from wheelhouse.resolve import PinNote

__all__ = ["StagedFile"]


@dataclass(frozen=True)
class StagedFile:
    """One pinned wheel: what was chosen and why (``parents``: who required it)."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str | None
    size: int | None
    requires_python: str | None = None
    parents: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    origin: str = ""  # index URL, find-links location, or release manifest URL
    release_key: str | None = None
    tool: Mapping[str, Any] = field(default_factory=dict)  # more [packages.tool.wh] data (a built engine's)
    yanked: bool = False  # PEP 592: only an exact pin stages a yanked release
    yanked_reason: str | None = None
    notes: tuple[PinNote, ...] = ()  # where a rule uv does not share chose this pin (``resolve.parity``)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "filename": self.filename,
            "size": self.size,
            "sha256": self.sha256,
            "url": self.url,
            "requires_python": self.requires_python,
            "parents": list(self.parents),
            "extras": list(self.extras),
            "yanked": self.yanked,
            "yanked_reason": self.yanked_reason if self.yanked else None,
            "notes": [n.to_json() for n in self.notes],
            **({"release": self.release_key} if self.release_key else {}),
        }
