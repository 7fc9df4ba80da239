"""What a user should know about the pins a resolution chose, though nothing failed: one warning line
each, for the CLI to show and ``--json`` to carry.

- a yanked release, used because the user's own requirements pin it with ``==`` (PEP 592; uv warns too);
- an extra the chosen release does not declare (``torch[nosuch]``: pip warns, and installs without it);
- a ``Requires-Python`` packaging cannot read (``>=3.15.*``): ignored, as pip and uv do, but named;
- a pin that is older than the newest release the requirements allow because the newer ones publish
  only source distributions (wh stages wheels only): the pin may be years old (deepspeed 0.3.1.dev3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from packaging.version import InvalidVersion, Version

from .candidates import CandidateFinder, spec_of
from wheelhouse.index import PackageSource

if TYPE_CHECKING:
    from .result import Pin
    from .provider import Provider

__all__ = ["caveats"]

def caveats(pins: Sequence[Pin], provider: Provider, source: PackageSource) -> list[str]:
    """One ``warning: ...`` line per caveat of ``pins``, in pin order."""
    out: list[str] = []
    for p in pins:
        if p.provided:
            continue
        key = f"{p.name}=={p.version}"
        d = p.distfile
        if d.yanked:
            out.append(f"warning: {key} is yanked ({d.yanked_reason or 'no reason given'}); it is used because your requirements pin it exactly")
        missing = {e for c, extras in provider.undeclared_extras.items() if c == key for e in extras}
        if missing:
            listed = ", ".join(repr(e) for e in sorted(missing))
            out.append(f"warning: {key} declares no extra {listed} ({p.name}[{','.join(sorted(missing))}] was asked): "
                       "nothing is added for it")
        bad_rp = provider.invalid_requires_python.get(d.filename) or (
            d.requires_python if d.requires_python and spec_of(d.requires_python) is None else None)
        if bad_rp:
            out.append(f"warning: {d.filename} declares an invalid Requires-Python {bad_rp!r}; it is ignored (as pip and uv do)")
        newer = _newer_sdist_only(p, provider.finder, source)
        if newer is not None:
            out.append(f"warning: {key} is the newest release with a wheel for the target; {p.name} {newer} (newer) "
                       "publishes only source distributions, which wh does not stage: build its wheel (`wh build`) "
                       "and pass it with --find-links to use it")
    return out


def _newer_sdist_only(pin: Pin, finder: CandidateFinder, source: PackageSource) -> Version | None:
    """The newest release above ``pin`` that its requirements admit and that has only sdists, if any.

    The sdists come with the page as filtered for the run (no page is read again); the whole page only
    when one above the pin is found, to see whether it has a wheel for another platform."""
    if pin.distfile.origin == "direct":
        return None
    try:
        chosen = Version(pin.version)
    except InvalidVersion:
        return None
    specs = pin.specifiers()
    files = finder.files(pin.name)
    # A release with a wheel for the target is never sdist-only: its sdist is skipped unparsed (parsing
    # every sdist's version of every pin was ~7% of a cold resolve's CPU).
    wheel_versions = {f.version for f in files if f.is_wheel}
    newer = set()
    for f in files:
        if f.is_wheel or f.version in wheel_versions:
            continue
        try:
            v = Version(f.version)
        except InvalidVersion:
            continue
        if v > chosen and not f.yanked and (not v.is_prerelease or chosen.is_prerelease) \
                and all(s.contains(v, prereleases=True) for s in specs):
            newer.add(v)
    if not newer:
        return None
    with_wheels = {Version(f.version) for f in source.files(pin.name) if f.is_wheel and _valid(f.version)}
    sdist_only = newer - with_wheels
    return max(sdist_only) if sdist_only else None


def _valid(v: str) -> bool:
    try:
        Version(v)
        return True
    except InvalidVersion:
        return False
