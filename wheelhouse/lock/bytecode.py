"""Bytecode compiled where the network is: one pack per wheel under ``bytecode/<cache tag>/``.

``wh install --compile`` on the box spends most of its time in ``compile()`` (38 CPU-seconds for
a 900 MB serving stack, the same in wh, pip and uv). The compile's output depends only on the
source bytes and the interpreter's bytecode version (its magic number), both known when the
wheelhouse is staged. So ``wh stage --bytecode`` (or ``wh bytecode WHEELHOUSE``) compiles every
importable ``.py`` file of every wheel once, with an interpreter of the target's Python version,
and the box only writes the results.

A pack is a zip file (deflated) named after its wheel, ``bytecode/cpython-312/<wheel>.zip``:

- ``wh-bytecode.json``: the wheel's filename and sha256, the magic number and cache tag it was
  compiled for, and ``files``: install-relative name -> source size in bytes;
- one member per compiled file, named ``purelib/<path>`` or ``platlib/<path>`` (where the wheel
  puts it), holding ``marshal.dumps(code)``: the body of a ``.pyc`` after its 16-byte header.

The header (magic, flags, source mtime, source size) is written on the box, from the installed
source's own ``stat``: the pyc is then exactly what ``py_compile`` would have written there,
except for the file name inside the code object, which the import system replaces with the real
path on every load (``_imp._fix_co_filename``).

``wh.json["bytecode"]`` records each pack with its sha256, size and the wheel sha256 it was
compiled from. A pack is used only when all of these hold; anything else (another interpreter,
a wheel that changed, a pack that changed) falls back to compiling on the box, with a note:

- the receiving interpreter's magic number and cache tag are the record's;
- the wheel being installed has the sha256 the pack was compiled from (install checks every
  wheel's sha256 anyway);
- the pack's own sha256 is the record's;
- each source file has the size the pack says (checked against the installed file).
- each member names a ``.py`` file its own wheel ships there (``importable``), with that file's size, and
  holds a code object; a path another wheel of the install also writes is compiled.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["BYTECODE", "INDEX", "BadPack", "PackRecord", "BytecodeRecord", "bytecode_record", "importable", "is_code", "pack_name",
           "pack_listing", "FORMAT"]

BYTECODE = "bytecode"  # the folder, relative to the wheelhouse
INDEX = "wh-bytecode.json"  # the pack's own index member
FORMAT = "wh-bytecode/1"


def pack_name(cache_tag: str, wheel_filename: str, wheel_sha256: str | None = None) -> str:
    """The pack's path relative to the wheelhouse: ``bytecode/cpython-312/<wheel>.zip``; with
    ``wheel_sha256``, the other name a pack may have, ``<wheel>.<sha256[:16]>.zip``: a run that
    replaces a pack wh.json lists writes there, so the listed one stays until the record changes."""
    stem = wheel_filename[:-len('.whl')] if wheel_filename.endswith('.whl') else wheel_filename
    return f"{BYTECODE}/{cache_tag}/{stem}{'.' + wheel_sha256[:16] if wheel_sha256 else ''}.zip"


@dataclass(frozen=True)
class PackRecord:
    wheel: str  # the wheel's filename
    wheel_sha256: str
    path: str  # relative to the wheelhouse
    sha256: str
    size: int
    files: int

    def to_json(self) -> dict[str, Any]:
        return {"wheel": self.wheel, "wheel_sha256": self.wheel_sha256, "path": self.path, "sha256": self.sha256,
                "size": self.size, "files": self.files}


@dataclass(frozen=True)
class BytecodeRecord:
    """wh.json's ``bytecode``: for which interpreter, and one pack per wheel (by filename)."""

    magic: str  # hex of importlib.util.MAGIC_NUMBER
    cache_tag: str  # sys.implementation.cache_tag, e.g. cpython-312
    python: str  # the compiling interpreter's full version, for the humans
    packs: Mapping[str, PackRecord]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "magic": self.magic, "cache_tag": self.cache_tag, "python": self.python,
                "packs": {k: v.to_json() for k, v in sorted(self.packs.items())}}


def bytecode_record(meta: Mapping[str, Any] | None) -> BytecodeRecord | None:
    """The record in a wh.json, or None when there is none or it is not one wh can read (then nothing
    of it is used: the box compiles, as without one)."""
    data = (meta or {}).get("bytecode")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    try:
        packs = {str(k): PackRecord(str(v["wheel"]), str(v["wheel_sha256"]), str(v["path"]), str(v["sha256"]),
                                    int(v["size"]), int(v["files"]))
                 for k, v in dict(data["packs"]).items()}
        return BytecodeRecord(str(data["magic"]), str(data["cache_tag"]), str(data.get("python", "")), packs)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def importable(w: zipfile.ZipFile) -> list[tuple[str, str, int]]:
    """(member, pack name, source size) of each ``.py`` file the wheel puts under purelib or platlib.

    The producer compiles these; the box accepts a pack's member only under a name this gives for
    the wheel being installed (a pack can never put code at a path its wheel does not ship)."""
    root, stem = "purelib", None
    for n in w.namelist():  # as the installer reads it: Root-Is-Purelib absent means true
        parts = n.split("/")
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "WHEEL":
            stem = parts[0][:-len(".dist-info")]
            for line in w.read(n).decode("utf-8", "replace").splitlines():
                key, _, value = line.partition(":")
                if key.strip().lower() == "root-is-purelib" and value.strip():
                    root = "purelib" if value.strip().lower() == "true" else "platlib"
            break
    out = []
    for info in w.infolist():
        n = info.filename
        if not n.endswith(".py") or info.is_dir():
            continue
        parts = n.split("/")
        if stem is not None and parts[0] == f"{stem}.data" and len(parts) > 2:
            if parts[1] not in ("purelib", "platlib"):
                continue  # scripts, data, headers: not importable modules
            out.append((n, f"{parts[1]}/{'/'.join(parts[2:])}", info.file_size))
        else:
            out.append((n, f"{root}/{n}", info.file_size))
    return out


def is_code(blob: bytes) -> bool:
    """Whether ``blob`` can be a marshalled code object (TYPE_CODE, with or without FLAG_REF, and more than a
    header): the cheap check that keeps a damaged member from becoming a .pyc every import of it fails on."""
    return isinstance(blob, bytes) and len(blob) > 32 and blob[0] & 0x7F == 0x63


class BadPack(ValueError):
    """A pack whose contents are not what its index says."""


def pack_listing(data: bytes) -> tuple[dict[str, Any], list[str]]:
    """A pack's index and its member names, nothing inflated but the index (the box's compile workers read
    the members); raises BadPack when they disagree or the bytes are not a pack."""
    import io

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            index = json.loads(z.read(INDEX))
            names = [n for n in z.namelist() if n != INDEX]
    except Exception as exc:  # zlib.error, an encrypted or unknown-method member, ...: all one "bad pack"
        raise BadPack(str(exc) or exc.__class__.__name__) from exc
    if not isinstance(index, dict) or index.get("format") != FORMAT or not isinstance(index.get("files"), dict):
        raise BadPack(f"{INDEX} is not a {FORMAT} index")
    if set(names) != set(index["files"]) or len(names) != len(set(names)):
        raise BadPack("its members are not the ones its index lists")
    return index, names
