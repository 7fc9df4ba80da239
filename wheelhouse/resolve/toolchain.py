"""Toolchain groups for the resolver: packages that must come from one release line.

Each member in the resolution depends on a virtual ``<toolchain:NAME>`` at its own major.minor
(or exact version), so two members at different releases conflict DURING the search and
resolvelib backtracks to a consistent set; when none exists, ``ToolchainSkew``
(see ``wheelhouse.explain``).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from packaging.version import Version

# The rule itself is the manifest's (the doctor judges installed toolchains by the same one).
from wheelhouse.manifest.toolchain import ToolchainRule, toolchain_rules

__all__ = ["TOOLCHAIN_PREFIX", "ToolchainRule", "toolchain_ident", "toolchain_rules", "toolchain_versions"]

TOOLCHAIN_PREFIX = "<toolchain:"


def toolchain_ident(name: str) -> str:
    """The resolver identifier of group ``name``'s virtual project."""
    return f"{TOOLCHAIN_PREFIX}{name}>"


def toolchain_versions(specifiers: Sequence[Any], bad: Iterable[Version]) -> list[Version]:
    """Release values of a group that satisfy every member's ``specifiers``, highest first."""
    excluded = set(bad)
    values = {Version(next(iter(s)).version.rstrip(".*")) for s in specifiers}
    ok = [v for v in values if v not in excluded and all(s.contains(v, prereleases=True) for s in specifiers)]
    return sorted(ok, reverse=True)
