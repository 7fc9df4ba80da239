"""One install at a time per target: an ``flock`` on the target's folder, held for the whole run.

The lock is taken on the folder itself (a venv's folder while it is created, then the
site folder, platlib), so it leaves no file behind in an environment that a refused
install must leave untouched. A second ``wh install`` (or ``wh drop``) on the same target
waits, saying so; the kernel drops the lock when its holder dies, even by SIGKILL.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Callable

__all__ = ["FolderLock", "is_locked", "lockable"]


def _open_dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))


def lockable(path: str | os.PathLike) -> Path:
    """``path``, or its nearest existing ancestor (a system interpreter's site folder may not exist yet)."""
    p = Path(path)
    while not p.is_dir() and p != p.parent:
        p = p.parent
    return p


class FolderLock:
    """An exclusive lock on ``path`` (a folder). ``create``: make the folder if missing (a new venv).

    ``created`` says whether this lock made the folder, so a refused install can remove it.
    """

    def __init__(self, path: str | os.PathLike, *, create: bool = False,
                 on_wait: Callable[[str], None] | None = None):
        self.path = Path(path)
        self.create = create
        self.on_wait = on_wait
        self.created = False
        self._fd: int | None = None

    def acquire(self) -> "FolderLock":
        while True:
            if self.create:
                try:
                    self.path.mkdir(parents=True)
                    self.created = True
                except FileExistsError:
                    pass
            fd = _open_dir(self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if self.on_wait is not None:
                    self.on_wait(f"waiting for another wh run on {self.path} to finish")
                fcntl.flock(fd, fcntl.LOCK_EX)
            # The holder we waited for may have removed the folder (a failed new venv): lock the new one.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                return self
            os.close(fd)
            if not self.create and not self.path.exists():
                raise FileNotFoundError(2, "No such file or directory", str(self.path))

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def is_locked(path: str | os.PathLike) -> bool:
    """Whether a wh install (or drop) holds the lock on ``path`` right now."""
    try:
        fd = _open_dir(Path(path))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
