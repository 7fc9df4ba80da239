"""What says a file is the one read before: its identity from ``os.stat``, and an evidence entry that also
says where nothing is (its appearing is a change). Used by the caches whose answers stand for files left
unread (the install's link cache and digests, the doctor's verdicts, a stage's recorded answer)."""

from __future__ import annotations

import os

__all__ = ["FileIdentity", "file_identity", "identity_entry"]

# (device, inode, size, mtime, ctime): another file at the path, or the same one written to, differs.
FileIdentity = tuple[int, int, int, int, int]


def file_identity(st: os.stat_result) -> FileIdentity:
    """What says a file is the one read before (``os.stat``/``os.fstat`` of it): a rename over it or a write
    changes it (the ctime too, where a write kept the size and set the mtime back)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def identity_entry(path: str) -> list:
    """``[path, *file_identity]`` of what is there now, ``[path]`` where nothing is."""
    try:
        return [path, *file_identity(os.stat(path))]
    except (OSError, ValueError):
        return [path]  # absent: its appearing is a change
