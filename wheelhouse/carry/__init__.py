"""Carrying a wheelhouse to the box: one archive (``pack``), checked offline (``verify``),
or published through an OCI registry (``oci``).

``materialize`` is the one door ``wh install`` (and ``wh verify``) go through: a wheelhouse
folder is itself; an archive (the file, any of its parts, or its sidecar) is checked against
its sidecar and unpacked into a private folder; an ``oci://`` reference is pulled, every blob
verified, into one. Those folders are removed when ``held`` closes.

Nothing imported here can open a socket: the OCI client is imported only for an ``oci://`` source.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Sequence

from wheelhouse.lock import WH_JSON
from wheelhouse.progress import Reporter

from .sidecar import Located, locate
from .unpack import ArchiveError, UnsafeArchive, unpack_archive

__all__ = ["ArchiveError", "UnsafeArchive", "OCI_SCHEME", "is_archive", "materialize", "unpack_into"]

OCI_SCHEME = "oci://"


def is_archive(source: str) -> Located | None:
    """The archive ``source`` names (a file, a part, a sidecar), or None for a folder or anything else."""
    if source.startswith(OCI_SCHEME) or Path(source).name == WH_JSON:
        return None
    return locate(source)


def _private_folder(held: ExitStack, prefix: str) -> Path:
    """A folder only this process writes to (mode 0700, TMPDIR), removed when ``held`` closes."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    held.callback(shutil.rmtree, folder, ignore_errors=True)
    return folder


def unpack_into(loc: Located, held: ExitStack, reporter: Reporter | None = None) -> Path:
    """The archive at ``loc`` unpacked, checked against its sidecar, into a private folder; its wheelhouse folder."""
    folder = _private_folder(held, "wh-unpacked-")
    try:
        return unpack_archive(loc, folder, reporter)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # refused: not a byte of it stays
        raise


def _pull(ref: str, held: ExitStack, reporter: Reporter | None) -> Path:
    from .oci import pull  # the registry client: only for an oci:// source

    folder = _private_folder(held, "wh-pulled-")
    try:
        return pull(ref, folder / "wheelhouse", reporter=reporter)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def materialize(sources: Sequence[str], held: ExitStack, reporter: Reporter | None = None) -> list[Path]:
    """Each source as a wheelhouse folder (or a folder to search); temporary folders live as long as ``held``."""
    out = []
    for s in map(os.fspath, sources):
        if s.startswith(OCI_SCHEME):
            out.append(_pull(s, held, reporter))
        elif (loc := is_archive(s)) is not None:
            out.append(unpack_into(loc, held, reporter))
        else:
            out.append(Path(s))
    return out
