"""Carrying a wheelhouse to the box: one archive (``pack``), checked offline (``verify``),
or published through an OCI registry (``oci``).

``materialize`` (in ``sources``) is the one door ``wh install`` (and ``wh verify``) go through: a
wheelhouse folder is itself; an archive or an ``oci://`` reference becomes a private folder, checked,
removed when ``held`` closes.

Nothing imported here can open a socket: the OCI client is imported only for an ``oci://`` source.
"""

from __future__ import annotations

from .sources import OCI_SCHEME, is_archive, materialize, origin_of, unpack_into
from .unpack import ArchiveError, UnsafeArchive

__all__ = ["ArchiveError", "UnsafeArchive", "OCI_SCHEME", "is_archive", "materialize", "origin_of", "unpack_into"]
