"""Toolchain groups as rules: which installed or pinned packages belong to a group, and their release.

A manifest's ``[[toolchain]]`` group (``ToolchainGroup``) names member patterns (shell
wildcards), whether members must be identical (``exact``) or share major.minor, and
exceptions. The resolver (``wheelhouse.resolve.toolchain``) enforces the rule while it
searches; the doctor (``toolchain:versions``) judges what is installed by the SAME rule,
so a wheelhouse the resolver accepted is one the doctor passes. Pure: no I/O.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Iterable

from packaging.utils import canonicalize_name
from packaging.version import Version

__all__ = ["ToolchainRule", "toolchain_rules"]


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
        ToolchainRule(g.name, tuple(canonicalize_name(p) for p in g.packages), bool(g.exact),
                      frozenset(canonicalize_name(e) for e in g.exceptions))
        for g in toolchains
    ]
