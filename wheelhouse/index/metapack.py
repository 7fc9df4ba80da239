"""The metadata files one resolution fetched, kept as ONE pack file instead of one file each.

A cold resolve of the vLLM closure reads ~220 METADATA files; one cache file each cost a file
creation each (kernel inode allocation, up to a fifth of a cold run's CPU on a busy ext4). A
resolution now collects what it fetched and writes it once, at its end, as
``metadata/<random>.pack``; a later run loads every pack in the folder once. Packs are never
changed after they are renamed into place; when there are more than ``MAX_PACKS`` of them the next
writer merges them all into its own and removes the ones it merged.

Nothing is trusted blindly: the pack's header carries its own sha256, and every record its length
and sha256; a torn or edited pack loses the records that fail (misses: fetched again), never
answers with other bytes. A pack removed by another run's merge while this one lists the folder is
simply not read (misses again).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Mapping

from wheelhouse.faults import checkpoint
from .http.cache import store_entry

__all__ = ["load_packs", "write_pack", "MAX_PACKS"]

MAX_PACKS = 16
_MAGIC = b"wh-metadata-pack"
_FORMAT = 1


def load_packs(folder: Path) -> dict[str, bytes]:
    """Every sound record of every pack in ``folder``: key -> METADATA bytes."""
    out: dict[str, bytes] = {}
    try:
        packs = sorted(p for p in folder.iterdir() if p.suffix == ".pack")
    except OSError:
        return out
    for path in packs:
        out.update(_read_pack(path))
    return out


def _read_pack(path: Path) -> dict[str, bytes]:
    try:
        raw = path.read_bytes()
        line, sep, rest = raw.partition(b"\n")
        parts = line.split(b" ")
        if not sep or len(parts) != 4 or parts[0] != _MAGIC or parts[1] != str(_FORMAT).encode():
            return {}
        size = int(parts[3])
        head = rest[:size]
        if len(head) != size or hashlib.sha256(head).hexdigest().encode() != parts[2]:
            return {}
        records = json.loads(head)
    except (OSError, ValueError):
        return {}
    out, pos = {}, len(line) + 1 + size
    for rec in records if isinstance(records, list) else ():
        if not (isinstance(rec, list) and len(rec) == 3 and isinstance(rec[0], str) and isinstance(rec[1], int)
                and rec[1] >= 0 and isinstance(rec[2], str)):
            return out  # a header that checks but says nonsense: what came before it only
        data = raw[pos:pos + rec[1]]
        pos += rec[1]
        if len(data) == rec[1] and hashlib.sha256(data).hexdigest() == rec[2]:
            out[rec[0]] = data
    return out


def write_pack(folder: Path, entries: Mapping[str, bytes]) -> None:
    """Keep ``entries`` (key -> METADATA bytes) as one new pack in ``folder``; with more than
    MAX_PACKS there already, merged with them all. A cache that cannot be written is ignored (a
    request next time, never the run)."""
    try:
        existing = sorted(p for p in folder.iterdir() if p.suffix == ".pack")
    except OSError:
        existing = []
    merged: list[Path] = []
    if len(existing) > MAX_PACKS:
        entries = {**load_packs(folder), **entries}
        merged = existing
    keys = sorted(entries)
    head = json.dumps([[k, len(entries[k]), hashlib.sha256(entries[k]).hexdigest()] for k in keys],
                      separators=(",", ":")).encode()
    line = b"%s %d %s %d\n" % (_MAGIC, _FORMAT, hashlib.sha256(head).hexdigest().encode(), len(head))
    try:
        checkpoint("index.cache-write")
        store_entry(folder / f"{uuid.uuid4().hex}.pack", [line, head, *(entries[k] for k in keys)])
    except OSError:
        return
    for p in merged:  # only after the merged pack is in place: a crash leaves both, never neither
        with contextlib.suppress(OSError):
            os.unlink(p)
