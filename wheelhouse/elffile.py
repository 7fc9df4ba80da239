"""The ELF format as the dynamic loader reads it: the header (and what glibc's ``open_verify`` makes of it), the
program headers (PT_LOAD to map an address to a file offset, PT_DYNAMIC), the dynamic entries, the symbol version
tables (what an object requires of each library, what a library defines) and, for CUDA fatbins, the section
headers; a dynamic symbol is looked up through the hash table PT_DYNAMIC names, as glibc's ``dlsym`` looks it up.

Written with ``struct`` on the System V ABI's layout (both classes, both byte orders) instead of pyelftools,
whose parsers cost ~3 ms per file (docs/design.md, the speed budget). Every read is a ``pread`` of what is
needed, and every table is bounded, so a crafted file costs a bounded read. Malformed input raises ValueError
(or ``struct.error``); :mod:`wheelhouse.elf` turns that into its BadElf with the file's name.
"""

from __future__ import annotations

import functools
import os
import struct
from typing import Callable, Iterable, Literal, Mapping

__all__ = ["ElfFile", "MACHINES", "PLATFORM_MACHINES", "SHT_NOBITS", "dynamic_strings", "exported", "elf_ident",
           "loader_verdict"]

_PT_LOAD, _PT_DYNAMIC = 1, 2
SHT_NOBITS = 8
_ET_EXEC, _ET_DYN = 2, 3
# Bounds no real object comes near, so a crafted file costs a bounded read, never gigabytes or an endless walk.
_MAX_ENTRY, _MAX_TABLE, _MAX_CHAIN = 1024, 1 << 20, 1 << 16
_MAX_STRINGS = 64 << 20  # a dynamic string table read whole (libtorch_cuda.so's: ~10 MB)
_DT_NULL, _DT_NEEDED, _DT_HASH, _DT_STRTAB, _DT_SYMTAB, _DT_STRSZ = 0, 1, 4, 5, 6, 10
_DT_SONAME, _DT_RPATH, _DT_RUNPATH, _DT_GNU_HASH = 14, 15, 29, 0x6FFFFEF5
_SHN_UNDEF, _STB_GLOBAL, _STB_WEAK, _STV_DEFAULT, _STV_PROTECTED = 0, 1, 2, 0, 3
_DT_VERSYM, _SHN_ABS, _STT_TLS, _STB_GNU_UNIQUE = 0x6FFFFFF0, 0xFFF1, 6, 10
_DT_VERDEF, _DT_VERNEED, _VER_FLG_WEAK = 0x6FFFFFFC, 0x6FFFFFFE, 0x2
_ELFOSABI_GNU = 3
# One read covers the version tables of a real object (libstdc++'s ~60 definitions: ~2 KB) or the version names they
# point to (close together in .dynstr); a record or name past it costs its own read.
_VERSION_BLOCK, _STRING_SPAN = 4096, 64 << 10
# The symbol types glibc's check_match lets a lookup return: NOTYPE, OBJECT, FUNC, COMMON, TLS, GNU_IFUNC (never
# SECTION or FILE).
_ALLOWED_STT = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 5) | (1 << 6) | (1 << 10)
# 64-bit S/390, Alpha (EM_ALPHA and the older 0x9026) and IA-64: DT_HASH words are 8 bytes (glibc's Elf_Symndx).
_HASH64_MACHINES = (22, 41, 50, 0x9026)
# e_machine -> its name in the ELF specification (what ElfInfo.machine holds; another number: the number).
MACHINES = {2: "EM_SPARC", 3: "EM_386", 8: "EM_MIPS", 20: "EM_PPC", 21: "EM_PPC64", 22: "EM_S390", 40: "EM_ARM",
             43: "EM_SPARCV9", 62: "EM_X86_64", 183: "EM_AARCH64", 243: "EM_RISCV", 258: "EM_LOONGARCH"}
# e_machine -> the machine as platform tags and ``uname -m`` name it (what a wheel's tag says).
PLATFORM_MACHINES = {62: "x86_64", 183: "aarch64", 21: "ppc64le", 22: "s390x", 3: "i686", 40: "armv7l",
                     243: "riscv64"}


def _ident(head: bytes) -> tuple[int, str, int] | None:
    """(ELF class 32/64, struct byte order, e_machine) from the first 20 bytes; None: no ELF header."""
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    end = "<" if head[5] == 1 else ">"
    return (64 if head[4] == 2 else 32), end, struct.unpack_from(f"{end}H", head, 18)[0]


def elf_ident(path: str | os.PathLike) -> tuple[int, str] | None:
    """(ELF class, machine as platforms name it: ``x86_64``) from the file's first 20 bytes; None when it is no
    ELF file. Only the header: what tells a file built for another machine, at the cost of one small read."""
    try:
        with open(path, "rb") as fh:
            found = _ident(fh.read(20))
    except OSError:
        return None
    if found is None:
        return None
    return found[0], PLATFORM_MACHINES.get(found[2], f"machine {found[2]}")


def loader_verdict(head: bytes, host: tuple[int, str, int]) -> tuple[Literal["take", "skip", "fail"], str]:
    """What glibc's ``open_verify`` (elf/dl-load.c) makes of a file found under a needed library's name, from its
    first 64 bytes ``head`` (fewer: the whole file), in a process of ``host`` (ELF class, byte order, e_machine):

    "skip": a file of another ELF class or machine, passed over silently (the search goes on); "fail", with glibc's
    message: the search stops there and the whole load fails (an empty or truncated file, one that is no ELF, another
    byte order, an object that is no shared object); "take": the file the loader maps.
    """
    bits, end, machine = host
    if len(head) < (64 if bits == 64 else 52):  # read against the host's own ElfW(Ehdr), whatever the file's class
        return "fail", "file too short"
    if head[:4] != b"\x7fELF":
        return "fail", "invalid ELF header"
    if head[4] != (2 if bits == 64 else 1):
        return "skip", ""  # "not a fatal error": a 32-bit library beside the 64-bit one
    if head[5] != (1 if end == "<" else 2):
        return "fail", f"ELF file data encoding not {'little' if end == '<' else 'big'}-endian"
    if head[6] != 1:
        return "fail", "ELF file version ident does not match current one"
    if head[7] not in (0, _ELFOSABI_GNU):  # linux's VALID_ELF_OSABI: SYSV or GNU
        return "fail", "ELF file OS ABI invalid"
    if head[8] and head[7] != _ELFOSABI_GNU:  # GNU's ABI versions depend on the glibc release: not judged
        return "fail", "ELF file ABI version invalid"
    if any(head[9:16]):
        return "fail", "nonzero padding in e_ident"
    e_type, e_machine, e_version = struct.unpack_from(f"{end}HHI", head, 16)
    if e_version != 1:
        return "fail", "ELF file version does not match current one"
    if e_machine != machine:
        return "skip", ""
    if e_type not in (_ET_EXEC, _ET_DYN):
        return "fail", "only ET_DYN and ET_EXEC can be loaded"
    if e_type == _ET_EXEC:  # open_verify lets it by; _dl_map_object_from_fd refuses it for anything but the program
        return "fail", "cannot dynamically load executable"
    (phentsize,) = struct.unpack_from(f"{end}H", head, 54 if bits == 64 else 42)
    if phentsize != (56 if bits == 64 else 32):
        return "fail", "ELF file's phentsize not the expected size"
    return "take", ""


class ElfFile:
    """The parts of one ELF file the loader reads, with ``struct`` (the System V ABI's layout): the header, the
    program headers (PT_LOAD, to map an address to a file offset; PT_DYNAMIC), the dynamic entries and, for the
    fatbin sections, the section headers. Each read is a ``pread`` of what is needed: a 1 GB libtorch_cuda.so
    costs a few small reads, and a lookup in ``.dynsym`` goes through its hash table as ``dlsym`` does."""

    def __init__(self, fd: int, path: str, size: int) -> None:
        self.fd, self.path, self.size = fd, path, size
        ident = os.pread(fd, 64, 0)
        if ident[:4] != b"\x7fELF":
            raise ValueError("bad magic number (not ELF: a linker script, or data)")
        if len(ident) < (64 if ident[4:5] == b"\x02" else 52):
            raise ValueError("the ELF header is cut short")
        found = _ident(ident)
        if found is None:
            raise ValueError(f"unknown ELF class {ident[4]} or data encoding {ident[5]}")
        self.bits, self.end, _ = found
        word = "Q" if self.bits == 64 else "I"
        (_type, self.machine_number, _version, _entry, self.phoff, self.shoff, _flags, _ehsize, self.phentsize,
         self.phnum, self.shentsize, self.shnum, self.shstrndx) = struct.unpack_from(
            f"{self.end}HHI{word}{word}{word}IHHHHHH", ident, 16)
        if _type not in (_ET_EXEC, _ET_DYN):  # ld.so: "only ET_DYN and ET_EXEC can be loaded"
            kind = {1: "a relocatable object (.o)", 4: "a core dump"}.get(_type, f"of type {_type}")
            raise ValueError(f"an ELF file {kind}: the loader maps only shared objects and executables")
        self._word = word

    def read(self, offset: int, n: int) -> bytes:
        """``n`` bytes at ``offset``; fewer (a truncated file) raises ValueError, as the loader refuses it."""
        if offset < 0 or n < 0 or offset + n > self.size:
            raise ValueError(f"{n} bytes at offset {offset} are past the end of the file")
        data = os.pread(self.fd, n, offset)
        if len(data) != n:
            raise ValueError(f"short read at offset {offset}")
        return data

    @functools.cached_property
    def segments(self) -> list[tuple[int, int, int, int]]:
        """(p_type, p_offset, p_vaddr, p_filesz) of each program header (read once)."""
        if not self.phnum:
            return []
        if self.bits == 64:
            fmt, size, pick = f"{self.end}IIQQQQQQ", 56, (0, 2, 3, 5)
        else:
            fmt, size, pick = f"{self.end}IIIIIIII", 32, (0, 1, 2, 4)
        if self.phentsize != size:  # ld.so: "ELF file's phentsize not the expected size"
            raise ValueError(f"program header entries of {self.phentsize} bytes, not {size}")
        table = self.read(self.phoff, self.phentsize * self.phnum)
        out = []
        for i in range(self.phnum):
            row = struct.unpack_from(fmt, table, i * self.phentsize)
            out.append(tuple(row[j] for j in pick))
        return out

    def dynamic(self) -> list[tuple[int, int]]:
        """(d_tag, d_val) of the last PT_DYNAMIC (as ld.so takes it), up to DT_NULL (read once)."""
        return self._dynamic

    @functools.cached_property
    def _dynamic(self) -> list[tuple[int, int]]:
        # ld.so keeps the last PT_DYNAMIC it sees (its l_ld is overwritten per header).
        dyn = next(((offset, filesz) for kind, offset, _, filesz in reversed(self.segments) if kind == _PT_DYNAMIC),
                   None)
        if dyn is None:
            return []
        fmt = f"{self.end}q{self._word}" if self.bits == 64 else f"{self.end}iI"
        step = struct.calcsize(fmt)
        data = self.read(dyn[0], min(dyn[1], self.size - dyn[0], _MAX_TABLE) // step * step)
        out = []
        for tag, value in struct.iter_unpack(fmt, data):
            if tag == _DT_NULL:
                break
            out.append((tag, value))
        return out

    def offset_of(self, address: int) -> int:
        """The file offset of a virtual address (of the PT_LOAD that maps it), as the loader finds its tables."""
        for kind, offset, vaddr, filesz in self.segments:
            if kind == _PT_LOAD and vaddr <= address < vaddr + filesz:
                return address - vaddr + offset
        raise ValueError(f"address {address:#x} is in no loaded segment")

    def string(self, table: int, index: int, limit: int | None = None) -> str:
        """The NUL-terminated string at ``index`` of the string table at file offset ``table``."""
        start, chunk, parts = table + index, 256, []
        end = min(self.size if limit is None else min(self.size, table + limit), start + _MAX_TABLE)
        pos = start
        while pos < end:
            data = self.read(pos, min(chunk, end - pos))
            cut = data.find(b"\0")
            if cut != -1:
                parts.append(data[:cut])
                return b"".join(parts).decode("utf-8", "surrogateescape")
            parts.append(data)
            pos += len(data)
            chunk *= 4
        raise ValueError(f"unterminated string at offset {start}")

    def strings(self, table: int, indexes: Iterable[int], limit: int | None = None) -> dict[int, str]:
        """The NUL-terminated strings at ``indexes`` of the string table at file offset ``table``: with one read when
        they lie within _STRING_SPAN bytes of each other (an object's version names do), else one by one."""
        wanted = sorted(set(indexes))
        if not wanted:
            return {}
        start = table + wanted[0]
        stop = min(self.size if limit is None else min(self.size, table + limit), table + wanted[-1] + 256)
        if not 0 < stop - start <= _STRING_SPAN:
            return {i: self.string(table, i, limit) for i in wanted}
        block = self.read(start, stop - start)
        out = {}
        for i in wanted:
            at = table + i - start
            cut = block.find(b"\0", at)
            out[i] = block[at:cut].decode("utf-8", "surrogateescape") if cut != -1 else self.string(table, i, limit)
        return out

    def strings_starting(self, prefix: bytes, tags: Mapping[int, int]) -> list[str]:
        """The strings of the dynamic string table (DT_STRTAB, DT_STRSZ bytes, bounded) that start with ``prefix``:
        candidates among the dynamic symbols' names, each still to be looked up (:meth:`symbol`)."""
        if _DT_STRTAB not in tags or _DT_STRSZ not in tags:
            return []
        at = self.offset_of(tags[_DT_STRTAB])
        table = self.read(at, min(tags[_DT_STRSZ], self.size - at, _MAX_STRINGS))
        out, pos = [], table.find(b"\0" + prefix)
        while pos != -1:
            end = table.find(b"\0", pos + 1)
            out.append(table[pos + 1:end if end != -1 else len(table)].decode("utf-8", "surrogateescape"))
            pos = table.find(b"\0" + prefix, pos + 1)
        return out

    def sections(self) -> list[tuple[str, int, int, int]]:
        """(name, sh_type, sh_offset, sh_size) of each section; none when the file has no section headers."""
        if not self.shnum or not self.shoff:
            return []
        if self.bits == 64:
            fmt, size = f"{self.end}IIQQQQIIQQ", 64
        else:
            fmt, size = f"{self.end}IIIIIIIIII", 40
        if not size <= self.shentsize <= _MAX_ENTRY:
            raise ValueError(f"section header entries of {self.shentsize} bytes")
        table = self.read(self.shoff, self.shentsize * self.shnum)
        rows = [struct.unpack_from(fmt, table, i * self.shentsize) for i in range(self.shnum)]
        names = rows[self.shstrndx] if self.shstrndx < len(rows) and rows[self.shstrndx][1] != SHT_NOBITS else None
        strings = self.read(names[4], min(names[5], _MAX_TABLE)) if names is not None else b""

        def name_at(index: int) -> str:
            end = strings.find(b"\0", index)
            return strings[index:end if end != -1 else len(strings)].decode("utf-8", "surrogateescape")

        return [(name_at(row[0]), row[1], row[4], row[5]) for row in rows]

    def symbol(self, name: str, tags: Mapping[int, int]) -> tuple[int, int, int] | None:
        """(st_info, st_other, st_shndx) of the dynamic symbol ``name``, found through DT_GNU_HASH or DT_HASH as
        ``dlsym`` finds it; None when it is not there (or the file has no hash table: the loader finds nothing
        either)."""
        if _DT_SYMTAB not in tags or _DT_STRTAB not in tags:
            return None
        symtab, strtab = self.offset_of(tags[_DT_SYMTAB]), self.offset_of(tags[_DT_STRTAB])
        strsz = tags.get(_DT_STRSZ)
        versym = self.offset_of(tags[_DT_VERSYM]) if _DT_VERSYM in tags else None
        wanted = name.encode("ascii")
        if self.bits == 64:
            sym_fmt, sym_size = f"{self.end}IBBHQQ", 24
        else:
            sym_fmt, sym_size = f"{self.end}IIIBBH", 16

        versioned: list[tuple[int, int, int]] = []  # matches of a non-default, non-hidden version (glibc's)

        def entry(index: int) -> tuple[int, int, int] | None:
            """The symbol at ``index`` when glibc's check_match takes it for a dlsym of ``name``, else None."""
            row = struct.unpack(sym_fmt, self.read(symtab + index * sym_size, sym_size))
            st_name, info, other, shndx, value = (row[0], row[1], row[2], row[3], row[4]) if self.bits == 64 else \
                (row[0], row[3], row[4], row[5], row[1])
            if value == 0 and shndx != _SHN_ABS and (info & 0xF) != _STT_TLS:
                return None  # no value: no definition
            if not (1 << (info & 0xF)) & _ALLOWED_STT:
                return None  # a section or file symbol is no code or data definition
            if self.string(strtab, st_name, strsz).encode("utf-8", "surrogateescape") != wanted:
                return None
            if versym is not None:
                (ver,) = struct.unpack(f"{self.end}H", self.read(versym + index * 2, 2))
                if (ver & 0x7FFF) >= 2:  # dlsym takes a named version only when it is the one visible
                    if not ver & 0x8000:
                        versioned.append((info, other, shndx))
                    return None
            return info, other, shndx

        def only_version() -> tuple[int, int, int] | None:
            """After the chain: the one non-hidden versioned definition, when there is exactly one."""
            return versioned[0] if len(versioned) == 1 else None

        u32 = f"{self.end}I"
        if _DT_GNU_HASH in tags:
            at = self.offset_of(tags[_DT_GNU_HASH])
            nbuckets, symoffset, bloom_size, bloom_shift = struct.unpack(f"{self.end}IIII", self.read(at, 16))
            if not nbuckets or not bloom_size:
                return None
            h = 5381
            for c in wanted:
                h = (h * 33 + c) & 0xFFFFFFFF
            bits, word_size = self.bits, self.bits // 8
            (bloom,) = struct.unpack(f"{self.end}{self._word}",
                                     self.read(at + 16 + ((h // bits) & (bloom_size - 1)) * word_size, word_size))
            mask = (1 << (h % bits)) | (1 << ((h >> bloom_shift) % bits))
            if bloom & mask != mask:
                return None
            buckets = at + 16 + bloom_size * word_size
            (index,) = struct.unpack(u32, self.read(buckets + h % nbuckets * 4, 4))
            if index < symoffset:
                return None
            chains = buckets + nbuckets * 4
            for _ in range(_MAX_CHAIN):  # a chain ends with its low bit set; one that never does is no hash table
                (value,) = struct.unpack(u32, self.read(chains + (index - symoffset) * 4, 4))
                if value | 1 == h | 1:
                    found = entry(index)
                    if found is not None:
                        return found
                if value & 1:
                    return only_version()
                index += 1
            raise ValueError(f"a GNU hash chain of over {_MAX_CHAIN} symbols without an end")
        if _DT_HASH in tags:
            at = self.offset_of(tags[_DT_HASH])
            ent = 8 if self.bits == 64 and self.machine_number in _HASH64_MACHINES else 4
            u = f"{self.end}{'Q' if ent == 8 else 'I'}"
            nbucket, nchain = struct.unpack(u + u[1:], self.read(at, 2 * ent))
            if not nbucket:
                return None
            h = 0
            for c in wanted:
                h = ((h << 4) + c) & 0xFFFFFFFF
                g = h & 0xF0000000
                if g:
                    h ^= g >> 24
                h &= ~g & 0xFFFFFFFF
            (index,) = struct.unpack(u, self.read(at + 2 * ent + h % nbucket * ent, ent))
            seen = 0
            while index and seen <= min(nchain, _MAX_CHAIN):  # a chain that loops in a crafted file ends
                found = entry(index)
                if found is not None:
                    return found
                (index,) = struct.unpack(u, self.read(at + 2 * ent + nbucket * ent + index * ent, ent))
                seen += 1
            return only_version()
        return None

    def version_needs(self, tags: Mapping[int, int]) -> list[tuple[str, tuple[str, ...]]]:
        """(file name, the versions required of it) of each entry of the DT_VERNEED table (``.gnu.version_r``), weak
        references left out: glibc's _dl_check_map_versions (elf/dl-version.c) fails the load when the object loaded
        for that name lacks a required version, and lets a weak one (VER_FLG_WEAK) be missing."""
        if _DT_VERNEED not in tags or _DT_STRTAB not in tags:
            return []
        at = self.offset_of(tags[_DT_VERNEED])
        unpack = self._table(at)
        rows: list[tuple[int, list[int]]] = []
        for _ in range(_MAX_ENTRY):  # glibc follows vn_next and vna_next (not the counts) until one is 0
            version, _count, file, aux, following = unpack("HHIII", at)
            if version != 1:
                raise ValueError(f"unsupported version {version} of Verneed record")  # ld.so refuses it too
            names, entry = [], at + aux
            for _ in range(_MAX_ENTRY):
                _hash, flags, _other, name, after = unpack("IHHII", entry)
                if not flags & _VER_FLG_WEAK:
                    names.append(name)
                if not after:
                    break
                entry += after
            rows.append((file, names))
            if not following:
                break
            at += following
        text = self.strings(self.offset_of(tags[_DT_STRTAB]), (i for f, names in rows for i in (f, *names)),
                            tags.get(_DT_STRSZ))
        return [(text[f], tuple(text[n] for n in names)) for f, names in rows]

    def version_defs(self, tags: Mapping[int, int]) -> tuple[str, ...] | None:
        """The version names this object defines (``.gnu.version_d``: of each DT_VERDEF entry its first name, the one
        glibc's match_symbol compares); None without a DT_VERDEF table, where glibc checks no version of it and at
        most warns ("no version information available")."""
        if _DT_VERDEF not in tags or _DT_STRTAB not in tags:
            return None
        at = self.offset_of(tags[_DT_VERDEF])
        unpack = self._table(at)
        names = []
        for _ in range(_MAX_ENTRY):
            version, _flags, _index, _count, _hash, aux, following = unpack("HHHHIII", at)
            if version != 1:
                raise ValueError(f"unsupported version {version} of Verdef record")  # ld.so refuses it too
            names.append(unpack("I", at + aux)[0])
            if not following:
                break
            at += following
        text = self.strings(self.offset_of(tags[_DT_STRTAB]), names, tags.get(_DT_STRSZ))
        return tuple(text[n] for n in names)

    def _table(self, at: int) -> Callable[[str, int], tuple[int, ...]]:
        """An unpacker of the records of the table at file offset ``at``: one read of _VERSION_BLOCK bytes serves
        those within it, a record past it costs its own read."""
        block = self.read(at, max(0, min(_VERSION_BLOCK, self.size - at)))

        def unpack(fmt: str, offset: int) -> tuple[int, ...]:
            fmt = self.end + fmt
            rel, size = offset - at, struct.calcsize(fmt)
            if 0 <= rel and rel + size <= len(block):
                return struct.unpack_from(fmt, block, rel)
            return struct.unpack(fmt, self.read(offset, size))

        return unpack


def exported(sym: tuple[int, int, int]) -> bool:
    """Defined here, global, weak or GNU-unique, visible to other objects: what dlsym (and so the import system)
    finds."""
    info, other, shndx = sym
    return (shndx != _SHN_UNDEF and info >> 4 in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE)
            and other & 3 in (_STV_DEFAULT, _STV_PROTECTED))


def dynamic_strings(elf: ElfFile) -> list[tuple[str, str]]:
    """(tag, string value) of the string-valued dynamic entries (from PT_DYNAMIC: stripped sections do not hide
    them), their strings read from DT_STRTAB as the loader reads them."""
    entries = elf.dynamic()
    names = {_DT_NEEDED: "DT_NEEDED", _DT_RPATH: "DT_RPATH", _DT_RUNPATH: "DT_RUNPATH", _DT_SONAME: "DT_SONAME"}
    wanted = [(tag, value) for tag, value in entries if tag in names]
    if not wanted:
        return []
    tags = dict(entries)
    if _DT_STRTAB not in tags:
        raise ValueError("PT_DYNAMIC names strings but no DT_STRTAB")
    table = elf.offset_of(tags[_DT_STRTAB])
    return [(names[tag], elf.string(table, value, tags.get(_DT_STRSZ))) for tag, value in wanted]
