"""Install wheelhouses on the box: find them, check them, verify them, install them, record them.

``install_wheelhouses`` (in ``run``, whose docstring has the order and why) checks the target, the
requirements (``closure``) and every file (``checks``) before anything changes, then installs them as
one transaction (``transaction``) with wh's unpacker (``wheel``) or pip, and records them (``state``).
The steps live in their own modules: ``wheelhouses`` (finding them), ``checks``, ``closure``,
``transaction``, ``state``, ``bytecode``, ``dry_run``; ``run`` runs them in order.

Nothing here imports anything that can open a socket.
"""

from __future__ import annotations

from wheelhouse.env.activation import write_activation
from .checks import check_target, verify_files
from .closure import MissingRequirements
from .errors import AmbiguousWheelhouse, HashMismatch, InstallFailed, PatchesUnavailable, TargetMismatch
from .options import InstallOptions
from .run import InstallReport, NoTarget, install_wheelhouses, recorded_wheelhouses, require_target
from .state import read_install_state, state_path, unfinished_transaction
from .transaction import UnfinishedInstall
from .wheelhouses import Wheelhouse, find_wheelhouses, load_wheelhouse

__all__ = [
    "Wheelhouse",
    "InstallOptions",
    "InstallReport",
    "TargetMismatch",
    "HashMismatch",
    "AmbiguousWheelhouse",
    "InstallFailed",
    "PatchesUnavailable",
    "MissingRequirements",
    "NoTarget",
    "require_target",
    "UnfinishedInstall",
    "unfinished_transaction",
    "find_wheelhouses",
    "load_wheelhouse",
    "install_wheelhouses",
    "recorded_wheelhouses",
    "read_install_state",
    "state_path",
    "check_target",
    "verify_files",
    "write_activation",
]
