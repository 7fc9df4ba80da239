"""The content-addressed download cache: verified files under ``<cache>/sha256/ab/abcdef...``.

A file enters the cache only under the sha256 of its bytes. It is not trusted for that on reuse:
a disk, a user or another tool may have changed it since, so every file taken from the cache is
hashed again before it is placed, and a damaged entry is deleted and downloaded again.

The wheelhouse shares the cache's inode: an entry is placed by HARDLINK (``link_entry``), so every
downloaded byte is written once, not once into the cache and again into the wheelhouse. This is
safe because nothing writes into an existing inode: wh makes every file under a temp name and
renames it, a damaged entry is unlinked (never truncated or rewritten), and cleaning the cache
means unlinking entries, which leaves a wheelhouse's name intact. A write by someone else through
either name is caught on use, never silently trusted: the cache hashes an entry again on every
reuse, and the wheelhouse is checked against its lock's sha256 by ``wh verify`` and by every
``wh install``. Across filesystems, or where links are refused (EXDEV, EPERM, EMLINK), the
wheelhouse gets a private copy (a reflink where the filesystem shares blocks).

An entry is read-only and as readable as a new file in the wheelhouse (``0444 & ~umask``: the
wheelhouse file IS the entry); the cache stays private through its ``sha256/`` folder, which is
owner-only (0700). Unfinished downloads wait under ``<cache>/partial/`` (owner-only files);
``entry_lock`` (fcntl, one lock file per entry under ``<cache>/locks/``) makes two processes that
want one file take turns: the second waits, then finds the first one's finished entry.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from wheelhouse.digest import sha256_of, update_hash
from wheelhouse.errors import HashMismatch, WhError
from wheelhouse.faults import checkpoint

__all__ = [
    "private",
    "HashMismatch",
    "NoSpace",
    "copy_private",
    "link_entry",
    "entry_mode",
    "entries_folder",
    "cached_path",
    "partial_path",
    "sha256_of",
    "update_hash",
    "entry_lock",
    "try_entry_lock",
    "cache_in_use",
    "try_cache_idle",
    "remove_part_files",
    "copy_verified",
    "add_to_cache",
    "commit_part",
    "place",
    "is_no_space",
]

_CHUNK = 1 << 20
_FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int), share the source's blocks copy-on-write


class NoSpace(WhError):
    """The disk filled up while wh was writing (a download, or the wheelhouse)."""

    code = "no-space"

    def __init__(self, path: Path, needed: int | None, cleaned: list[str] = ()):
        # ``needed``: the bytes this run still had to write when the disk filled up.
        more = f": needs {_mb(needed)} MB more" if needed else ""
        super().__init__(
            f"no space left on {_mount_point(path)}{more} (free now: {_free_bytes(path) // (1 << 20)} MB)",
            hint="free space there, or point the cache elsewhere with --cache-dir (WH_CACHE_DIR), then re-run "
                 "the same command; finished downloads are kept",
            detail=("removed the unfinished files: " + ", ".join(cleaned)) if cleaned else None,
        )
        self.path = path
        self.needed = needed


def is_no_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _mb(n: int | None) -> int:
    return -(-(n or 0) // (1 << 20))


def _free_bytes(path: Path) -> int:
    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        st = os.statvfs(folder)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def _mount_point(path: Path) -> Path:
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    while not os.path.ismount(p):
        p = p.parent
    return p


def private(path, flags: int) -> int:
    """An ``open(..., opener=private)`` that creates files owner-only (0600): partial downloads
    of a private index are as private as its pages."""
    return os.open(path, flags, 0o600)


def cached_path(cache: Path, sha256: str) -> Path:
    """Where a verified file with this sha256 lives in the cache."""
    return Path(cache) / "sha256" / sha256[:2] / sha256


def partial_path(cache: Path, key: str) -> Path:
    """Where the unfinished download ``key`` (its sha256, or a name derived from its URL) is kept."""
    return Path(cache) / "partial" / f"{key}.part"


@contextlib.contextmanager
def entry_lock(cache: Path, key: str, *, on_wait: Callable[[], None] | None = None,
               cancelled: Callable[[], bool] | None = None) -> Iterator[None]:
    """Hold the cache entry ``key`` for this process (fcntl.flock; released on exit, and by the
    kernel if the process dies). ``on_wait`` is called once if another process holds it."""
    folder = Path(cache) / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited and on_wait is not None:
                    on_wait()
                waited = True
                if cancelled is not None and cancelled():
                    raise InterruptedError("interrupted while waiting for another wh's download")
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def try_entry_lock(cache: Path, key: str) -> int:
    """The entry ``key`` held for this process without waiting (``entry_lock``'s lock): its descriptor
    (closing it releases the lock), or -1 where another process holds it."""
    folder = Path(cache) / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return -1
    return fd


_IN_USE = ".in-use.lock"  # under locks/: shared by every fetch running, exclusive for `wh cache prune|clean`


@contextlib.contextmanager
def cache_in_use(cache: Path) -> Iterator[None]:
    """Mark the cache as used by this run (a shared flock, dropped by the kernel if the process dies): a
    wheel it takes from the cache or has just filed has one link until it is placed, and ``wh cache
    prune`` must not take it for unneeded meanwhile."""
    folder = Path(cache) / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / _IN_USE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def try_cache_idle(cache: Path) -> int:
    """The cache held exclusively, without waiting: a descriptor (close it to release), or -1 while a
    fetch runs (``cache_in_use``)."""
    folder = Path(cache) / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / _IN_USE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return -1
    return fd


def remove_part_files(part: Path) -> None:
    """Remove an unfinished download's files: its body and its ranges' record and layout (``part.*``)."""
    for path in part.parent.glob(part.name + ".*"):
        path.unlink(missing_ok=True)
    part.unlink(missing_ok=True)


def _clone_or_copy(src: Path, dst_fh, h: "hashlib._Hash | None", cancelled: Callable[[], bool] | None) -> int:
    """Copy ``src`` into the open file ``dst_fh``; hash the bytes into ``h``. A reflink when the
    filesystem shares blocks copy-on-write (then hashing reads the source once)."""
    with open(src, "rb") as fh:
        try:
            fcntl.ioctl(dst_fh.fileno(), _FICLONE, fh.fileno())
            if h is not None:
                update_hash(h, src)
            return os.fstat(fh.fileno()).st_size
        except OSError:
            pass
        n = 0
        while True:
            block = fh.read(_CHUNK)
            if not block:
                return n
            checkpoint("fetch.copy")
            if cancelled is not None and cancelled():
                raise InterruptedError("interrupted")
            dst_fh.write(block)
            if h is not None:
                h.update(block)
            n += len(block)


def copy_verified(src: Path, dst: Path, sha256: str | None, size: int | None = None, *,
                  cancelled: Callable[[], bool] | None = None) -> str:
    """Give ``dst`` a private copy of ``src`` (temp name, then rename), hashing the bytes copied;
    returns their sha256. With ``sha256`` given, a copy that does not match (or has the wrong
    ``size``) is removed and HashMismatch raised: the caller decides what to do with ``src``."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".{dst.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            n = _clone_or_copy(src, out, h, cancelled)
        actual = h.hexdigest()
        if (sha256 and actual != sha256) or (size is not None and n != size):
            raise HashMismatch(str(src), sha256 or "", actual,
                               message=f"{src}: sha256 is {actual} ({n} bytes), expected {sha256}"
                                       + (f" ({size} bytes)" if size is not None else ""))
        os.replace(tmp, dst)
        return actual
    finally:
        tmp.unlink(missing_ok=True)


def copy_private(src: Path, dst: Path, size: int | None = None, *,
                 cancelled: Callable[[], bool] | None = None) -> Path:
    """Give ``dst`` a private copy of ``src`` (temp name, then rename) without hashing it again.

    Only for a file this process verified a moment ago (a download it just hashed and filed):
    the copy is the kernel's (a reflink, else ``copy_file_range``: no pass through Python, no
    second sha256), and its size is checked. A cache entry reused from an earlier run goes
    through ``copy_verified`` instead: the disk may have changed it since.
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".{dst.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(src, "rb") as fh, open(tmp, "wb") as out:
            n = _kernel_copy(fh, out, cancelled)
        if size is not None and n != size:
            raise HashMismatch(str(src), "", "", message=f"{src}: {n} bytes copied, expected {size}")
        os.replace(tmp, dst)
        return dst
    finally:
        tmp.unlink(missing_ok=True)


def _kernel_copy(src_fh, dst_fh, cancelled: Callable[[], bool] | None) -> int:
    try:
        fcntl.ioctl(dst_fh.fileno(), _FICLONE, src_fh.fileno())
        return os.fstat(src_fh.fileno()).st_size
    except OSError:
        pass
    n = 0
    while True:
        checkpoint("fetch.copy")
        if cancelled is not None and cancelled():
            raise InterruptedError("interrupted")
        try:
            step = os.copy_file_range(src_fh.fileno(), dst_fh.fileno(), 64 << 20)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP) or is_no_space(exc):
                raise
            # no in-kernel copy here: the rest through user space
            while block := src_fh.read(_CHUNK):
                dst_fh.write(block)
                n += len(block)
            return n
        if step == 0:
            return n
        n += step


def add_to_cache(cache: Path, path: Path, sha256: str | None = None) -> Path:
    """Put a local file into the cache (a hardlink, else a copy), verifying its hash on the way in.

    Returns the cache path. Used to seed the cache from a previous wheelhouse, so
    a restage after ``rm -rf ~/.cache/wh`` still downloads nothing it already has.
    """
    actual = sha256 or sha256_of(path)
    final = cached_path(cache, actual)
    if not final.exists():
        entries_folder(cache)
        if _link_verified(path, final, actual, mode=entry_mode()) is None:  # another filesystem: a copy
            copy_verified(path, final, actual)
            os.chmod(final, entry_mode())
    return final


def commit_part(cache: Path, part: Path, sha256: str) -> Path:
    """Give a verified partial file its cache name (the caller has checked ``sha256``)."""
    final = cached_path(cache, sha256)
    entries_folder(cache)
    final.parent.mkdir(parents=True, exist_ok=True)
    # Read-only: nobody edits an entry in place by accident (and reuse verifies it anyway). Readable
    # like any new file of the wheelhouse, which will be this inode; the folder keeps it private.
    os.chmod(part, entry_mode())
    os.replace(part, final)
    return final


def _in_cache(path: Path) -> bool:
    """Whether ``path`` is a cache entry (``.../sha256/ab/<64 hex>``)."""
    return path.parent.parent.name == "sha256" and len(path.name) == 64 and path.name.startswith(path.parent.name)


def place(src: Path, dst: Path) -> Path:
    """Put ``src``'s bytes at ``dst``: a hardlink where possible, else a copy. A cache entry is
    hashed again on the way (it names the sha256 it must have)."""
    try:
        if dst.exists() and os.path.samefile(src, dst):
            return dst
    except OSError:
        pass
    if _in_cache(src):
        if link_entry(src, dst, src.name) is None:
            copy_verified(src, dst, src.name)
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".{dst.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        try:
            os.link(src, tmp)
        except OSError:  # another filesystem, or links not allowed: copy
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst


# --- placing an entry by hardlink ---------------------------------------------------------------

# Where a hardlink cannot be made, the caller copies: another filesystem (EXDEV), links refused by
# the filesystem or by fs.protected_hardlinks (EPERM, EACCES), too many links to one inode (EMLINK).
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EACCES, errno.EMLINK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would race with other threads)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def entry_mode() -> int:
    """A cache entry's mode: read-only, readable by whom a new wheelhouse file would be (the entry is
    the wheelhouse file's inode)."""
    return 0o444 & ~_umask()


def entries_folder(cache: Path) -> Path:
    """``<cache>/sha256``, owner-only (0700): entries are readable like the wheelhouse files they
    are linked to, so the cache's privacy is its folder's."""
    folder = Path(cache) / "sha256"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = folder.stat()
    if st.st_mode & 0o077 and st.st_uid == os.getuid():
        os.chmod(folder, 0o700)  # a cache made by an older wh
    return folder


def link_entry(entry: Path, dst: Path, sha256: str | None = None, size: int | None = None, *,
               cancelled: Callable[[], bool] | None = None) -> Path | None:
    """Place the cache entry at ``dst`` by hardlink (temp name, then rename); None where no link can
    be made (the caller copies). With ``sha256``, the linked inode is hashed before it gets its
    final name, and HashMismatch raised when it does not match (an entry from an earlier run: the
    caller removes it). Without, only for a download this process verified a moment ago."""
    mode = entry_mode()
    try:
        st = entry.stat()
        if st.st_mode & 0o7777 != mode:
            os.chmod(entry, mode)  # an entry of an older wh (0400): readable like a wheelhouse file
    except PermissionError:
        return None  # another user's entry: a copy of our own
    return _link_verified(entry, dst, sha256, size, cancelled=cancelled)


def _link_verified(src: Path, dst: Path, sha256: str | None, size: int | None = None, *, mode: int | None = None,
                   cancelled: Callable[[], bool] | None = None) -> Path | None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".{dst.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    tmp.unlink(missing_ok=True)  # a leftover of a killed run with this pid and thread
    try:
        try:
            os.link(src, tmp)
        except OSError as exc:
            if exc.errno in _NO_LINK:
                return None
            raise
        checkpoint("fetch.link")  # killed here: a temp name, nothing under the final one
        if sha256 is not None:
            # The inode just linked is the one hashed: what gets the final name is what matched.
            h = hashlib.sha256()
            n = _hash_into(tmp, h, cancelled)
            if h.hexdigest() != sha256 or (size is not None and n != size):
                raise HashMismatch(str(src), sha256, h.hexdigest(),
                                   message=f"{src}: sha256 is {h.hexdigest()} ({n} bytes), expected {sha256}"
                                           + (f" ({size} bytes)" if size is not None else ""))
        elif size is not None and tmp.stat().st_size != size:
            raise HashMismatch(str(src), "", "", message=f"{src}: {tmp.stat().st_size} bytes, expected {size}")
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, dst)
        return dst
    finally:
        tmp.unlink(missing_ok=True)


def _hash_into(path: Path, h: "hashlib._Hash", cancelled: Callable[[], bool] | None) -> int:
    """Feed ``path`` to ``h`` through one reused buffer; its size. Stops when ``cancelled``."""
    buf = bytearray(_CHUNK * 4)
    view = memoryview(buf)
    n = 0
    with open(path, "rb", buffering=0) as fh:
        while True:
            if cancelled is not None and cancelled():
                raise InterruptedError("interrupted")
            got = fh.readinto(buf)
            if not got:
                return n
            h.update(view[:got])
            n += got
