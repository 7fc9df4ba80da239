"""The target profile: the interpreter and machine a wheelhouse is for, as data.

It answers what a resolver and an installer ask (is this wheel installable, and how well
does it rank; does this marker hold; does this Requires-Python admit it), always for the
target and never for the host, and reads and writes its JSON (ours, or a pex
complete-platform file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from packaging.utils import canonicalize_name
from packaging.version import Version

from wheelhouse.datafile import load_json
from wheelhouse.errors import TargetError
from . import capture as capture_target
from .gpu import Gpu, gpu_from_json

if TYPE_CHECKING:
    from packaging.markers import Marker

__all__ = ["TargetProfile", "ProvidedDist", "target_from_json", "load_target", "host_target", "MARKER_KEYS", "glibc_version", "libc_of"]

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


@dataclass(frozen=True)
class ProvidedDist:
    """A distribution the target interpreter already imports (captured on the box): what a delta stage
    treats as installed. ``where``: "venv" (the interpreter's own site dir), "parent" (a base venv it
    sees), "system" (the base interpreter's); ``path``: the site dir it was found in, informative only."""

    name: str  # canonical (PEP 503) name
    version: str
    where: str = "system"
    path: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "where": self.where, "path": self.path}


@dataclass(frozen=True)
class TargetProfile:
    """An interpreter and machine as data: its ordered tags, full marker environment, libc, GPUs."""

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
    provided: tuple[ProvidedDist, ...] = ()  # what the image's interpreter imports, in its sys.path order
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
        """Best rank among a wheel's tags (0 is best), or None when the target cannot install it.

        The one place a wheel is ranked by its filename: the resolver, the lock and ``wh install``
        all ask here. The tag triple is split without parsing the name (PEP 425 compressed tag
        sets: ``py2.py3-none-any``), since resolution ranks tens of thousands of files.
        """
        if not filename.endswith(".whl"):
            return None
        parts = filename[:-4].split("-")
        if len(parts) not in (5, 6):  # name-version[-build]-py-abi-plat
            return None
        best = None
        rank = self._rank
        for py in parts[-3].split("."):
            for abi in parts[-2].split("."):
                for plat in parts[-1].split("."):
                    r = rank.get(f"{py}-{abi}-{plat}")
                    if r is not None and (best is None or r < best):
                        best = r
        return best

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
            from packaging.markers import Marker  # here: a stage answered from its stored resolution evaluates none

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
            "gpus": [{k: v for k, v in g.to_json().items() if v is not None} for g in self.gpus],
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "distributions": [d.to_json() for d in self.provided],
        }


def glibc_version(libc: tuple[str, str] | None) -> tuple[int, int] | None:
    """``("glibc", "2.35")`` -> ``(2, 35)``; None for musl or an unknown libc."""
    if libc and libc[0] == "glibc":
        major, minor = libc[1].split(".")[:2]
        return int(major), int(minor)
    return None


def libc_of(platforms) -> tuple[str, str] | None:
    """The newest libc a list of platform tags names: ``("glibc", "2.35")``, ``("musl", "1.2")`` or None."""
    found = [s for s in map(capture_target.split_libc_platform, platforms) if s]
    if not found:
        return None
    libc, major, minor, _ = max(found, key=lambda s: (s[1], s[2]))
    return libc, f"{major}.{minor}"


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
    _check_distributions(data.get("distributions"), where)


_WHERE = ("venv", "parent", "system")
_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)  # PEP 508 names


def _check_distributions(dists: Any, where: str) -> None:
    """``distributions``: a list of {name, version, where, path}, each name once (the first on sys.path wins)."""
    if dists is None:
        return
    hint = "capture it again on the box with `wh target capture -o FILE` (or `python capture_target.py -o FILE`)"
    if not isinstance(dists, list):
        raise TargetError(f'{where}: distributions must be a list of {{"name", "version", "where", "path"}} objects',
                          hint=hint)
    seen: dict[str, int] = {}
    for i, d in enumerate(dists):
        label = f"{where}: distributions[{i}]"
        if not isinstance(d, Mapping):
            raise TargetError(f"{label} must be an object with name and version", hint=hint)
        name, version = d.get("name"), d.get("version")
        if not isinstance(name, str) or not _NAME.match(name):
            raise TargetError(f"{label}: name must be a distribution name, not {name!r}", hint=hint)
        label = f"{where}: distribution {name}"
        if not isinstance(version, str) or not version.strip():
            raise TargetError(f"{label}: version must be a non-empty string, not {version!r}", hint=hint)
        if d.get("where", "system") not in _WHERE:
            raise TargetError(f"{label}: where must be one of {', '.join(_WHERE)}, not {d.get('where')!r}", hint=hint)
        if d.get("path") is not None and not isinstance(d["path"], str):
            raise TargetError(f"{label}: path must be a string or null", hint=hint)
        key = canonicalize_name(name)
        if key in seen:
            raise TargetError(f"{label} is listed twice (distributions[{seen[key]}] and [{i}]); the interpreter "
                              "imports only the first copy", hint=hint)
        seen[key] = i


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
    libc_t = (libc["name"], libc["version"]) if isinstance(libc, dict) else libc_of(platforms)
    gpus = tuple(gpu_from_json(g, i) for i, g in enumerate(data.get("gpus") or ()))
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
        provided=tuple(ProvidedDist(name=canonicalize_name(d["name"]), version=d["version"].strip(),
                                    where=d.get("where", "system"), path=d.get("path"))
                       for d in data.get("distributions") or ()),
    )


def load_target(path: str | Path) -> TargetProfile:
    """Read a target profile file; a missing or malformed file is a TargetError."""
    p = Path(path)
    data = load_json(p, what="target file", error=TargetError,
                     hint="give the path of a JSON profile from `wh target capture -o FILE` (run it on the box)")
    return target_from_json(data, where=f"target file {p}")


def host_target(include_gpus: bool = False) -> TargetProfile:
    """The running interpreter's own profile, without its distributions: wh's own environment is no image a
    stage should assume present (a delta needs a profile captured on the box)."""
    data = capture_target.capture(include_gpus=include_gpus, include_distributions=False)
    data["source"] = "host"
    return target_from_json(data)
