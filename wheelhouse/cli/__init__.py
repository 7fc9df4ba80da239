"""wh's command line. The only place (with its sibling modules) that imports click and rich.

Each command lives in its own module under ``wheelhouse.cli`` and is loaded only
when invoked, so one broken command cannot take the others down. ``wh --version``
and ``wh --help`` import neither click nor rich (``_fast``); the click group is in
``_group`` and is imported only when a command runs. The command table is in
``_commands``, the entry point ``main`` in ``_main``.

Exit codes: 0 success; 1 the thing asked for failed (doctor: a check failed);
2 bad input (nothing was changed), or doctor --strict with warnings; 3 wh itself
could not run.
"""

from __future__ import annotations

from ._commands import _COMMANDS, DESCRIPTION, EPILOG  # as before the split (tests read _COMMANDS here)
from ._main import main

__all__ = ["main", "cli"]

_LAZY = {"cli": "cli", "_LazyGroup": "_LazyGroup", "_with_verbosity": "_with_verbosity",
         "_usage_error": "usage_error", "_NO_ARGS_IS_HELP": "NO_ARGS_IS_HELP"}


def __getattr__(name: str):
    """``wheelhouse.cli.cli`` (the click group) and its helpers, imported on first use."""
    if name in _LAZY:
        from . import _group

        return getattr(_group, _LAZY[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
