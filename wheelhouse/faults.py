"""Fault injection for crash-safety tests: ``WH_FAULT=<point>[:<action>]``.

wh calls ``checkpoint(name)`` at the points where a crash or a full disk matters
(between the two renames of a wheelhouse swap, after a journal is written, ...).
Normally it does nothing. When the environment variable ``WH_FAULT`` names that
point, it acts, so a test can run a real ``wh`` process and stop it exactly there:

- ``kill`` (default): the process sends itself SIGKILL (no cleanup, no finally);
- ``enospc`` / ``eio``: raises ``OSError(ENOSPC)`` / ``OSError(EIO)`` as the disk would.

This is the only place that reads ``WH_FAULT``.
"""

from __future__ import annotations

import errno
import os
import signal

__all__ = ["checkpoint", "ENV", "ACTIONS"]

ENV = "WH_FAULT"
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
