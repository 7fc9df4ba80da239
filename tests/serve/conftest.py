"""Fixtures the serve tests share."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def env(tmp_path):
    """The caller's environment for a `wh serve` subprocess: its own state folder, no engine URL, key or GPU mask
    of the caller's, plain output."""
    e = {**os.environ, "WH_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1", "COLUMNS": "200"}
    for k in ("WH_SERVE_URL", "WH_API_KEY", "CUDA_VISIBLE_DEVICES"):
        e.pop(k, None)
    return e
