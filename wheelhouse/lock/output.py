"""The wheelhouse folder as a whole: one writer at a time, swapped in whole, recovered after a crash.

- ``hold_output(out)``: an exclusive ``fcntl`` lock on the output folder (a lock file beside
  it, removed on release), so two ``wh stage``/``wh build`` runs on one folder take turns;
  the second waits (saying so) up to a timeout. Once held, an interrupted swap is recovered.
- ``new_tree`` / ``swap_in``: the next wheelhouse is assembled in a sibling folder and
  replaces the old one by two renames in one folder. What wh did not write (not listed in
  the old ``wh.json["owned"]``) is moved into the new tree first: never lost.
- ``recover``: a crash (kill -9, power loss) between the two renames leaves no folder under
  the ``-o`` name; the next run finishes the swap when the new tree is complete (its
  ``wh.json`` is written last), else puts the old one back, and removes the leftovers. An
  in-place change a crash interrupted (``wh build``, lock.journal) is rolled back.

A symlink given as ``-o`` is followed (``real_output``): the wheelhouse is written into its
target, the link stays a link, and every rename stays on the target's filesystem.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Callable, Iterable, Iterator

from wheelhouse.datafile import parse_json
from wheelhouse.errors import UsageError, WhError
from wheelhouse.faults import checkpoint

from .files import WH_JSON
from .writer import is_owned, owned_paths

__all__ = [
    "OutputBusy",
    "BadOutput",
    "real_output",
    "check_output",
    "hold_output",
    "recover",
    "interrupted_swap",
    "new_tree",
    "swap_in",
    "foreign_paths",
    "read_meta",
]

_NEW = ".wh-new-"
_OLD = ".wh-old-"


class OutputBusy(WhError):
    """Another wh run held the output folder for longer than we were told to wait."""

    code = "output-busy"


class BadOutput(UsageError):
    """``-o`` names something wh must not (or cannot) turn into a wheelhouse."""

    code = "bad-output"


def real_output(out: Path) -> Path:
    """``out`` with symlinks followed (the link itself is never replaced), as an absolute path."""
    out = Path(out).absolute()
    return out.resolve() if out.is_symlink() else out.parent.resolve() / out.name


def read_meta(root: Path) -> dict | None:
    """A folder's wh.json as a dict when it is a wh wheelhouse's, else None (no file, or someone else's)."""
    try:
        data = parse_json((root / WH_JSON).read_text(encoding="utf-8"), source=str(root / WH_JSON))
    except (OSError, ValueError, UsageError):
        return None
    from .files import WH_JSON_SCHEMA

    return data if isinstance(data, dict) and data.get("schema") == WH_JSON_SCHEMA else None


def check_output(out: Path, writes: Iterable[str] | None = None) -> None:
    """Refuse, before any work, an -o that wh must not turn into a wheelhouse (``out``: a real path).

    A file; a non-empty folder that is not a wh wheelhouse (no wh.json, or someone else's); a
    wheelhouse holding, at a name this run writes (``writes``, top-level names; default: the
    whole standard layout), something wh did not write.
    """
    from .writer import STANDARD_LAYOUT

    if out.exists() and not out.is_dir():
        raise BadOutput(f"-o {out} is a file, not a folder", hint="give a new or empty folder, or an existing wheelhouse")
    if out.is_dir() and any(out.iterdir()):
        meta = read_meta(out)
        if meta is None:
            raise BadOutput(
                f"-o {out} is a non-empty folder that is not a wheelhouse (no {WH_JSON} written by wh); "
                "refusing to write into it",
                hint="give a new or empty folder, or the folder of an earlier `wh stage`",
            )
        owned = owned_paths(meta)
        # a folder wh owns paths under (patches/ for patches/fix/fix.toml) is wh's: swap_in keeps the user's files
        # in it and refuses the ones a run would replace
        clash = [n for n in (STANDARD_LAYOUT if writes is None else writes)
                 if (out / n).exists() and not is_owned(n, owned) and not any(o.startswith(f"{n}/") for o in owned)]
        if clash:
            raise BadOutput(f"-o {out} holds {', '.join(clash)}, which wh did not write and would now replace",
                            hint="move those out of the wheelhouse folder, then run the command again")
    # Nothing is created yet: a failed resolve must not leave empty parent folders behind.
    from wheelhouse.atomic import probe_writable

    try:
        probe_writable(out.parent)
    except NotADirectoryError as exc:
        raise BadOutput(f"cannot create -o {out}: {exc.filename} is a file", hint="choose a folder you can write to") from exc
    except OSError as exc:
        raise BadOutput(f"cannot write in {out.parent} (for -o {out}): {exc.strerror}",
                        hint="choose a folder you can write to") from exc


# --- one writer at a time ----------------------------------------------------------------------

def _lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}.whlock"


@contextlib.contextmanager
def hold_output(out: Path, *, timeout: float = 600.0, on_wait: Callable[[str], None] | None = None,
                what: str = "wh stage") -> Iterator[list[str]]:
    """Hold the exclusive lock on ``out`` (a real path, see ``real_output``) and recover an interrupted swap.

    Yields the notes of what was recovered. A second holder waits up to ``timeout`` seconds
    (``on_wait`` is told once), then ``OutputBusy``. The lock file is removed on release; a
    waiter that got a lock on a removed file retries on the new one.
    """
    path = _lock_path(out)
    made = [p for p in (out.parent, *out.parent.parents) if not p.exists()]  # deepest first
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadOutput(f"cannot create {out.parent} (for {out}): {exc.strerror}",
                        hint="choose a folder you can write to") from exc
    deadline = time.monotonic() + timeout
    told = False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            if time.monotonic() >= deadline:
                raise OutputBusy(f"another {what} is writing {out}; gave up after waiting {timeout:.0f}s",
                                 hint="wait for it to finish, or pass --lock-timeout SECONDS to wait longer") from None
            if not told and on_wait is not None:
                on_wait(f"waiting for another {what} on {out} (up to {timeout:.0f}s)")
                told = True
            time.sleep(0.1)
            continue
        try:  # the holder before us may have removed the file we locked: lock the current one
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
        yield recover(out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)
        for folder in made:  # a run that wrote nothing leaves no new parent folders behind
            try:
                folder.rmdir()
            except OSError:
                break


# --- ownership -----------------------------------------------------------------------------------

def foreign_paths(root: Path, owned: tuple[str, ...] | list[str]) -> list[str]:
    """Paths under ``root`` (relative, posix; the smallest covering set) that wh did not write."""
    found: list[str] = []

    def walk(folder: Path, prefix: str) -> None:
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            rel = f"{prefix}{entry.name}"
            if is_owned(rel, owned) or (not prefix and entry.name.startswith(".wh-")):
                continue  # wh's own scratch (".wh-fetch-*", ".wh-build-undo-*") is never the user's
            if entry.is_dir() and not entry.is_symlink() and any(p.startswith(rel + "/") for p in owned):
                walk(entry, rel + "/")
            else:
                found.append(rel)

    if root.is_dir():
        walk(root, "")
    return found


def _move_foreign(src: Path, dst: Path, owned, *, only_check: bool = False) -> list[str]:
    """Move what wh did not write from ``src`` to the same place under ``dst`` (folders merge);
    returns the conflicts (a different file ``dst`` already has), which stay where they are."""
    conflicts: list[str] = []

    def move(rel: str) -> None:
        source, target = src / rel, dst / rel
        if target.is_dir() and not target.is_symlink() and source.is_dir() and not source.is_symlink():
            for child in sorted(source.iterdir(), key=lambda p: p.name):
                move(f"{rel}/{child.name}")
            return
        if target.exists() or target.is_symlink():
            if not (source.is_file() and target.is_file() and _same_bytes(source, target)):
                conflicts.append(rel)
            return
        if not only_check:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(source, target)

    for rel in foreign_paths(src, owned):
        move(rel)
    return conflicts


def _same_bytes(a: Path, b: Path) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    from wheelhouse.digest import sha256_of

    return sha256_of(a) == sha256_of(b)


# --- the swap and its recovery ------------------------------------------------------------------

def new_tree(out: Path) -> Path:
    """A new, empty sibling folder of ``out`` to assemble the next wheelhouse in."""
    new = out.parent / f".{out.name}{_NEW}{uuid.uuid4().hex[:8]}"
    try:
        new.mkdir(parents=True)
    except OSError as exc:
        raise BadOutput(f"cannot create {new} for -o {out}: {exc.strerror}", hint="choose a folder you can write to") from exc
    return new


def swap_in(new: Path, out: Path) -> None:
    """Replace ``out`` by the complete tree ``new``, keeping what wh did not write in ``out``.

    The user's files move into ``new`` first; then two renames in one folder. A crash at any
    point is undone or finished by ``recover`` on the next run.
    """
    if out.exists():
        owned = owned_paths(read_meta(out)) if read_meta(out) is not None else ()
        conflicts = _move_foreign(out, new, owned, only_check=True)
        if conflicts:
            raise BadOutput(f"{out} holds {', '.join(conflicts)}, which wh did not write and would now replace",
                            hint="move those files out of the wheelhouse folder, then run the command again")
        _move_foreign(out, new, owned)
        checkpoint("stage.swap.adopted")
        old = out.parent / f".{out.name}{_OLD}{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
        checkpoint("stage.swap.between-renames")
        try:
            os.rename(new, out)
        except BaseException:
            os.rename(old, out)
            _move_foreign(new, out, owned_paths(read_meta(new)))
            raise
        checkpoint("stage.swap.renamed")
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(new, out)


def interrupted_swap(out: Path) -> str | None:
    """Where the wheelhouse that should be at ``out`` is, when a killed run left it beside it (read-only:
    for `wh install` and friends, which must not change a wheelhouse, to say what happened)."""
    out = Path(out).absolute()
    if out.exists() or not out.parent.is_dir():
        return None
    trees = sorted((p for p in out.parent.glob(f".{out.name}{_OLD}*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    if not trees:
        return None
    return (f"{out} is missing: a wh stage was interrupted while replacing it; the previous wheelhouse is "
            f"{trees[-1]} (run the same `wh stage ... -o {out}` again: it finishes or undoes the swap first)")


def recover(out: Path) -> list[str]:
    """Finish or undo a swap a crash interrupted, and remove its leftovers; returns what was done."""
    parent, name = out.parent, out.name
    if not parent.is_dir():
        return []

    def leftovers(kind: str) -> list[Path]:
        found = [p for p in parent.glob(f".{name}{kind}*") if p.is_dir() and not p.is_symlink()]
        return sorted(found, key=lambda p: p.stat().st_mtime)

    from .journal import recover_journals

    notes = []
    news, olds = leftovers(_NEW), leftovers(_OLD)
    if not out.exists() and not out.is_symlink():
        complete = [n for n in news if read_meta(n) is not None]
        if complete and olds:  # killed between the two renames: the new tree was ready
            os.rename(complete[-1], out)
            news.remove(complete[-1])
            notes.append(f"finished an interrupted swap: {out} is the wheelhouse that was being written")
        elif olds:
            os.rename(olds[-1], out)
            olds.remove(olds[-1])
            notes.append(f"put the previous wheelhouse back at {out} (a run was interrupted before replacing it)")
    for tree in [*news, *olds]:
        meta = read_meta(tree)
        # The user's files were moved into a new tree only once it was complete (wh.json written);
        # an old tree is what -o was. Either way, what wh did not write goes back to -o.
        if out.is_dir() and (meta is not None or tree in olds):
            _move_foreign(tree, out, owned_paths(meta) if meta is not None else ())
        shutil.rmtree(tree, ignore_errors=True)
        notes.append(f"removed {tree.name} left by an interrupted run")
    return notes + recover_journals(out)
