"""A target written as flags (``--python-version 3.12 --platform manylinux_2_35_x86_64``).

The interpreter cannot be run, so its facts are computed the way its own packaging would
compute them: platform tags checked and expanded (``platforms``), then the ordered tag list
from ``packaging.tags.cpython_tags``/``generic_tags`` and ``compatible_tags`` given that
platform list, which never reads the host (STYLE.md). A free-threaded interpreter is written
``3.13t`` (as uv and pip spell it) or ``--abi cp313t``; CPython before 3.8 has the pymalloc
ABI ``cp37m``.
"""

from __future__ import annotations

import re

from packaging import tags as ptags

from wheelhouse.errors import TargetError
from .platforms import Platform, expand_platforms, parse_platform
from .profile import TargetProfile, libc_of

__all__ = ["target_from_flags"]

_IMPL_NAMES = {"cp": ("cpython", "CPython"), "pp": ("pypy", "PyPy")}
_SYSTEMS = {"Linux": ("linux", "posix"), "Darwin": ("darwin", "posix"), "Windows": ("win32", "nt")}


def _parse_version(python_version: str) -> tuple[int, int, str, bool]:
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?(t?)", (python_version or "").strip())
    if not m:
        raise TargetError(
            f"--python-version {python_version!r} is not MAJOR.MINOR[.MICRO] (3.13t for free-threaded)",
            hint="for example: --python-version 3.12",
        )
    major, minor, threaded = int(m.group(1)), int(m.group(2)), bool(m.group(4))
    if threaded and (major, minor) < (3, 13):
        # PEP 703: CPython's free-threaded build (ABI tag cp313t) exists from 3.13 on; no wheel is tagged cp312t.
        raise TargetError(
            f"--python-version {python_version}: there is no free-threaded CPython {major}.{minor} (the "
            "free-threaded build starts with 3.13)",
            hint=f"use --python-version {major}.{minor} (the regular build) or 3.13t",
        )
    return major, minor, m.group(3) or "0", threaded


def _default_abi(implementation: str, major: int, minor: int, threaded: bool) -> str:
    if implementation == "pp":
        return f"pypy{major}{minor}_pp73"  # PyPy 7.3's ABI tag (EXT_SUFFIX .pypy310-pp73-...), every current PyPy
    if (major, minor) < (3, 8):
        return f"cp{major}{minor}m"  # pymalloc builds, every CPython <= 3.7 wheel (PEP 3149)
    return f"cp{major}{minor}{'t' if threaded else ''}"


def _tags(implementation: str, version: tuple[int, int], abi: str, platforms: list[str]) -> list[str]:
    """What ``packaging.tags.sys_tags()`` yields on that interpreter, given its platforms."""
    if implementation == "cp":
        specific = ptags.cpython_tags(version, [abi], platforms)
        pure = f"cp{version[0]}{version[1]}"
    else:
        specific = ptags.generic_tags(f"{implementation}{version[0]}{version[1]}", [abi], platforms)
        pure = f"{implementation}{version[0]}"  # packaging: pp3-none-any
    out = [str(t) for t in specific] + [str(t) for t in ptags.compatible_tags(version, pure, platforms)]
    return list(dict.fromkeys(out))


def _one_system(parsed: list[Platform]) -> tuple[str, str]:
    arches = {(p.system, p.machine) for p in parsed}
    if len(arches) != 1:
        raise TargetError(
            f"--platform values name several machines: {', '.join(sorted(f'{s} {m}' for s, m in arches))}",
            hint="stage once per architecture",
        )
    return arches.pop()


def target_from_flags(
    python_version: str,
    platforms: list[str],
    implementation: str = "cp",
    abi: str | None = None,
) -> TargetProfile:
    """A profile for an interpreter we cannot run, computed like packaging would on it."""
    major, minor, micro, threaded = _parse_version(python_version)
    if not platforms:
        raise TargetError(
            "a target from flags needs at least one --platform",
            hint="for example: --platform manylinux_2_35_x86_64",
        )
    if implementation not in _IMPL_NAMES:
        raise TargetError(
            f"--implementation {implementation!r} is not supported (cp or pp)",
            hint="use --implementation cp",
        )
    parsed = [parse_platform(p) for p in platforms]
    system, machine = _one_system(parsed)
    abi = abi or _default_abi(implementation, major, minor, threaded)
    expanded = expand_platforms(parsed)
    name, pyimpl = _IMPL_NAMES[implementation]
    sys_platform, os_name = _SYSTEMS[system]
    full = f"{major}.{minor}.{micro}"
    markers = {
        "implementation_name": name,
        "implementation_version": full,
        "os_name": os_name,
        "platform_machine": machine,
        "platform_python_implementation": pyimpl,
        "platform_release": "",
        "platform_system": system,
        "platform_version": "",
        "python_full_version": full,
        "python_version": f"{major}.{minor}",
        "sys_platform": sys_platform,
    }
    return TargetProfile(
        implementation=implementation,
        python_version=f"{major}.{minor}",
        abi=abi,
        machine=machine,
        platforms=tuple(expanded),
        tags=tuple(_tags(implementation, (major, minor), abi, expanded)),
        markers=markers,
        libc=libc_of(expanded),
        source="flags",
    )
