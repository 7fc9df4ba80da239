"""Where a pin follows a rule of wh's that uv does not share, a note on that pin: ``--json`` says which pins
uv may answer differently, and why (docs/stage.md, "Same answers as uv, where checked").

The one such rule today: **Requires-Python upper bounds are honoured.** uv reads only a ``Requires-Python``'s
lower bound (``>=3.9,<3.13`` is ``>=3.9`` to it), so where a newer release that the pin's requirements admit
was skipped for an upper bound alone, uv may pick that release.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .candidates import CandidateFinder, spec_of
from .result import Pin, PinNote

__all__ = ["UPPER_BOUND", "SUMMARIES", "with_parity_notes"]

UPPER_BOUND = "requires-python-upper-bound"

# each code's difference in one sentence, for a line that names every pin it decided
SUMMARIES = {
    UPPER_BOUND: "wh honours Requires-Python upper bounds; uv reads only lower bounds and may pick newer releases",
}

_LOWER = {">=", ">", "~=", "==", "==="}  # the clauses that bound a version from below (`==3.10.*`: >=3.10)


def with_parity_notes(pins: Sequence[Pin], finder: CandidateFinder) -> tuple[Pin, ...]:
    """``pins``, each that a rule uv does not share decided carrying its note."""
    python = Version(finder.target.python_full_version)
    out = []
    for pin in pins:
        note = _upper_bound_note(pin, finder, python)
        out.append(replace(pin, notes=(*pin.notes, note)) if note else pin)
    return tuple(out)


def _upper_bound_note(pin: Pin, finder: CandidateFinder, python: Version) -> PinNote | None:
    refused = finder.python_refused.get(pin.name)
    if not refused or pin.provided or pin.distfile.origin == "direct":
        return None
    try:
        chosen = Version(pin.version)
    except InvalidVersion:
        return None
    specs = [*pin.specifiers(), *(c.specifier for c in finder.constraints.get(pin.name, ()))]
    skipped = {v: rp for v, rp in refused.items()
               if v > chosen and (finder.prereleases or not v.is_prerelease or chosen.is_prerelease)
               and all(s.contains(v, prereleases=True) for s in specs)
               and _upper_bound_only(spec_of(rp), python) and _published(finder, pin.name, v)}
    if not skipped:
        return None
    lo, hi = min(skipped), max(skipped)
    span = f"{pin.name} {lo} was" if lo == hi else f"{pin.name} {lo}\u2013{hi} were"
    bounds = sorted({str(s) for rp in skipped.values() for s in (spec_of(rp) or ())
                     if not s.contains(python, prereleases=True)})
    what = "the upper bound" if all(b.startswith("<") for b in bounds) else "the clause (not a lower bound)"
    return PinNote(UPPER_BOUND, f"{span} skipped for Requires-Python {','.join(bounds)}: wh honours {what} "
                                f"that the target's Python {python} fails, uv reads only lower bounds and may pick "
                                f"{pin.name} {hi}")


def _upper_bound_only(spec: SpecifierSet | None, python: Version) -> bool:
    """Whether ``spec`` refuses ``python`` while every lower bound in it admits ``python`` (what uv reads)."""
    if spec is None or spec.contains(python, prereleases=True):
        return False
    return all(_at_least(s.operator, s.version, python) for s in spec if s.operator in _LOWER)


def _at_least(op: str, text: str, python: Version) -> bool:
    try:
        bound = Version(text.removesuffix(".*"))
    except InvalidVersion:
        return True  # `===foo`: no bound packaging can compare
    return python > bound if op == ">" else python >= bound


def _published(finder: CandidateFinder, name: str, v: Version) -> bool:
    """Whether ``v`` has a wheel for the target that is not yanked (or that the user's own ``==`` allows)."""
    allowed = v in finder.allowed_yanks.get(name, ())
    for f in finder.files(name):
        if f.is_wheel and (allowed or not f.yanked) and finder.installable_name(f.filename):
            try:
                if Version(f.version) == v:
                    return True
            except InvalidVersion:
                continue
    return False
