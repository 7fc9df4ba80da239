"""Shared objects as the dynamic loader sees them: DT_NEEDED, RUNPATH/RPATH, and where each need is found.

The file is read by :mod:`wheelhouse.elffile` (the ELF format, with ``struct``): only the ELF header, the program
headers (PT_DYNAMIC: needs, search paths, soname, the symbol versions required and defined) and the section
headers (to locate CUDA fatbin sections for :mod:`wheelhouse.fatbin`); a 1 GB libtorch_cuda.so costs a few reads.
:func:`exports_pyinit` looks the init function up as ``dlsym`` does, to tell an extension module from a library.
Results are cached by (path, size, mtime, ctime, inode), so the link check and the kernel check read each file once
per process.

:func:`find_needed` follows glibc's ld.so search order (ld.so(8)):

1. DT_RPATH of the requesting object, then of the objects that loaded it, then
   of the executable -- only when the requesting object has no DT_RUNPATH (an
   object's own DT_RUNPATH disables its DT_RPATH);
2. LD_LIBRARY_PATH;
3. DT_RUNPATH of the requesting object (its direct needs only);
4. the loader cache (``ldconfig -p``);
5. the loader's default folders.

Before any search, a name already loaded in the process (by its soname or
file name) is taken as it is: an extension module that needs ``libc10.so``
loads because ``import torch`` put it there. ``$ORIGIN``, ``$LIB`` and
``$PLATFORM`` are expanded in RPATH/RUNPATH entries. A file of the needed name
is judged as glibc's ``open_verify`` judges it: one of another ELF class or
machine is skipped and the search goes on; any other that the loader cannot
map (empty, truncated, no ELF) ends the search, and the load fails there.

The library the search ends at must define every symbol version the object
requires of it (``.gnu.version_r`` against its ``.gnu.version_d``, weak
references aside): glibc fails the load otherwise (``version `GLIBCXX_3.4.30'
not found``), it does not search on.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import struct
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

from wheelhouse.elffile import MACHINES, SHT_NOBITS, ElfFile, dynamic_strings, exported, loader_verdict
from wheelhouse.errors import WhError

__all__ = [
    "BadElf",
    "ElfInfo",
    "LoaderFacts",
    "Found",
    "read_elf",
    "expand_dst",
    "find_needed",
    "rpath_dirs",
    "FATBIN_SECTIONS",
    "is_shared_object",
    "exports_pyinit",
    "exported_init_functions",
    "module_init_names",
]

# .nv_fatbin: device code of a linked object; __nv_relfatbin: relocatable device code (nvcc -rdc).
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")


class BadElf(WhError):
    """A file named like a shared object that the loader could not map (empty, truncated, not ELF)."""

    code = "bad-elf"

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}", hint="reinstall the distribution that ships it (`wh install WHEELHOUSE --reinstall NAME`)")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class ElfInfo:
    """What the loader needs to know about one shared object."""

    path: str
    elf_class: int  # 32 or 64
    machine: str  # e_machine, e.g. "EM_X86_64"
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]  # raw entries, $ORIGIN unexpanded
    runpath: tuple[str, ...]
    ident: tuple[int, str, int]  # (ELF class, byte order as struct writes it, e_machine): what the loader compares
    version_needs: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (needed file, versions it must define), not weak
    version_defs: tuple[str, ...] | None = None  # the versions it defines; None: unversioned (never checked)
    pie: bool = False  # a position-independent executable (DT_FLAGS_1 has DF_1_PIE): no library to load
    fatbin_sections: tuple[tuple[str, int, int], ...] = ()  # (name, file offset, size)

    @property
    def origin(self) -> str:
        """$ORIGIN: the folder the object lives in (of the path it was loaded by)."""
        return os.path.dirname(os.path.abspath(self.path))

    def compatible(self, other: "ElfInfo") -> bool:
        """Could the loader use ``other`` to satisfy a need of this object (same class and machine)?"""
        return self.elf_class == other.elf_class and self.machine == other.machine


@dataclass(frozen=True)
class LoaderFacts:
    """The target environment's loader facts (gathered by ``doctor/probes/loader.py`` in the target)."""

    ld_library_path: tuple[str, ...] = ()
    cache: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # name -> paths, in ldconfig -p order
    default_dirs: tuple[str, ...] = ()
    loaded: Mapping[str, str] = field(default_factory=dict)  # soname or file name -> path, already mapped
    executable: ElfInfo | None = None  # the interpreter binary (its DT_RPATH counts for every lookup)
    lib: str = "lib64"  # $LIB
    platform: str = "x86_64"  # $PLATFORM


@dataclass(frozen=True)
class Found:
    """Where one DT_NEEDED entry resolves: ``path`` None means the loader would fail."""

    name: str
    path: str | None
    via: str  # "loaded", "rpath", "ld_library_path", "runpath", "cache", "default", "path" (a name with a slash)
    searched: tuple[str, ...] = ()  # folders looked in, in order, and a file the loader stopped at (a miss's evidence)
    note: str = ""  # how it was found, where that is not the whole story (found through some loader chains only)
    error: str = ""  # a miss at a file the loader fails on: "<path>: file too short (...)", "<path> lacks version V"


_DT_FLAGS_1, _DF_1_PIE = 0x6FFFFFFB, 0x08000000


def is_shared_object(name: str) -> bool:
    """``libfoo.so``, ``libfoo.so.12.1``, ``_ext.cpython-312-x86_64-linux-gnu.so`` (a path or a file name)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


def _stat_key(path: str, st: os.stat_result | None = None) -> tuple[str, int, int, int, int]:
    st = st or os.stat(path)
    # mtime alone is coarse (a clock tick): a file rewritten at once keeps it; its ctime and inode tell.
    return (path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def read_elf(path: str | os.PathLike[str]) -> ElfInfo:
    """The loader-relevant facts of ``path``; raises :class:`BadElf` for what the loader could not map."""
    return _read_cached(_file_key(path))


def _file_key(path: str | os.PathLike[str]) -> tuple[str, int, int, int, int]:
    p = os.fspath(path)
    try:
        return _stat_key(p)
    except OSError as exc:
        raise BadElf(p, exc.strerror or str(exc)) from exc


@contextlib.contextmanager
def _opened(key: tuple[str, int, int, int, int]) -> Iterator[ElfFile]:
    """The ELF file of ``key``; what the loader could not map (here or while it is read) raises :class:`BadElf`."""
    path, size = key[0], key[1]
    if size == 0:
        raise BadElf(path, "empty file (0 bytes): the loader reports 'file too short'")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise BadElf(path, exc.strerror or str(exc)) from exc
    try:
        yield ElfFile(fd, path, size)
    except OSError as exc:
        raise BadElf(path, exc.strerror or str(exc)) from exc
    except (struct.error, ValueError, UnicodeDecodeError) as exc:
        raise BadElf(path, f"not a loadable ELF file ({size} bytes): {exc}") from exc
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=8192)
def _read_cached(key: tuple[str, int, int, int, int]) -> ElfInfo:
    path = key[0]
    with _opened(key) as elf:
        tags = dynamic_strings(elf)
        dynamic = dict(elf.dynamic())
        fatbins = tuple((name, offset, size) for name, kind, offset, size in elf.sections()
                        if name in FATBIN_SECTIONS and kind != SHT_NOBITS)
        return ElfInfo(
            path=path,
            elf_class=elf.bits,
            machine=MACHINES.get(elf.machine_number, str(elf.machine_number)),
            soname=next((v for t, v in tags if t == "DT_SONAME"), None),
            needed=tuple(v for t, v in tags if t == "DT_NEEDED"),
            rpath=tuple(e for t, v in tags if t == "DT_RPATH" for e in v.split(":") if e),
            runpath=tuple(e for t, v in tags if t == "DT_RUNPATH" for e in v.split(":") if e),
            ident=(elf.bits, elf.end, elf.machine_number),
            version_needs=tuple(elf.version_needs(dynamic)),
            version_defs=elf.version_defs(dynamic),
            pie=bool(dynamic.get(_DT_FLAGS_1, 0) & _DF_1_PIE),
            fatbin_sections=fatbins,
        )


def module_init_names(leaf: str) -> tuple[str, ...]:
    """The init function an extension module named ``leaf`` exports: ``PyInit_<leaf>``, or for a non-ASCII
    name ``PyInitU_<punycode, '-' as '_'>`` (PEP 489, "Export Hook Name")."""
    if leaf.isascii():
        return (f"PyInit_{leaf}",)
    return (f"PyInitU_{leaf.encode('punycode').decode('ascii').replace('-', '_')}",)


def exports_pyinit(path: str | os.PathLike[str], leaf: str) -> bool:
    """Is ``path`` a Python extension module named ``leaf``: does its dynamic symbol table export the init function?

    A ``.so`` without it is a library (loaded by path: ``torch.ops.load_library``, ctypes), which
    the import system refuses ("does not define module export function"). The symbol is looked up as
    ``dlsym`` looks it up: through the hash table PT_DYNAMIC names (a missing name costs a few small reads:
    its bloom filter word, mostly); cached like :func:`read_elf`. Raises :class:`BadElf` for what the loader
    could not map.
    """
    return _exports_cached(_file_key(path), leaf)


@functools.lru_cache(maxsize=8192)
def _exports_cached(key: tuple[str, int, int, int, int], leaf: str) -> bool:
    with _opened(key) as elf:
        tags = dict(elf.dynamic())
        return any(exported(sym) for name in module_init_names(leaf)
                   if (sym := elf.symbol(name, tags)) is not None)


def exported_init_functions(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """The Python init functions (``PyInit_*``, ``PyInitU_*``) ``path`` exports, whatever module they name: a file
    with an extension suffix that exports ``PyInit_core`` but not the ``PyInit__core`` its name asks for is an
    extension module built under another name (importing it fails), not a library loaded by path. Raises
    :class:`BadElf` for what the loader could not map."""
    return _inits_cached(_file_key(path))


@functools.lru_cache(maxsize=1024)
def _inits_cached(key: tuple[str, int, int, int, int]) -> tuple[str, ...]:
    with _opened(key) as elf:
        tags = dict(elf.dynamic())
        names = elf.strings_starting(b"PyInit", tags)
        return tuple(n for n in dict.fromkeys(names) if n.startswith(("PyInit_", "PyInitU_"))
                     and (sym := elf.symbol(n, tags)) is not None and exported(sym))


def expand_dst(entry: str, origin: str, lib: str = "lib64", platform: str = "x86_64") -> str:
    """Expand the dynamic string tokens of one RPATH/RUNPATH entry (ld.so(8) "Dynamic string tokens")."""
    for token, value in (("ORIGIN", origin), ("LIB", lib), ("PLATFORM", platform)):
        entry = entry.replace("${" + token + "}", value).replace("$" + token, value)
    return entry


def find_needed(info: ElfInfo, facts: LoaderFacts, inherited: Sequence[ElfInfo] = ()) -> list[Found]:
    """Resolve every DT_NEEDED entry of ``info`` the way the target's loader would (module docstring).

    ``inherited``: the objects that load ``info``, nearest first; their DT_RPATH is searched after
    ``info``'s own (when neither ``info`` nor that object has a DT_RUNPATH), as glibc walks the loader chain.
    """
    return [_find_one(name, info, facts, inherited) for name in info.needed]


def rpath_dirs(obj: ElfInfo, facts: LoaderFacts) -> list[str]:
    """``obj``'s DT_RPATH folders, expanded; none when it has a DT_RUNPATH (which disables its RPATH)."""
    return [] if obj.runpath else _expand_all(obj.rpath, obj, facts)


def _expand_all(entries: Sequence[str], obj: ElfInfo, facts: LoaderFacts) -> list[str]:
    return [os.path.normpath(expand_dst(e, obj.origin, facts.lib, facts.platform)) for e in entries]


def _find_one(name: str, info: ElfInfo, facts: LoaderFacts, inherited: Sequence[ElfInfo]) -> Found:
    if "/" in name:  # a path, not a name: no search
        if not os.path.isabs(name):  # relative to the engine's working folder, which is unknown here: not judged
            return Found(name, name, "path")
        try:
            hit = _candidate(name, info)
        except _StepEnds:
            hit = None
        return _taken(name, info, hit, "path", ()) if hit else Found(name, None, "path", (name,))
    if name in facts.loaded:
        return _taken(name, info, (facts.loaded[name], ""), "loaded", ())
    searched: list[str] = []
    for via, places in _places(name, info, facts, inherited):
        if via == "cache":
            searched.append("ldconfig cache")  # named as searched even when it has no entry of that name
        for path, where in places:
            try:
                hit = _candidate(path, info)
            except _StepEnds as stop:
                searched.append(f"{where} ({path}: {stop}: the loader ends this step of its search there)")
                break
            if hit:
                return _taken(name, info, hit, via, searched)
            searched.append(where)
    return Found(name, None, "", tuple(dict.fromkeys(searched)))


class _StepEnds(Exception):
    """A candidate the loader cannot open for a reason other than "no such file" or "no permission" (a symlink
    loop, a name too long, an I/O error) in a folder that exists: glibc's ``open_path`` gives up the rest of that
    step's folders (``here_any && errno != ENOENT && errno != EACCES``) and goes on with the next step."""


def _places(name: str, info: ElfInfo, facts: LoaderFacts,
            inherited: Sequence[ElfInfo]) -> Iterator[tuple[str, Iterator[tuple[str, str]]]]:
    """The loader's search for ``name`` in its order (module docstring), step by step and lazily (the search mostly
    ends in its first folders): (via, (candidate file, the folder it is in, or "ldconfig cache")...)."""
    def within(folders: Sequence[str]) -> Iterator[tuple[str, str]]:
        return ((os.path.join(folder, name), folder) for folder in folders)

    if not info.runpath:
        rpath = rpath_dirs(info, facts)
        for obj in [*inherited, *([facts.executable] if facts.executable is not None else [])]:
            rpath += rpath_dirs(obj, facts)
        yield "rpath", within(list(dict.fromkeys(rpath)))
    yield "ld_library_path", within(facts.ld_library_path)
    yield "runpath", within(_expand_all(info.runpath, info, facts))
    yield "cache", ((path, "ldconfig cache") for path in facts.cache.get(name, ()))
    yield "default", within(facts.default_dirs)


def _candidate(path: str, requester: ElfInfo) -> tuple[str, str] | None:
    """Where the loader's search for a need of ``requester`` stands at ``path``: None when it goes on (no such file,
    one it cannot open, one of another ELF class or machine); ``(path, "")`` when it takes that file; ``(path, why)``
    when it stops at a file it cannot map, and the load fails without looking further (glibc's open_verify skips
    only the other class or machine: an empty, truncated or non-ELF file is "file too short", "invalid ELF
    header")."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.EACCES, errno.ENOTDIR) or not os.path.isdir(os.path.dirname(path)):
            return None
        raise _StepEnds(exc.strerror or str(exc)) from exc
    if stat.S_ISDIR(st.st_mode):  # a folder opens, and its read fails
        return path, "cannot read file data: Is a directory"
    if not stat.S_ISREG(st.st_mode):  # a pipe or device: never opened here (a read could block)
        return path, "not a regular file"
    verdict, why = _verdict_cached(_stat_key(path, st), requester.ident)
    return None if verdict == "skip" else (path, why)


@functools.lru_cache(maxsize=8192)
def _verdict_cached(key: tuple[str, int, int, int, int], host: tuple[int, str, int]) -> tuple[str, str]:
    """:func:`loader_verdict` of the file of ``key`` for a process of ``host``; a file it takes that cannot be read
    whole (cut inside its program headers, say) fails the load as it is mapped."""
    try:
        fd = os.open(key[0], os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return "skip", ""  # the loader's open fails too (no permission): it tries the next place
    try:
        head = os.pread(fd, 64, 0)
    except OSError as exc:
        return "fail", f"cannot read file data: {exc.strerror}"
    finally:
        os.close(fd)
    verdict, why = loader_verdict(head, host)
    if verdict == "take":
        try:
            if _read_cached(key).pie:  # glibc >= 2.30 refuses it once mapped
                return "fail", "cannot dynamically load position-independent executable"
        except BadElf as exc:
            return "fail", exc.reason
    return verdict, why


def _taken(name: str, info: ElfInfo, hit: tuple[str, str], via: str, searched: Sequence[str]) -> Found:
    """``name`` where the loader's search ended, at ``hit`` (the file, why the loader fails on it): found, or a miss
    naming that file and why -- it cannot map it, or it lacks a version ``info`` requires of it."""
    path, why = hit
    error = f"{path}: {why} (the loader stops there)" if why else _lacking_versions(info, name, path)
    if error:
        return Found(name, None, via, tuple(dict.fromkeys([*searched, path])), error=error)
    return Found(name, path, via)


def _lacking_versions(info: ElfInfo, name: str, path: str) -> str:
    """"<path> lacks version V" when the library at ``path`` defines versions but not one that ``info`` requires of
    ``name`` (glibc: ``version `V' not found``, and the load fails); "" when it defines them all, or none at all (an
    unversioned library: glibc only warns, "no version information available")."""
    required = [v for file, versions in info.version_needs if file == name for v in versions]
    if not required:
        return ""
    try:
        defined = read_elf(path).version_defs
    except BadElf:
        return ""  # an object already loaded that cannot be read here: the process has it, not judged
    if defined is None:
        return ""
    missing = [v for v in dict.fromkeys(required) if v not in defined]
    return f"{path} lacks version{'s' if len(missing) > 1 else ''} {', '.join(missing)}" if missing else ""
