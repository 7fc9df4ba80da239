"""A delta stage: what the target's image already provides is not staged, and wh.json says so.

A profile captured on the box lists the distributions its interpreter imports
(``TargetProfile.provided``). ``wh stage`` offers them to the resolver as installed
(``resolve(provided=...)``): a kept one is neither downloaded nor locked, and is recorded in
wh.json's ``assumed_present`` (the contract ``wh install`` checks on the box before it writes
anything). ``--full`` offers nothing and records no assumption.

Some image distributions are never offered, because the stack names a specific FILE of them:
a release manifest's wheel, the engine ``wh build`` added, a requirement line with ``--hash``
(its sha256 can only be checked on a file wh stages).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from packaging.utils import canonicalize_name

from wheelhouse.target import TargetProfile

__all__ = ["ImageDelta", "offered", "profile_identity", "delta_of"]

_LISTED = 8  # names in the one-line summary; the JSON has them all


@dataclass(frozen=True)
class ImageDelta:
    """How one stage relates to the target's image (None when the profile lists no distributions)."""

    profile: dict[str, Any]  # profile_identity(target)
    full: bool  # --full: the whole closure staged, nothing assumed
    assumed: tuple[tuple[str, str], ...] = ()  # (canonical name, the image's version) kept, not staged
    changes: tuple[Any, ...] = ()  # resolve.ImageChange: image distributions the stack moves
    unknown_deps: tuple[str, ...] = ()  # kept versions no index has metadata of (taken to need nothing)
    never_offered: tuple[str, ...] = ()  # image names staged anyway: the stack names a file of them

    def assumed_json(self) -> list[dict[str, str]]:
        """wh.json's ``assumed_present``: exactly what the box must still provide, at these versions."""
        return [{"name": n, "version": v} for n, v in self.assumed]

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": dict(self.profile),
            "full": self.full,
            "kept": len(self.assumed),
            "changes": [c.to_json() for c in self.changes],
            "unknown_dependencies": list(self.unknown_deps),
            "never_offered": list(self.never_offered),
        }

    def summary(self, staged: int, verb: str = "staged") -> str:
        """``staged 3 of 10 (7 provided by the image: numpy 2.1.0, torch 2.11.0, ...)``"""
        total = staged + len(self.assumed)
        if not self.assumed:
            why = "--full: nothing assumed of the image" if self.full else "the image provides none of it"
            return f"{verb} {staged} of {total} ({why})"
        names = [f"{n} {v}" for n, v in self.assumed[:_LISTED]]
        more = f", and {len(self.assumed) - _LISTED} more" if len(self.assumed) > _LISTED else ""
        return f"{verb} {staged} of {total} ({len(self.assumed)} provided by the image: {', '.join(names)}{more})"

    def lines(self) -> list[str]:
        """One line per image distribution the stack changes, and per assumption made blind."""
        if self.full and self.changes:  # a whole closure: one line, they are all in the JSON
            ordered = sorted(self.changes, key=lambda c: (c.direction != "downgrade", c.name))  # downgrades first
            shown = ", ".join(c.describe() for c in ordered[:_LISTED])
            more = f", and {len(self.changes) - _LISTED} more" if len(self.changes) > _LISTED else ""
            out = [f"--full: {len(self.changes)} staged at another version than the image's: {shown}{more}"]
        else:
            out = [f"changes the image's {c.describe()}" for c in self.changes]
        out += [f"{u} (image): no index has its metadata; assumed to need nothing more" for u in self.unknown_deps]
        return out


def profile_identity(target: TargetProfile) -> dict[str, Any]:
    """Which profile a delta was staged against: the sha256 of its canonical JSON, and what it is."""
    body = json.dumps(target.to_json(), sort_keys=True, separators=(",", ":")).encode()
    return {
        "sha256": hashlib.sha256(body).hexdigest(),
        "source": target.source,
        "describe": target.describe(),
        "distributions": len(target.provided),
    }


def offered(target: TargetProfile, full: bool, never: Iterable[str]) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """(what the resolver may treat as installed, image names left out because the stack names a file of them)."""
    if full or not target.provided:
        return (), ()
    skip = {canonicalize_name(n) for n in never}
    offer = tuple(d for d in target.provided if canonicalize_name(d.name) not in skip)
    left = tuple(sorted({canonicalize_name(d.name) for d in target.provided} & skip))
    return offer, left


def delta_of(target: TargetProfile, full: bool, resolution, never_offered: Sequence[str]) -> ImageDelta | None:
    """The delta a resolution made against the image (None when the profile lists no distributions)."""
    from wheelhouse.resolve.image import image_changes, provided_versions

    if not target.provided:
        return None
    kept = tuple(sorted((p.name, p.version) for p in resolution.pins if p.provided))
    # --full offered nothing, yet what the full closure replaces of the image is still worth saying.
    changes = image_changes(resolution.pins, provided_versions(target.provided)) if full else resolution.changes
    return ImageDelta(profile_identity(target), full, kept, tuple(changes),
                      tuple(resolution.unknown_deps), tuple(never_offered))
