"""The sources ``wh install`` and ``wh verify`` take, as wheelhouse folders: a folder, an archive, an oci:// reference.

``materialize`` is the one door ``wh install`` (and ``wh verify``) go through: a wheelhouse
folder is itself; an archive (the file, any of its parts, or its sidecar) is checked against
its sidecar and unpacked into a private folder; an ``oci://`` reference is pulled, every blob
verified, into one. Those folders are removed when ``held`` closes.

Nothing imported here can open a socket: the OCI client is imported only for an ``oci://`` source.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Sequence

from wheelhouse.faults import checkpoint
from wheelhouse.lock import WH_JSON
from wheelhouse.progress import Reporter

from .sidecar import Located, locate
from .unpack import UnpackFailed, unpack_archive

__all__ = ["OCI_SCHEME", "is_archive", "materialize", "origin_of", "unpack_into"]

OCI_SCHEME = "oci://"

# A materialized folder -> what the user named (the archive's absolute path, or the oci:// reference), for as long
# as the folder lives: wh install records the source, never a temporary folder the next `wh drop --restore` cannot find.
_ORIGINS: dict[str, str] = {}


def origin_of(path: str | os.PathLike) -> str:
    """What ``path`` was materialized from (an archive or an oci:// reference); ``path`` itself otherwise."""
    return _ORIGINS.get(os.path.normpath(os.fspath(path)), os.fspath(path))


def _remember(folder: Path, source: str, held: ExitStack) -> Path:
    key = os.path.normpath(os.fspath(folder))
    _ORIGINS[key] = source
    held.callback(_ORIGINS.pop, key, None)
    return folder


def is_archive(source: str) -> Located | None:
    """The archive ``source`` names (a file, a part, a sidecar), or None for a folder or anything else."""
    if source.startswith(OCI_SCHEME) or Path(source).name == WH_JSON:
        return None
    return locate(source)


_OWNER = ".wh-owner.lock"  # flocked by the run using the folder: kill -9 releases it, so the next run can tell


def _sweep(prefix: str) -> None:
    """Remove the private folders of runs that are gone (killed: no cleanup ran); never a live run's."""
    import fcntl

    for old in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        try:
            if old.is_symlink() or not old.is_dir() or old.stat().st_uid != os.getuid():
                continue
            fd = os.open(old / _OWNER, os.O_RDWR | os.O_NOFOLLOW)  # none yet: a run still making it
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: a live run's
        finally:
            os.close(fd)
        shutil.rmtree(old, ignore_errors=True)


def _private_folder(held: ExitStack, prefix: str) -> Path:
    """A folder only this process writes to (mode 0700, TMPDIR), removed when ``held`` closes (or, after a
    kill -9, by the next run: see ``_sweep``)."""
    import fcntl

    _sweep(prefix)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    held.callback(shutil.rmtree, folder, ignore_errors=True)
    # locked before it has its final name: a sweep never sees it unlocked while this run lives
    fd = os.open(folder / f"{_OWNER}.tmp", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    held.callback(os.close, fd)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(folder / f"{_OWNER}.tmp", folder / _OWNER)
    return folder


def unpack_into(loc: Located, held: ExitStack, reporter: Reporter | None = None) -> Path:
    """The archive at ``loc`` unpacked, checked against its sidecar, into a private folder; its wheelhouse folder."""
    folder = _private_folder(held, "wh-unpacked-")
    try:
        unpacked = unpack_archive(loc, folder, reporter)
        checkpoint("carry.unpacked")
        return unpacked
    except BaseException as exc:
        shutil.rmtree(folder, ignore_errors=True)  # refused: not a byte of it stays
        if isinstance(exc, OSError):  # a full disk or a quota while writing: named, never an internal error
            raise UnpackFailed(f"could not unpack {loc.whole.name} into {folder}: {exc.strerror or exc}; "
                               "nothing of it was kept", hint="free space there, or point TMPDIR at a folder with "
                               "room (TMPDIR=/big/tmp wh ...)") from exc
        raise


def _pull(ref: str, held: ExitStack, reporter: Reporter | None) -> Path:
    from .oci import pull  # the registry client: only for an oci:// source

    folder = _private_folder(held, "wh-pulled-")
    try:
        return pull(ref, folder / "wheelhouse", reporter=reporter)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def materialize(sources: Sequence[str], held: ExitStack, reporter: Reporter | None = None) -> list[Path]:
    """Each source as a wheelhouse folder (or a folder to search); temporary folders live as long as ``held``."""
    out = []
    for s in map(os.fspath, sources):
        if s.startswith(OCI_SCHEME):
            out.append(_remember(_pull(s, held, reporter), s, held))
        elif (loc := is_archive(s)) is not None:
            out.append(_remember(unpack_into(loc, held, reporter), os.path.abspath(s), held))
        else:
            out.append(Path(s))
    return out
