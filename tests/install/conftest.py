"""Fixtures shared by the install tests."""

from __future__ import annotations

import pytest


def make_scheme(root) -> dict[str, str]:
    """An install scheme under ``root`` (site, bin, include), its folders created."""
    s = {"purelib": root / "site", "platlib": root / "site", "scripts": root / "bin", "data": root,
         "headers": root / "include"}
    for p in s.values():
        p.mkdir(parents=True, exist_ok=True)
    return {k: str(v) for k, v in s.items()}


@pytest.fixture
def scheme(tmp_path) -> dict[str, str]:
    return make_scheme(tmp_path / "env")
