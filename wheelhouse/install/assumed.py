"""What a delta wheelhouse assumed the box's image provides, checked before anything is written."""

from __future__ import annotations

__all__ = ["check_assumed"]


def check_assumed(houses, interp, *, existing: bool, system_site_packages: bool) -> list[str]:
    """Refuse (raise) when the receiving interpreter no longer provides what ``houses`` assumed; notes otherwise."""
    return []
