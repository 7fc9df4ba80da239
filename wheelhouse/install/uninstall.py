"""The one guarded uninstaller: ``wh install`` replacing a version and ``wh drop`` both use it.

The files an installed distribution's RECORD names are removed as one transaction
(``transaction``): only paths inside the environment's scheme, never wh's own state
folder, whatever the RECORD says (``../../outside.txt`` is not followed); cached
bytecode goes with its module; a failure or a crash puts everything back. An install
that a kill left unfinished is rolled back first (its journal is the only way back).
``keep`` names files to leave in place: ``wh drop`` passes those another installed
distribution's RECORD lists too (``wheelhouse.install.sharedfiles``).
The caller holds the target's lock (``wheelhouse.folderlock``).
"""

from __future__ import annotations

from typing import Collection, Mapping

from .installed import find_installed, inside_scheme, installed_paths, prune_empty_dirs, same_path
from .transaction import Transaction, recover

__all__ = ["remove_distribution"]


def remove_distribution(name: str, scheme: Mapping[str, str], keep: Collection[str] = ()) -> list[str]:
    """Uninstall every installed copy of ``name`` (files from its RECORD) but the files ``keep`` names (absolute
    paths; a folder's other name, ``lib64`` for ``lib``, is the same folder); returns the versions removed."""
    recover(scheme["platlib"], scheme)
    sites = [scheme["purelib"], scheme["platlib"]]
    kept = {same_path(k) for k in keep}
    removed = []
    for dist_info, version in find_installed(sites, name):
        paths = inside_scheme(installed_paths(dist_info), scheme, name)
        if kept:
            paths = [p for p in paths if same_path(p) not in kept]
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

