"""Bytecode the wheelhouse carries (``wh stage --bytecode``), written on the box instead of compiled.

The rules for when a pack may be used are in ``wheelhouse.lock.bytecode``; every one of them is
checked here, and anything that fails one is compiled on the box as before, with a note saying
why. One background thread reads each usable pack once: hashes it against wh.json's record, keeps
a private copy of exactly those bytes (under the environment's ``.wh/trash``, which a killed run's
recovery sweeps; removed at the end), and maps each member to the path its source is installed at.

The .pyc files themselves are written by the compile workers, in the receiving interpreter
(``bytecode._COMPILE_WORKER``): the feeding thread of a worker asks ``lookup(path)`` and tells the
worker the copy and member instead of the path alone. So writing them costs the unpacking process
no GIL time (on a 16-core box the unpacker's GIL is what its threads share), and a worker that finds a
member unusable (not code, another size) compiles the file instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Iterable, Mapping

from wheelhouse.lock.bytecode import BadPack, bytecode_record, importable, pack_listing

__all__ = ["Precompiled"]


class Precompiled:
    """Pack members by the absolute path their source is installed at: (pack copy, member, source size)."""

    def __init__(self, magic: str, cache_tag: str, site: str | None = None):
        self._magic = magic
        self._tag = cache_tag
        self._site = site
        self._copies: Path | None = None
        self._entries: dict[str, tuple[str, str, int] | None] = {}
        self._ready = threading.Event()
        self.written = 0  # set by the caller from the workers' answers
        self.notes: list[str] = []

    @classmethod
    def start(cls, todo: Iterable, interp, scheme: Mapping[str, str]) -> "Precompiled | None":
        """Start reading the packs that fit ``todo`` ((wheelhouse, locked file) pairs) and ``interp``;
        None when there are none to read (the notes then go nowhere: nothing was carried)."""
        notes: list[str] = []
        work: list[tuple[Path, object, object, Path]] = []  # (pack, its record, locked file, wheel)
        wheels = [house.path / f.path for house, f in todo]  # every one: a path two wheels write is compiled
        magic, tag = getattr(interp, "magic", ""), getattr(interp, "cache_tag", "")
        refused = _environment_refuses()
        for house, f in todo:
            record = bytecode_record(house.meta)
            if record is None:
                continue
            if refused:
                notes.append(f"{house.path}: its bytecode was not used ({refused}): compiled here")
                break
            if (record.magic, record.cache_tag) != (magic, tag):
                notes.append(f"{house.path}: its bytecode is for {record.cache_tag} (Python {record.python}), this "
                             f"interpreter is {tag or 'unknown'}: compiled here")
                continue
            pack = record.packs.get(f.filename)
            if pack is None or pack.wheel_sha256 != f.sha256:
                continue  # a wheel added or changed since the packs were made: compiled here
            work.append((house.path / pack.path, pack, f, house.path / f.path))
        notes = list(dict.fromkeys(notes))
        if not work:
            if notes:
                out = cls(magic or "00", tag)
                out.notes = notes
                out._ready.set()
                return out
            return None
        out = cls(magic, tag, scheme.get("platlib"))
        out.notes = notes
        threading.Thread(target=out._load, args=(work, wheels, scheme), name="wh-pycs", daemon=True).start()
        return out

    def _load(self, work, wheels, scheme: Mapping[str, str]) -> None:
        try:
            # Which wheel writes what: a pack's member is taken only under a name its own wheel ships, with
            # that file's size, and only where no other wheel of the batch writes the same path (the one
            # installed last wins there, and it may be one without a pack: its file is compiled).
            shipped: dict[Path, dict[str, int]] = {}
            claims: dict[str, int] = {}
            for wheel in dict.fromkeys(wheels):
                try:
                    with zipfile.ZipFile(wheel) as w:
                        shipped[wheel] = {name: size for _, name, size in importable(w)}
                except (OSError, zipfile.BadZipFile, ValueError, RuntimeError, EOFError) as exc:
                    self.notes.append(f"{Path(wheel).name} could not be read ({exc}): bytecode compiled here")
                    return  # the install refuses it anyway; nothing is taken from a pack without knowing it
                for name in shipped[wheel]:
                    dest = _dest(scheme, name)
                    if dest is not None:
                        claims[dest] = claims.get(dest, 0) + 1
            for path, pack, f, wheel in work:
                try:
                    data = Path(path).read_bytes()
                    if len(data) != pack.size or hashlib.sha256(data).hexdigest() != pack.sha256:
                        self.notes.append(f"{pack.path} is not the pack wh.json records (its sha256 differs): "
                                          f"{f.filename} compiled here; `wh verify` names what else changed")
                        continue
                    index, members = pack_listing(data)
                except (OSError, BadPack) as exc:
                    self.notes.append(f"{pack.path} could not be read ({exc}): {f.filename} compiled here")
                    continue
                if index.get("wheel_sha256") != f.sha256 or index.get("magic") != self._magic:
                    self.notes.append(f"{pack.path} was made for another wheel or Python than its record says: "
                                      f"{f.filename} compiled here")
                    continue
                try:
                    copy = self._copy(data, len(self._entries))
                except OSError as exc:
                    self.notes.append(f"no room for a private copy of {pack.path} ({exc.strerror or exc}): "
                                      f"{f.filename} compiled here")
                    continue
                sizes, own = index["files"], shipped.get(wheel, {})
                foreign = 0
                for name in members:
                    size = sizes.get(name)
                    dest = _dest(scheme, name)
                    if dest is None or type(size) is not int or own.get(name) != size:
                        foreign += 1
                        continue
                    if claims.get(dest, 0) > 1 or dest in self._entries:
                        self._entries[dest] = None  # two wheels write it: compiled, from the file installed last
                    else:
                        self._entries[dest] = (copy, name, size)
                if foreign:
                    self.notes.append(f"{pack.path} holds {foreign} member(s) that are not files of {f.filename} "
                                      "as it ships them: not used (`wh bytecode` rewrites the pack)")
        finally:
            self._ready.set()

    def _copy(self, data: bytes, n: int) -> str:
        """The verified bytes as a file only this run writes: a worker reads what was hashed, whatever
        happens to the wheelhouse meanwhile."""
        if self._copies is None:
            base = Path(self._site) / ".wh" / "trash" if self._site else None
            if base is not None:
                base.mkdir(parents=True, exist_ok=True)
            self._copies = Path(tempfile.mkdtemp(prefix="pycs-", dir=base))
        path = self._copies / f"{n}.zip"
        with open(path, "wb") as fh:
            fh.write(data)
        return str(path)

    def lookup(self, path: str) -> tuple[str, str, int] | None:
        """(pack copy, member, source size) for ``path``'s .pyc, or None: compile it (waits for the packs)."""
        self._ready.wait()
        return self._entries.pop(os.path.normpath(path), None)

    def close(self) -> None:
        """Remove the private copies (the workers are done with them)."""
        self._ready.wait()
        if self._copies is not None:
            shutil.rmtree(self._copies, ignore_errors=True)
            try:
                self._copies.parent.rmdir()  # .wh/trash, when this run made it and nothing else is there
            except OSError:
                pass
            self._copies = None

    def finished(self) -> list[str]:
        """The notes, once the packs were read (what was not used, and why)."""
        self._ready.wait()
        return list(dict.fromkeys(self.notes))


def _dest(scheme: Mapping[str, str], name: str) -> str | None:
    """The installed path of a pack member (``purelib/<path>``), or None for a name that is not one."""
    key, _, rel = name.partition("/")
    base = scheme.get(key) if key in ("purelib", "platlib") else None
    return os.path.normpath(os.path.join(base, rel)) if base and rel else None


def _environment_refuses() -> str:
    """Why py_compile on the box would write another kind of .pyc than a pack holds ('' when it would not)."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return "SOURCE_DATE_EPOCH is set, so .pyc files are hash-checked"
    if os.environ.get("PYTHONOPTIMIZE"):
        return "PYTHONOPTIMIZE is set, so .pyc files are optimized ones"
    if os.environ.get("PYTHONPYCACHEPREFIX"):
        return "PYTHONPYCACHEPREFIX is set, so .pyc files go under that folder"
    return ""
