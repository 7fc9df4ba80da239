"""The one error hierarchy: every failure wh reports is a WhError.

Each error names the thing, the reason, and (``hint``) the next command to run.
The CLI renders it once, as one red line plus a hint line, and exits with
``exit_code``.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["WhError", "UsageError", "TargetError", "HashMismatch", "EXIT_OK", "EXIT_FAIL", "EXIT_USAGE", "EXIT_INTERNAL"]

EXIT_OK = 0
EXIT_FAIL = 1  # the thing asked for did not happen (or, for the doctor, a check failed)
EXIT_USAGE = 2  # bad input: flags, files, manifests
EXIT_INTERNAL = 3  # wh itself could not run


class WhError(Exception):
    """Root of wh's errors. Subclasses set ``code`` and carry their fields."""

    code = "error"
    exit_code = EXIT_FAIL

    def __init__(self, message: str, *, hint: str | None = None, detail: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        # Output of a third-party tool (compiler, pip) kept verbatim for the user.
        self.detail = detail

    def __str__(self) -> str:
        return self.message


class UsageError(WhError):
    """A flag, file or manifest is wrong; nothing was changed."""

    code = "usage"
    exit_code = EXIT_USAGE


class TargetError(UsageError):
    """A target profile could not be built or read."""

    code = "bad-target"


class HashMismatch(WhError):
    """Bytes whose sha256 is not the one promised: by an index or release manifest (fetch), by
    ``pylock.toml`` (install). ``bad`` lists every file found so, ``(path, expected, actual)``;
    ``path``/``expected``/``actual`` name the first."""

    code = "hash-mismatch"

    def __init__(self, path: str, expected: str, actual: str, *, more: Sequence[tuple[str, str, str]] = (),
                 message: str | None = None, hint: str | None = None, detail: str | None = None):
        super().__init__(
            message or f"{path}: sha256 is {actual}, expected {expected}; the file was deleted",
            hint=hint or "the index served different bytes than it advertised: re-run `wh stage`, or check the index/mirror",
            detail=detail,
        )
        self.bad = [(path, expected, actual), *more]
        self.path = path
        self.expected = expected
        self.actual = actual
