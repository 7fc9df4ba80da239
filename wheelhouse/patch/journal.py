"""A patch's journal on disk: ``<site>/.wh/patches/<name>/`` holds the intent, the backup and the record.

An apply writes the intent first (``intent.json``: the file, its hash before and after, the
backup's name, its mode), then the backup (``<sha>.orig``), then replaces the file, and writes
the record (``record.json``) last, removing the intent. So an intent without a record is an
apply that did not finish: :func:`recover_interrupted` rolls it back from the backup before
anything else touches that patch. The journal is data a wheel could have planted, so the
backup it names must be a plain file name inside the patch's own folder.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from wheelhouse.atomic import write_atomic
from wheelhouse.datafile import load_json
from wheelhouse.digest import sha256_of
from wheelhouse.errors import WhError
from wheelhouse.folderlock import FolderLock

__all__ = ["PatchDrifted", "patch_lock", "write_source", "patch_dir", "intent_path", "record_path", "remove_patch_dir", "backup_name",
           "read_journal", "recover_interrupted"]


class PatchDrifted(WhError):
    code = "patch-drifted"


@contextmanager
def patch_lock(site: Path) -> Iterator[None]:
    """Hold the patch lock of a site folder: two wh processes patching one site take turns.

    Without it, two applies that both read the "before" file race on one journal: the slower
    one's cleanup fails and its rollback undoes the faster one's verified patch (and a verify
    during an apply rolls that apply back as "interrupted"). The lock is the install's
    ``FolderLock`` on ``<site>/.wh`` (not the site folder: ``wh install`` holds that one while it
    applies patches), removed again when left empty; the kernel drops it when its holder dies.
    """
    lock = FolderLock(Path(site) / ".wh", create=True)
    try:
        lock.acquire()
    except OSError:  # a read-only site: nobody can patch it, so there is nothing to wait for
        yield
        return
    try:
        yield
    finally:
        try:
            lock.path.rmdir()  # leave no trace when the journal is empty (a waiter then locks the new one)
        except OSError:
            pass
        lock.release()


def write_source(target: Path, data: bytes, mode: int) -> None:
    """Replace ``target`` atomically with ``data`` and drop its cached bytecode.

    A pyc is trusted when the source's mtime (whole seconds) and size match its header: a
    version of the same size written within the same second (a payload rolled back right after
    py_compile cached it) would otherwise keep running the other version's bytecode.
    """
    write_atomic(target, data, mode=mode)
    if target.suffix == ".py":
        for pyc in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
            try:
                pyc.unlink()
            except OSError:  # gone already, or not ours to remove: the import then checks it as usual
                pass


def patch_dir(site: Path, name: str) -> Path:
    return Path(site) / ".wh" / "patches" / name


def intent_path(pdir: Path) -> Path:
    return pdir / "intent.json"


def record_path(pdir: Path) -> Path:
    return pdir / "record.json"


def remove_patch_dir(pdir: Path) -> None:
    """Remove a patch's folder, and ``.wh/patches`` and ``.wh`` when that leaves them empty."""
    shutil.rmtree(pdir, ignore_errors=True)
    for parent in (pdir.parent, pdir.parent.parent):
        try:
            parent.rmdir()
        except OSError:
            break


def backup_name(journal: Mapping[str, Any], pdir: Path) -> str:
    """The backup a journal or record names: a plain file name inside ``pdir``, never a path elsewhere."""
    name = journal.get("backup")
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise PatchDrifted(f"the patch journal in {pdir} names no valid backup ({name!r})",
                           hint=f"inspect {pdir}; reinstall the distribution to get a known file back")
    return name


def read_journal(path: Path, distribution: str) -> dict[str, Any]:
    """An intent or record (bounded, a JSON object), as PatchDrifted when it is not one."""
    return load_json(path, what="patch journal", error=PatchDrifted,
                     hint=f"inspect {path.parent}; reinstall {distribution} to get a known file back")


def recover_interrupted(name: str, distribution: str, target: Path, pdir: Path) -> str:
    """Roll back an apply of patch ``name`` that did not finish (its intent is still there).

    Returns what was done, "" when there was nothing to recover. The file is put back from the
    backup when it holds the payload; a file that is neither the before nor the after version is
    refused (PatchDrifted), the journal kept.
    """
    ipath = intent_path(pdir)
    if not os.path.lexists(ipath):
        return ""
    intent = read_journal(ipath, distribution)
    before, after = str(intent.get("before_sha256", "")), str(intent.get("after_sha256", ""))
    backup = pdir / backup_name(intent, pdir)
    mode = intent.get("mode")
    mode = mode & 0o777 if isinstance(mode, int) and not isinstance(mode, bool) else 0o644
    current = sha256_of(target)
    if current == after:
        if not backup.is_file() or sha256_of(backup) != before:
            raise PatchDrifted(f"an apply of patch {name} was interrupted and its backup {backup} is missing or "
                               f"damaged; {target} still holds the unverified payload",
                               hint=f"reinstall {distribution} (`wh install`) to get the original file back")
        write_source(target, backup.read_bytes(), mode)
    elif current != before:
        raise PatchDrifted(f"{target} changed after an interrupted apply of patch {name}: sha256 {current}, "
                           f"expected {before} or {after}; nothing changed, the journal stays in {pdir}",
                           hint=f"reinstall {distribution} (`wh install`) to get a known file back")
    if record_path(pdir).exists():  # an older, finished apply's record: keep it and its backup
        ipath.unlink()
    else:
        remove_patch_dir(pdir)
    return f"an interrupted apply of {name} was rolled back ({target} restored, sha256 {before})"
