"""An in-place change to a wheelhouse that can be undone, even after a kill -9 (``wh build``).

``wh stage`` builds a new tree and swaps it in; ``wh build`` adds to an existing wheelhouse in
place. Before it changes anything, ``UndoJournal`` copies the index files (pylock.toml,
wh.json, simple/) into ``<wheelhouse>/.wh-undo-<id>/`` and writes ``journal.json``; every file
the change is about to create is added to the journal first. ``rollback()`` puts the index files
back and removes exactly the created files (and the folders their creation added, once empty); ``commit()`` drops the journal. A journal found by
``recover_journals`` (run under the wheelhouse's lock, so its writer is gone) is rolled back.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Sequence

from wheelhouse.atomic import write_atomic

__all__ = ["UndoJournal", "recover_journals", "inside_wheelhouse"]

_PREFIX = ".wh-undo-"
_JOURNAL = "journal.json"


class UndoJournal:
    """What one in-place change did to a wheelhouse, kept on disk until it is committed."""

    def __init__(self, root: Path, index_paths: Sequence[str]):
        self.root = Path(root)
        self.saved = self.root / f"{_PREFIX}{uuid.uuid4().hex[:8]}"
        self.index = list(index_paths)
        self.had: list[str] = []
        self.made: list[str] = []
        self.kept: list[str] = []
        self.saved.mkdir(parents=True)
        for rel in self.index:
            src = self.root / rel
            if src.is_dir():
                shutil.copytree(src, self.saved / rel, symlinks=True)
            elif src.is_file():
                (self.saved / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, self.saved / rel)
            else:
                continue
            self.had.append(rel)
        self._write()  # from here on, a kill is undone by the next run

    def created(self, path: Path) -> None:
        """Record ``path`` (inside the wheelhouse) BEFORE it is created, with the folders that creating
        it will add (``"wheels/"``): a rollback removes those too when they are empty again."""
        rel = Path(path).relative_to(self.root)
        new_dirs = [p for p in reversed(rel.parents) if p.parts and not (self.root / p).is_dir()]
        self.made.extend([*(f"{d.as_posix()}/" for d in new_dirs), rel.as_posix()])
        self._write()

    def replacing(self, path: Path) -> None:
        """Record ``path`` BEFORE it is overwritten (or created, when it does not exist yet)."""
        path = Path(path)
        if not path.is_file():
            self.created(path)
            return
        rel = path.relative_to(self.root).as_posix()
        copy = self.saved / "files" / rel
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, copy)
        self.kept.append(rel)
        self._write()

    def rollback(self) -> None:
        _rollback(self.root, self.saved, self.index, self.had, self.made, self.kept)

    def commit(self) -> None:
        shutil.rmtree(self.saved, ignore_errors=True)

    def _write(self) -> None:
        write_atomic(self.saved / _JOURNAL, json.dumps({"index": self.index, "had": self.had, "created": self.made,
                                                        "replaced": self.kept}))


_INDEX_FILES = ("pylock.toml", "wh.json", "simple")


def inside_wheelhouse(root: Path, rel: str) -> bool:
    """Whether ``rel``, a path read from the wheelhouse's own files (a journal, wh.json), names a path inside
    ``root``: relative, no .., no symlinked parent leading out. What was read from disk may have been edited."""
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        return False
    parent = (root / p).parent.resolve()
    return parent == root.resolve() or root.resolve() in parent.parents


def _rollback(root: Path, saved: Path, index: Sequence[str], had: Sequence[str], made: Sequence[str],
              kept: Sequence[str]) -> None:
    for rel in index:
        if rel not in _INDEX_FILES:
            continue
        cur = root / rel
        if rel in had and not os.path.lexists(saved / rel):
            continue  # put back already, by a rollback killed after it: what is there now is the original
        if cur.is_dir() and not cur.is_symlink():
            shutil.rmtree(cur)
        elif cur.exists() or cur.is_symlink():
            cur.unlink()
        if rel in had:
            os.replace(saved / rel, cur)
    for rel in made:
        if rel.endswith("/") or not inside_wheelhouse(root, rel):
            continue
        try:
            (root / rel).unlink()
        except FileNotFoundError:
            pass
    for rel in reversed(made):  # the folders the change added, deepest first, once empty again
        if rel.endswith("/") and inside_wheelhouse(root, rel.rstrip("/")):
            try:
                (root / rel).rmdir()
            except OSError:
                pass
    for rel in kept:
        if inside_wheelhouse(root, rel) and (saved / "files" / rel).is_file():
            os.replace(saved / "files" / rel, root / rel)
    shutil.rmtree(saved, ignore_errors=True)


def recover_journals(root: Path) -> list[str]:
    """Roll back every change to ``root`` a killed writer left unfinished; returns what was done."""
    notes = []
    if not root.is_dir():
        return notes
    for saved in sorted(root.glob(f"{_PREFIX}*")):
        try:
            data = json.loads((saved / _JOURNAL).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            shutil.rmtree(saved, ignore_errors=True)  # killed before the journal existed: nothing changed yet
            continue
        _rollback(root, saved, data.get("index", ()), data.get("had", ()), data.get("created", ()),
                  data.get("replaced", ()))
        notes.append(f"undid an interrupted change to {root} (a `wh build` killed while recording its wheel)")
    return notes
