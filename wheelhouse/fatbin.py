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
  version: a driver JITs PTX up to the ISA of its own CUDA release (ISA 8.8
  came with CUDA 12.9, so a CUDA 12.4 driver refuses it,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
- LTO-IR is not loadable by the driver on its own and is ignored.

A section that cannot be read (bytes that are neither a container nor zero
padding, an entry header that is none) is not silently empty: the object's
:attr:`DeviceCode.damage` says what is wrong, as the runtime cannot register
what it cannot read either.

The public face for other checks: :func:`device_code` and
:meth:`DeviceCode.runs_on` (e.g. is ``sgl_kernel/sm100/common_ops.so``
deliberately unloadable on this sm_89 card?).
"""

from __future__ import annotations

import functools
import mmap
import os
import re
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


# PTX ISA version -> the CUDA release that introduced it (PTX ISA reference, "Release Notes"; CUDA 12.6 kept 8.5).
# Older ISAs are known to every driver of a CUDA 11 or newer stack and are not judged.
_PTX_ISA_CUDA: dict[tuple[int, int], tuple[int, int]] = {
    (7, 0): (11, 0), (7, 1): (11, 1), (7, 2): (11, 2), (7, 3): (11, 3), (7, 4): (11, 4), (7, 5): (11, 5),
    (7, 6): (11, 6), (7, 7): (11, 7), (7, 8): (11, 8),
    (8, 0): (12, 0), (8, 1): (12, 1), (8, 2): (12, 2), (8, 3): (12, 3), (8, 4): (12, 4), (8, 5): (12, 5),
    (8, 6): (12, 7), (8, 7): (12, 8), (8, 8): (12, 9),
    (9, 0): (13, 0), (9, 1): (13, 1),
}
_NEWEST_ISA = max(_PTX_ISA_CUDA)
_NEWEST_CUDA = _PTX_ISA_CUDA[_NEWEST_ISA]
_ISA_TO_CUDA_MAJOR = 4  # ISA 7.x came with CUDA 11, 8.x with 12, 9.x with 13: the rule beyond the table


def _release(text: str | None) -> tuple[int, ...] | None:
    """``"12.4"`` -> ``(12, 4)``, ``"13"`` -> ``(13,)``; None when unknown or unreadable."""
    try:
        return tuple(int(x) for x in text.split(".")[:2]) if text else None
    except ValueError:
        return None


def _driver_isa(driver: tuple[int, ...]) -> tuple[int, int] | None:
    """The newest PTX ISA a driver of CUDA release ``driver`` JITs, where the table knows that release."""
    if len(driver) < 2 or not (min(_PTX_ISA_CUDA.values()) <= driver <= _NEWEST_CUDA):
        return None
    return max(isa for isa, cuda in _PTX_ISA_CUDA.items() if cuda <= driver)


def _jits(isa: tuple[int, int], driver_cuda: str | None) -> bool:
    """Does a driver supporting CUDA ``driver_cuda`` JIT PTX of ISA ``isa``? A release the table knows JITs up to
    its own ISA; one newer than the table (or a major alone) every ISA of its major and older. With the driver
    unknown, or an ISA older than the table's, it is not judged (True)."""
    driver = _release(driver_cuda)
    if driver is None or isa < min(_PTX_ISA_CUDA):
        return True
    newest = _driver_isa(driver)
    if newest is None:
        return isa[0] + _ISA_TO_CUDA_MAJOR <= driver[0]
    return isa <= newest


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
        """Can a GPU of compute capability ``sm`` run this image (PTX: through the JIT of a driver supporting CUDA
        ``driver_cuda``; None: the driver is unknown, only the arch is judged)?"""
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
            return sm >= self.arch and _jits(self.version, driver_cuda)
        return False

    def driver_needed(self) -> str | None:
        """The driver a PTX image's ISA asks for (``"a CUDA 12.9 driver"``); None for SASS or an ISA every driver
        of a CUDA 11+ stack knows."""
        if self.kind != "ptx" or self.version < min(_PTX_ISA_CUDA):
            return None
        cuda = _PTX_ISA_CUDA.get(self.version)
        if cuda:
            return f"a CUDA {cuda[0]}.{cuda[1]} driver"
        if self.version[0] > _NEWEST_ISA[0]:
            return f"a CUDA {self.version[0] + _ISA_TO_CUDA_MAJOR} driver"
        return f"a driver newer than CUDA {_NEWEST_CUDA[0]}.{_NEWEST_CUDA[1]}"

    def isa_origin(self) -> str:
        """``"ISA 8.8, from CUDA 12.9"``, or where an ISA the table does not know stands against the newest it does."""
        isa = f"ISA {self.version[0]}.{self.version[1]}"
        cuda = _PTX_ISA_CUDA.get(self.version)
        if cuda:
            return f"{isa}, from CUDA {cuda[0]}.{cuda[1]}"
        if self.version > _NEWEST_ISA:
            return (f"{isa}, newer than CUDA {_NEWEST_CUDA[0]}.{_NEWEST_CUDA[1]}'s "
                    f"{_NEWEST_ISA[0]}.{_NEWEST_ISA[1]}")
        return isa


@dataclass(frozen=True)
class DeviceCode:
    """The device code one shared object embeds: sorted SASS and PTX architectures, and every entry."""

    sass: tuple[int, ...]
    ptx: tuple[int, ...]
    entries: tuple[FatbinEntry, ...] = ()
    # Images found outside the fatbin sections, which the library loads itself (cuFFT keeps its PTX in
    # .ldata and hands it to the driver): only looked for when asked (``device_code(path, deep=True)``).
    self_loaded: int = 0
    # What in its fatbin sections cannot be read (".nv_fatbin: no fatbin container at byte 0 (...)"): the
    # runtime cannot register those kernels either.
    damage: tuple[str, ...] = ()

    @classmethod
    def of(cls, entries: tuple[FatbinEntry, ...], self_loaded: tuple[FatbinEntry, ...] = (),
           damage: tuple[str, ...] = ()) -> "DeviceCode":
        """Each distinct image once (libtorch_cuda.so repeats the same few in ~20,000 kernels' containers)."""
        every = tuple(dict.fromkeys((*entries, *self_loaded)))
        return cls(sass=tuple(sorted({e.arch for e in every if e.kind == "sass"})),
                   ptx=tuple(sorted({e.arch for e in every if e.kind == "ptx"})), entries=every,
                   self_loaded=len(self_loaded), damage=damage)

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
        text = "; ".join(parts) or ("no readable image" if self.damage else "no SASS or PTX (LTO-IR only)")
        if self.damage:
            text += " (damaged fatbin: " + "; ".join(self.damage) + ")"
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
    variant_of: str | None = None  # the same object built for another GPU or CUDA (sm100/, cu13/) that runs there

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
            text += (f" and its PTX ({jit[0].isa_origin()}) needs {jit[0].driver_needed()}, "
                     f"this one supports CUDA {self.driver_cuda} ({_driver_rule(self.driver_cuda)})")
        if self.variant_of:
            text += f" (an architecture variant: {self.variant_of} runs there)"
        return text


def _driver_rule(driver_cuda: str | None) -> str:
    """Which PTX a driver of CUDA ``driver_cuda`` JITs, and by which rule (said beside a PTX gap)."""
    driver = _release(driver_cuda) or (0,)
    newest = _driver_isa(driver)
    if newest:
        return f"PTX ISA up to {newest[0]}.{newest[1]}: a driver JITs no newer PTX than its own CUDA release's"
    return (f"a release the table of PTX ISAs does not list (newest CUDA {_NEWEST_CUDA[0]}.{_NEWEST_CUDA[1]}): "
            f"judged by its major, PTX ISA {driver[0] - _ISA_TO_CUDA_MAJOR}.x and older")


# A folder or a file-name part naming a build for one GPU architecture or CUDA major: sm100/, sm_90a, cu12/, _cu13.
_VARIANT_PART = re.compile(r"(?:^|[._-])(?:sm_?\d{2,3}[af]?|cu(?:da)?_?\d{2,3})(?=$|[._-])", re.IGNORECASE)


def _variant_key(path: str) -> str:
    """``pkg/sm100/ops.so``, ``pkg/cu13/ops.so``, ``pkg/ops_sm90.so`` -> ``pkg/ops.so``: the path less its variant
    parts. Two objects with one key are builds of one object the package chooses between."""
    parts = (_VARIANT_PART.sub("", part) for part in path.split("/"))
    return "/".join(part for part in parts if part)


def kernel_gaps(objects: dict[str, DeviceCode], sms, driver_cuda: str | None = None) -> list[KernelGap]:
    """Every (object, sm) with no image the GPU can run, among the objects of ONE package (path -> code).

    An object that is another build of one that runs on that sm is an architecture variant the package picks
    between at run time: the same path but for folders or file-name parts that name a GPU architecture or a
    CUDA major (``sgl_kernel/sm100/common_ops.so`` beside ``sgl_kernel/common_ops.so``, ``cu12/`` beside
    ``cu13/``, ``ops_sm80.so`` beside ``ops_sm90.so``); its gap carries ``variant_of`` and is not a failure.
    A same-named module in an unrelated folder (``pkg/contrib/_C.so`` beside ``pkg/_C.so``) is no variant: the
    package loads each. LTO-IR-only objects are left out: nvJitLink turns them into code at run time.
    """
    keys = {path: _variant_key(path) for path in objects}
    gaps: list[KernelGap] = []
    for sm in sorted({sm_number(s) for s in sms}):
        for path, code in objects.items():
            if not (code.sass or code.ptx) or code.runs_on(sm, driver_cuda):
                continue
            sibling = next((p for p, c in objects.items()
                            if p != path and keys[p] == keys[path] and c.runs_on(sm, driver_cuda)), None)
            gaps.append(KernelGap(path, code, sm, driver_cuda, sibling))
    return gaps


def _entry(header: bytes) -> tuple[FatbinEntry, int, int]:
    """(entry, header size, payload size) from the first bytes of an entry header."""
    kind, _ver, hsize, psize, _csize, _opt, minor, major, arch, _no, _nl, flags = _ENTRY.unpack_from(header)
    suffix = "a" if flags & _FLAG_ARCH_SPECIFIC else ("f" if flags & _FLAG_FAMILY else "")
    return FatbinEntry(_KINDS.get(kind, f"kind-{kind}"), arch, suffix, (major, minor)), hsize, psize


def _walk(read: Callable[[int, int], bytes], size: int) -> tuple[list[FatbinEntry], list[str]]:
    """Every entry of every container in a region of ``size`` bytes (``read(offset, n)``), and what in it cannot
    be read (offsets in the region): bytes that are neither a container nor zero padding, an entry header that
    is none, or no container at all."""
    out: list[FatbinEntry] = []
    damage: list[str] = []
    pos, containers = 0, 0
    while pos + _CONTAINER.size <= size:
        magic, _ver, hsize, body = _CONTAINER.unpack_from(read(pos, _CONTAINER.size))
        if magic != FATBIN_MAGIC:
            nxt, padding = _next_magic(read, pos, size)
            if not padding:
                damage.append(f"no fatbin container at byte {pos} (magic 0x{magic:08x}, not 0x{FATBIN_MAGIC:08x})")
            if nxt is None:
                break
            pos = nxt
            continue
        containers += 1
        end = min(pos + hsize + body, size)
        e = pos + hsize
        while e + _ENTRY.size <= end:
            entry, ehsize, psize = _entry(read(e, _ENTRY.size))
            if ehsize < _ENTRY.size:  # not an entry header: a corrupt container, stop reading it
                damage.append(f"the entry at byte {e} of the container at byte {pos} has header size {ehsize}")
                break
            out.append(entry)
            e += ehsize + psize
        pos = max(end, pos + _CONTAINER.size)
    if size and not containers and not damage:
        damage.append(f"no fatbin container in its {size} bytes")
    return out, damage


def _next_magic(read: Callable[[int, int], bytes], start: int, size: int) -> tuple[int | None, bool]:
    """The next container after ``start``, at an 8-byte aligned offset, and whether all before it is zero padding
    (what a linker puts between containers)."""
    pos, padding = start, True
    while pos < size:
        chunk = read(pos, min(_SCAN_CHUNK, size - pos))
        i = chunk.find(_MAGIC_BYTES, 1 if pos == start else 0)
        while i != -1 and (pos + i) % 8:
            i = chunk.find(_MAGIC_BYTES, i + 1)
        if i != -1:
            return pos + i, padding and not chunk[:i].strip(b"\0")
        padding = padding and not chunk.strip(b"\0")
        pos += max(len(chunk) - len(_MAGIC_BYTES) + 1, 1)  # overlap: a magic across two chunks is found
    return None, padding


def parse_fatbin(data: bytes) -> tuple[FatbinEntry, ...]:
    """The entries of the fatbin containers in ``data`` (a ``.nv_fatbin`` section's bytes)."""
    def read(offset: int, n: int) -> bytes:
        return data[offset:offset + n].ljust(n, b"\0")

    return tuple(_walk(read, len(data))[0])


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
    damage: list[str] = []
    with open(path, "rb") as fh:
        for name, offset, size in sections:
            found, bad = _walk(_read_at(fh, offset), size)
            entries += found
            damage += [f"{name}: {b}" for b in bad]
        own = _self_loaded(fh, skip) if skip is not None else []
    return DeviceCode.of(tuple(entries), tuple(own), tuple(damage))


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
                    # A sane header found by its magic in arbitrary data: what of it cannot be read is no verdict.
                    out += _walk(lambda o, n, base=pos: mm[base + o:base + o + n].ljust(n, b"\0"), hsize + body)[0]
                    end = pos + hsize + body
            pos = mm.find(_MAGIC_BYTES, end)
    return out
