"""The one guarded uninstaller: ``wh install`` replacing a version and ``wh drop`` both use it.

The files an installed distribution's RECORD names are removed as one transaction
(``transaction``): only paths inside the environment's scheme, never wh's own state
folder, whatever the RECORD says (``../../outside.txt`` is not followed); cached
bytecode goes with its module; a failure or a crash puts everything back. An install
that a kill left unfinished is rolled back first (its journal is the only way back).
The caller holds the target's lock (``wheelhouse.folderlock``).
"""

from __future__ import annotations

from typing import Mapping

from .installed import find_installed, inside_scheme, installed_paths, prune_empty_dirs
from .transaction import Transaction, recover

__all__ = ["remove_distribution"]


def remove_distribution(name: str, scheme: Mapping[str, str]) -> list[str]:
    """Uninstall every installed copy of ``name`` (files from its RECORD); returns the versions removed."""
    recover(scheme["platlib"], scheme)
    sites = [scheme["purelib"], scheme["platlib"]]
    removed = []
    for dist_info, version in find_installed(sites, name):
        paths = inside_scheme(installed_paths(dist_info), scheme, name)
        txn = Transaction(scheme["platlib"], [f"uninstall {dist_info.name}"])
        txn.before_commit.append(lambda: prune_empty_dirs(paths, set(scheme.values())))
        try:
            txn.begin(paths)
            txn.commit()
        except BaseException:
            if txn.active:
                txn.rollback()
            raise
        removed.append(version)
    return removed
