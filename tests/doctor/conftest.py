"""Fixtures shared by the doctor tests."""

from __future__ import annotations

import pytest

from broken_packages import _ext


@pytest.fixture(scope="module")
def exts(tmp_path_factory) -> dict[str, bytes]:
    """Extension modules built with gcc: one that loads, one with an undefined symbol."""
    build = tmp_path_factory.mktemp("exts-build")
    return {"ok": _ext(build, "_ext"), "undef": _ext(build, "_ext", "WH_UNDEF")}
