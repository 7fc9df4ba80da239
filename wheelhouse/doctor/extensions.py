"""Which files of a distribution the target interpreter loads as Python extension modules, and which it never can.

Discovery comes from the files (the RECORD, what is on disk) and the target interpreter's own import rules,
never from hints such as ``top_level.txt``:

- a file named for this interpreter's suffixes (``importlib.machinery.EXTENSION_SUFFIXES``) is a module;
  where several files serve one dotted name (a stale ``_rust.cpython-311-x86_64-linux-gnu.so`` beside a
  healthy ``_rust.abi3.so``), the import system takes the one whose suffix comes first in that list, so that
  is the file the module's verdict is about, and the others are never loaded;
- ``lib*.so`` is a module when it exports ``PyInit_<stem>`` (triton's ``libtriton.so``), else a library;
- a file built for another target (another CPython, ABI or libc by its name; another architecture by its
  ELF header) is a module the interpreter can never load: "built for cp312/aarch64; this interpreter is
  cp311/x86_64". Such a file beside a loadable build of the same module is only another build, never loaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from wheelhouse.elf import BadElf, exports_pyinit
from wheelhouse.elffile import elf_ident

__all__ = ["TargetInterpreter", "ForeignFile", "target_interpreter", "by_import_order", "foreign_by_name",
           "foreign_by_elf", "pyinit_modules", "describe_tag", "is_python_extension"]

# Machine names as platform tags spell them (a file name's tag, read by foreign_by_name).
_ARCHES = ("x86_64", "aarch64", "arm64", "ppc64le", "ppc64", "s390x", "i686", "i386", "armv7l", "riscv64")


@dataclass(frozen=True)
class TargetInterpreter:
    """What decides whether an extension file can be loaded: the interpreter's tag, machine, libc, suffixes."""

    tag: str  # "cp311"
    machine: str  # "x86_64"
    libc: str  # "gnu" | "musl"
    suffixes: tuple[str, ...]  # EXTENSION_SUFFIXES, in the order the import system tries them
    elf: tuple[int, str] | None = None  # the interpreter binary's ELF class (32/64) and machine

    def describe(self) -> str:
        return f"{self.tag}/{self.machine}" + ("/musl" if self.libc == "musl" else "")


@dataclass(frozen=True)
class ForeignFile:
    """An extension module file this interpreter can never load."""

    relpath: str
    module: str
    built_for: str  # "cp312/aarch64"
    here: str  # "cp311/x86_64"

    @property
    def reason(self) -> str:
        return (f"{self.relpath}: built for {self.built_for}; this interpreter is {self.here}: "
                "the wheelhouse was staged for another target")

    def to_json(self) -> dict[str, str]:
        return {"module": self.module, "path": self.relpath, "built_for": self.built_for, "here": self.here}


def _tag_of_soabi(soabi: str | None, implementation: str | None, version: str | None) -> str:
    if soabi:
        head = soabi.split("-")
        if head[0] == "cpython" and len(head) > 1:
            return "cp" + head[1]
        if head[0].startswith("pypy"):
            return "pp" + head[0][4:].split("_")[0]
    impl = {"cpython": "cp", "pypy": "pp"}.get(implementation or "", implementation or "py")
    return impl + (version or "").replace(".", "")


def target_interpreter(facts: Mapping[str, Any], python: str) -> TargetInterpreter:
    """The target interpreter's loading rules, from the facts probe and its own ELF header."""
    elf = elf_ident(os.path.realpath(python))
    machine = elf[1] if elf else ""
    return TargetInterpreter(
        tag=_tag_of_soabi(facts.get("soabi"), facts.get("implementation"), facts.get("python_version")),
        machine=machine or str(facts.get("machine") or "?"),
        libc="musl" if facts.get("system") == "Linux" and not facts.get("glibc") else "gnu",
        suffixes=tuple(facts.get("extension_suffixes") or (".so",)), elf=elf)


def describe_tag(tag: str) -> str:
    """``cpython-312-aarch64-linux-gnu.so`` -> ``cp312/aarch64``; ``cp312-win_amd64.pyd`` -> ``cp312/win_amd64``."""
    core = tag.rsplit(".", 1)[0]
    if core == "abi3":
        return "the CPython stable ABI (abi3)"
    parts = core.split("-")
    head = parts[0]
    if head.startswith("cpython"):
        py = "cp" + (parts[1] if len(parts) > 1 else "")
        rest = parts[2:]
    elif head.startswith("pypy"):
        py = "pp" + head[4:]
        rest = [p for p in parts[1:] if not p.startswith("pp")]
    else:  # cp312-win_amd64, graalpy...
        py, rest = head, parts[1:]
    arch = next((p for p in rest if p in _ARCHES), None) or "_".join(rest) or "?"
    libc = "/musl" if "musl" in rest else ""
    return f"{py}/{arch}{libc}"


def foreign_by_name(relpath: str, tag: str, module: str, here: TargetInterpreter) -> ForeignFile:
    return ForeignFile(relpath, module, describe_tag(tag), here.describe())


def foreign_by_elf(relpath: str, path: str | Path, module: str, here: TargetInterpreter) -> ForeignFile | None:
    """The file's ELF header says another machine or class than the interpreter's; None: it could load.

    Another libc shows in the file name (``linux-musl``), which :func:`foreign_by_name` reads.
    """
    if here.elf is None:
        return None
    header = elf_ident(path)
    if header is None or header == here.elf:
        return None
    bits = "" if header[0] == here.elf[0] else f" ({header[0]}-bit)"
    return ForeignFile(relpath, module, f"{here.tag}/{header[1]}{bits}", here.describe())


def by_import_order(files: Iterable[tuple[str, str]], suffixes: Sequence[str]) -> dict[str, list[str]]:
    """dotted name -> its files, the one the import system loads first (FileFinder tries ``suffixes`` in order)."""
    rank = {s: i for i, s in enumerate(suffixes)}

    def order(rel: str) -> int:
        base = rel.rsplit("/", 1)[-1]
        return min((i for s, i in rank.items() if base.endswith(s)), default=len(rank))

    out: dict[str, list[str]] = {}
    for rel, module in files:
        out.setdefault(module, []).append(rel)
    return {m: sorted(rels, key=order) for m, rels in out.items()}


def pyinit_modules(location: Path, candidates: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The ``lib*.so`` files among ``candidates`` that export ``PyInit_<stem>``: extension modules by their symbol."""
    out = []
    for rel, module in candidates:
        try:
            if exports_pyinit(location / rel, rel.rsplit("/", 1)[-1].split(".", 1)[0]):
                out.append((rel, module))
        except (BadElf, OSError):
            continue  # a library the loader cannot map: the sharedlibs check names it
    return out


def is_python_extension(path: str | Path) -> bool:
    """Does ``path`` export the init function its file name names (``PyInit__rust`` for ``_rust.abi3.so``)?"""
    try:
        return exports_pyinit(path, Path(path).name.split(".", 1)[0])
    except (BadElf, OSError):
        return False
