"""The stack manifest's values: frozen dataclasses, the keys each section takes, and its error."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from wheelhouse.errors import UsageError
from .flag_rules import FlagRule
from .requirements_file import RequirementLine

__all__ = [
    "ManifestError",
    "ToolchainGroup",
    "ReleaseManifest",
    "DropRule",
    "Exclusion",
    "DoctorExpectations",
    "DOCTOR_LINKS",
    "ServeSpec",
    "StackManifest",
    "MANIFEST_KEYS",
]


class ManifestError(UsageError):
    code = "bad-manifest"


@dataclass(frozen=True)
class ToolchainGroup:
    """Packages that must share one release (same major.minor, or identical when ``exact``)."""

    name: str
    packages: tuple[str, ...]
    exact: bool = False
    exceptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReleaseManifest:
    url: str
    keys: tuple[str, ...]
    sha256: str | None = None


@dataclass(frozen=True)
class DropRule:
    distribution: str
    module: str | None = None
    reason: str = ""
    force: bool = False


@dataclass(frozen=True)
class Exclusion:
    """A distribution left out of the closure wherever it is required, and why."""

    distribution: str
    reason: str = ""


@dataclass(frozen=True)
class DoctorExpectations:
    gpus: int | None = None
    sm: str | None = None
    max_used_mib: int | None = None
    toolchain_exact: bool = False
    checks: tuple[str, ...] = ()
    entry: tuple[str, ...] = ()  # the modules the engine imports at start-up (native: what they load must load)
    links: tuple[str, ...] = ()  # "sonames" / "lib64": what the stack's builds need from `wh links`


DOCTOR_LINKS = ("sonames", "lib64")


@dataclass(frozen=True)
class ServeSpec:
    command: tuple[str, ...]
    ready: str = "health"
    url: str = "http://127.0.0.1:1919"
    path: str | None = None
    timeout: float = 7200.0
    env: Mapping[str, str] = field(default_factory=dict)
    forbid_flags: Mapping[str, str] = field(default_factory=dict)
    # Every rule on the command's flags: forbid-flags as forbid rules, then the [[serve.rule]] tables.
    rules: tuple[FlagRule, ...] = ()


@dataclass(frozen=True)
class StackManifest:
    path: Path | None
    name: str
    requirements: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    excludes: tuple[Exclusion, ...] = ()
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    target_file: Path | None = None
    target_flags: Mapping[str, Any] = field(default_factory=dict)
    prereleases: bool = False
    keep_image: tuple[str, ...] = ()  # distributions held at the target image's version (``--keep-image``)
    toolchains: tuple[ToolchainGroup, ...] = ()
    release_manifests: tuple[ReleaseManifest, ...] = ()
    engine_recipe: Path | None = None
    drops: tuple[DropRule, ...] = ()
    patches: tuple[Path, ...] = ()
    doctor: DoctorExpectations = DoctorExpectations()
    serve: ServeSpec | None = None
    # Lines of requirements-files/constraints-files with --hash options: enforced when staging.
    hashed_requirements: tuple[RequirementLine, ...] = ()
    # requirements-files / constraints-files (resolved against the manifest's folder). parse_manifest
    # only names them; read_requirement_files (load_manifest calls it) adds their lines above.
    requirement_files: tuple[Path, ...] = ()
    constraint_files: tuple[Path, ...] = ()
    files_read: bool = False

    @property
    def base(self) -> Path:
        return self.path.parent if self.path else Path.cwd()


# Every key each section takes: anything else is refused with a did-you-mean (a typo such as
# `requirement-files` must never silently drop the requirements it names).
MANIFEST_KEYS: Mapping[str, frozenset[str]] = {
    "stack": frozenset({"name", "requirements", "requirements-files", "constraints", "constraints-files", "index-url",
                        "extra-index-urls", "find-links", "target", "prereleases", "overrides", "keep-image"}),
    "exclude": frozenset({"distribution", "reason"}),
    "target": frozenset({"python-version", "platforms", "implementation", "abi"}),
    "toolchain": frozenset({"name", "packages", "exact", "exceptions"}),
    "manifest": frozenset({"url", "keys", "sha256"}),
    "engine": frozenset({"recipe"}),
    "drop": frozenset({"distribution", "module", "reason", "force"}),
    "patch": frozenset({"spec"}),
    "doctor": frozenset({"gpus", "sm", "max-used-mib", "toolchain-exact", "checks", "entry", "links"}),
    "serve": frozenset({"command", "ready", "url", "path", "timeout", "env", "forbid-flags", "rule"}),
}
