"""What the dynamic loader searched, or would search, as evidence of the doctor's verdict cache.

A passing probe's process names the libraries it mapped; which file the loader maps for a library name also
depends on the folders searched before it (``LD_LIBRARY_PATH``, each object's RPATH/RUNPATH) and on
``/etc/ld.so.cache``: :func:`search_entry` names one of those, a folder with its entry names and link targets.
A failed ``dlopen`` maps nothing: :func:`loader_witness` names what could mend or alter the failure.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

from wheelhouse.fileidentity import identity_entry

if TYPE_CHECKING:
    from wheelhouse.elf import LoaderFacts

__all__ = ["LOADER_STATE", "NOT_ELF", "search_entry", "links_digest", "elf_search_folders", "loader_witness"]


# What decides where the loader finds a library besides the searched folders' contents (ld.so(8), ldconfig(8)).
_LOADER_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ld.so.preload")
_WITNESS_OBJECTS = 64  # ELF objects followed from the failed module through the libraries it needs
# What the loader reads besides the searched folders for a name that no RPATH/LD_LIBRARY_PATH/RUNPATH folder holds
# (ld.so(8)): a new cache (ldconfig after a library was installed) may name another file.
LOADER_STATE = ("/etc/ld.so.cache", "/etc/ld.so.preload")
NOT_ELF = (".py", ".pyc", ".pth", ".cfg", ".json", ".txt")  # file names no ELF object has here


def links_digest(folder: str) -> str | None:
    """A folder's entry names but ``__pycache__``, each link with its target: a library name the loader looks up
    in a folder is often a link (``libfoo.so.1 -> libfoo.so.1.2``), pointed elsewhere by a rename over it."""
    try:
        with os.scandir(folder) as it:
            names = sorted(e.name + ("\0->" + os.readlink(e.path) if e.is_symlink() else "")
                           for e in it if e.name != "__pycache__")
    except OSError:
        return None
    return hashlib.blake2b("\0".join(names).encode("utf-8", "surrogateescape"), digest_size=32).hexdigest()


def search_entry(path: str) -> list:
    """The evidence entry of a file or folder the loader reads: its identity and, for a folder, the digest of its
    entry names and link targets (``links:``, :func:`links_digest`): a ``__pycache__`` created in it is no
    change."""
    entry = identity_entry(path)
    if len(entry) == 6 and os.path.isdir(path):
        links = links_digest(path)
        if links is not None:
            entry.append("links:" + links)
    return entry


def elf_search_folders(path: str) -> list[str]:
    """The RPATH (where no RUNPATH disables it) and RUNPATH folders of ELF object ``path``, ``$ORIGIN`` expanded;
    none for a file that is no ELF object."""
    from wheelhouse.elf import BadElf, expand_dst, read_elf

    try:
        with open(path, "rb") as fh:
            if fh.read(4) != b"\x7fELF":
                return []
        info = read_elf(path)
    except (OSError, BadElf):
        return []
    return [os.path.normpath(expand_dst(e, info.origin)) for e in info.runpath or info.rpath]


def loader_witness(module_file: str | None, facts: LoaderFacts) -> list[list]:
    """The files and folders whose identity keys a stored warning of a module that failed to load (a failed
    dlopen maps nothing, so the probe's own evidence does not hold them): the module's file; the loader's
    configuration (``/etc/ld.so.cache``, ``ld.so.conf`` and ``ld.so.conf.d`` with its files, ``ld.so.preload``);
    the folders of ``facts`` (the probe environment's ``LD_LIBRARY_PATH``, the loader's default folders); and,
    from the module's file through the libraries :func:`wheelhouse.elf.find_needed` resolves for it (up to
    :data:`_WITNESS_OBJECTS` objects), each object's file, its RPATH/RUNPATH folders and every folder searched
    for a library that is not found. A folder's identity changes when an entry is added, removed or renamed in
    it: the missing library appearing there is a change."""
    from wheelhouse.elf import expand_dst, find_needed, read_elf, rpath_dirs

    paths: list[str] = [*_LOADER_FILES]
    try:
        paths += sorted(os.path.join("/etc/ld.so.conf.d", n) for n in os.listdir("/etc/ld.so.conf.d"))
    except OSError:
        pass
    paths += [*facts.ld_library_path, *facts.default_dirs]
    seen: set[str] = set()
    queue = [(os.path.abspath(module_file), ())] if module_file else []
    while queue and len(seen) < _WITNESS_OBJECTS:
        obj, chain = queue.pop(0)
        if obj in seen:
            continue
        seen.add(obj)
        paths.append(obj)
        try:
            info = read_elf(obj)
        except Exception:  # noqa: BLE001 - not ELF (a .py), unreadable: its identity above is the evidence
            continue
        paths += rpath_dirs(info, facts)
        paths += [os.path.normpath(expand_dst(e, info.origin, facts.lib, facts.platform)) for e in info.runpath]
        for found in find_needed(info, facts, chain):
            if found.path is not None:
                queue.append((os.path.abspath(found.path), (info, *chain)))
            paths += [p for p in found.searched if os.path.isabs(p)]
    return [identity_entry(p) for p in dict.fromkeys(os.path.abspath(p) for p in paths)]
