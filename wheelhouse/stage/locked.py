"""Stage a PEP 751 lock as it is: the lock's packages whose markers hold for the TARGET, nothing resolved.

``wh stage pylock.toml`` (as pip ``lock`` and ``uv export --format pylock.toml`` write it) picks, by
PEP 751's own installation steps (``packaging.pylock.Pylock.select``), each package whose marker holds
in the target's marker environment (with the ``--extra``/``--group`` asked for; the lock's default
groups otherwise) and, for it, the wheel ranked best by the target's tag order. What the lock offers no
wheel of for the target (an sdist only, a VCS or directory source, no wheel of a matching tag) is
refused, naming the package: the box builds nothing. The wheels are fetched and checked against the
lock's sha256 as any staged wheel is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from packaging.pylock import (Pylock, PylockSelectError, PylockUnsupportedVersionError, PylockValidationError,
                              PackageWheel)
from packaging.tags import parse_tag
from packaging.utils import parse_wheel_filename

from wheelhouse.datafile import load_toml
from wheelhouse.target import TargetProfile
from .writer import StagedFile, StageError

__all__ = ["LockInputError", "is_pylock_name", "read_lock_input", "locked_files"]


class LockInputError(StageError):
    code = "bad-lock-input"


def is_pylock_name(path: str | Path) -> bool:
    """PEP 751's file names: ``pylock.toml`` or ``pylock.<name>.toml``."""
    name = Path(path).name
    return name == "pylock.toml" or (name.startswith("pylock.") and name.endswith(".toml") and name.count(".") >= 2)


def read_lock_input(path: str | Path) -> Pylock:
    """The PEP 751 lock at ``path``, validated."""
    data = load_toml(path, what="lock", error=LockInputError,
                     hint="give a PEP 751 pylock.toml (pip lock, uv export --format pylock.toml)")
    try:
        return Pylock.from_dict(data)
    except (PylockValidationError, PylockUnsupportedVersionError) as exc:
        raise LockInputError(f"{path} is not a valid PEP 751 lock: {exc}",
                             hint="write it again with the tool that made it (pip lock, uv export --format "
                                  "pylock.toml)") from exc


def locked_files(lock: Pylock, path: Path, target: TargetProfile, extras: Sequence[str] = (),
                 groups: Sequence[str] | None = None) -> tuple[StagedFile, ...]:
    """The wheel of each of ``lock``'s packages that the target installs (``path``: where the lock is, for
    the wheels it names by a path relative to it)."""
    tags = [t for text in target.tags for t in sorted(parse_tag(text), key=str)]
    env = {**target.markers}
    try:
        picks = list(lock.select(environment=env, tags=tags, extras=extras or None,
                                 dependency_groups=groups if groups else None))
    except PylockSelectError as exc:
        raise LockInputError(f"{path}: {exc} (for {target.describe()})",
                             hint="stage for the target the lock was made for, or lock again for this one "
                                  "(uv lock covers every platform; pip lock the one it runs on)") from exc
    out = []
    for package, source in picks:
        if not isinstance(source, PackageWheel):
            kind = type(source).__name__.removeprefix("Package").lower()
            raise LockInputError(f"{path}: {package.name} has no wheel for {target.describe()} (the lock offers "
                                 f"its {kind} only), and the box builds nothing",
                                 hint="lock it with a wheel for the target, or build one with `wh build` and "
                                      "stage that")
        out.append(_staged(package, source, path))
    return tuple(sorted(out, key=lambda f: f.name))


def _staged(package, wheel: PackageWheel, path: Path) -> StagedFile:
    sha = (wheel.hashes or {}).get("sha256")
    if not sha:
        raise LockInputError(f"{path}: {package.name}'s wheel {wheel.filename} has no sha256 in the lock",
                             hint="lock it again with sha256 hashes (pip lock and uv write them)")
    url = wheel.url or (path.parent / wheel.path).resolve().as_uri()
    version = str(package.version) if package.version is not None else str(parse_wheel_filename(wheel.filename)[1])
    return StagedFile(
        name=str(package.name), version=version, filename=wheel.filename, url=url, sha256=sha, size=wheel.size,
        requires_python=str(package.requires_python) if package.requires_python else None,
        parents=("(locked)",), origin=package.index or "",
    )
