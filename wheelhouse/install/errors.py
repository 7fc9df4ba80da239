"""What can stop ``wh install``: each a WhError with its code and the next command to run."""

from __future__ import annotations

from typing import Sequence

from wheelhouse.errors import UsageError, WhError

__all__ = ["TargetMismatch", "HashMismatch", "AmbiguousWheelhouse", "InstallFailed", "PatchesUnavailable"]


class TargetMismatch(UsageError):
    code = "target-mismatch"


class HashMismatch(WhError):
    code = "hash-mismatch"

    def __init__(self, message: str, *, bad: Sequence[tuple[str, str, str]] = (), **kw):
        super().__init__(message, **kw)
        self.bad = list(bad)  # (path, expected, actual)


class AmbiguousWheelhouse(UsageError):
    code = "ambiguous-wheelhouse"


class InstallFailed(WhError):
    code = "install-failed"


class PatchesUnavailable(UsageError):
    code = "patches-unavailable"
