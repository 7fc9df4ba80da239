"""Toolchain groups for the resolver: packages that must come from one release line.

Each member in the resolution depends on a virtual ``<toolchain:NAME>`` at its own major.minor
(or exact version), so two members at different releases conflict DURING the search and
resolvelib backtracks to a consistent set; when none exists, ``ToolchainSkew``
(see ``wheelhouse.explain``).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from packaging.utils import canonicalize_name
from packaging.version import Version

__all__ = ["TOOLCHAIN_PREFIX", "ToolchainRule", "toolchain_ident", "toolchain_rules", "toolchain_versions"]

TOOLCHAIN_PREFIX = "<toolchain:"


def toolchain_ident(name: str) -> str:
    """The resolver identifier of group ``name``'s virtual project."""
    return f"{TOOLCHAIN_PREFIX}{name}>"


@dataclass(frozen=True)
class ToolchainRule:
    """One group: member name patterns (shell wildcards), exact or major.minor, and exceptions."""

    name: str
    patterns: tuple[str, ...]
    exact: bool
    exceptions: frozenset[str]

    def has(self, name: str) -> bool:
        return name not in self.exceptions and any(fnmatch.fnmatchcase(name, p) for p in self.patterns)

    def release(self, version: Version) -> str:
        if self.exact:
            return str(version)
        rel = version.release + (0,)
        return f"{rel[0]}.{rel[1]}"

    def specifier(self, version: Version) -> str:
        """What a member at ``version`` requires of the group's virtual project."""
        value = self.release(version)
        return f"=={value}" if self.exact else f"=={value}.*"


def toolchain_rules(toolchains: Iterable[Any]) -> list[ToolchainRule]:
    """Rules from ``manifest.ToolchainGroup`` values (name, packages, exact, exceptions)."""
    return [
        ToolchainRule(g.name, tuple(canonicalize_name(p) for p in g.packages), bool(g.exact), frozenset(canonicalize_name(e) for e in g.exceptions))
        for g in toolchains
    ]


def toolchain_versions(specifiers: Sequence[Any], bad: Iterable[Version]) -> list[Version]:
    """Release values of a group that satisfy every member's ``specifiers``, highest first."""
    excluded = set(bad)
    values = {Version(next(iter(s)).version.rstrip(".*")) for s in specifiers}
    ok = [v for v in values if v not in excluded and all(s.contains(v, prereleases=True) for s in specifiers)]
    return sorted(ok, reverse=True)
