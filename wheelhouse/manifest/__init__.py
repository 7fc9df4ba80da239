"""Stack manifests (TOML): what to stage for a deployment and how to prove it on the box.

Parsing is pure (``parse_manifest(data, base)``); reading the file is separate
(``load_manifest(path)``). Every section is optional except that a manifest must
say something. Unknown top-level keys are an error, so a typo never silently
drops a requirement. Format (all keys shown)::

    [stack]
    name = "demo"
    requirements = ["markupsafe==3.0.2", "rich"]
    requirements-files = ["requirements.txt"]   # relative to the manifest; --hash options enforced
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
    force = false                                # true: listed for dropping; dropped only with --include-forced

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

from wheelhouse.errors import UsageError
from .requirements_file import RequirementLine, RequirementsFileError, parse_requirements_text

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
    # Lines of requirements-files/constraints-files with --hash options: enforced when staging.
    hashed_requirements: tuple[RequirementLine, ...] = ()

    @property
    def base(self) -> Path:
        return self.path.parent if self.path else Path.cwd()


_TOP = {"stack", "target", "toolchain", "manifest", "engine", "drop", "patch", "doctor", "serve"}


def _strs(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ManifestError(f"{where} must be a list of strings", hint=f'write {where.split(": ")[-1]} = ["..."]')
    return tuple(value)


def _table(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise ManifestError(f"{where}{key} must be a table", hint=f"write [{key}]")
    return value


def _tables(data: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    """An array of tables (``[[key]]``); anything else is an error, never an AttributeError later."""
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ManifestError(f"{where}{key} must be an array of tables", hint=f"write each entry as [[{key}]]")
    return value


_KIND = {str: "a string", bool: "true or false", int: "an integer", float: "a number", Mapping: "a table"}


def _value(table: Mapping[str, Any], key: str, kinds: tuple[type, ...], where: str, default: Any = None) -> Any:
    """``table[key]`` checked against ``kinds`` (TOML types); absent means ``default``."""
    value = table.get(key)
    if value is None:
        return default
    # bool is an int in Python, not in TOML: `gpus = true` is a mistake.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        what = " or ".join(_KIND[k] for k in kinds if not (k is int and float in kinds))
        name = where.split(": ")[-1]
        hint = f'quote it: {key} = "{value}"' if kinds == (str,) and not isinstance(value, (Mapping, list)) else f"fix {name} in the manifest"
        raise ManifestError(f"{where} must be {what}, not {value!r}", hint=hint)
    return value


def _str_table(table: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = _value(table, key, (Mapping,), where, {})
    if not all(isinstance(v, str) for v in value.values()):
        raise ManifestError(f"{where} must map names to strings", hint=f'write {key} = {{ NAME = "value" }}')
    return dict(value)


def _read_lines(path: Path, where: str) -> tuple[RequirementLine, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"{where}: cannot read {path}: {exc.strerror}", hint="fix the path (relative to the manifest)") from exc
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{where}: {path} is not UTF-8 text", hint="save it as UTF-8") from exc
    try:
        return parse_requirements_text(text, str(path), option_hint="list requirements only (with --hash options if "
                                       "you like); indexes and find-links go in [stack] index-url, extra-index-urls, "
                                       "find-links, constraints in constraints-files")
    except RequirementsFileError as exc:
        raise ManifestError(exc.message, hint=exc.hint) from None


def _resolve_data_path(value: str, base: Path, subdir: str) -> Path:
    """A path relative to the manifest, else a bundled file under ``subdir`` (engine_src/)."""
    from wheelhouse.resources import data_dir

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
    reqs = list(_strs(stack.get("requirements"), f"{where}stack.requirements"))
    hashed: list[RequirementLine] = []
    for f in _strs(stack.get("requirements-files"), f"{where}stack.requirements-files"):
        lines = _read_lines(base / f, where + "stack.requirements-files")
        reqs += [line.text for line in lines]
        hashed += [line for line in lines if line.hashes]
    cons = list(_strs(stack.get("constraints"), f"{where}stack.constraints"))
    for f in _strs(stack.get("constraints-files"), f"{where}stack.constraints-files"):
        lines = _read_lines(base / f, where + "stack.constraints-files")
        cons += [line.text for line in lines]
        hashed += [line for line in lines if line.hashes]

    target_file = None
    stack_target = _value(stack, "target", (str,), f"{where}stack.target")
    if stack_target:
        target_file = _resolve_data_path(stack_target, base, "manifests")
    target_table = _table(data, "target", where)
    target_flags: dict[str, Any] = {}
    for key in ("python-version", "implementation", "abi"):
        # python-version = 3.10 would be the float 3.1: only a string says what was meant.
        if key in target_table:
            target_flags[key] = _value(target_table, key, (str,), f"{where}target.{key}")
    if "platforms" in target_table:
        target_flags["platforms"] = list(_strs(target_table["platforms"], f"{where}target.platforms"))
    unknown_target = sorted(set(target_table) - {"python-version", "platforms", "implementation", "abi"})
    if unknown_target:
        raise ManifestError(f"{where}unknown key(s) in [target]: {', '.join(unknown_target)}",
                            hint="[target] takes python-version, platforms, implementation, abi")
    if target_file and target_flags:
        raise ManifestError(f"{where}stack.target and [target] are both set", hint="keep one")

    toolchains = []
    for i, t in enumerate(_tables(data, "toolchain", where)):
        pkgs = _strs(t.get("packages"), f"{where}toolchain[{i}].packages")
        if len(pkgs) < 2:
            raise ManifestError(f"{where}toolchain[{i}] needs at least two packages", hint="list the packages that must share a version")
        toolchains.append(
            ToolchainGroup(
                name=_value(t, "name", (str,), f"{where}toolchain[{i}].name", f"toolchain-{i}"),
                packages=pkgs,
                exact=_value(t, "exact", (bool,), f"{where}toolchain[{i}].exact", False),
                exceptions=_strs(t.get("exceptions"), f"{where}toolchain[{i}].exceptions"),
            )
        )

    releases = []
    for i, m in enumerate(_tables(data, "manifest", where)):
        if not m.get("url"):
            raise ManifestError(f"{where}manifest[{i}] has no url", hint="set url = \"https://.../engine-linux_x86_64.json\"")
        releases.append(ReleaseManifest(url=_value(m, "url", (str,), f"{where}manifest[{i}].url"),
                                        keys=_strs(m.get("keys"), f"{where}manifest[{i}].keys"),
                                        sha256=_value(m, "sha256", (str,), f"{where}manifest[{i}].sha256")))

    engine = _table(data, "engine", where)
    recipe_name = _value(engine, "recipe", (str,), f"{where}engine.recipe")
    recipe = _resolve_data_path(recipe_name, base, "engine_src") if recipe_name else None

    drops = []
    for i, d in enumerate(_tables(data, "drop", where)):
        if not d.get("distribution"):
            raise ManifestError(f"{where}drop[{i}] has no distribution", hint='set distribution = "name"')
        w = f"{where}drop[{i}]"
        drops.append(DropRule(_value(d, "distribution", (str,), f"{w}.distribution"),
                              _value(d, "module", (str,), f"{w}.module"),
                              _value(d, "reason", (str,), f"{w}.reason", ""),
                              _value(d, "force", (bool,), f"{w}.force", False)))

    patches = []
    for i, p in enumerate(_tables(data, "patch", where)):
        if not p.get("spec"):
            raise ManifestError(f"{where}patch[{i}] has no spec", hint='set spec = "file.toml" (under engine_src/)')
        patches.append(_resolve_data_path(_value(p, "spec", (str,), f"{where}patch[{i}].spec"), base, "engine_src"))

    doc = _table(data, "doctor", where)
    sm = _value(doc, "sm", (str, float, int), f"{where}doctor.sm")
    doctor = DoctorExpectations(
        gpus=_value(doc, "gpus", (int,), f"{where}doctor.gpus"),
        sm=str(sm) if sm is not None else None,
        max_used_mib=_value(doc, "max-used-mib", (int,), f"{where}doctor.max-used-mib"),
        toolchain_exact=_value(doc, "toolchain-exact", (bool,), f"{where}doctor.toolchain-exact", False),
        checks=_strs(doc.get("checks"), f"{where}doctor.checks"),
    )

    serve = None
    srv = _table(data, "serve", where)
    if srv:
        cmd = srv.get("command")
        if isinstance(cmd, str):
            import shlex

            try:
                cmd = shlex.split(cmd)
            except ValueError as exc:  # an unterminated quote
                raise ManifestError(f"{where}serve.command cannot be split into words: {exc}",
                                    hint='write it as a list: command = ["engine", "--flag", "value"]') from exc
        serve = ServeSpec(
            command=_strs(cmd, f"{where}serve.command"),
            ready=_value(srv, "ready", (str,), f"{where}serve.ready", "health"),
            url=_value(srv, "url", (str,), f"{where}serve.url", "http://127.0.0.1:1919"),
            path=_value(srv, "path", (str,), f"{where}serve.path"),
            timeout=float(_value(srv, "timeout", (int, float), f"{where}serve.timeout", 7200)),
            env=_str_table(srv, "env", f"{where}serve.env"),
            forbid_flags=_str_table(srv, "forbid-flags", f"{where}serve.forbid-flags"),
        )
        if serve.ready not in ("health", "http", "generate"):
            raise ManifestError(f"{where}serve.ready is {serve.ready!r}", hint="use health, http or generate")

    return StackManifest(
        path=path,
        name=_value(stack, "name", (str,), f"{where}stack.name") or (path.stem if path else "stack"),
        requirements=tuple(reqs),
        constraints=tuple(cons),
        index_url=_value(stack, "index-url", (str,), f"{where}stack.index-url"),
        extra_index_urls=_strs(stack.get("extra-index-urls"), f"{where}stack.extra-index-urls"),
        find_links=tuple(str(_resolve_data_path(f, base, "manifests")) if not f.startswith(("http:", "https:", "file:")) else f
                         for f in _strs(stack.get("find-links"), f"{where}stack.find-links")),
        target_file=target_file,
        target_flags=target_flags,
        prereleases=_value(stack, "prereleases", (bool,), f"{where}stack.prereleases", False),
        toolchains=tuple(toolchains),
        release_manifests=tuple(releases),
        engine_recipe=recipe,
        drops=tuple(drops),
        patches=tuple(patches),
        doctor=doctor,
        serve=serve,
        hashed_requirements=tuple(hashed),
    )


def load_manifest(path: str | Path) -> StackManifest:
    """Read and parse a manifest file; a bundled name like ``demo`` finds ``manifests/demo.toml``."""
    from wheelhouse.resources import manifests_dir

    p = Path(path)
    if not p.exists() and not p.suffix:
        bundled = manifests_dir() / f"{p.name}.toml"
        if bundled.exists():
            p = bundled
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ManifestError(f"manifest {p} does not exist", hint="give a path to a .toml stack manifest, or a bundled name such as `demo`") from exc
    except IsADirectoryError as exc:
        raise ManifestError(f"manifest {p} is a folder, not a file", hint="give the path of the .toml file inside it") from exc
    except OSError as exc:
        raise ManifestError(f"manifest {p}: cannot read it ({exc.strerror})", hint="check its permissions") from exc
    except UnicodeDecodeError as exc:
        raise ManifestError(f"manifest {p} is not UTF-8 text", hint="save it as UTF-8 TOML") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"manifest {p} is not valid TOML: {exc}", hint="fix the line it names") from exc
    return parse_manifest(data, p.resolve())
