"""What can stop `wh install`: each error has its kebab-case code and the exit code docs/install.md documents."""

from __future__ import annotations

import re

import pytest

from wheelhouse.errors import EXIT_FAIL, EXIT_USAGE, WhError
from wheelhouse.install import (
    AmbiguousWheelhouse,
    HashMismatch,
    InstallFailed,
    MissingRequirements,
    NoTarget,
    PatchesUnavailable,
    TargetMismatch,
)
from wheelhouse.install.transaction import UnfinishedInstallError
from wheelhouse.install.wheel import NoSpace, RecordMismatch, UnpackError, UnsafeWheelPath


@pytest.mark.parametrize("cls, exit_code", [
    (TargetMismatch, EXIT_USAGE), (AmbiguousWheelhouse, EXIT_USAGE), (PatchesUnavailable, EXIT_USAGE),
    (NoTarget, EXIT_USAGE), (MissingRequirements, EXIT_USAGE),
    (InstallFailed, EXIT_FAIL), (UnpackError, EXIT_FAIL), (UnsafeWheelPath, EXIT_FAIL), (RecordMismatch, EXIT_FAIL),
    (NoSpace, EXIT_FAIL), (UnfinishedInstallError, EXIT_FAIL), (HashMismatch, EXIT_FAIL),
])
def test_codes_and_exit_codes(cls, exit_code):
    assert issubclass(cls, WhError) and cls.exit_code == exit_code
    assert re.fullmatch(r"[a-z]+(-[a-z]+)*", cls.code), cls.code


def test_codes_are_distinct():
    classes = [TargetMismatch, AmbiguousWheelhouse, PatchesUnavailable, NoTarget, MissingRequirements, InstallFailed,
               UnpackError, UnsafeWheelPath, RecordMismatch, NoSpace, UnfinishedInstallError, HashMismatch]
    assert len({c.code for c in classes}) == len(classes)
