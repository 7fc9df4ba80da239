"""What can stop ``wh install``: each a WhError with its code and the next command to run."""

from __future__ import annotations

from wheelhouse.errors import HashMismatch, UsageError, WhError

__all__ = ["TargetMismatch", "HashMismatch", "AmbiguousWheelhouse", "InstallFailed", "PatchesUnavailable"]


class TargetMismatch(UsageError):
    code = "target-mismatch"


class AmbiguousWheelhouse(UsageError):
    code = "ambiguous-wheelhouse"


class InstallFailed(WhError):
    code = "install-failed"


class PatchesUnavailable(UsageError):
    code = "patches-unavailable"
