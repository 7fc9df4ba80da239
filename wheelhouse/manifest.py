"""Stack manifests (TOML): what to stage for a deployment and how to prove it on the box.

Parsing is pure (``parse_manifest(data, base)``); reading the file is separate
(``load_manifest(path)``). Every section is optional except that a manifest must
say something. Unknown top-level keys are an error, so a typo never silently
drops a requirement. Format (all keys shown)::

    [stack]
    name = "demo"
    requirements = ["markupsafe==3.0.2", "rich"]
    requirements-files = ["requirements.txt"]   # relative to the manifest
    constraints = ["numpy<3"]
    constraints-files = []
    index-url = "https://..."                   # default: pip's configured/default index
    extra-index-urls = []
    find-links = ["./wheels"]
    target = "targets/kaggle-4xl4.json"         # or a [target] table of flags
    prereleases = false

    [target]                                     # instead of stack.target
    python-version = "3.12"
    platforms = ["manylinux_2_35_x86_64"]
    implementation = "cp"
    abi = "cp312"

    [[toolchain]]
    name = "cuda"
    packages = ["nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm"]
    exact = true                                 # default false: same major.minor
    exceptions = ["nvidia-cuda-cccl"]            # allowed to differ (headers only)

    [[manifest]]                                 # JSON release manifests (engine nightly)
    url = "https://.../engine-linux_x86_64.json"
    keys = ["runtime", "kernel_cache"]           # entries carrying name, url, sha256
    sha256 = "..."                               # optional: of the JSON itself

    [engine]
    recipe = "freetoken-pr70.toml"               # under engine_src/ or relative to the manifest

    [[drop]]                                     # dropped on the box when their probe fails
    distribution = "sglang-kernel"
    module = "sgl_kernel"
    reason = "..."
    force = false                                # true: drop even when the import works (JIT unusable)

    [[patch]]
    spec = "freetoken-fp8-rowwise.toml"          # under engine_src/ or relative to the manifest

    [doctor]
    gpus = 4
    sm = "8.9"
    max-used-mib = 4096
    toolchain-exact = true
    checks = []                                  # default: all

    [serve]
    command = ["ft", "serve", "--model-path", "{model}"]
    ready = "health"                             # health | http | generate
    url = "http://127.0.0.1:1919"
    path = "/health"
    timeout = 7200
    env = { }
    forbid-flags = { "--num-tokens" = "why" }
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "ManifestError",
    "ToolchainGroup",
    "ReleaseManifest",
    "DropRule",
    "DoctorExpectations",
    "ServeSpec",
    "StackManifest",
    "parse_manifest",
    "load_manifest",
    "resolve_data_path",
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
class DoctorExpectations:
    gpus: int | None = None
    sm: str | None = None
    max_used_mib: int | None = None
    toolchain_exact: bool = False
    checks: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServeSpec:
    command: tuple[str, ...]
    ready: str = "health"
    url: str = "http://127.0.0.1:1919"
    path: str | None = None
    timeout: float = 7200.0
    env: Mapping[str, str] = field(default_factory=dict)
    forbid_flags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StackManifest:
    path: Path | None
    name: str
    requirements: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    target_file: Path | None = None
    target_flags: Mapping[str, Any] = field(default_factory=dict)
    prereleases: bool = False
    toolchains: tuple[ToolchainGroup, ...] = ()
    release_manifests: tuple[ReleaseManifest, ...] = ()
    engine_recipe: Path | None = None
    drops: tuple[DropRule, ...] = ()
    patches: tuple[Path, ...] = ()
    doctor: DoctorExpectations = DoctorExpectations()
    serve: ServeSpec | None = None

    @property
    def base(self) -> Path:
        return self.path.parent if self.path else Path.cwd()


_TOP = {"stack", "target", "toolchain", "manifest", "engine", "drop", "patch", "doctor", "serve"}


def _strs(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ManifestError(f"{where} must be a list of strings", hint=f'write {where} = ["..."]')
    return tuple(value)


def _table(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise ManifestError(f"{where}{key} must be a table", hint=f"write [{key}]")
    return value


def _read_lines(path: Path, where: str) -> tuple[str, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"{where}: cannot read {path}: {exc.strerror}", hint="fix the path (relative to the manifest)") from exc
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            if line.startswith(("-r ", "-c ", "--")):
                raise ManifestError(f"{path}: option lines ({line.split()[0]}) are not supported", hint="list requirements only")
            out.append(line)
    return tuple(out)


def _resolve_data_path(value: str, base: Path, subdir: str) -> Path:
    """A path relative to the manifest, else a bundled file under ``subdir`` (engine_src/)."""
    from .resources import data_dir

    p = Path(value)
    if p.is_absolute():
        return p
    local = base / p
    if local.exists():
        return local
    bundled = data_dir(subdir) / p
    return bundled if bundled.exists() else local


def resolve_data_path(value: str, base: Path, subdir: str) -> Path:
    """A path relative to ``base``, else a bundled file under ``subdir``; patch specs find their payload this way."""
    return _resolve_data_path(value, base, subdir)


def parse_manifest(data: Mapping[str, Any], path: Path | None = None) -> StackManifest:
    """Turn parsed TOML into a StackManifest, collecting the first structural error."""
    where = f"{path}: " if path else ""
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise ManifestError(f"{where}unknown section(s) {', '.join(unknown)}", hint=f"known sections: {', '.join(sorted(_TOP))}")
    base = path.parent if path else Path.cwd()
    stack = _table(data, "stack", where)
    reqs = list(_strs(stack.get("requirements"), "stack.requirements"))
    for f in _strs(stack.get("requirements-files"), "stack.requirements-files"):
        reqs += _read_lines(base / f, where + "stack.requirements-files")
    cons = list(_strs(stack.get("constraints"), "stack.constraints"))
    for f in _strs(stack.get("constraints-files"), "stack.constraints-files"):
        cons += _read_lines(base / f, where + "stack.constraints-files")

    target_file = None
    if stack.get("target"):
        target_file = _resolve_data_path(str(stack["target"]), base, "manifests")
    target_flags = dict(_table(data, "target", where))
    if target_file and target_flags:
        raise ManifestError(f"{where}stack.target and [target] are both set", hint="keep one")

    toolchains = []
    for i, t in enumerate(data.get("toolchain", []) or []):
        pkgs = _strs(t.get("packages"), f"toolchain[{i}].packages")
        if len(pkgs) < 2:
            raise ManifestError(f"{where}toolchain[{i}] needs at least two packages", hint="list the packages that must share a version")
        toolchains.append(
            ToolchainGroup(
                name=str(t.get("name", f"toolchain-{i}")),
                packages=pkgs,
                exact=bool(t.get("exact", False)),
                exceptions=_strs(t.get("exceptions"), f"toolchain[{i}].exceptions"),
            )
        )

    releases = []
    for i, m in enumerate(data.get("manifest", []) or []):
        if not m.get("url"):
            raise ManifestError(f"{where}manifest[{i}] has no url", hint="set url = \"https://.../engine-linux_x86_64.json\"")
        releases.append(ReleaseManifest(url=str(m["url"]), keys=_strs(m.get("keys"), f"manifest[{i}].keys"), sha256=m.get("sha256")))

    engine = _table(data, "engine", where)
    recipe = _resolve_data_path(str(engine["recipe"]), base, "engine_src") if engine.get("recipe") else None

    drops = []
    for i, d in enumerate(data.get("drop", []) or []):
        if not d.get("distribution"):
            raise ManifestError(f"{where}drop[{i}] has no distribution", hint='set distribution = "name"')
        drops.append(DropRule(str(d["distribution"]), d.get("module"), str(d.get("reason", "")), bool(d.get("force", False))))

    patches = []
    for i, p in enumerate(data.get("patch", []) or []):
        if not p.get("spec"):
            raise ManifestError(f"{where}patch[{i}] has no spec", hint='set spec = "file.toml" (under engine_src/)')
        patches.append(_resolve_data_path(str(p["spec"]), base, "engine_src"))

    doc = _table(data, "doctor", where)
    doctor = DoctorExpectations(
        gpus=doc.get("gpus"),
        sm=str(doc["sm"]) if doc.get("sm") is not None else None,
        max_used_mib=doc.get("max-used-mib"),
        toolchain_exact=bool(doc.get("toolchain-exact", False)),
        checks=_strs(doc.get("checks"), "doctor.checks"),
    )

    serve = None
    srv = _table(data, "serve", where)
    if srv:
        cmd = srv.get("command")
        if isinstance(cmd, str):
            import shlex

            cmd = shlex.split(cmd)
        serve = ServeSpec(
            command=_strs(cmd, "serve.command"),
            ready=str(srv.get("ready", "health")),
            url=str(srv.get("url", "http://127.0.0.1:1919")),
            path=srv.get("path"),
            timeout=float(srv.get("timeout", 7200)),
            env=dict(srv.get("env", {})),
            forbid_flags=dict(srv.get("forbid-flags", {})),
        )
        if serve.ready not in ("health", "http", "generate"):
            raise ManifestError(f"{where}serve.ready is {serve.ready!r}", hint="use health, http or generate")

    return StackManifest(
        path=path,
        name=str(stack.get("name") or (path.stem if path else "stack")),
        requirements=tuple(reqs),
        constraints=tuple(cons),
        index_url=stack.get("index-url"),
        extra_index_urls=_strs(stack.get("extra-index-urls"), "stack.extra-index-urls"),
        find_links=tuple(str(_resolve_data_path(f, base, "manifests")) if not f.startswith(("http:", "https:", "file:")) else f
                         for f in _strs(stack.get("find-links"), "stack.find-links")),
        target_file=target_file,
        target_flags=target_flags,
        prereleases=bool(stack.get("prereleases", False)),
        toolchains=tuple(toolchains),
        release_manifests=tuple(releases),
        engine_recipe=recipe,
        drops=tuple(drops),
        patches=tuple(patches),
        doctor=doctor,
        serve=serve,
    )


def load_manifest(path: str | Path) -> StackManifest:
    """Read and parse a manifest file; a bundled name like ``demo`` finds ``manifests/demo.toml``."""
    from .resources import manifests_dir

    p = Path(path)
    if not p.exists() and not p.suffix:
        bundled = manifests_dir() / f"{p.name}.toml"
        if bundled.exists():
            p = bundled
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ManifestError(f"manifest {p} does not exist", hint="give a path to a .toml stack manifest, or a bundled name such as `demo`") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"manifest {p} is not valid TOML: {exc}", hint="fix the line it names") from exc
    return parse_manifest(data, p.resolve())
