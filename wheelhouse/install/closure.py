"""Requirements before writes: the wheelhouse together with what is installed must be complete.

``wh install`` asks the receiving interpreter which distributions it imports (its venv,
a parent venv, the base, in its own ``sys.path`` order, first of a name wins: exactly
what ``importlib.metadata`` run in it answers), puts the files it is about to install
over that view, and judges every ``Requires-Dist`` with the target's markers and the
extras other requirements ask for. It refuses when an installed-to-be distribution
misses a requirement, or when the install would break one that holds today (wh's own
``click>=8.1`` when installing into wh's own environment, say). Requirements that were
already unmet before the install are not this install's doing and are left to the doctor.

The stack's overrides and exclusions (wh.json's ``inputs``) are honoured as the resolver honoured
them: a requirement on an excluded project is ``EXCLUDED`` (never missing), and one on an
overridden project is judged by the override(s) instead.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelhouse.errors import UsageError
from wheelhouse.lock.rewrites import requested_with_extras, rewrites_of
from wheelhouse.target import TargetProfile
from wheelhouse.target.installed import InstalledListError, installed_distributions
from .wheel.archive import read_wheel

__all__ = ["Dist", "MissingRequirements", "EXCLUDED", "installed_view", "wheel_dist", "unmet", "asked_extras",
           "check_closure", "rewrites_of", "requested_with_extras"]

EXCLUDED = "excluded by the manifest"


class MissingRequirements(UsageError):
    code = "unmet-requirements"


@dataclass(frozen=True)
class Dist:
    name: str
    version: str
    requires: tuple[str, ...]


def installed_view(python: str, timeout: float = 120) -> dict[str, Dist]:
    """What ``python`` imports, by canonical name (first on its ``sys.path`` wins): target.installed's one view."""
    try:
        dists = installed_distributions(python, timeout=timeout)
    except InstalledListError as exc:
        raise MissingRequirements(exc.message, hint=exc.hint, detail=exc.detail) from exc
    return {k: Dist(d.name, d.version, d.requires) for k, d in dists.items()}


def wheel_dist(wheel: Path) -> Dist:
    """Name, version and Requires-Dist from a wheel's METADATA (nothing is extracted)."""
    texts = read_wheel(wheel).texts  # read once: planning the same wheel reads it from there
    text = next((t for n, t in texts.items() if n.endswith("/METADATA")), "")
    fields = _headers(text)
    return Dist((fields.get("name") or [wheel.name.split("-")[0]])[0], (fields.get("version") or [""])[0],
                tuple(fields.get("requires-dist") or ()))


def _headers(text: str) -> dict[str, list[str]]:
    """The header fields of a core-metadata file (RFC 822 style: continuation lines start with white space).

    Not ``email.parser``: it imports ``socket``, and nothing on the install path may.
    """
    out: dict[str, list[str]] = {}
    last: list[str] | None = None
    for line in text.splitlines():
        if not line.strip():
            break  # the body (the long description) starts after the first empty line
        if line[0] in " \t" and last:
            last[-1] += " " + line.strip()
            continue
        key, sep, value = line.partition(":")
        if sep:
            last = out.setdefault(key.strip().lower(), [])
            last.append(value.strip())
    return out


def _applies(req: Requirement, target: TargetProfile, extras: Iterable[str]) -> bool:
    if req.marker is None:
        return True
    try:
        return any(target.evaluate(req.marker, extra=e) for e in ("", *sorted(extras)))
    except (InvalidMarker, ValueError):
        return True


def _satisfied(req: Requirement, version: str) -> bool:
    try:
        return req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        # Not a PEP 440 version: only a requirement with no version bound is met by it. Calling one with a
        # bound met would be a green for what nobody judged.
        return not req.specifier


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


@functools.lru_cache(maxsize=8192)
def _requirement(text: str) -> Requirement | None:
    """``text`` parsed once (``check_closure`` judges the same requirements before and after, each pass of
    extras again: ~900 of them for the 900 MB set), None when it is not a requirement."""
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def unmet(view: Mapping[str, Dist], target: TargetProfile, *, excluded: Iterable[str] = (),
          overrides: Mapping[str, Sequence[str]] | None = None,
          asked: Mapping[str, Iterable[str]] | None = None) -> dict[tuple[str, str], str]:
    """``{(requirer, requirement): why}`` for every requirement ``view`` does not satisfy.

    Extras count once something asks for them (``torch[opt]`` turns on torch's ``opt`` requirements): an installed
    distribution's requirement, or ``asked`` (canonical name -> extras: a stack manifest's ``fastpkg[fast]``).
    A requirement on an ``excluded`` project is reported with why ``EXCLUDED`` (the caller says so;
    it is not missing); one on an ``overrides`` project is judged by the override texts instead.
    """
    excluded = frozenset(canonicalize_name(n) for n in excluded)
    overrides = overrides or {}
    extras: dict[str, set[str]] = {k: set((asked or {}).get(k, ())) for k in view}
    problems: dict[tuple[str, str], str] = {}
    changed = True
    while changed:
        changed = False
        for key, dist in view.items():
            for text in dist.requires:
                req = _requirement(text)
                if req is None:
                    continue
                if not _applies(req, target, extras[key]):
                    continue
                name = canonicalize_name(req.name)
                if name in excluded:
                    problems[(dist.name, str(req))] = EXCLUDED
                    continue
                for req in _judged_by(req, overrides.get(name), target):
                    changed = _judge(req, view, dist, extras, problems) or changed
    return problems


def _judged_by(req: Requirement, overrides: Sequence[str] | None, target: TargetProfile) -> list[Requirement]:
    if overrides is None:
        return [req]
    out = [r for r in map(_requirement, overrides) if r is not None]
    return [r for r in out if r.marker is None or _applies(r, target, ())]


def _judge(req: Requirement, view: Mapping[str, Dist], dist: Dist, extras: dict[str, set[str]],
           problems: dict[tuple[str, str], str]) -> bool:
    """Record why ``req`` of ``dist`` is unmet, if it is; True when it turned on more extras."""
    found = view.get(canonicalize_name(req.name))
    if found is None:
        problems[(dist.name, str(req))] = "not installed"
    elif not _satisfied(req, found.version):
        problems[(dist.name, str(req))] = f"{found.version} installed" + (
            "" if _is_version(found.version) else ", not a PEP 440 version: it cannot be judged")
    elif not req.extras <= extras[canonicalize_name(req.name)]:
        extras[canonicalize_name(req.name)] |= req.extras
        return True
    return False


def asked_extras(requirements: Iterable[Requirement], target: TargetProfile) -> dict[str, set[str]]:
    """Canonical name -> the extras ``requirements`` ask of it (a manifest's or a wheelhouse's ``app[gpu]``), those
    whose marker holds on ``target`` (one that cannot be judged counts): ``unmet``'s ``asked``."""
    asked: dict[str, set[str]] = {}
    for req in requirements:
        if _applies(req, target, ()):
            asked.setdefault(canonicalize_name(req.name), set()).update(req.extras)
    return asked


def check_closure(installed: Mapping[str, Dist], incoming: Sequence[Dist], target: TargetProfile, *,
                  excluded: Iterable[str] = (), overrides: Mapping[str, Sequence[str]] | None = None,
                  requested: Sequence[Requirement] = ()) -> None:
    """Raise MissingRequirements naming what ``incoming`` lacks and what installing it would break
    (``excluded``/``overrides``: the wheelhouse's, as ``unmet`` takes them; ``requested``: its requirements that
    ask for extras, ``app[gpu]``, whose requirements count where their marker holds on ``target``)."""
    final = dict(installed)
    for d in incoming:
        final[canonicalize_name(d.name)] = d
    asked = asked_extras(requested, target)
    # Judged alike before: a gap the install does not change is not new (a reinstall of the same app of app[gpu]);
    # but the extras asked of another version this install writes (app 2.0) count after it only: its gap is new.
    ours = {canonicalize_name(d.name) for d in incoming}
    other_version = {key for key, d in ((canonicalize_name(d.name), d) for d in incoming)
                     if key not in installed or installed[key].version != d.version}
    before = unmet(installed, target, asked={k: v for k, v in asked.items() if k not in other_version})
    new = {k: v for k, v in unmet(final, target, excluded=excluded, overrides=overrides, asked=asked).items()
           if k not in before and v != EXCLUDED}
    if not new:
        return
    missing = [f"{who} needs {req} ({why})" for (who, req), why in sorted(new.items()) if canonicalize_name(who) in ours]
    broken = [f"{who} needs {req} ({why} after this install)" for (who, req), why in sorted(new.items())
              if canonicalize_name(who) not in ours]
    lines = ([f"missing: {m}" for m in missing] + [f"would break: {b}" for b in broken])
    raise MissingRequirements(
        f"the install would leave {len(lines)} requirement(s) unmet, nothing was installed: " + "; ".join(lines[:4])
        + (f" (and {len(lines) - 4} more)" if len(lines) > 4 else ""),
        hint="stage the missing distributions into the wheelhouse (`wh stage` on the networked host), "
             "or install anyway with `wh install --allow-missing`",
        detail="\n".join(lines),
    )
