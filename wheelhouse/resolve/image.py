"""How a resolution relates to what the target's image already provides.

A target profile captured on the box lists the distributions its interpreter imports
(``TargetProfile.provided``). The resolver prefers those versions (``wheelhouse.candidates``);
this module reads the result back: which pins the image keeps (nothing to stage), and which image
distributions the stack moves to another version (an upgrade or a downgrade, said out loud).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping, Sequence

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

__all__ = ["ImageChange", "provided_versions", "image_changes"]


@dataclass(frozen=True)
class ImageChange:
    """An image distribution the stack needs at another version: the staged one replaces it on the box."""

    name: str
    image: str  # the version the image has
    staged: str  # the version the stack pins
    direction: Literal["upgrade", "downgrade", "replace"]  # replace: same release, another local build

    def describe(self) -> str:
        """``torch 2.11.0 (image) -> 2.9.1 (downgrade)``"""
        return f"{self.name} {self.image} (image) -> {self.staged} ({self.direction})"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "image": self.image, "staged": self.staged, "direction": self.direction}


def provided_versions(provided: Iterable[Any]) -> dict[str, str]:
    """canonical name -> version string, from ``ProvidedDist`` values (or ``(name, version)`` pairs).

    The first of a name wins: profiles list them in the interpreter's ``sys.path`` order, and the
    first copy is the one that imports. A version that is not PEP 440 is left out (nothing can be
    compared with it; the stack then stages its own copy).
    """
    out: dict[str, str] = {}
    for d in provided:
        name, version = (d.name, d.version) if hasattr(d, "name") else d
        key = canonicalize_name(name)
        if key in out:
            continue
        try:
            Version(version)
        except InvalidVersion:
            continue
        out[key] = version
    return out


def image_changes(pins: Sequence[Any], provided: Mapping[str, str]) -> tuple[ImageChange, ...]:
    """The image distributions whose version the resolution changes (pins not kept from the image)."""
    out = []
    for p in pins:
        have = provided.get(p.name)
        if have is None or getattr(p, "provided", False):
            continue
        old, new = Version(have), Version(p.version)
        if new == old:
            continue
        if new.public == old.public and new.local != old.local:
            direction = "replace"
        else:
            direction = "upgrade" if new > old else "downgrade"
        out.append(ImageChange(p.name, have, p.version, direction))
    return tuple(sorted(out, key=lambda c: c.name))
