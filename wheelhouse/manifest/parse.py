"""Parsing a stack manifest (TOML): what to stage for a deployment and how to prove it on the box.

Parsing is pure (``parse_manifest(data_or_text, path)`` reads no file); reading is separate
(``load_manifest(path)`` reads the manifest through ``wheelhouse.datafile`` and then the
requirements files it names, ``read_requirement_files``). Every section is optional. Unknown
sections, and unknown keys inside a known section, are an error with a did-you-mean, so a typo
(``requirement-files``, ``constrains``) never silently drops a requirement. Format (all keys shown)::

    [stack]
    name = "demo"
    requirements = ["markupsafe==3.0.2", "rich"]
    requirements-files = ["requirements.txt"]   # relative to the manifest; --hash options enforced
    constraints = ["numpy<3"]
    constraints-files = []
    overrides = ["nvidia-cudnn-cu12==9.10.2.21"]  # replace every requirement on the project (uv's
                                                 # override-dependencies); a marker limits where
    index-url = "https://..."                   # default: pip's configured/default index
    extra-index-urls = []
    find-links = ["./wheels"]
    target = "targets/kaggle-4xl4.json"         # or a [target] table of flags
    prereleases = false
    keep-image = ["torch"]                       # the target image's version of each is a hard constraint

    [[exclude]]                                  # removed from the closure wherever it is required
    distribution = "nvidia-cutlass-dsl"
    reason = "..."                               # said by `wh stage` and the doctor's deps check

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
    entry = ["freetoken.server"]                 # modules the engine imports at start-up (default: top-level names)
    links = ["sonames", "lib64"]                 # the stack's builds need `wh links` (-lcudart, -L.../lib64)

    [serve]
    command = ["ft", "serve", "--model-path", "{model}"]
    ready = "health"                             # health | http | generate
    url = "http://127.0.0.1:1919"
    path = "/health"
    timeout = 7200
    env = { }
    forbid-flags = { "--num-tokens" = "why" }    # short for [[serve.rule]] forbid = true

    rule = [...]                                 # written as [[serve.rule]] tables:
    [[serve.rule]]                               # a limit on a flag's value (flag_rules.py)
    flag = "--gpu-memory-utilization"
    max = 0.97                                   # or min, values = [...], multiple-of, forbid = true
    key = "..."                                  # optional: a key of the flag's JSON value
    reason = "why"                               # shown on refusal, with the manifest as the source
    hint = "..."                                 # optional: the next step (default: from the limit)
    source = "..."                               # optional: who found it (shown with the manifest's path)
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from pathlib import Path
from typing import Any, Mapping

from packaging.requirements import InvalidRequirement, Requirement

from wheelhouse.datafile import check_keys, get_value, parse_toml
from wheelhouse.errors import UsageError
from wheelhouse.resources import data_dir
from .flag_rules import forbid_rules, parse_flag_rules
from .model import (DOCTOR_LINKS, MANIFEST_KEYS, DoctorExpectations, DropRule, Exclusion, ManifestError,
                    ReleaseManifest, ServeSpec, StackManifest, ToolchainGroup)

__all__ = ["parse_manifest", "exclusion", "resolve_data_path"]

_TOP = set(MANIFEST_KEYS)


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
    check_keys(value, MANIFEST_KEYS[key], f"{where}[{key}]", error=ManifestError)
    return value


def _tables(data: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    """An array of tables (``[[key]]``); anything else is an error, never an AttributeError later."""
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ManifestError(f"{where}{key} must be an array of tables", hint=f"write each entry as [[{key}]]")
    for i, v in enumerate(value):
        check_keys(v, MANIFEST_KEYS[key], f"{where}[[{key}]] #{i + 1}", error=ManifestError)
    return value


def _value(table: Mapping[str, Any], key: str, kinds: tuple[type, ...], where: str, default: Any = None) -> Any:
    """``table[key]`` checked against ``kinds`` (TOML types); absent means ``default``."""
    return get_value(table, key, kinds, where, error=ManifestError, default=default)


def _seconds(table: Mapping[str, Any], key: str, where: str, default: float) -> float:
    """``table[key]`` as a number of seconds > 0. TOML has nan and inf, and no deadline can use them (every
    comparison with nan is false: a wait bounded by it never ends)."""
    value = float(_value(table, key, (int, float), where, default))
    if not (math.isfinite(value) and value > 0):
        raise ManifestError(f"{where} must be a finite number of seconds above 0, not {value}",
                            hint=f"write {key} = {default} (seconds)")
    return value


def _str_table(table: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = _value(table, key, (Mapping,), where, {})
    if not all(isinstance(v, str) for v in value.values()):
        raise ManifestError(f"{where} must map names to strings", hint=f'write {key} = {{ NAME = "value" }}')
    return dict(value)



def resolve_data_path(value: str, base: Path, subdir: str) -> Path:
    """A path relative to ``base``, else a bundled file under ``subdir``; patch specs find their payload this way."""
    p = Path(value)
    if p.is_absolute():
        return p
    local = base / p
    if local.exists():
        return local
    bundled = data_dir(subdir) / p
    return bundled if bundled.exists() else local


def _target(data: Mapping[str, Any], stack: Mapping[str, Any], base: Path, where: str) -> tuple[Path | None, dict]:
    target_file = None
    stack_target = _value(stack, "target", (str,), f"{where}stack.target")
    if stack_target:
        target_file = resolve_data_path(stack_target, base, "manifests")
    target_table = _table(data, "target", where)
    target_flags: dict[str, Any] = {}
    for key in ("python-version", "implementation", "abi"):
        # python-version = 3.10 would be the float 3.1: only a string says what was meant.
        if key in target_table:
            target_flags[key] = _value(target_table, key, (str,), f"{where}target.{key}")
    if "platforms" in target_table:
        target_flags["platforms"] = list(_strs(target_table["platforms"], f"{where}target.platforms"))
    if target_file and target_flags:
        raise ManifestError(f"{where}stack.target and [target] are both set", hint="keep one")
    return target_file, target_flags


def _toolchains(data: Mapping[str, Any], where: str) -> tuple[ToolchainGroup, ...]:
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
    return tuple(toolchains)


def _releases(data: Mapping[str, Any], where: str) -> tuple[ReleaseManifest, ...]:
    releases = []
    for i, m in enumerate(_tables(data, "manifest", where)):
        if not m.get("url"):
            raise ManifestError(f"{where}manifest[{i}] has no url", hint="set url = \"https://.../engine-linux_x86_64.json\"")
        releases.append(ReleaseManifest(url=_value(m, "url", (str,), f"{where}manifest[{i}].url"),
                                        keys=_strs(m.get("keys"), f"{where}manifest[{i}].keys"),
                                        sha256=_value(m, "sha256", (str,), f"{where}manifest[{i}].sha256")))
    return tuple(releases)


def _drops(data: Mapping[str, Any], where: str) -> tuple[DropRule, ...]:
    drops = []
    for i, d in enumerate(_tables(data, "drop", where)):
        if not d.get("distribution"):
            raise ManifestError(f"{where}drop[{i}] has no distribution", hint='set distribution = "name"')
        w = f"{where}drop[{i}]"
        drops.append(DropRule(_value(d, "distribution", (str,), f"{w}.distribution"),
                              _value(d, "module", (str,), f"{w}.module"),
                              _value(d, "reason", (str,), f"{w}.reason", ""),
                              _value(d, "force", (bool,), f"{w}.force", False)))
    return tuple(drops)


def exclusion(name: str, reason: str = "", where: str = "exclude", error: type[UsageError] = ManifestError) -> Exclusion:
    """An Exclusion of the project ``name``; anything but a bare project name is refused (``error``)."""
    try:
        req = Requirement(name)
    except InvalidRequirement:
        req = None
    if req is None or req.specifier or req.marker or req.extras or req.url:
        raise error(f"{where} {name!r} is not a project name",
                    hint="an exclusion names a project (no version): `nvidia-cutlass-dsl`; to change a version, "
                         "use an override")
    return Exclusion(name, reason)


def _excludes(data: Mapping[str, Any], where: str) -> tuple[Exclusion, ...]:
    out = []
    for i, d in enumerate(_tables(data, "exclude", where)):
        w = f"{where}exclude[{i}]"
        name = _value(d, "distribution", (str,), f"{w}.distribution")
        if not name:
            raise ManifestError(f"{w} has no distribution", hint='set distribution = "name"')
        out.append(exclusion(name, _value(d, "reason", (str,), f"{w}.reason", ""), f"{w}.distribution"))
    return tuple(out)


def _patches(data: Mapping[str, Any], base: Path, where: str) -> tuple[Path, ...]:
    patches = []
    for i, p in enumerate(_tables(data, "patch", where)):
        if not p.get("spec"):
            raise ManifestError(f"{where}patch[{i}] has no spec", hint='set spec = "file.toml" (under engine_src/)')
        patches.append(resolve_data_path(_value(p, "spec", (str,), f"{where}patch[{i}].spec"), base, "engine_src"))
    return tuple(patches)


def _doctor(data: Mapping[str, Any], where: str) -> DoctorExpectations:
    doc = _table(data, "doctor", where)
    sm = _value(doc, "sm", (str, float, int), f"{where}doctor.sm")
    return DoctorExpectations(
        gpus=_value(doc, "gpus", (int,), f"{where}doctor.gpus"),
        sm=str(sm) if sm is not None else None,
        max_used_mib=_value(doc, "max-used-mib", (int,), f"{where}doctor.max-used-mib"),
        toolchain_exact=_value(doc, "toolchain-exact", (bool,), f"{where}doctor.toolchain-exact", False),
        checks=_strs(doc.get("checks"), f"{where}doctor.checks"),
        entry=_strs(doc.get("entry"), f"{where}doctor.entry"),
        links=_links(doc, where),
    )


def _links(doc: Mapping[str, Any], where: str) -> tuple[str, ...]:
    links = _strs(doc.get("links"), f"{where}doctor.links")
    bad = [x for x in links if x not in DOCTOR_LINKS]
    if bad:
        raise ManifestError(f"{where}doctor.links: {', '.join(bad)} is not one of {', '.join(DOCTOR_LINKS)}",
                            hint='links = ["sonames", "lib64"]: what the stack\'s builds need from `wh links`')
    return links


def _serve(data: Mapping[str, Any], where: str) -> ServeSpec | None:
    srv = _table(data, "serve", where)
    if not srv:
        return None
    cmd = srv.get("command")
    if isinstance(cmd, str):
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
        timeout=_seconds(srv, "timeout", f"{where}serve.timeout", 7200),
        env=_str_table(srv, "env", f"{where}serve.env"),
        forbid_flags=_str_table(srv, "forbid-flags", f"{where}serve.forbid-flags"),
    )
    source = where[:-2] if where.endswith(": ") else "the manifest"  # its path, named on refusal
    rules = (*forbid_rules(serve.forbid_flags, f"{source} [serve.forbid-flags]"),
             *parse_flag_rules(srv.get("rule", []), f"{where}[[serve.rule]]", f"{source} [[serve.rule]]",
                               error=ManifestError))
    names = [r.name for r in rules]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ManifestError(f"{where}serve: {', '.join(twice)} has a rule in forbid-flags and in [[serve.rule]]",
                            hint="keep one: [[serve.rule]] with forbid = true can carry a hint")
    serve = dataclasses.replace(serve, rules=rules)
    if serve.ready not in ("health", "http", "generate"):
        raise ManifestError(f"{where}serve.ready is {serve.ready!r}", hint="use health, http or generate")
    return serve


def parse_manifest(data: Mapping[str, Any] | str, path: Path | None = None) -> StackManifest:
    """A StackManifest from parsed TOML (or TOML text); stops at the first structural error.

    Reads no file: requirements-files and constraints-files are only named
    (``requirement_files``/``constraint_files``); :func:`read_requirement_files` adds their lines.
    """
    where = f"{path}: " if path else ""
    if isinstance(data, str):
        data = parse_toml(data, source=str(path or "<text>"), what="manifest", error=ManifestError)
    check_keys(data, _TOP, f"{where}manifest", error=ManifestError, noun="section")
    base = path.parent if path else Path.cwd()
    stack = _table(data, "stack", where)
    target_file, target_flags = _target(data, stack, base, where)
    engine = _table(data, "engine", where)
    recipe_name = _value(engine, "recipe", (str,), f"{where}engine.recipe")
    return StackManifest(
        path=path,
        name=_value(stack, "name", (str,), f"{where}stack.name") or (path.stem if path else "stack"),
        requirements=_strs(stack.get("requirements"), f"{where}stack.requirements"),
        constraints=_strs(stack.get("constraints"), f"{where}stack.constraints"),
        overrides=_strs(stack.get("overrides"), f"{where}stack.overrides"),
        excludes=_excludes(data, where),
        requirement_files=tuple(base / f for f in _strs(stack.get("requirements-files"), f"{where}stack.requirements-files")),
        constraint_files=tuple(base / f for f in _strs(stack.get("constraints-files"), f"{where}stack.constraints-files")),
        index_url=_value(stack, "index-url", (str,), f"{where}stack.index-url"),
        extra_index_urls=_strs(stack.get("extra-index-urls"), f"{where}stack.extra-index-urls"),
        find_links=tuple(str(resolve_data_path(f, base, "manifests")) if not f.startswith(("http:", "https:", "file:")) else f
                         for f in _strs(stack.get("find-links"), f"{where}stack.find-links")),
        target_file=target_file,
        target_flags=target_flags,
        prereleases=_value(stack, "prereleases", (bool,), f"{where}stack.prereleases", False),
        keep_image=_strs(stack.get("keep-image"), f"{where}stack.keep-image"),
        toolchains=_toolchains(data, where),
        release_manifests=_releases(data, where),
        engine_recipe=resolve_data_path(recipe_name, base, "engine_src") if recipe_name else None,
        drops=_drops(data, where),
        patches=_patches(data, base, where),
        doctor=_doctor(data, where),
        serve=_serve(data, where),
    )
