"""An install is a transaction: an intent journal first, the record last, a rollback after any crash.

Before the first byte of a batch is written, ``<site>/.wh/journal.json`` lists every path
the batch will write or remove, whether it existed, and where its previous content goes
(``<site>/.wh/txn/<id>/``); the journal is fsynced, then the previous files are moved
there. The caller writes its files, its patches and ``installed.json`` last, then
``commit`` removes the journal and the backups. A run killed at any point leaves the
journal behind: the next ``wh install`` (or ``recover``) rolls it back, restoring every
path to exactly what it was, including files another distribution owns, before it does
anything else. ``wh doctor`` reports it through ``unfinished_transaction``.

Invariant that makes the rollback exact: a path that existed is only written after its
previous content was moved to its backup. So at rollback, an existing path whose backup
is there is restored from it, one whose backup is not there was never touched, and a
path that did not exist is removed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from wheelhouse.datafile import parse_json
from wheelhouse.errors import WhError
from wheelhouse.faults import checkpoint
from .installed import drop_bytecode, real_roots, stays_inside, venv_own_file
from wheelhouse.folderlock import is_locked

__all__ = ["Transaction", "UnfinishedInstall", "UnfinishedInstallError", "journal_path", "unfinished_transaction", "recover", "clean_leftovers"]

_SCHEMA = "wh-install-journal/1"


def journal_path(site: str | os.PathLike) -> Path:
    """Where the intent journal of the environment with ``site`` (its platlib) lives."""
    return Path(site) / ".wh" / "journal.json"


def _txn_root(site: str | os.PathLike) -> Path:
    return Path(site) / ".wh" / "txn"


def refuse_linked_state(site: str | os.PathLike) -> None:
    """Raise where ``<site>/.wh``, or a folder in it that wh empties (``txn``, ``trash``), is a symbolic link: wh
    keeps its journal, backups and records in real folders inside the environment, and removes nothing through
    a link (emptying a ``trash`` that points at another disk would delete that folder's files)."""
    state = Path(site) / ".wh"
    for path in (state, state / "txn", state / "trash"):
        if path.is_symlink():
            try:
                to = f" (to {os.readlink(path)})"
            except OSError:
                to = ""
            raise WhError(f"{path} is a symbolic link{to}: wh keeps its state and backups in real folders inside "
                          "the environment and neither writes nor removes anything through a link",
                          hint=f"remove the link (`rm {path}`; what it points to is kept) and run the command again")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _move(src: str, dest: str) -> None:
    """Rename, or copy then unlink across filesystems (a scripts folder on another mount)."""
    try:
        os.rename(src, dest)
    except OSError as exc:
        if exc.errno != 18:  # EXDEV
            raise
        # Copied under a temporary name, renamed once whole: a rollback takes a backup that exists for the
        # previous content, so a copy cut short (a full disk, a kill) must never be there under its name.
        part = dest + ".wh-part"
        _remove(part)  # left by a copy cut short before
        try:
            if os.path.isdir(src) and not os.path.islink(src):
                shutil.copytree(src, part, symlinks=True)
            else:
                shutil.copy2(src, part, follow_symlinks=False)
        except BaseException:
            _remove(part)
            raise
        os.rename(part, dest)
        _remove(src)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


def _below_any(path: str, folders: set[str]) -> bool:
    d = os.path.dirname(path)
    while folders and d and d != os.path.dirname(d):
        if d in folders:
            return True
        d = os.path.dirname(d)
    return False


def _bytecode_files(path: str, listing: dict[str, list[str]]) -> list[str]:
    """The cached bytecode of the module at ``path`` (``listing``: ``__pycache__`` contents read once per folder)."""
    if not path.endswith(".py"):
        return []
    cache = os.path.join(os.path.dirname(path), "__pycache__")
    if os.path.islink(cache):  # a __pycache__ that is a link out: not this module's bytecode to move
        return []
    names = listing.get(cache)
    if names is None:
        try:
            names = listing[cache] = sorted(os.listdir(cache))
        except OSError:
            names = listing[cache] = []
    stem = os.path.basename(path)[:-3] + "."
    return [os.path.join(cache, n) for n in names if n.startswith(stem) and n.endswith(".pyc")]


class UnfinishedInstallError(WhError):
    code = "unfinished-install"


@dataclass(frozen=True)
class UnfinishedInstall:
    """A journal left by an install that did not finish (``running``: its process still holds the lock)."""

    journal: str
    started: str
    pid: int
    wheels: tuple[str, ...]
    running: bool = False

    def describe(self) -> str:
        what = ", ".join(self.wheels[:3]) + (f" and {len(self.wheels) - 3} more" if len(self.wheels) > 3 else "")
        return (f"an install started {self.started} by pid {self.pid} ({what}) "
                + ("is still running" if self.running else "did not finish"))


class Transaction:
    """One install batch's journal. ``begin`` before the first write, ``commit`` after the record."""

    def __init__(self, site: str | os.PathLike, wheels: Iterable[str] = (), extra: Iterable[str] = ()):
        self.site = Path(site)
        self.wheels = tuple(wheels)
        self.extra = [str(p) for p in extra]  # written by the caller after the batch (installed.json)
        self.id = f"{os.getpid()}-{time.time_ns()}"
        self.entries: list[list] = []  # [path, existed, backup (relative to the txn folder) or None]
        self.dirs: list[str] = []
        self.active = False
        # Tidying of the replaced content (its emptied folders) while the journal is still there: a kill
        # just after the commit would leave it undone for good, and a rollback remakes the folders it needs.
        self.before_commit: list[Callable[[], None]] = []

    @property
    def folder(self) -> Path:
        return _txn_root(self.site) / self.id

    def begin(self, paths: Iterable[str], dirs: Iterable[str] = ()) -> None:
        """Journal ``paths`` (to be written or removed) and ``dirs`` (to be created), then move aside what exists.

        Cached bytecode of every existing ``.py`` path is journaled with it, so a rollback
        restores it too.
        """
        if journal_path(self.site).exists():  # never clobber another run's journal: it is the only way back
            raise UnfinishedInstallError(
                f"{journal_path(self.site)}: {unfinished_transaction(self.site).describe()}",
                hint="run `wh install` on this environment again: it rolls the unfinished install back first")
        seen: set[str] = set()
        moved_dirs: set[str] = set()  # an old dist-info folder moves whole: what is inside goes with it
        listing: dict[str, list[str]] = {}
        folders: dict[str, bool] = {}  # a path in a folder that is not there is not there (a new venv: most)
        sep = os.sep
        normal = {os.path.normpath(p) for p in (*paths, *self.extra)}
        for p in sorted(normal, key=lambda x: (x.count(sep), x)):
            parent = p.rpartition(sep)[0] or p[:1] if sep in p else ""  # os.path.dirname of a normalised path
            there = folders.get(parent)
            if there is None:
                there = folders[parent] = os.path.isdir(parent)
            for q in ((p, *_bytecode_files(p, listing)) if there else (p,)):
                if q in seen or (moved_dirs and _below_any(q, moved_dirs)):
                    continue
                seen.add(q)
                existed = there and os.path.lexists(q)
                if existed and os.path.isdir(q) and not os.path.islink(q):
                    moved_dirs.add(q)
                self.entries.append([q, existed, str(len(self.entries)) if existed else None])
        self.dirs = sorted({os.path.normpath(d) for d in dirs if not os.path.isdir(d)}, key=len)
        refuse_linked_state(self.site)
        self.folder.mkdir(parents=True, exist_ok=True)
        body = {"schema": _SCHEMA, "id": self.id, "pid": os.getpid(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "wheels": list(self.wheels),
                "dirs": self.dirs, "entries": self.entries}
        path = journal_path(self.site)
        tmp = path.with_name(f".journal.{self.id}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(json.dumps(body).encode("utf-8"))  # one C encoder pass (json.dump writes piece by piece)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        self.active = True
        checkpoint("install.journal-written")
        extra = {os.path.normpath(p) for p in self.extra}
        for p, existed, backup in self.entries:
            if existed and p not in extra:  # the caller's records stay in place until ``put`` replaces them
                _move(p, str(self.folder / backup))
        checkpoint("install.backed-up")

    def put(self, pending: str | os.PathLike, path: str | os.PathLike) -> None:
        """Rename ``pending`` over ``path`` (one of ``extra``), its previous content first kept as its backup (a
        hard link, or a whole copy renamed into place): until then ``path`` is what it was (installed.json names
        what is installed, not the batch), and a rollback after it puts the previous content back."""
        path = os.path.normpath(path)
        entry = next(e for e in self.entries if e[0] == path)
        if entry[1] and os.path.lexists(path):
            backup = str(self.folder / entry[2])
            try:
                os.link(path, backup)
            except OSError:
                shutil.copy2(path, backup + ".wh-part", follow_symlinks=False)
                os.rename(backup + ".wh-part", backup)
        os.replace(pending, path)

    def commit(self) -> None:
        """The batch is complete: forget the journal, then the backups."""
        for step in self.before_commit:
            step()
        journal_path(self.site).unlink()
        _fsync_dir(journal_path(self.site).parent)
        self.active = False
        checkpoint("install.committed")
        _discard(self.folder)

    def rollback(self) -> None:
        """Put every journaled path back as it was (see the module docstring), then forget the journal."""
        _roll_back(self.site, self.id, self.entries, self.dirs)
        self.active = False


def _discard(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    for d in (folder.parent, folder.parent.parent):  # .wh/txn, .wh: only when empty
        try:
            d.rmdir()
        except OSError:
            break


def _roll_back(site: Path, txn_id: str, entries: list, dirs: list[str]) -> None:
    folder = _txn_root(site) / txn_id
    touched = [(p, existed, b) for p, existed, b in entries
               if not existed or (b is not None and os.path.lexists(folder / b))]
    # New content and its bytecode first; then the previous content back (its bytecode is journaled too).
    for p, _, _ in touched:
        _remove(p)
        if p.endswith(".py"):
            drop_bytecode(p)
    for p, existed, b in reversed(touched):
        if existed:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            _move(str(folder / b), p)
        checkpoint("install.rollback-step")
    for d in sorted(dirs, key=len, reverse=True):
        if _only_bytecode(d):
            shutil.rmtree(os.path.join(d, "__pycache__"), ignore_errors=True)
        try:
            os.rmdir(d)
        except OSError:
            pass
    journal_path(site).unlink(missing_ok=True)
    if txn_id:
        _discard(folder)


def _only_bytecode(d: str) -> bool:
    try:
        return os.listdir(d) == ["__pycache__"]
    except OSError:
        return False


def _read_journal(site: str | os.PathLike) -> dict | None:
    try:
        data = parse_json(journal_path(site).read_text(encoding="utf-8"), source=str(journal_path(site)))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, WhError):  # (nested deeper than MAX_DEPTH: not a journal wh wrote)
        # Written with fsync before anything else: an unreadable journal means no write happened yet.
        return {"schema": _SCHEMA, "id": "", "pid": 0, "started": "?", "wheels": [], "dirs": [], "entries": []}
    return data if isinstance(data, dict) and data.get("schema") == _SCHEMA else None


def unfinished_transaction(site: str | os.PathLike) -> UnfinishedInstall | None:
    """The install into the environment with ``site`` (its platlib) that did not finish, if any.

    ``running`` in the answer: a wh run holds the target's lock right now (it may still finish);
    otherwise the run died and the next ``wh install`` rolls it back. For ``wh doctor``: a fail,
    "unfinished install".
    """
    data = _read_journal(site)
    if data is None:
        return None
    return UnfinishedInstall(str(journal_path(site)), str(data.get("started")), int(data.get("pid") or 0),
                             tuple(data.get("wheels") or ()), is_locked(site))


_TXN_ID = re.compile(r"^\d+-\d+\Z")  # Transaction.id: pid-time_ns


def _trusted(data: dict, roots: Sequence[str] | None, scheme: Mapping[str, str] | None) -> tuple[str, list, list[str]]:
    """The id, entries and folders of a journal read from disk, only as far as they stay inside the
    environment (``roots``, from ``real_roots``; None: anywhere) and are not the venv's own files (its
    interpreter, activation scripts, ``pyvenv.cfg``): anyone who can write into a venv could plant one,
    and the rollback removes what it names (a transaction id of ``../../..`` made its backup folder
    someone's home). A parent folder that is a link out counts as out (``installed.stays_inside``)."""

    def inside(path: object) -> bool:
        if not isinstance(path, str) or not path:
            return False
        if scheme is not None and venv_own_file(path, scheme):
            return False
        return roots is None or stays_inside(path, roots)

    txn_id = str(data.get("id") or "")
    txn_id = txn_id if _TXN_ID.match(txn_id) else ""
    entries = [e for e in (data.get("entries") or [])
               if isinstance(e, list) and len(e) == 3 and inside(e[0]) and isinstance(e[1], bool)
               and (e[2] is None or (isinstance(e[2], str) and e[2].isdigit()))]
    dirs = [d for d in (data.get("dirs") or []) if inside(d)]
    return txn_id, entries, dirs


def recover(site: str | os.PathLike, scheme: Mapping[str, str] | None = None) -> UnfinishedInstall | None:
    """Roll back the unfinished install of ``site``, if any, and sweep what a killed run left beside it
    (``clean_leftovers``). The caller holds the install lock. Returns what was rolled back.

    ``scheme``: the environment's folders; the journal's paths outside them (and outside ``site``)
    are not touched (without it, every path it names is taken)."""
    refuse_linked_state(site)
    found = unfinished_transaction(site)
    if found is not None:
        found = replace(found, running=False)  # the caller holds the lock: its writer is gone
        roots = real_roots(scheme, site) if scheme else None
        txn_id, entries, dirs = _trusted(_read_journal(site) or {}, roots, scheme)
        _roll_back(Path(site), txn_id, entries, dirs)
    clean_leftovers(site)
    return found


# Temp files of what an install writes atomically in .wh/ (atomic.write_atomic's and the journal's
# names); other tools' temp files there are theirs to clean.
_OWN_TEMPS = (".installed.json.", ".journal.")


def clean_leftovers(site: str | os.PathLike) -> int:
    """Remove what a killed run leaves beside a journal: backups no journal refers to (killed after its
    commit), the old ``.wh/trash``, half-written temp files of installed.json and of the journal.

    The caller holds the install lock and has rolled back first, so none of them is in use.
    Returns how many entries were removed.
    """
    removed = 0
    if (Path(site) / ".wh").is_symlink():  # (recover refuses first; nothing is removed through a link)
        return 0
    try:
        temps = [p for p in (Path(site) / ".wh").iterdir()
                 if p.name.startswith(_OWN_TEMPS) and p.name.endswith(".tmp") and p.is_file()]
    except OSError:
        temps = []
    for p in temps:
        p.unlink(missing_ok=True)
        removed += 1
    for root in (_txn_root(site), Path(site) / ".wh" / "trash"):
        if root.is_symlink():
            continue
        try:
            children = list(root.iterdir())
        except OSError:
            continue
        for child in children:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
            removed += 1
        for d in (root, root.parent):  # the folder, then .wh: only when empty
            try:
                d.rmdir()
            except OSError:
                break
    return removed
