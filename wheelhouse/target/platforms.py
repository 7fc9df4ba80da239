"""Platform tags a user writes (``--platform manylinux_2_35_x86_64``): checked, understood, expanded.

A mistyped platform (``manylinux_2_35_x86_65``, ``manylinux_2_35_amd64``) would resolve happily and
show up only on the offline box, where no wheel installs; so every form is checked here, before any
work, and refused with the accepted forms and the closest valid spelling. Expansion is what the
target's own packaging would list: the Linux rules live in the stdlib-only capture script (it
computes the same list on the box), macOS comes from ``packaging.tags.mac_platforms``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from packaging.tags import mac_platforms

from wheelhouse.errors import TargetError
from . import capture

__all__ = ["Platform", "parse_platform", "expand_platforms", "ACCEPTED_FORMS"]

ACCEPTED_FORMS = ("manylinux_X_Y_ARCH, manylinux2014_ARCH (also manylinux2010/manylinux1), musllinux_X_Y_ARCH, "
                  "linux_ARCH, macosx_X_Y_ARCH, win_amd64, win_arm64, win32")
# PEP 599/600 and auditwheel's architectures; macOS's from packaging.tags.mac_platforms.
_LINUX_ARCHS = ("x86_64", "i686", "aarch64", "armv7l", "armv8l", "ppc64", "ppc64le", "s390x", "riscv64", "loongarch64")
_MAC_ARCHS = ("arm64", "x86_64", "universal2", "intel", "fat64", "fat32", "universal", "i386", "ppc64", "ppc")
_WINDOWS = {"win_amd64": "AMD64", "win_arm64": "ARM64", "win32": "x86"}
# Names other systems use for the same machine (uname on macOS, Go, Debian): never valid in a Linux tag.
_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "x86": "i686", "i386": "i686", "ppc64el": "ppc64le"}

_LINUX = re.compile(r"^linux_(.+)$")
_MAC = re.compile(r"^macosx_(\d+)_(\d+)_(.+)$")


@dataclass(frozen=True)
class Platform:
    """One platform tag as understood: its system, libc (Linux) or OS version (macOS), and machine."""

    tag: str
    system: str  # "Linux" | "Darwin" | "Windows"
    machine: str  # platform_machine as the target reports it
    libc: tuple[str, str] | None = None  # ("glibc", "2.35"), ("musl", "1.2"); None: unknown or not Linux
    os_version: tuple[int, int] | None = None  # macOS


def _refuse(tag: str, why: str, suggestion: str | None) -> TargetError:
    mean = f"; did you mean {suggestion}?" if suggestion else ""
    return TargetError(f"--platform {tag} is not a platform tag: {why}{mean}",
                       hint=f"accepted forms: {ACCEPTED_FORMS}; ARCH one of {', '.join(_LINUX_ARCHS)} "
                            f"(macOS: {', '.join(_MAC_ARCHS[:3])})")


def _arch(tag: str, prefix: str, arch: str, known: tuple[str, ...], aliases: dict[str, str]) -> str:
    if arch in known:
        return arch
    close = aliases.get(arch) or next(iter(difflib.get_close_matches(arch, known, n=1, cutoff=0.6)), None)
    raise _refuse(tag, f"unknown architecture {arch!r}", f"{prefix}{close}" if close else None)


def parse_platform(tag: str) -> Platform:
    """Understand one ``--platform`` value, or raise TargetError naming the accepted forms."""
    tag = tag.strip()
    if tag in _WINDOWS:
        return Platform(tag, "Windows", _WINDOWS[tag])
    split = capture.split_libc_platform(tag)
    if split:
        libc, major, minor, arch = split
        arch = _arch(tag, tag[:len(tag) - len(arch)], arch, _LINUX_ARCHS, _ALIASES)
        return Platform(tag, "Linux", arch, (libc, f"{major}.{minor}"))
    m = _MAC.match(tag)
    if m:
        arch = _arch(tag, tag[:m.start(3)], m.group(3), _MAC_ARCHS, {"aarch64": "arm64", "amd64": "x86_64"})
        return Platform(tag, "Darwin", arch, os_version=(int(m.group(1)), int(m.group(2))))
    m = _LINUX.match(tag)
    if m:
        return Platform(tag, "Linux", _arch(tag, "linux_", m.group(1), _LINUX_ARCHS, _ALIASES))
    forms = ["manylinux_2_35_x86_64", "manylinux_2_28_aarch64", "manylinux2014_x86_64", "musllinux_1_2_x86_64",
             "macosx_14_0_arm64", "win_amd64"]
    close = difflib.get_close_matches(tag, forms, n=1, cutoff=0.75)
    return_hint = close[0] if close else None
    raise _refuse(tag, "it is none of the accepted forms", return_hint)


def expand_platforms(platforms: list[Platform]) -> list[str]:
    """Every platform tag the target accepts, best first, as its own packaging orders them."""
    out: list[str] = []
    for p in platforms:
        if p.system == "Darwin":
            tags = list(mac_platforms(p.os_version, p.machine))
        else:
            tags = capture.expand_platform(p.tag)
        out += [t for t in tags if t not in out]
    return out
