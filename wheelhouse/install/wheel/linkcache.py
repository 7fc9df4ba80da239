"""The verified extraction cache: hardlinks when one wheelhouse is installed into several venvs.

Opt-in (``ENABLED_BY_DEFAULT``). After a wheel's files were extracted into a venv and checked,
each of them is hardlinked into ``<cache>/unpacked/<sha256[:2]>/<sha256>/files/`` (by the
worker that wrote the wheel's last file, while other wheels are still being extracted) and a
manifest records every file's (archive name, size, mtime_ns, inode, device, mode): no byte is
written twice. The entry appears whole or not at all, and only once every wheel of the batch
had the lock's sha256: it is built in a private folder and renamed into place; a concurrent
install that built the same entry loses the rename and discards its own.

The next install of the same wheel (same sha256) into another venv on the same filesystem
links each of those files into the venv instead of inflating and writing it again, and then
checks the venv's new name with ``lstat``: a regular file, owned by this user, with the
manifest's inode, device, size, mtime and mode. The check is made on the link just created,
so the inode checked is the inode installed (no window between a check and a link). A file
that differs (written in place by anyone: its mtime moved; replaced: another inode; chmod-ed)
is unlinked again and the rest of that wheel is extracted from the wheel as usual; the entry
is replaced afterwards. A cache on another filesystem (EXDEV) is not used, silently.

Never linked, always written per venv: ``.data/scripts`` (their shebang names this venv's
interpreter), ``.pyc`` files, and the dist-info files an install writes itself (INSTALLER,
REQUESTED, RECORD, direct_url.json). wh never writes into an existing inode (``create_new``
unlinks first; patches replace the file), so linked inodes are only ever read by wh.

What the check does not catch: a file changed in place whose mtime was then set back (a
deliberate ``touch -d``/``os.utime``), or changed within the filesystem's timestamp tick of
its extraction; a manifest edited to match a replaced file. Whoever can write the cache can
choose what gets installed, as with any installer's cache; it lives in the user's own cache
folder, created private (0700). Removing it (or any entry) only unlinks names: venvs keep
their files.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from wheelhouse.cachedir import default_cache_dir
from wheelhouse.faults import checkpoint
from wheelhouse.fileidentity import FileIdentity, file_identity

__all__ = ["ENV", "ENABLED_BY_DEFAULT", "default_dir", "enabled", "linkable", "Manifest", "LinkCache", "FileStat", "Linking", "Staged"]

ENV = "WH_LINK_CACHE"
# Decided by measurement (docs/install-cache.md): adding a first install's files to the cache (a
# hardlink each) costs it ~5% of its CPU on the 900 MB set, and the box's usual case is one install:
# opt-in (--link-cache, WH_LINK_CACHE=1) where one wheelhouse goes into several venvs.
ENABLED_BY_DEFAULT = False
_SCHEMA = "wh-unpacked/1"
_MAX_NLINK = 60000  # ext4 refuses past 65000 (EMLINK); an entry near that is not used
_MAX_WHEEL_FILES = 8  # wheel files remembered per entry (copies of one wheel in several wheelhouses)


def default_dir() -> Path:
    """The extraction cache's folder: ``unpacked/`` in wh's cache (``$WH_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/wh``, else ``~/.cache/wh``)."""
    return default_cache_dir() / "unpacked"


def enabled(flag: bool | None) -> bool:
    """Whether to use the cache: the flag, else ``$WH_LINK_CACHE`` (1/0, true/false), else the default."""
    if flag is not None:
        return flag
    raw = os.environ.get(ENV, "").strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    return ENABLED_BY_DEFAULT


_PER_VENV = ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json")


def linkable(name: str, dist_info: str, script: bool) -> bool:
    """Whether an archive member may be shared by hardlink: not a script (shebang rewritten per venv),
    not bytecode, not a dist-info file an install writes itself."""
    if script or name.endswith(".pyc"):
        return False
    head, _, tail = name.rpartition("/")
    return not (head == dist_info and tail in _PER_VENV)


@dataclass(frozen=True)
class FileStat:
    """What a cached file must still be: ``os.stat_result`` fields the manifest keeps."""

    size: int
    mtime_ns: int
    ino: int
    dev: int
    mode: int  # permission bits

    @classmethod
    def of(cls, st: os.stat_result) -> "FileStat":
        return cls(st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, stat.S_IMODE(st.st_mode))

    def matches(self, st: os.stat_result) -> bool:
        return (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and 1 <= st.st_nlink <= _MAX_NLINK
                and FileStat.of(st) == self)


@dataclass(frozen=True)
class Manifest:
    """One entry: where its files are and what each must still be."""

    folder: Path  # the entry's files/ folder
    sha256: str
    files: Mapping[str, FileStat]
    # The identity (``fileidentity.file_identity``) of each wheelhouse file whose whole sha256 was found to be
    # this entry's, most recent last: a wheel file with one of these identities is passed as checked.
    wheel_files: tuple[FileIdentity, ...] = ()


def _parse(data: object, sha256: str) -> dict[str, FileStat] | None:
    """The files of a manifest, or None when it is not one wh wrote for this sha256 (torn, edited, other)."""
    if not isinstance(data, dict) or data.get("schema") != _SCHEMA or data.get("sha256") != sha256:
        return None
    rows = data.get("files")
    if not isinstance(rows, dict):
        return None
    out: dict[str, FileStat] = {}
    for name, row in rows.items():
        if not isinstance(name, str) or not _ints(row, 5):
            return None
        out[name] = FileStat(*row)
    return out


def _ints(row: object, n: int) -> bool:
    return isinstance(row, list) and len(row) == n and all(type(v) is int and v >= 0 for v in row)


def _wheel_files(data: dict) -> tuple[FileIdentity, ...] | None:
    """The identities of wheel files whose sha256 was checked (``wheel_files``; none in an older manifest),
    or None when the field is there but not wh's."""
    rows = data.get("wheel_files", [])
    if not isinstance(rows, list) or len(rows) > _MAX_WHEEL_FILES or not all(_ints(r, 5) for r in rows):
        return None
    return tuple(tuple(r) for r in rows)


class LinkCache:
    """The cache at ``root`` (``default_dir()``): entries by sha256, built privately and renamed into place."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._tmp = self.root / ".tmp"
        self._swept = False
        self._lock = threading.Lock()

    def entry(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def usable_for(self, folder: str) -> bool:
        """Whether links from the cache into ``folder`` can work: the same filesystem (else EXDEV), and a
        cache folder that is a real, private folder of this user. Creates the cache folder."""
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            st = os.lstat(self.root)
            return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
                    and st.st_dev == os.stat(folder).st_dev)
        except OSError:
            return False

    def lookup(self, sha256: str) -> Manifest | None:
        """The entry for ``sha256`` with its manifest, or None (none, unreadable, or not wh's)."""
        folder = self.entry(sha256)
        try:
            data = json.loads((folder / "manifest.json").read_bytes())
        except (OSError, ValueError, RecursionError):  # (nested too deep: not wh's)
            return None
        files = _parse(data, sha256)
        wheel_files = _wheel_files(data) if files is not None else None
        return None if wheel_files is None else Manifest(folder / "files", sha256, files, wheel_files)

    def link(self, manifest: Manifest, name: str, dest: str, mode: int, size: int) -> os.stat_result | None:
        """Hardlink the entry's ``name`` at ``dest`` and check the link made (see the module docstring).

        Returns the new name's stat, or None when the file is not the manifest's (nothing left at ``dest``).
        Raises OSError when linking itself fails (EXDEV, EMLINK, a missing file): the caller extracts.
        """
        want = manifest.files.get(name)
        if want is None or want.mode != mode or want.size != size:  # the wheel's RECORD size, and the mode wh gives
            return None
        src = os.path.join(manifest.folder, name)
        try:
            os.link(src, dest, follow_symlinks=False)
        except FileExistsError:
            os.unlink(dest)  # never write into an existing inode; journaled by the caller
            os.link(src, dest, follow_symlinks=False)
        st = os.lstat(dest)
        if want.matches(st):
            return st
        os.unlink(dest)
        return None

    # ---- populating ------------------------------------------------------------------------------

    def _sweep(self) -> None:
        """Private folders of runs that died while building an entry (their pid is gone)."""
        with self._lock:
            if self._swept:
                return
            self._swept = True
        try:
            children = list(self._tmp.iterdir())
        except OSError:
            return
        for child in children:
            pid = child.name.split(".")[1] if child.name.count(".") >= 2 else ""
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(child, ignore_errors=True)  # unlinks names only

    def stage(self, sha256: str, files: Iterable[tuple[str, str, os.stat_result]],
              replace: bool = False) -> "Staged | None":
        """Hardlink installed files ``(archive name, installed path, its stat when it was checked)`` into a
        private folder for the entry of ``sha256`` (not visible until ``publish``). None when an entry is
        already there (unless it is to ``replace`` a stale one) or linking fails (nothing half-made is left)."""
        self._sweep()
        if not replace and self.entry(sha256).exists():
            return None
        work = self._tmp / f"{sha256}.{os.getpid()}.{time.time_ns()}.{threading.get_ident()}"
        rows: dict[str, list[int]] = {}
        try:
            os.makedirs(work / "files", mode=0o700)
            files = list(files)
            top = os.path.join(work, "files")
            dirs: set[str] = set()
            for name, _, _ in files:
                d = os.path.dirname(name)
                while d and d not in dirs:
                    dirs.add(d)
                    d = os.path.dirname(d)
            for d in sorted(dirs):  # a parent sorts before its children
                os.mkdir(os.path.join(top, d), 0o700)
            for name, path, st in files:
                # the manifest keeps the stat taken when the file was checked: an inode replaced or written
                # since then fails the check on reuse, so the link needs no second look here
                os.link(path, os.path.join(top, name), follow_symlinks=False)
                rows[name] = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, stat.S_IMODE(st.st_mode)]
        except OSError:
            shutil.rmtree(work, ignore_errors=True)
            return None
        return Staged(sha256, work, rows)

    def publish(self, staged: "Staged", wheel: str, replace: bool = False,
                wheel_files: Iterable[FileIdentity] = ()) -> bool:
        """Write the manifest and rename the staged folder into place (atomic). ``replace``: the entry there
        failed its check; it is moved aside first. ``wheel_files``: the identities of wheel files whose sha256
        was found to be the entry's. False: another run's entry won the rename (or the cache cannot be
        written); the staged folder is removed."""
        work, final = staged.folder, self.entry(staged.sha256)
        try:
            body = json.dumps({"schema": _SCHEMA, "sha256": staged.sha256, "wheel": wheel, "files": staged.rows,
                               "wheel_files": [list(i) for i in wheel_files][-_MAX_WHEEL_FILES:]})
            with open(work / "manifest.json", "xb") as fh:
                fh.write(body.encode())
            final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if replace:
                self._discard(final)
            checkpoint("install.linkcache.before-rename")
            os.rename(work, final)  # atomic; fails when another run's entry is already there
            return True
        except OSError:
            shutil.rmtree(work, ignore_errors=True)
            return False

    def remember(self, manifest: Manifest, identity: FileIdentity) -> bool:
        """Add ``identity`` (a wheel file whose whole sha256 this run found to be the entry's) to the entry's
        ``wheel_files``: the manifest is written beside it and renamed over it. Only when the entry on disk is
        still the one ``manifest`` was read from (same files); False when not, or it cannot be written."""
        now = self.lookup(manifest.sha256)
        if now is None or now.files != manifest.files:
            return False
        if identity in now.wheel_files:
            return True
        path = self.entry(manifest.sha256) / "manifest.json"
        tmp = path.with_name(f".manifest.{os.getpid()}.{time.time_ns()}.{threading.get_ident()}")
        try:
            data = json.loads(path.read_bytes())
            data["wheel_files"] = [list(i) for i in (*now.wheel_files, identity)][-_MAX_WHEEL_FILES:]
            with open(tmp, "xb") as fh:
                fh.write(json.dumps(data).encode())
            os.replace(tmp, path)
            return True
        except (OSError, ValueError, RecursionError):
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False

    def drop(self, staged: "Staged") -> None:
        shutil.rmtree(staged.folder, ignore_errors=True)

    def _discard(self, entry: Path) -> None:
        """Move a stale entry out of the way (an atomic rename), then unlink its names."""
        gone = self._tmp / f"stale.{os.getpid()}.{time.time_ns()}"
        try:
            self._tmp.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.rename(entry, gone)
        except OSError:
            return
        shutil.rmtree(gone, ignore_errors=True)


@dataclass(frozen=True)
class Staged:
    """An entry built in a private folder, not yet renamed into place."""

    sha256: str
    folder: Path
    rows: Mapping[str, list[int]]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _umask() -> int:
    """This process's umask (what a created file's mode loses), read without changing it (Linux), else
    by setting and restoring it before any worker thread runs."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


class Linking:
    """One batch's use of the cache: the entries found for its wheels, which of them failed a check,
    the stat of every file installed (to add entries afterwards), and how many files were linked."""

    def __init__(self, cache: LinkCache, manifests: Mapping[Path, Manifest], keys: Mapping[Path, str]):
        self.cache = cache
        self.manifests = dict(manifests)  # wheel -> the entry to link its files from
        self.keys = dict(keys)  # wheel -> the lock's sha256 (the entry's name)
        self.stale: set[Path] = set()  # wheels whose entry failed a check: extracted, the entry replaced
        self.stats: dict[str, os.stat_result] = {}  # installed path -> its stat once checked
        self.linked: dict[Path, int] = {}
        self.staged: dict[Path, Staged] = {}  # wheel -> its entry, built, waiting for the batch's hashes
        self.off = False  # EXDEV met: no more links this batch
        # wheel -> the identity of the file whose whole sha256 this batch computed (the entry remembers it)
        self.hashed: dict[Path, FileIdentity] = {}
        # wheel -> the identity its entry remembers and the file still has: passed as checked, not read whole
        self.trusted: dict[Path, FileIdentity] = {}
        self.umask = _umask()
        self._lock = threading.Lock()

    def trust(self, plans) -> dict[Path, FileIdentity]:
        """The wheels whose whole sha256 need not be read again: the entry of the lock's sha256 remembers a
        wheel file with the identity (device, inode, size, mtime_ns, ctime_ns) that the plan was read from and
        that the file at the path still has. Extraction opens such a wheel only if that identity is still
        there (``verified``'s pin). Any write, rename over, ``touch`` or ``chmod`` moves the ctime: hashed."""
        for plan in plans:
            manifest = self.manifests.get(plan.wheel)
            if manifest is None or plan.identity is None or plan.identity not in manifest.wheel_files:
                continue
            try:
                now = file_identity(os.stat(plan.wheel))
            except OSError:
                continue
            if now == plan.identity:
                self.trusted[plan.wheel] = now
        return dict(self.trusted)

    def hashed_file(self, wheel: Path, identity: FileIdentity | None) -> None:
        """Extraction computed ``wheel``'s whole sha256 from the file with ``identity`` (None: it changed while
        it was read): remembered in the entry once the batch's hashes all matched."""
        if identity is not None:
            with self._lock:
                self.hashed[wheel] = identity

    def entry_for(self, wheel: Path) -> Manifest | None:
        if self.off or wheel in self.stale:
            return None
        return self.manifests.get(wheel)

    def try_link(self, wheel: Path, manifest: Manifest, name: str, dest: str, mode: int,
                 size: int) -> os.stat_result | None:
        """Link ``name`` of ``wheel``'s entry at ``dest`` (checked), or None: then the caller extracts it,
        and the rest of that wheel (the entry is replaced afterwards)."""
        try:
            st = self.cache.link(manifest, name, dest, mode & ~self.umask, size)
        except OSError as exc:
            if exc.errno == 18:  # EXDEV: a mount boundary inside the venv; the entry is fine
                self.off = True
                return None
            st = None
        if st is None:
            with self._lock:
                self.stale.add(wheel)
            return None
        with self._lock:
            self.linked[wheel] = self.linked.get(wheel, 0) + 1
        return st

    def stage(self, plan) -> None:
        """Called by the worker that wrote a wheel's last file: hardlink its files into a private folder
        for its entry (overlapping the rest of the extraction), when it had no entry or a stale one."""
        sha = self.keys.get(plan.wheel)
        if sha is None or self.off or (plan.wheel in self.manifests and plan.wheel not in self.stale):
            return
        # a member another wheel of the batch writes holds that wheel's bytes: no entry for this one
        if any(not m.write for m in plan.members):
            return
        rows = [(m.name, m.dest, self.stats.get(m.dest)) for m in plan.members
                if linkable(m.name, plan.dist_info, m.script)]
        if any(st is None for _, _, st in rows):
            return
        staged = self.cache.stage(sha, rows, replace=plan.wheel in self.stale)
        if staged is not None:
            with self._lock:
                self.staged[plan.wheel] = staged

    def publish(self, plans) -> int:
        """The batch's wheels all have the lock's sha256: put the staged entries in place. Returns how many."""
        names = {p.wheel: p.wheel.name for p in plans}
        done = 0
        for wheel, staged in self.staged.items():
            known = self.hashed.get(wheel) or self.trusted.get(wheel)
            done += self.cache.publish(staged, names.get(wheel, wheel.name), replace=wheel in self.stale,
                                       wheel_files=[known] if known is not None else ())
        for wheel, identity in self.hashed.items():  # an entry that was used as it is: it learns this file
            manifest = self.manifests.get(wheel)
            if wheel not in self.staged and wheel not in self.stale and manifest is not None \
                    and identity not in manifest.wheel_files:
                self.cache.remember(manifest, identity)
        self.staged.clear()
        return done

    def discard(self) -> None:
        """The batch failed: nothing it staged becomes an entry."""
        for staged in self.staged.values():
            self.cache.drop(staged)
        self.staged.clear()
