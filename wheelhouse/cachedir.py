"""Where wh's cache lives: one rule for every side (the install side imports nothing that opens sockets,
so the rule is not in ``fetch.cache``, whose package does)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_cache_dir"]


def default_cache_dir() -> Path:
    """``$WH_CACHE_DIR``, else ``$XDG_CACHE_HOME/wh``, else ``~/.cache/wh``."""
    env = os.environ.get("WH_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "wh"
