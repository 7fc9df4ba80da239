"""Raw deflate for wheel members: ISA-L or zlib-ng when importable (the ``fast`` extra), else stdlib zlib.

Used by ``wh install`` (extraction) and ``wh stage`` (the RECORD check of every member, lock.records).

The box waits on inflation: on 2 cores about 40% of an install's CPU was the standard
zlib, and with zlib-ng inflation was still ~75% of wh's user CPU on the 2.45 GB set (perf).
``isal.isal_zlib`` (python-isal) and ``zlib_ng.zlib_ng`` (python-zlib-ng) are drop-in
ports of CPython's zlib module (same ``decompressobj``/``crc32``, the GIL released while
they work) and inflate 3-4x faster than it. Neither is required:
without them the standard zlib does the same job, slower. ``WH_INFLATE=zlib|zlib-ng|isal``
forces one (tests run both paths; a named one that is not importable is an error, never
a silent fallback).
"""

from __future__ import annotations

import importlib
import os
import zlib
from dataclasses import dataclass
from types import ModuleType

from wheelhouse.errors import UsageError

__all__ = ["Inflater", "BACKENDS", "available", "choose"]

# Fastest first. The 2-core staging host (AMD EPYC, AVX-512), every deflated member >= 1 MiB of the
# 2.45 GB set inflated, CRC-checked and written, user CPU, 4 alternating rounds under load: ISA-L
# 9.7-11.1 s, zlib-ng 11.2-12.7 s (the 750 MB cuBLAS member alone: 1.7 s each; ISA-L gains on the
# literal-heavy CUDA libraries), the standard zlib ~3x slower.
BACKENDS = {"isal": "isal.isal_zlib", "zlib-ng": "zlib_ng.zlib_ng", "zlib": "zlib"}


# CRC-32 of 256 KiB-16 MiB pieces on the same host: zlib-ng ~15 GB/s, ISA-L ~13 GB/s, standard zlib ~2.3 GB/s.
_CRC_ORDER = ("zlib-ng", "isal", "zlib")


@dataclass(frozen=True)
class Inflater:
    """One zlib-compatible module for raw deflate (``decompressobj(-15)``) and its error class, and the
    fastest importable ``crc32`` (they all compute the same CRC-32)."""

    name: str
    module: ModuleType
    crc_module: ModuleType = zlib

    def decompressobj(self):
        return self.module.decompressobj(-15)

    def crc32(self, data, value: int = 0) -> int:
        return self.crc_module.crc32(data, value)

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        return (self.module.error, zlib.error)


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(BACKENDS[name])
    except ImportError:
        return None


def _load(name: str) -> Inflater | None:
    module = _module(name)
    if module is None:
        return None
    if name == "zlib":  # the plain path stays plain: nothing optional is used on it
        return Inflater(name, module, module)
    crc = next(m for m in (_module(n) for n in _CRC_ORDER) if m is not None)
    return Inflater(name, module, crc)


def available() -> list[str]:
    """The backends importable here, fastest first (``zlib`` is always last and always there)."""
    return [n for n in BACKENDS if _load(n) is not None]


def choose(name: str | None = None) -> Inflater:
    """The backend named (or ``$WH_INFLATE``), else the fastest importable one."""
    name = name or os.environ.get("WH_INFLATE") or None
    if name is not None:
        if name not in BACKENDS:
            raise UsageError(f"WH_INFLATE={name}: not one of {', '.join(BACKENDS)}",
                             hint="unset WH_INFLATE to use the fastest importable one")
        found = _load(name)
        if found is None:
            raise UsageError(f"WH_INFLATE={name}: {BACKENDS[name]} is not importable here",
                             hint="install the fast extra (`pip install 'wh[fast]'`) or unset WH_INFLATE")
        return found
    for n in BACKENDS:
        found = _load(n)
        if found is not None:
            return found
    raise AssertionError("the standard zlib is always importable")
