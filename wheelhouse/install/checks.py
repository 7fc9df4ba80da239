"""What must hold before ``wh install`` writes its first byte.

One file per package is chosen for the receiving interpreter (markers judged for
it, the best tag by its own order); the wheelhouses' target must match that
interpreter (implementation, version, ABI, glibc, and every chosen file's tags);
and every chosen file must be there with the size ``pylock.toml`` says, and its
sha256: hashed here for an installer that cannot check it (pip), or by wh's own
unpacker while it extracts (``wheel.extract``: one read of each wheel, spread over
all cores, and a wrong one rolls the whole transaction back). Each check collects
every failure and reports them together.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from packaging.markers import InvalidMarker

from wheelhouse.digest import update_hash_from
from wheelhouse.errors import UsageError
from .errors import HashMismatch, TargetMismatch
from .installed import canonical_name
from wheelhouse.fileidentity import FileIdentity, file_identity
from wheelhouse.target.interpreter import Interpreter
from wheelhouse.lock import LockedFile
from wheelhouse.progress import Reporter
from .wheelhouses import Wheelhouse

__all__ = ["select_files", "check_target", "verify_files", "hash_mismatch", "target_problems", "fitting_wheelhouses"]


def _applies(f: LockedFile, interp: Interpreter) -> bool:
    try:
        return interp.target.evaluate(f.marker or None)
    except InvalidMarker:
        return True


def select_files(houses: Sequence[Wheelhouse], interp: Interpreter,
                 only: set[str] | None) -> list[tuple[Wheelhouse, LockedFile]]:
    """One file per package: markers judged for the receiving interpreter, best tag by its own order."""
    unfit = len(interp.tags) + 1  # still chosen, so check_target names it
    best: dict[str, tuple[int, Wheelhouse, LockedFile]] = {}
    for h in houses:
        for f in h.files:
            if not _applies(f, interp):
                continue
            r = interp.target.wheel_rank(f.filename)
            r = unfit if r is None else r
            key = canonical_name(f.name)
            if key not in best or r < best[key][0]:
                best[key] = (r, h, f)
    if only is not None:
        wanted = {canonical_name(n) for n in only}
        missing = sorted(wanted - set(best))
        if missing:
            raise UsageError(f"not in the wheelhouse(s): {', '.join(missing)}",
                             hint="list what a wheelhouse holds in its pylock.toml")
        best = {k: v for k, v in best.items() if k in wanted}
    return [(h, f) for _, h, f in (best[k] for k in sorted(best))]


def target_problems(house: Wheelhouse, interp: Interpreter) -> list[str]:
    """How ``house``'s recorded target differs from ``interp`` (empty: it fits, or records none)."""
    t = house.target
    if t is None:
        return []
    problems = []
    for what, theirs, ours in (
        ("implementation", t.implementation, interp.implementation),
        ("Python", t.python_version, interp.python_version),
        ("ABI", t.abi, interp.abi),
    ):
        if theirs != ours:
            problems.append(f"{house.path} is for {what} {theirs}, {interp.executable} is {ours}")
    if t.glibc and interp.glibc and t.glibc > interp.glibc:
        problems.append(f"{house.path} is for glibc {t.libc[1]}, this machine has {interp.libc[1]}")
    if t.glibc and interp.libc and interp.libc[0] != "glibc":
        problems.append(f"{house.path} is for glibc, this machine has {interp.libc[0]}")
    return problems


def fitting_wheelhouses(houses: Sequence[Wheelhouse], interp: Interpreter) -> tuple[list[Wheelhouse], list[str]]:
    """Of several wheelhouses (a search root can hold one per target), keep those staged for ``interp``.

    Returns the kept ones and a note per skipped one. When none fits, all are kept, so that
    check_target names every difference.
    """
    fit = [h for h in houses if not target_problems(h, interp)]
    if len(houses) < 2 or not fit or len(fit) == len(houses):
        return list(houses), []
    return fit, [f"skipped {h.path}: {target_problems(h, interp)[0]}" for h in houses if h not in fit]


def check_target(houses: Sequence[Wheelhouse], chosen: Sequence[tuple[Wheelhouse, LockedFile]],
                 interp: Interpreter) -> None:
    """Raise TargetMismatch naming every difference between the wheelhouses' target and ``interp``."""
    problems: list[str] = []
    for h in houses:
        problems += target_problems(h, interp)
    for _, f in chosen:
        if interp.target.wheel_rank(f.filename) is None:
            problems.append(f"{f.filename} has no tag {interp.executable} accepts (its best: {interp.tags[0]})")
    if problems:
        raise TargetMismatch(
            f"wheelhouse does not fit {interp.describe()}: " + "; ".join(problems[:4])
            + (f" (and {len(problems) - 4} more)" if len(problems) > 4 else ""),
            hint="stage for this interpreter: run `python capture_target.py -o target.json` here, then "
                 "`wh stage --target target.json` on the networked host",
        )


def hash_mismatch(bad: Sequence[tuple[str, str, str]]) -> HashMismatch:
    """The one error for files that are not what pylock.toml says: ``(path, expected, actual)`` each."""
    first = bad[0]
    return HashMismatch(
        *first, more=list(bad[1:]),
        message=f"{len(bad)} file(s) do not match pylock.toml, nothing was installed: {Path(first[0]).name} "
        f"(expected sha256 {first[1][:16]}..., got {first[2][:16]}{'...' if len(first[2]) > 16 else ''})",
        hint="the wheelhouse was altered or damaged in transit; copy it again or re-run `wh stage`",
        detail="\n".join(f"{p}: expected {e}, got {a}" for p, e, a in bad),
    )


def _hash_pinned(path: Path) -> tuple[str, FileIdentity | None]:
    """The sha256 of the file at ``path`` and the identity of the very file that was read (None when it
    changed while it was read): extraction opens the path again and must find that file there."""
    with open(path, "rb") as fh:
        before = file_identity(os.fstat(fh.fileno()))
        h = hashlib.sha256()
        update_hash_from(h, fh)
        after = file_identity(os.fstat(fh.fileno()))
    return h.hexdigest(), (before if before == after else None)


def verify_files(chosen: Sequence[tuple[Wheelhouse, LockedFile]], jobs: int, reporter: Reporter, *,
                 hashes: bool = True) -> dict[Path, FileIdentity | None]:
    """Check every file against pylock.toml; raise HashMismatch listing every bad one.

    Returns ``{path: identity of the file hashed}`` (``install_wheels(verified=...)`` extracts only
    from that file: a wheel replaced after its hash matched is refused). ``hashes=False`` checks
    presence and size only (identities None): the caller has the sha256 checked while unpacking
    (``install_wheels(expected=...)``).
    """
    paths = [h.path / f.path for h, f in chosen]
    task = f"verifying {len(paths)} wheel{'' if len(paths) == 1 else 's'}"
    reporter.start(task, total=len(paths))

    def one(item):
        (h, f), path = item
        if not path.is_file():
            return (str(path), f.sha256, "missing")
        if f.size is not None and path.stat().st_size != f.size:
            return (str(path), f.sha256, f"size {path.stat().st_size} != {f.size}")
        actual, identities[path] = _hash_pinned(path) if hashes else (f.sha256, None)
        reporter.advance(task)
        if hashes and identities[path] is None:
            return (str(path), f.sha256, "a file that changed while it was read")
        return None if actual == f.sha256 else (str(path), f.sha256, actual)

    identities: dict[Path, FileIdentity | None] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        bad = [b for b in pool.map(one, zip(chosen, paths)) if b]
    reporter.finish(task)
    if bad:
        raise hash_mismatch(bad)
    return {p: identities[p] for p in paths}
