"""Why each pin was chosen (``wh stage -v``): what brought it in, the newest version the target could
have had against the one chosen, the newer releases left out and why, and what was backtracked.

Read after the resolution from what it already holds (resolvelib's criteria: every requirement on a
project with the candidate that asked for it; the finder's installable versions), plus each project's
whole file list for the releases the target cannot install (only when asked: ``resolve(explain=True)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from resolvelib import BaseReporter

from wheelhouse.errors import WhError

from .candidates import Cand, spec_of

__all__ = ["BacktrackLog", "explain_pins"]

_SHOWN = 4  # newer releases named per pin; the rest counted


@dataclass
class BacktrackLog(BaseReporter):
    """resolvelib's reporter events that say what was given up: each candidate rejected, with the
    requirements it could not meet together. Wraps the progress reporter (``inner``)."""

    inner: BaseReporter
    rejected: dict[tuple[str, Version], str] = field(default_factory=dict)  # (name, version) -> why

    def pinning(self, candidate):
        self.inner.pinning(candidate)

    def rejecting_candidate(self, criterion, candidate):
        self.inner.rejecting_candidate(criterion, candidate)
        if getattr(candidate, "kind", "pkg") != "pkg":
            return
        # ``criterion``: the requirements (on another project, or on the Python) that this candidate's
        # dependencies could not meet together with the rest.
        broke = sorted({_asked(info.requirement, info.parent) for info in criterion.information})
        self.rejected.setdefault((candidate.name, candidate.version), "; ".join(broke))

    def resolving_conflicts(self, causes):
        self.inner.resolving_conflicts(causes)  # (the progress reporter counts conflicts: the search's priorities)
        # ``causes``: the requirements that cannot hold together; their parents are the pins given up.
        broke = "; ".join(sorted({_asked(c.requirement, c.parent) for c in causes}))
        for c in causes:
            parent = c.parent
            if parent is not None and getattr(parent, "kind", "pkg") == "pkg":
                self.rejected.setdefault((parent.name, parent.version), broke)

    def lines(self, final: set[tuple[str, Version]] = frozenset()) -> list[str]:
        """One line per candidate given up and not pinned in the end (``final``)."""
        return [f"backtracked: gave up {name}=={v}" + (f" (it conflicts with {why})" if why else "")
                for (name, v), why in self.rejected.items() if (name, v) not in final]


def _asked(req, parent) -> str:
    text = getattr(req, "text", str(req))
    return f"{text} (from {parent.name}=={parent.version})" if parent is not None else f"{text} (requested)"


def explain_pins(result, provider, backtracks: BacktrackLog | None = None) -> list[str]:
    """One line per pinned project (sorted by name), then one per candidate given up while backtracking."""
    rejected = backtracks.rejected if backtracks is not None else {}
    pins = {c.name: c for c in result.mapping.values() if c.kind == "pkg" and not c.extras}
    lines = []
    for ident in sorted(result.mapping, key=lambda i: result.mapping[i].name):
        cand = result.mapping[ident]
        if cand.kind != "pkg" or cand.extras:
            continue
        infos = list(result.criteria[ident].information) if ident in result.criteria else []
        lines.append(_pin_line(cand, infos, provider, rejected, pins))
    final = {(c.name, c.version) for c in pins.values()}
    return lines + (backtracks.lines(final) if backtracks is not None else [])


def _pin_line(cand: Cand, infos, provider, rejected: Mapping[tuple[str, Version], str],
              pins: Mapping[str, Cand]) -> str:
    asked = sorted({_asked(i.requirement, i.parent) for i in infos}) or ["(requested)"]
    head = f"why {cand.name}=={cand.version}: " + ", ".join(asked)
    if cand.provided:
        return head + "; provided by the image (kept: the stack allows its version)"
    installable = provider.finder._installable(cand.name)
    newest = next(iter(installable), None)
    parts = [head, f"newest for the target {newest}" if newest is not None else None]
    specs = [(i.requirement.specifier, _asked(i.requirement, i.parent)) for i in infos
             if getattr(i.requirement, "specifier", None)]
    specs += [(c.specifier, c.text) for c in provider.constraints.get(cand.name, ())]
    left, more = _newer_left_out(cand, installable, specs, provider, rejected, pins)
    if left:
        shown = "; ".join(left) + (f"; and {more} more" if more else "")
        parts.append("newer releases left out: " + shown)
    return "; ".join(p for p in parts if p)


def _newer_left_out(cand: Cand, installable, specs: list[tuple[SpecifierSet, str]], provider,
                    rejected: Mapping[tuple[str, Version], str], pins: Mapping[str, Cand]) -> tuple[list[str], int]:
    """The releases newer than the one chosen (the first few), each with the reason the resolution did not
    take it; and how many more there are."""
    versions: dict[Version, list] = {}
    for f in provider.source.files(cand.name):
        try:
            v = Version(f.version) if f.version else None
        except InvalidVersion:
            v = None
        if v is not None and v > cand.version:
            versions.setdefault(v, []).append(f)
    newer = sorted(versions, reverse=True)
    allow_pre = provider.prereleases or cand.version.is_prerelease
    out = []
    for v in newer[:_SHOWN]:
        why = _left_out_because(cand.name, v, versions[v], installable, specs, provider, allow_pre, rejected, pins)
        out.append(f"{v} ({why})")
    return out, max(0, len(newer) - _SHOWN)


def _left_out_because(name: str, v: Version, files, installable, specs, provider, allow_pre: bool,
                      rejected: Mapping[tuple[str, Version], str], pins: Mapping[str, Cand]) -> str:
    if v not in installable:
        return _not_installable(files, provider)
    if v.is_prerelease and not allow_pre:
        return "a pre-release: every final release the requirements admit is tried first; --pre takes the newest"
    if all(f.yanked for f in installable[v]):
        reason = next((f.yanked_reason for f in installable[v] if f.yanked_reason), None)
        return f"yanked{': ' + reason if reason else ''}; only your own exact pin (`{name}=={v}`) selects it"
    against = [text for spec, text in specs if not spec.contains(v, prereleases=True)]
    if against:
        return f"excluded by {', '.join(against)}"
    if (name, v) in rejected:
        return f"backtracked: conflicts with {rejected[name, v]}" if rejected[name, v] else "backtracked"
    clash = _clash_with_pins(name, v, installable[v], provider, pins)
    if clash:
        return clash
    return "not needed: an older release satisfied every requirement once other pins were made"


def _clash_with_pins(name: str, v: Version, files, provider, pins: Mapping[str, Cand]) -> str | None:
    """What in a newer release's own dependencies disagrees with the final pins (the provider tries such
    releases last, ``Provider._decided_first``): its Requires-Python, or a requirement a pin does not meet."""
    best = min(files, key=provider.finder._file_key)
    try:
        deps = provider._deps(Cand("pkg", name, v, best))
    except WhError:
        return None
    for d in deps:
        if d.kind == "python" and not d.specifier.contains(provider.python, prereleases=True):
            return f"{d.text}: the target has Python {provider.python}"
        pin = pins.get(d.name) if d.kind == "pkg" else None
        if pin is not None and pin.kind == "pkg" and not d.specifier.contains(pin.version, prereleases=True):
            return f"it needs {d.text}, and {pin.name}=={pin.version} is pinned"
    return None


def _not_installable(files, provider) -> str:
    """Why the target can install none of a release's files."""
    wheels = [f for f in files if f.is_wheel]
    if not wheels:
        return "no wheel, only an sdist"
    target = provider.target
    tagged = [f for f in wheels if target.wheel_rank(f.filename) is not None]
    if not tagged:
        return f"no wheel for {target.describe()}"
    pythons = sorted({f.requires_python for f in tagged if f.requires_python
                      and (spec_of(f.requires_python) is not None and not target.accepts_python(spec_of(f.requires_python)))})
    if pythons:
        return f"Requires-Python {', '.join(pythons)}"
    return "not installable for the target"
