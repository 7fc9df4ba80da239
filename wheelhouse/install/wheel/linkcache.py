"""The verified extraction cache: hardlinks when one wheelhouse is installed into several venvs.

Skeleton: filled in by the extraction-cache work (issue 14). ``default_dir()`` returns None
(no cache) until then.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["default_dir"]


def default_dir() -> Path | None:
    return None
