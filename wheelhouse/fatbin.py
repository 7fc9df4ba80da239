"""CUDA device code inside a shared object: which SASS architectures and PTX versions it embeds.

nvcc puts a fatbin container into the ``.nv_fatbin`` section (``__nv_relfatbin``
for relocatable device code; a device-linked library has both, and the
runtime loads ``.nv_fatbin``). A section holds one container per compilation
unit, one after another; each container is a 16-byte header (magic
``0xBA55ED50``, version, header size, size of what follows) and entries, each
with its own header: kind (1 PTX, 2 ELF = SASS, 8 LTO-IR), PTX ISA or cubin
version, sm arch, flags (``a`` arch-specific, ``f`` family-specific,
compressed) and the payload size. Only entry headers are read (payloads may be
compressed; arch and kind are enough), seeking past the payloads, so a
library with hundreds of megabytes of kernels costs a few thousand small reads.

Whether code runs on a GPU of compute capability ``sm`` (CUDA C Programming
Guide, "Binary Compatibility" / "Application Compatibility"):

- SASS ``sm_XY`` runs on the same major X with minor >= Y; ``sm_XYf`` likewise
  (its family); ``sm_XYa`` only on exactly sm_XY;
- PTX ``compute_XY`` is JIT-compiled by the driver for any sm >= XY (``a``:
  exactly XY, ``f``: the same family), if the driver knows its PTX ISA
  version (ISA 7.x came with CUDA 11, 8.x with 12, 9.x with 13);
- LTO-IR is not loadable by the driver on its own and is ignored.

The public face for other checks: :func:`device_code` and
:meth:`DeviceCode.runs_on` (e.g. is ``sgl_kernel/sm100/common_ops.so``
deliberately unloadable on this sm_89 card?).
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO, Callable

from .elf import BadElf, read_elf

__all__ = ["FATBIN_MAGIC", "FatbinEntry", "DeviceCode", "KernelGap", "device_code", "parse_fatbin", "sm_number",
           "kernel_gaps"]

FATBIN_MAGIC = 0xBA55ED50
_MAGIC_BYTES = struct.pack("<I", FATBIN_MAGIC)
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries that follow
# kind, version, header size, payload size, compressed size, (options offset), minor, major, arch,
# name offset, name length, flags
_ENTRY = struct.Struct("<HHIQIIHHIIIQ")
_KINDS = {1: "ptx", 2: "sass", 8: "ltoir"}
_FLAG_ARCH_SPECIFIC = 0x100000  # sm_90a / compute_90a
_FLAG_FAMILY = 0x200000  # sm_100f / compute_100f
_SCAN_CHUNK = 1 << 16


def sm_number(value: str | int) -> int:
    """``"8.9"``, ``"sm_89"``, ``"89"`` or ``89`` -> ``89`` (major * 10 + minor)."""
    if isinstance(value, int):
        return value
    text = value.strip().lower().removeprefix("sm_").removeprefix("compute_").rstrip("af")
    if "." in text:
        major, minor = text.split(".", 1)
        return int(major) * 10 + int(minor)
    return int(text)


def _required_cuda_major(ptx_isa: tuple[int, int]) -> int | None:
    major = ptx_isa[0]
    return major + 4 if major >= 7 else None  # ISA 7.x: CUDA 11, 8.x: 12, 9.x: 13


@dataclass(frozen=True)
class FatbinEntry:
    """One image in a fatbin: SASS for ``sm_<arch><suffix>`` or PTX for ``compute_<arch><suffix>``."""

    kind: str  # "sass" | "ptx" | "ltoir" | "kind-<n>"
    arch: int  # 90 for sm_90
    suffix: str = ""  # "", "a" (arch-specific) or "f" (family-specific)
    version: tuple[int, int] = (0, 0)  # PTX ISA for PTX, cubin format for SASS

    @property
    def name(self) -> str:
        prefix = "compute_" if self.kind == "ptx" else "sm_"
        return f"{prefix}{self.arch}{self.suffix}"

    def runs_on(self, sm: str | int, driver_cuda: str | None = None) -> bool:
        """Can a GPU of compute capability ``sm`` run this image (PTX: through the driver's JIT)?"""
        sm = sm_number(sm)
        if self.kind == "sass":
            if self.suffix == "a":
                return sm == self.arch
            return sm // 10 == self.arch // 10 and sm % 10 >= self.arch % 10
        if self.kind == "ptx":
            if self.suffix == "a" and sm != self.arch:
                return False
            if self.suffix == "f" and sm // 10 != self.arch // 10:
                return False
            if sm < self.arch:
                return False
            need = _required_cuda_major(self.version)
            if driver_cuda and need is not None:
                try:
                    return int(driver_cuda.split(".")[0]) >= need
                except ValueError:
                    return True
            return True
        return False


@dataclass(frozen=True)
class DeviceCode:
    """The device code one shared object embeds: sorted SASS and PTX architectures, and every entry."""

    sass: tuple[int, ...]
    ptx: tuple[int, ...]
    entries: tuple[FatbinEntry, ...] = ()
    # Images found outside the fatbin sections, which the library loads itself (cuFFT keeps its PTX in
    # .ldata and hands it to the driver): only looked for when asked (``device_code(path, deep=True)``).
    self_loaded: int = 0

    @classmethod
    def of(cls, entries: tuple[FatbinEntry, ...], self_loaded: tuple[FatbinEntry, ...] = ()) -> "DeviceCode":
        """Each distinct image once (libtorch_cuda.so repeats the same few in ~20,000 kernels' containers)."""
        every = tuple(dict.fromkeys((*entries, *self_loaded)))
        return cls(sass=tuple(sorted({e.arch for e in every if e.kind == "sass"})),
                   ptx=tuple(sorted({e.arch for e in every if e.kind == "ptx"})), entries=every,
                   self_loaded=len(self_loaded))

    def runs_on(self, sm: str | int, driver_cuda: str | None = None) -> bool:
        """Is there an image that a GPU of compute capability ``sm`` can run (SASS, or PTX to JIT)?"""
        return self.runner(sm, driver_cuda) is not None

    def runner(self, sm: str | int, driver_cuda: str | None = None) -> FatbinEntry | None:
        """The image the driver would pick for ``sm``: the newest matching SASS, else the newest PTX."""
        usable = [e for e in self.entries if e.runs_on(sm, driver_cuda)]
        usable.sort(key=lambda e: (e.kind == "sass", e.arch))
        return usable[-1] if usable else None

    def names(self) -> tuple[str, ...]:
        """``("sm_80", "sm_90a", "compute_90")``: distinct images, SASS first."""
        seen = dict.fromkeys(e.name for e in sorted(self.entries, key=lambda e: (e.kind != "sass", e.arch, e.suffix))
                             if e.kind in ("sass", "ptx"))
        return tuple(seen)

    def images(self) -> str:
        """``"sm_80, sm_90, PTX compute_90"`` (for a sentence), or ``"LTO-IR"``."""
        names = [n if n.startswith("sm_") else f"PTX {n}" for n in self.names()]
        return ", ".join(names) or "LTO-IR"

    def describe(self) -> str:
        """``"sm_80, sm_90; PTX compute_90"``, or what there is when neither."""
        sass = [n for n in self.names() if n.startswith("sm_")]
        ptx = [n for n in self.names() if n.startswith("compute_")]
        parts = []
        if sass:
            parts.append(", ".join(sass))
        if ptx:
            parts.append("PTX " + ", ".join(ptx))
        text = "; ".join(parts) or "no SASS or PTX (LTO-IR only)"
        if self.self_loaded:
            text += f" ({self.self_loaded} image(s) outside its fatbin section, loaded by the library itself)"
        return text

    def to_json(self) -> dict:
        return {"sass": [n for n in self.names() if n.startswith("sm_")],
                "ptx": [n for n in self.names() if n.startswith("compute_")]}


@dataclass(frozen=True)
class KernelGap:
    """A shared object with device code that a GPU of compute capability ``sm`` cannot run."""

    path: str  # as the caller named it (a RECORD path, an archive member)
    code: DeviceCode
    sm: int
    driver_cuda: str | None = None
    variant_of: str | None = None  # a same-named object elsewhere in the same package that does run there

    @property
    def older_only(self) -> bool:
        """Only SASS for older majors, no PTX: nothing runs here (a launch returns cudaError 209). The doctor
        fails it unless ``doctor/kernels.toml`` names the gap as harmless (cuFFTW's sm_75-only fatbin); staging
        only warns (the wheelhouse may serve older GPUs too)."""
        return not self.code.ptx and bool(self.code.sass) and all(a // 10 < self.sm // 10 for a in self.code.sass)

    def sentence(self, gpu: str = "this GPU") -> str:
        """``sgl_kernel/sm100/common_ops.so has kernels for sm_100 only; this GPU is sm_89``."""
        text = f"{self.path} has kernels for {self.code.images()} only; {gpu} is sm_{self.sm}"
        jit = [e for e in self.code.entries if e.kind == "ptx" and e.runs_on(self.sm)]
        if jit:  # the arch would JIT, the driver is too old for the PTX ISA
            need = _required_cuda_major(jit[0].version)
            text += (f" and its PTX (ISA {jit[0].version[0]}.{jit[0].version[1]}) needs a CUDA {need} driver, "
                     f"this one supports CUDA {self.driver_cuda}")
        if self.variant_of:
            text += f" (an architecture variant: {self.variant_of} runs there)"
        return text


def kernel_gaps(objects: dict[str, DeviceCode], sms, driver_cuda: str | None = None) -> list[KernelGap]:
    """Every (object, sm) with no image the GPU can run, among the objects of ONE package (path -> code).

    An object whose same-named sibling elsewhere in the package runs on that sm is an architecture variant
    the package picks between at run time (``sgl_kernel/sm100/common_ops.so`` beside
    ``sgl_kernel/common_ops.so``): its gap carries ``variant_of`` and is not a failure.
    LTO-IR-only objects are left out: nvJitLink turns them into code at run time, nothing to judge.
    """
    gaps: list[KernelGap] = []
    for sm in sorted({sm_number(s) for s in sms}):
        for path, code in objects.items():
            if not (code.sass or code.ptx) or code.runs_on(sm, driver_cuda):
                continue
            base = path.rsplit("/", 1)[-1]
            sibling = next((p for p, c in objects.items()
                            if p != path and p.rsplit("/", 1)[-1] == base and c.runs_on(sm, driver_cuda)), None)
            gaps.append(KernelGap(path, code, sm, driver_cuda, sibling))
    return gaps


def _entry(header: bytes) -> tuple[FatbinEntry, int, int]:
    """(entry, header size, payload size) from the first bytes of an entry header."""
    kind, _ver, hsize, psize, _csize, _opt, minor, major, arch, _no, _nl, flags = _ENTRY.unpack_from(header)
    suffix = "a" if flags & _FLAG_ARCH_SPECIFIC else ("f" if flags & _FLAG_FAMILY else "")
    return FatbinEntry(_KINDS.get(kind, f"kind-{kind}"), arch, suffix, (major, minor)), hsize, psize


def _walk(read: Callable[[int, int], bytes], size: int) -> list[FatbinEntry]:
    """Every entry of every container in a region of ``size`` bytes (``read(offset, n)``)."""
    out: list[FatbinEntry] = []
    pos = 0
    while pos + _CONTAINER.size <= size:
        magic, _ver, hsize, body = _CONTAINER.unpack_from(read(pos, _CONTAINER.size))
        if magic != FATBIN_MAGIC:
            nxt = _next_magic(read, pos + 1, size)
            if nxt is None:
                break
            pos = nxt
            continue
        end = min(pos + hsize + body, size)
        e = pos + hsize
        while e + _ENTRY.size <= end:
            entry, ehsize, psize = _entry(read(e, _ENTRY.size))
            if ehsize < _ENTRY.size:
                break  # not an entry header: a corrupt container, stop reading it
            out.append(entry)
            e += ehsize + psize
        pos = max(end, pos + _CONTAINER.size)
    return out


def _next_magic(read: Callable[[int, int], bytes], start: int, size: int) -> int | None:
    """The next container (padding between containers), at an 8-byte aligned offset."""
    pos = (start + 7) & ~7
    while pos < size:
        chunk = read(pos, min(_SCAN_CHUNK, size - pos))
        i = chunk.find(_MAGIC_BYTES)
        while i != -1 and i % 8:
            i = chunk.find(_MAGIC_BYTES, i + 1)
        if i != -1:
            return pos + i
        pos += max(len(chunk) - 8, 8) & ~7
    return None


def parse_fatbin(data: bytes) -> tuple[FatbinEntry, ...]:
    """The entries of the fatbin containers in ``data`` (a ``.nv_fatbin`` section's bytes)."""
    def read(offset: int, n: int) -> bytes:
        return data[offset:offset + n].ljust(n, b"\0")

    return tuple(_walk(read, len(data)))


def _read_at(fh: BinaryIO, base: int) -> Callable[[int, int], bytes]:
    def read(offset: int, n: int) -> bytes:
        fh.seek(base + offset)
        return fh.read(n).ljust(n, b"\0")

    return read


def device_code(path: str | os.PathLike[str], *, deep: bool = False) -> DeviceCode | None:
    """The CUDA device code ``path`` embeds, or None when it has no fatbin section (or is no ELF file).

    ``deep``: also look through the rest of the file for fatbin containers the library loads itself
    (a full read of the file: ask for it only when the fatbin sections alone do not cover a GPU).
    """
    try:
        info = read_elf(path)
        st = os.stat(path)
    except (BadElf, OSError):
        return None
    # A device-linked object (nvcc -rdc) keeps its inputs in __nv_relfatbin and what the runtime loads in
    # .nv_fatbin: judge .nv_fatbin when there is one (as cuobjdump lists it), the relocatable images otherwise.
    linked = tuple(s for s in info.fatbin_sections if s[0] == ".nv_fatbin")
    sections = linked or info.fatbin_sections
    if not sections:
        return None
    return _device_code_cached(info.path, (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino), sections,
                               info.fatbin_sections if deep else None)


@functools.lru_cache(maxsize=4096)
def _device_code_cached(path: str, _stat: tuple[int, ...], sections: tuple[tuple[str, int, int], ...],
                        skip: tuple[tuple[str, int, int], ...] | None) -> DeviceCode:
    entries: list[FatbinEntry] = []
    with open(path, "rb") as fh:
        for _name, offset, size in sections:
            entries += _walk(_read_at(fh, offset), size)
        own = _self_loaded(fh, skip) if skip is not None else []
    return DeviceCode.of(tuple(entries), tuple(own))


def _self_loaded(fh: BinaryIO, skip: tuple[tuple[str, int, int], ...]) -> list[FatbinEntry]:
    """Entries of fatbin containers anywhere in the file outside the ``skip`` sections (8-aligned, sane header)."""
    out: list[FatbinEntry] = []
    try:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return out
    with mm:
        size = len(mm)
        pos = mm.find(_MAGIC_BYTES)
        while pos != -1:
            end = pos + 1
            inside = next((off + n for _, off, n in skip if off <= pos < off + n), None)
            if inside is not None:
                end = inside
            elif pos % 8 == 0 and pos + _CONTAINER.size + _ENTRY.size <= size:
                _magic, ver, hsize, body = _CONTAINER.unpack_from(mm, pos)
                kind = int.from_bytes(mm[pos + hsize:pos + hsize + 2], "little") if hsize == _CONTAINER.size else 0
                if ver == 1 and hsize == _CONTAINER.size and 0 < body <= size - pos - hsize and kind in _KINDS:
                    out += _walk(lambda o, n, base=pos: mm[base + o:base + o + n].ljust(n, b"\0"), hsize + body)
                    end = pos + hsize + body
            pos = mm.find(_MAGIC_BYTES, end)
    return out
