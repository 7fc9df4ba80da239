"""Fault injection for crash-safety tests: ``WH_FAULT=<point>[:<action>]``.

wh calls ``checkpoint(name)`` at the points where a crash or a full disk matters
(between the two renames of a wheelhouse swap, after a journal is written, ...).
Normally it does nothing. When the environment variable ``WH_FAULT`` names that
point, it acts, so a test can run a real ``wh`` process and stop it exactly there:

- ``kill`` (default): the process sends itself SIGKILL (no cleanup, no finally);
- ``enospc`` / ``eio``: raises ``OSError(ENOSPC)`` / ``OSError(EIO)`` as the disk would.

``WH_FAULT_HELPER`` does the same in wh's helper processes only (``for_helper``), so a test can
kill a helper at a point the main process passes too, and see the main process carry on.

This is the only place that reads ``WH_FAULT`` and ``WH_FAULT_HELPER``.
"""

from __future__ import annotations

import errno
import os
import signal

__all__ = ["checkpoint", "for_helper", "check_helper_spec", "ENV", "HELPER_ENV", "ACTIONS"]

ENV = "WH_FAULT"
HELPER_ENV = "WH_FAULT_HELPER"
ACTIONS = ("kill", "enospc", "eio")


def _wanted() -> tuple[str, str] | None:
    raw = os.environ.get(ENV, "")
    if not raw:
        return None
    point, _, action = raw.partition(":")
    return point, (action or "kill")


def checkpoint(name: str) -> None:
    """Crash, or fail like a disk would, if ``WH_FAULT`` names this point; else do nothing."""
    wanted = _wanted()
    if wanted is None or wanted[0] != name:
        return
    action = wanted[1]
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "enospc":
        raise OSError(errno.ENOSPC, f"No space left on device (injected at {name})")
    elif action == "eio":
        raise OSError(errno.EIO, f"Input/output error (injected at {name})")
    else:  # a typo in a test must not pass silently as "no fault"
        raise ValueError(f"WH_FAULT action {action!r} is not one of {', '.join(ACTIONS)}")


def for_helper() -> None:
    """In a helper process: its faults are ``WH_FAULT_HELPER``'s (none where that is unset)."""
    os.environ[ENV] = os.environ.get(HELPER_ENV, "")


def check_helper_spec() -> None:
    """In the main process, before a helper starts: a ``WH_FAULT_HELPER`` action that is not one of
    ACTIONS raises here (in the helper it would only make the helper fail, and its work be redone)."""
    raw = os.environ.get(HELPER_ENV, "")
    action = raw.partition(":")[2]
    if raw and action and action not in ACTIONS:
        raise ValueError(f"{HELPER_ENV} action {action!r} is not one of {', '.join(ACTIONS)}")
