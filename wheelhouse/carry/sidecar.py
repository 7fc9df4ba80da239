"""The sidecar of a packed wheelhouse: ``FILE.sha256`` in ``sha256sum`` format, and the names of parts.

One line per part (``FILE.part-0001``, ...) in order, then one for the whole ``FILE``::

    3f1c...  wh.tar.part-0001
    9ab0...  wh.tar.part-0002
    77de...  wh.tar

``sha256sum -c --ignore-missing wh.tar.sha256`` checks the parts on any machine; the line of
the whole checks ``cat wh.tar.part-* > wh.tar``. Parsing is pure (``parse_sidecar``); finding
the sidecar and the parts of a path given on the command line is ``locate``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Sidecar", "Located", "SIDECAR_SUFFIX", "part_name", "render_sidecar", "parse_sidecar", "base_of", "locate"]

SIDECAR_SUFFIX = ".sha256"
_PART = re.compile(r"^(?P<base>.+)\.part-(?P<n>\d{4,})$")
_LINE = re.compile(r"^(?P<sha>[0-9a-fA-F]{64}) [ *](?P<name>[^/\\]+)$")


@dataclass(frozen=True)
class Sidecar:
    """What the sidecar promises: the whole archive's sha256 and, when split, each part's, in order."""

    whole: str  # the archive's file name as packed
    sha256: str
    parts: tuple[tuple[str, str], ...] = ()  # (file name, sha256), part 1 first


@dataclass(frozen=True)
class Located:
    """An archive given on the command line: its folder, base name, sidecar, and the part files it names."""

    folder: Path
    base: str
    sidecar: Path

    @property
    def whole(self) -> Path:
        return self.folder / self.base

    def part(self, number: int) -> Path:
        return self.folder / part_name(self.base, number)


def part_name(base: str, number: int) -> str:
    """``wh.tar`` and 2 -> ``wh.tar.part-0002`` (numbered from 1, so ``ls`` lists them in order)."""
    return f"{base}.part-{number:04d}"


def render_sidecar(sidecar: Sidecar) -> str:
    lines = [f"{sha}  {name}" for name, sha in sidecar.parts] + [f"{sidecar.sha256}  {sidecar.whole}"]
    return "\n".join(lines) + "\n"


def parse_sidecar(text: str, origin: str) -> tuple[Sidecar | None, list[str]]:
    """The sidecar in ``text``, or None and what is wrong with it (one line each)."""
    whole: list[tuple[str, str]] = []
    parts: dict[int, tuple[str, str]] = {}
    problems: list[str] = []
    for i, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        m = _LINE.match(raw.rstrip("\r"))
        if m is None:
            problems.append(f"{origin} line {i} is not `<sha256>  <file name>`")
            continue
        name, sha = m["name"], m["sha"].lower()
        pm = _PART.match(name)
        if pm:
            n = int(pm["n"])
            if n in parts:
                problems.append(f"{origin} lists part {n} twice")
            parts[n] = (name, sha)
        else:
            whole.append((name, sha))
    if len(whole) != 1:
        problems.append(f"{origin} names {len(whole)} whole archives, expected one line without .part-N")
    if parts and sorted(parts) != list(range(1, len(parts) + 1)):
        problems.append(f"{origin} lists parts {sorted(parts)}, expected 1..{len(parts)} with none missing")
    if problems:
        return None, problems
    return Sidecar(whole=whole[0][0], sha256=whole[0][1], parts=tuple(parts[n] for n in sorted(parts))), []


def base_of(path: Path) -> Path:
    """The archive a path stands for: ``wh.tar.part-0003`` and ``wh.tar.sha256`` both stand for ``wh.tar``."""
    m = _PART.match(path.name)
    if m:
        return path.with_name(m["base"])
    if path.name.endswith(SIDECAR_SUFFIX) and len(path.name) > len(SIDECAR_SUFFIX):
        return path.with_name(path.name[: -len(SIDECAR_SUFFIX)])
    return path


def locate(path: str | Path) -> Located | None:
    """The archive ``path`` names (the file, any of its parts, or its sidecar), or None when it names none."""
    p = Path(path)
    if p.is_dir():
        return None
    base = base_of(p)
    sidecar = base.with_name(base.name + SIDECAR_SUFFIX)
    named = p != base and p.is_file()  # a part's or the sidecar's name says "archive" even when others are missing
    if named or sidecar.is_file() or base.with_name(part_name(base.name, 1)).is_file() or _is_tar(p):
        return Located(folder=base.parent, base=base.name, sidecar=sidecar)
    return None


def _is_tar(path: Path) -> bool:
    """A lone file is taken for an archive only when it is a tar (any other file: not a wheelhouse, said so)."""
    import tarfile

    try:
        return path.is_file() and tarfile.is_tarfile(path)
    except OSError:
        return False
