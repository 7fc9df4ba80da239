"""Patch specs: which installed file a one-file patch replaces, with what, and when.

A patch spec (TOML) names the file inside an installed distribution, the sha256
it must have before, the payload that replaces it and the payload's sha256,
optional conditions on facts, and an optional verification call::

    [patch]
    name = "freetoken-fp8-rowwise"
    distribution = "freetoken"
    file = "freetoken/kernel/triton/fp8_pertensor_linear.py"   # inside the distribution
    before-sha256 = ["..."]          # one or a list: the versions the payload may replace
    payload = "fp8_pertensor_linear.py"   # relative to the spec, else under engine_src/
    payload-sha256 = "..."

    [patch.when]                     # all must hold (otherwise: skipped, unless forced)
    sm = ["8.9"]                     # any GPU with one of these compute capabilities
    torch = "<2.12"                  # any other key: an installed distribution's version range

    [patch.verify]
    call = "freetoken.kernel.triton.fp8_pertensor_linear:rowwise_scaled_mm_ok"
    expect = false                   # compared only when the conditions hold
    timeout = 300

Hashes left out of the spec are taken from the wheelhouse that holds it, when
``wh build`` exported the payload there (wh.json ``engine.artifacts`` record the
payload's sha256 and the file's sha256 at the recipe's commit). With no known
"before" hash at all, apply refuses: a patch never lands on a file nobody vouched for.

Parsing is pure (``parse_patch_spec``); ``load_patch_spec`` reads the file and
fills the hashes left out from the wheelhouse. Applying a spec is ``wheelhouse.patch``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from wheelhouse.datafile import check_keys, find_bundled, load_json, load_toml
from wheelhouse.errors import UsageError, WhError
from wheelhouse.manifest import resolve_data_path
from wheelhouse.resources import engine_src_dir

__all__ = [
    "PatchSpec",
    "PatchVerify",
    "PatchSpecError",
    "parse_patch_spec",
    "load_patch_spec",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SPEC_KEYS = {"name", "distribution", "file", "before-sha256", "payload", "payload-sha256", "when", "verify"}
_VERIFY_KEYS = {"call", "expect", "timeout", "env"}


class PatchSpecError(UsageError):
    code = "bad-patch-spec"


@dataclass(frozen=True)
class PatchVerify:
    call: str  # "module:function"
    expect: Any = None
    has_expect: bool = False
    timeout: float = 300
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PatchSpec:
    name: str
    distribution: str
    file: str
    before_sha256: tuple[str, ...]
    payload: Path
    payload_sha256: str | None
    when: Mapping[str, Any] = field(default_factory=dict)
    verify: PatchVerify | None = None
    path: Path | None = None
    hash_source: str = "spec"  # or the wh.json they came from


# --- the spec (pure parsing, then provenance) ----------------------------------------------
def _hex64(value: Any, where: str) -> str:
    v = str(value).strip().lower()
    if len(v) != 64 or any(c not in "0123456789abcdef" for c in v):
        raise PatchSpecError(f"{where} {value!r} is not a sha256 (64 hex digits)", hint="compute it with `sha256sum FILE`")
    return v


def parse_patch_spec(data: Mapping[str, Any], path: Path | None = None) -> PatchSpec:
    where = f"{path}: " if path else ""
    check_keys(data, {"patch"}, f"{where}patch spec", error=PatchSpecError, noun="section")
    p = data.get("patch")
    if not isinstance(p, Mapping):
        raise PatchSpecError(f"{where}no [patch] table", hint="see `wh patch --help`, and docs/manifest.md#patch-specs in wh's source repository for the spec format")
    check_keys(p, _SPEC_KEYS, f"{where}[patch]", error=PatchSpecError)
    for key in ("name", "distribution", "file", "payload"):
        if not isinstance(p.get(key), str) or not p[key]:
            raise PatchSpecError(f"{where}[patch] needs {key} (a string)", hint="see `wh patch --help`, and docs/manifest.md#patch-specs in wh's source repository for the spec format")
    if not _NAME.fullmatch(p["name"]):  # it names the journal folder <site>/.wh/patches/<name>/ (removed on revert)
        raise PatchSpecError(f"{where}[patch] name {p['name']!r} must be a plain name (letters, digits, '.', '_', '-')",
                             hint='e.g. name = "freetoken-fp8-rowwise"')
    if Path(p["file"]).is_absolute() or ".." in Path(p["file"]).parts:
        raise PatchSpecError(f"{where}[patch] file {p['file']!r} must be a path inside the distribution",
                             hint='e.g. file = "pkg/module.py"')
    before = p.get("before-sha256", [])
    before = [before] if isinstance(before, str) else before
    if not isinstance(before, list):
        raise PatchSpecError(f"{where}before-sha256 must be a sha256 or a list of them", hint='before-sha256 = ["<64 hex>"]')
    before_t = tuple(_hex64(b, f"{where}before-sha256") for b in before)
    payload_sha = _hex64(p["payload-sha256"], f"{where}payload-sha256") if p.get("payload-sha256") else None
    for key in ("when", "verify"):
        if not isinstance(p.get(key) or {}, Mapping):
            raise PatchSpecError(f"{where}[patch] {key} must be a table", hint=f"write [patch.{key}]")
    when = dict(p.get("when", {}) or {})
    for key, value in when.items():
        if key == "sm":
            sms = [value] if isinstance(value, (str, int, float)) else value
            if not isinstance(sms, list) or not all(isinstance(v, (str, int, float)) for v in sms):
                raise PatchSpecError(f"{where}[patch.when] sm must be a compute capability or a list of them",
                                     hint='e.g. sm = ["8.9"]')
            when[key] = [str(v) for v in sms]
        else:
            try:
                SpecifierSet(str(value))
            except InvalidSpecifier as exc:
                raise PatchSpecError(f"{where}[patch.when] {key} = {value!r} is not a version range",
                                     hint='e.g. torch = "<2.12"') from exc
    verify = None
    if p.get("verify"):
        v = p["verify"]
        check_keys(v, _VERIFY_KEYS, f"{where}[patch.verify]", error=PatchSpecError)
        if not isinstance(v.get("call"), str) or ":" not in v["call"]:
            raise PatchSpecError(f"{where}[patch.verify] needs call = \"module:function\"",
                                 hint='e.g. call = "pkg.mod:check", expect = false')
        timeout, env = v.get("timeout", 300), v.get("env") or {}
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
            raise PatchSpecError(f"{where}[patch.verify] timeout must be a number of seconds, not {timeout!r}",
                                 hint="e.g. timeout = 300")
        if not isinstance(env, Mapping):
            raise PatchSpecError(f"{where}[patch.verify] env must be a table", hint='env = { NAME = "value" }')
        verify = PatchVerify(call=str(v["call"]), expect=v.get("expect"), has_expect="expect" in v,
                             timeout=float(timeout), env={str(k): str(x) for k, x in env.items()})
    base = path.parent if path else Path.cwd()
    payload = resolve_data_path(p["payload"], base, "engine_src")
    return PatchSpec(name=p["name"], distribution=p["distribution"], file=p["file"].lstrip("/"), before_sha256=before_t,
                     payload=payload, payload_sha256=payload_sha, when=when, verify=verify, path=path)


def _provenance(spec: PatchSpec) -> PatchSpec:
    """Fill hashes the spec leaves out from the wh.json of the wheelhouse that holds the payload."""
    if spec.payload_sha256 and spec.before_sha256:
        return spec
    here = spec.payload.resolve()
    for folder in list(here.parents)[:3]:
        wh = folder / "wh.json"
        if not wh.exists():
            continue
        try:
            data = load_json(wh, what="wheelhouse record")
        except WhError:  # provenance is optional: a damaged record gives none
            continue
        engine = data.get("engine")
        arts = engine.get("artifacts") if isinstance(engine, dict) else None
        for art in arts if isinstance(arts, list) else []:  # provenance is optional: a damaged record gives none
            if not isinstance(art, dict) or not isinstance(art.get("path", ""), str):
                continue
            if (folder / art.get("path", "")).resolve() == here:
                before = spec.before_sha256 or tuple(x for x in [art.get("before_sha256")] if x)
                return PatchSpec(**{**spec.__dict__, "payload_sha256": spec.payload_sha256 or art.get("sha256"),
                                    "before_sha256": before, "hash_source": str(wh)})
    return spec


def load_patch_spec(path: str | Path) -> PatchSpec:
    """Read a spec file (or a bundled one by name), parse it, and fill left-out hashes from its wheelhouse."""
    p = find_bundled(path, engine_src_dir()) or Path(path)
    data = load_toml(p, what="patch spec", error=PatchSpecError,
                     hint="give the spec's .toml file (wheelhouses keep them in patches/)")
    return _provenance(parse_patch_spec(data, p.resolve()))
