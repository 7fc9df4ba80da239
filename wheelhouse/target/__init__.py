"""Target profiles: the interpreter and machine a wheelhouse is for.

A profile is data. It comes from the box (``wh target capture``), from flags
(``--python-version 3.12 --platform manylinux_2_35_x86_64``), from a file (ours
or a pex complete-platform JSON), or, when nothing is given, from the running
interpreter. Nothing here evaluates anything against the host unless asked for
the host's profile.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from packaging.markers import Marker
from packaging.utils import parse_wheel_filename, InvalidWheelFilename
from packaging.version import Version

from . import capture as capture_target
from wheelhouse.errors import TargetError

__all__ = ["Gpu", "TargetProfile", "target_from_flags", "load_target", "host_target", "MARKER_KEYS", "glibc_version"]

# PEP 508: every key a marker may name. Marker.evaluate() fills missing keys
# from the HOST's default_environment(), so a target must always supply all.
MARKER_KEYS = (
    "implementation_name",
    "implementation_version",
    "os_name",
    "platform_machine",
    "platform_python_implementation",
    "platform_release",
    "platform_system",
    "platform_version",
    "python_full_version",
    "python_version",
    "sys_platform",
)

_IMPL_NAMES = {"cp": ("cpython", "CPython"), "pp": ("pypy", "PyPy")}
_PLATFORM = re.compile(r"^(manylinux_\d+_\d+|manylinux1|manylinux2010|manylinux2014|musllinux_\d+_\d+|linux)_(.+)$")


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    index: int | None = None

    @property
    def sm(self) -> str | None:
        """``8.9`` -> ``sm_89``."""
        if not self.compute_capability:
            return None
        return "sm_" + self.compute_capability.replace(".", "")


@dataclass(frozen=True)
class TargetProfile:
    implementation: str  # "cp"
    python_version: str  # "3.12"
    abi: str  # "cp312"
    machine: str  # "x86_64"
    platforms: tuple[str, ...]  # accepted platform tags, best first
    tags: tuple[str, ...]  # every accepted wheel tag, best first
    markers: Mapping[str, str]  # complete PEP 508 environment
    libc: tuple[str, str] | None = None  # ("glibc", "2.35")
    gpus: tuple[Gpu, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    source: str = "flags"  # captured | flags | host | pex | file
    _rank: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        missing = [k for k in MARKER_KEYS if k not in self.markers]
        if missing:
            raise TargetError(
                f"target marker environment lacks {', '.join(missing)}",
                hint="capture the profile on the box with `python capture_target.py -o target.json`",
            )
        object.__setattr__(self, "_rank", {t: i for i, t in enumerate(self.tags)})

    # --- questions a resolver or installer asks -------------------------------------------
    @property
    def python_full_version(self) -> str:
        return self.markers["python_full_version"]

    @property
    def glibc(self) -> tuple[int, int] | None:
        return glibc_version(self.libc)

    def tag_rank(self, tag: str) -> int | None:
        """Position of one ``py-abi-plat`` tag in the target's order (0 is best), or None."""
        return self._rank.get(tag)

    def wheel_rank(self, filename: str) -> int | None:
        """Best rank among a wheel's tags, or None when the target cannot install it."""
        try:
            _, _, _, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            return None
        ranks = [self._rank[str(t)] for t in tags if str(t) in self._rank]
        return min(ranks) if ranks else None

    def environment(self, extra: str | None = None) -> dict[str, str]:
        """The full marker environment, with ``extra`` set (empty string when none)."""
        env = dict(self.markers)
        env["extra"] = extra or ""
        return env

    def evaluate(self, marker: Marker | str | None, extra: str | None = None) -> bool:
        """Evaluate a PEP 508 marker for the target, never for the host."""
        if marker is None:
            return True
        if isinstance(marker, str):
            marker = Marker(marker)
        return marker.evaluate(self.environment(extra))

    def accepts_python(self, specifier) -> bool:
        """Whether a ``Requires-Python`` specifier admits the target's interpreter."""
        if specifier is None:
            return True
        return specifier.contains(Version(self.python_full_version), prereleases=True)

    def describe(self) -> str:
        libc = f" {self.libc[0]} {self.libc[1]}" if self.libc else ""
        return f"{self.implementation}{self.python_version.replace('.', '')} ({self.abi}) {self.machine}{libc}"

    # --- (de)serialisation ----------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "schema": capture_target.SCHEMA,
            "source": self.source,
            "implementation": self.implementation,
            "python_version": self.python_version,
            "abi": self.abi,
            "machine": self.machine,
            "platforms": list(self.platforms),
            "libc": {"name": self.libc[0], "version": self.libc[1]} if self.libc else None,
            "marker_environment": dict(self.markers),
            "compatible_tags": list(self.tags),
            "gpus": [
                {k: v for k, v in vars(g).items() if v is not None} for g in self.gpus
            ],
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
        }


def glibc_version(libc: tuple[str, str] | None) -> tuple[int, int] | None:
    """``("glibc", "2.35")`` -> ``(2, 35)``; None for musl or an unknown libc."""
    if libc and libc[0] == "glibc":
        major, minor = libc[1].split(".")[:2]
        return int(major), int(minor)
    return None


def _split_platform(tag: str) -> tuple[str | None, str]:
    m = _PLATFORM.match(tag)
    if not m:
        return None, tag
    return m.group(1), m.group(2)


def _libc_of(platforms: list[str]) -> tuple[str, str] | None:
    best: tuple[str, tuple[int, int]] | None = None
    for p in platforms:
        kind, _ = _split_platform(p)
        if not kind:
            continue
        legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
        if kind in legacy:
            ver, name = legacy[kind], "glibc"
        elif kind.startswith("manylinux_"):
            ver, name = tuple(int(x) for x in kind.split("_")[1:3]), "glibc"
        elif kind.startswith("musllinux_"):
            ver, name = tuple(int(x) for x in kind.split("_")[1:3]), "musl"
        else:
            continue
        if best is None or ver > best[1]:
            best = (name, ver)
    return (best[0], f"{best[1][0]}.{best[1][1]}") if best else None


def target_from_flags(
    python_version: str,
    platforms: list[str],
    implementation: str = "cp",
    abi: str | None = None,
) -> TargetProfile:
    """A profile for an interpreter we cannot run, computed like packaging would on it."""
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?", python_version or "")
    if not m:
        raise TargetError(
            f"--python-version {python_version!r} is not MAJOR.MINOR[.MICRO]",
            hint="for example: --python-version 3.12",
        )
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
    major, minor = int(m.group(1)), int(m.group(2))
    micro = m.group(3) or "0"
    abi = abi or f"{implementation}{major}{minor}"
    expanded: list[str] = []
    for p in platforms:
        for tag in capture_target.expand_platform(p):
            if tag not in expanded:
                expanded.append(tag)
    arches = {_split_platform(p)[1] for p in platforms}
    if len(arches) != 1:
        raise TargetError(
            f"--platform values name several architectures: {', '.join(sorted(arches))}",
            hint="stage once per architecture",
        )
    machine = arches.pop()
    tags = capture_target.compatible_tags(implementation, (major, minor), [abi], expanded)
    kind = _split_platform(expanded[0])[0]
    is_linux = kind is not None
    name, pyimpl = _IMPL_NAMES[implementation]
    full = f"{major}.{minor}.{micro}"
    markers = {
        "implementation_name": name,
        "implementation_version": full,
        "os_name": "posix" if is_linux else ("nt" if machine.startswith(("amd64", "win")) else "posix"),
        "platform_machine": machine,
        "platform_python_implementation": pyimpl,
        "platform_release": "",
        "platform_system": "Linux" if is_linux else "",
        "platform_version": "",
        "python_full_version": full,
        "python_version": f"{major}.{minor}",
        "sys_platform": "linux" if is_linux else "",
    }
    return TargetProfile(
        implementation=implementation,
        python_version=f"{major}.{minor}",
        abi=abi,
        machine=machine,
        platforms=tuple(expanded),
        tags=tuple(tags),
        markers=markers,
        libc=_libc_of(expanded),
        source="flags",
    )


def _check_profile(data: Mapping[str, Any], where: str) -> None:
    """Every field a profile may carry has its JSON type, so a hand-edited file fails here, by name."""
    def bad(key: str, what: str) -> TargetError:
        return TargetError(f"{where}: {key} must be {what}", hint="capture it again on the box with `wh target capture -o FILE`")

    if "marker_environment" not in data or "compatible_tags" not in data:
        raise TargetError(f"{where} lacks marker_environment or compatible_tags",
                          hint="write one on the box with `python capture_target.py -o target.json`")
    markers, tags = data["marker_environment"], data["compatible_tags"]
    if not isinstance(markers, Mapping) or not all(isinstance(v, str) for v in markers.values()):
        raise bad("marker_environment", "an object of strings")
    missing = [k for k in MARKER_KEYS if k not in markers]
    if missing:
        raise TargetError(f"{where}: marker_environment lacks {', '.join(missing)}",
                          hint="capture the profile on the box with `python capture_target.py -o target.json`")
    if not isinstance(tags, list):
        raise bad("compatible_tags", "a list of wheel tags like cp312-cp312-manylinux_2_35_x86_64")
    if not all(isinstance(t, str) and t.count("-") == 2 for t in tags):
        raise bad("compatible_tags", "a list of wheel tags like cp312-cp312-manylinux_2_35_x86_64")
    for key in ("implementation", "python_version", "abi", "machine", "driver_version", "cuda_version"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise bad(key, "a string")
    platforms = data.get("platforms")
    if platforms is not None and not (isinstance(platforms, list) and all(isinstance(x, str) for x in platforms)):
        raise bad("platforms", "a list of strings")
    libc = data.get("libc")
    if libc is not None and not (isinstance(libc, Mapping) and isinstance(libc.get("name"), str)
                                 and isinstance(libc.get("version"), str)
                                 and (libc["name"] != "glibc" or re.fullmatch(r"\d+\.\d+(\.\d+)?", libc["version"]))):
        raise bad("libc", 'an object like {"name": "glibc", "version": "2.35"}')
    gpus = data.get("gpus")
    if gpus is not None and not (isinstance(gpus, list) and all(isinstance(g, Mapping) for g in gpus)):
        raise bad("gpus", "a list of objects")


def target_from_json(data: Mapping[str, Any], source: str = "file", where: str = "target file") -> TargetProfile:
    """Our profile JSON, or a pex complete-platform JSON (marker_environment + compatible_tags)."""
    _check_profile(data, where)
    markers = dict(data["marker_environment"])
    tags = list(data["compatible_tags"])
    if not tags:
        raise TargetError(f"{where} has an empty compatible_tags list", hint="capture it again on the box")
    first = tags[0].split("-")
    impl = data.get("implementation") or re.sub(r"\d+$", "", first[0])
    pyver = data.get("python_version") or markers.get("python_version")
    abi = data.get("abi") or first[1]
    platforms = data.get("platforms") or list(dict.fromkeys(t.split("-", 2)[2] for t in tags if not t.endswith("-any")))
    machine = data.get("machine") or markers.get("platform_machine", "")
    libc = data.get("libc")
    libc_t = (libc["name"], libc["version"]) if isinstance(libc, dict) else _libc_of(list(platforms))
    gpus = tuple(
        Gpu(
            name=g.get("name", "?"),
            compute_capability=g.get("compute_capability"),
            memory_total_mib=g.get("memory_total_mib"),
            memory_used_mib=g.get("memory_used_mib"),
            index=g.get("index"),
        )
        for g in data.get("gpus") or ()
    )
    kind = "pex" if "schema" not in data else data.get("source", source)
    return TargetProfile(
        implementation=impl,
        python_version=pyver,
        abi=abi,
        machine=machine,
        platforms=tuple(platforms),
        tags=tuple(tags),
        markers=markers,
        libc=libc_t,
        gpus=gpus,
        driver_version=data.get("driver_version"),
        cuda_version=data.get("cuda_version"),
        source=kind,
    )


def load_target(path: str | Path) -> TargetProfile:
    """Read a target profile file; a missing or malformed file is a TargetError."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise TargetError(f"target file {p} does not exist", hint="capture one with `wh target capture -o FILE` on the box") from exc
    except OSError as exc:
        raise TargetError(f"target file {p}: cannot read it ({exc.strerror})", hint="give the path of a JSON profile from `wh target capture`") from exc
    except ValueError as exc:
        raise TargetError(f"target file {p} is not valid JSON: {exc}", hint="capture it again on the box") from exc
    if not isinstance(data, dict):
        raise TargetError(f"target file {p} is not a JSON object", hint="capture it again on the box")
    return target_from_json(data, where=f"target file {p}")


def host_target(include_gpus: bool = False) -> TargetProfile:
    """The running interpreter's own profile."""
    data = capture_target.capture(include_gpus=include_gpus)
    data["source"] = "host"
    return target_from_json(data)
