"""Bytecode the wheelhouse carries (``wh stage --bytecode``), written on the box instead of compiled.

The rules for when a pack may be used are in ``wheelhouse.lock.bytecode``; every one of them is
checked here, and anything that fails one is compiled on the box as before, with a note saying
why. Packs are read (hashed, inflated) by one background thread while extraction starts; the
first written module waits for it.

A ``.pyc`` is written exactly as ``py_compile`` writes one: the receiving interpreter's magic,
flags 0 (timestamp-checked), the installed source's mtime and size from its ``stat``, the
pack's code; under a temp name in ``__pycache__``, then renamed; mode as py_compile's.
"""

from __future__ import annotations

import hashlib
import os
import threading
import zipfile
from pathlib import Path
from typing import Iterable, Mapping

from wheelhouse.faults import checkpoint
from wheelhouse.lock.bytecode import BadPack, bytecode_record, importable, is_code, read_pack

__all__ = ["Precompiled"]


class Precompiled:
    """Pack entries by the absolute path their source is installed at: (source size, marshal bytes)."""

    def __init__(self, magic: str, cache_tag: str):
        self._magic = bytes.fromhex(magic)
        self._tag = cache_tag
        self._entries: dict[str, tuple[int, bytes]] = {}
        self._ready = threading.Event()
        self.written = 0
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
        out = cls(magic, tag)
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
                    index, members = read_pack(data)
                except (OSError, BadPack) as exc:
                    self.notes.append(f"{pack.path} could not be read ({exc}): {f.filename} compiled here")
                    continue
                if index.get("wheel_sha256") != f.sha256 or index.get("magic") != self._magic.hex():
                    self.notes.append(f"{pack.path} was made for another wheel or Python than its record says: "
                                      f"{f.filename} compiled here")
                    continue
                sizes, own = index["files"], shipped.get(wheel, {})
                foreign = bad = 0
                for name, code in members.items():
                    size = sizes.get(name)
                    dest = _dest(scheme, name)
                    if dest is None or type(size) is not int or own.get(name) != size:
                        foreign += 1
                        continue
                    if not is_code(code):
                        self._entries[dest] = (-1, b"")  # not a code object: as a .pyc, every import would fail
                        bad += 1
                        continue
                    if claims.get(dest, 0) > 1 or dest in self._entries:
                        self._entries[dest] = (-1, b"")
                    else:
                        self._entries[dest] = (size, code)
                if foreign:
                    self.notes.append(f"{pack.path} holds {foreign} member(s) that are not files of {f.filename} "
                                      "as it ships them: not used (`wh bytecode` rewrites the pack)")
                if bad:
                    self.notes.append(f"{pack.path} holds {bad} member(s) that are not compiled code: those files "
                                      "compiled here (`wh bytecode` rewrites the pack)")
        finally:
            self._ready.set()

    def finished(self) -> list[str]:
        """The notes, once the packs were read (what was not used, and why)."""
        self._ready.wait()
        return list(dict.fromkeys(self.notes))

    def write(self, path: str) -> bool:
        """Write ``path``'s .pyc from its pack; False when there is none (or it does not fit): compile it."""
        self._ready.wait()
        hit = self._entries.pop(os.path.normpath(path), None)
        if hit is None or hit[0] < 0:
            return False
        size, code = hit
        try:
            st = os.stat(path)
        except OSError:
            return False
        if st.st_size != size:
            return False
        head = (self._magic + b"\0\0\0\0" + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                + (size & 0xFFFFFFFF).to_bytes(4, "little"))
        folder, name = os.path.split(path)
        cache = os.path.join(folder, "__pycache__")
        pyc = os.path.join(cache, f"{name[:-3]}.{self._tag}.pyc")
        # Ends in .pyc: a run killed here leaves a file the rollback's bytecode sweep removes (never imported).
        tmp = os.path.join(cache, f"{name[:-3]}.{self._tag}.{threading.get_ident()}.tmp.pyc")
        try:
            os.makedirs(cache, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                         (st.st_mode | 0o200) & 0o666)
            try:
                buf = memoryview(head + code)
                while buf:
                    buf = buf[os.write(fd, buf):]
            finally:
                os.close(fd)
            checkpoint("install.pyc-from-pack")
            os.replace(tmp, pyc)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        self.written += 1
        return True


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
