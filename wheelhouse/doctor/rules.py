"""Known-bug rules as data: TOML files under ``doctor/rules/`` evaluated against facts.

A rule fires when ALL its conditions hold; then its verdict (fail / warn /
info) and hint are reported. A rule that does not fire is ``ok`` with the
condition that cleared it as evidence. Format::

    [[rule]]
    id = "sm89-rowwise-scaled-mm"
    title = "..."
    verdict = "fail"                       # fail | warn | info
    hint = "wh patch apply ..."
    references = ["pytorch#177651"]

    [[rule.when]]                          # one table per condition
    gpu_sm = ["8.9"]                       # some GPU has this compute capability
    [[rule.when]]
    package = "torch"                      # installed ...
    version = "<2.12"                      # ... with a version in this specifier (optional)
    [[rule.when]]
    package = "freetoken"                  # a file of an installed package, relative to its site dir
    file = "freetoken/kernel/triton/fp8_pertensor_linear.py"
    not_contains = "rowwise_scaled_mm_ok"  # or contains / sha256 / not_sha256
    [[rule.when]]
    env = "PYTORCH_CUDA_ALLOC_CONF"        # an environment variable ...
    contains = "expandable_segments:True"  # ... contains / equals (absent: is set)
    [[rule.when]]
    installed = ["sgl-kernel", "sglang-kernel"]   # all of these are installed
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelhouse.datafile import check_keys, get_value, load_toml
from wheelhouse.errors import UsageError
from wheelhouse.target.gpu import Gpu
from .report import CheckResult

__all__ = ["RuleError", "Condition", "Rule", "RuleFacts", "InstalledPackage", "load_rules", "parse_rules",
           "evaluate_rule", "evaluate_rules"]

_CONDITION_KEYS = {"gpu_sm", "package", "version", "file", "contains", "not_contains", "sha256", "not_sha256",
                   "env", "equals", "installed"}
_RULE_KEYS = {"id", "title", "verdict", "hint", "references", "when"}
_LIST_KEYS = {"gpu_sm", "installed"}  # a string or a list of strings; every other condition key is a string


class RuleError(UsageError):
    code = "bad-rule"


@dataclass(frozen=True)
class InstalledPackage:
    name: str
    version: str
    location: str | None  # the site dir its files are relative to


@dataclass(frozen=True)
class RuleFacts:
    """What rules may look at."""

    gpus: Sequence[Gpu] = ()
    packages: Mapping[str, InstalledPackage] = field(default_factory=dict)  # canonical name -> package
    environ: Mapping[str, str] = field(default_factory=dict)

    def package(self, name: str) -> InstalledPackage | None:
        return self.packages.get(canonicalize_name(name))


@dataclass(frozen=True)
class Condition:
    spec: Mapping[str, Any]

    def check(self, facts: RuleFacts) -> tuple[bool | None, str]:
        """(holds, evidence): the evidence says what was looked at, either way; holds is None: cannot tell."""
        s = self.spec
        if "gpu_sm" in s:
            wanted = {_capability(w) for w in ([s["gpu_sm"]] if isinstance(s["gpu_sm"], str) else s["gpu_sm"])}
            hits = [g for g in facts.gpus if g.compute_capability and _capability(g.compute_capability) in wanted]
            if hits:
                return True, f"GPU {hits[0].index} {hits[0].name} is sm {hits[0].compute_capability}"
            seen = sorted({g.compute_capability or "?" for g in facts.gpus})
            return False, f"no GPU with sm {'/'.join(sorted(wanted))} (" + (", ".join(seen) or "no GPUs") + ")"
        if "installed" in s:
            names = [s["installed"]] if isinstance(s["installed"], str) else list(s["installed"])
            found = [facts.package(n) for n in names]
            if all(found):
                return True, "installed: " + ", ".join(f"{p.name} {p.version}" for p in found)
            missing = [n for n, p in zip(names, found) if not p]
            return False, "not installed: " + ", ".join(missing)
        if "env" in s:
            value = facts.environ.get(s["env"])
            if value is None:
                return False, f"{s['env']} is not set"
            if "equals" in s:
                return value == s["equals"], f"{s['env']}={value}"
            if "contains" in s:
                return s["contains"] in value, f"{s['env']}={value}"
            return True, f"{s['env']}={value}"
        if "package" in s:
            pkg = facts.package(s["package"])
            if pkg is None:
                return False, f"{s['package']} is not installed"
            if "version" in s:
                try:
                    holds = SpecifierSet(s["version"]).contains(Version(pkg.version), prereleases=True)
                except InvalidVersion:  # unknown, not "does not hold": no ok may rest on it
                    return None, f"{pkg.name} {pkg.version} is not a PEP 440 version: cannot tell if it is {s['version']}"
                if not holds or "file" not in s:
                    return holds, f"{pkg.name} {pkg.version} ({'' if holds else 'not '}{s['version']})"
            if "file" in s:
                return _check_file(s, pkg)
            return True, f"{pkg.name} {pkg.version} is installed"
        raise RuleError(f"condition {dict(s)} names nothing to check", hint="use gpu_sm, package, env or installed")


def _capability(sm: str) -> str:
    """``8.9``, ``89``, ``sm_89``, ``sm_90a`` -> ``8.9`` / ``9.0``: one spelling for rules and GPUs alike."""
    w = sm.strip().lower().removeprefix("sm_").removeprefix("sm").rstrip("af")
    return w if "." in w or len(w) < 2 else f"{w[:-1]}.{w[-1]}"


def _check_file(s: Mapping[str, Any], pkg: InstalledPackage) -> tuple[bool, str]:
    path = Path(pkg.location or "") / s["file"]
    try:
        data = path.read_bytes()
    except OSError:
        return False, f"{path} does not exist ({pkg.name} {pkg.version})"
    if "not_contains" in s:
        has = s["not_contains"].encode() in data
        return not has, f"{path} {'contains' if has else 'does not contain'} {s['not_contains']!r}"
    if "contains" in s:
        has = s["contains"].encode() in data
        return has, f"{path} {'contains' if has else 'does not contain'} {s['contains']!r}"
    digest = hashlib.sha256(data).hexdigest()
    if "sha256" in s:
        return digest == s["sha256"].lower(), f"{path} sha256 {digest}"
    if "not_sha256" in s:
        return digest != s["not_sha256"].lower(), f"{path} sha256 {digest}"
    return True, f"{path} exists"


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    verdict: str
    hint: str | None
    conditions: tuple[Condition, ...]
    references: tuple[str, ...] = ()
    source: str = ""


def parse_rules(data: Mapping[str, Any], source: str = "<rules>") -> list[Rule]:
    rules = []
    check_keys(data, {"rule"}, f"{source}: rule file", error=RuleError, noun="section")
    entries = data.get("rule", []) or []
    if not isinstance(entries, list) or not all(isinstance(r, Mapping) for r in entries):
        raise RuleError(f"{source}: rule must be an array of tables", hint="write each rule as [[rule]]")
    for i, r in enumerate(entries):
        where = f"{source}: rule[{i}]"
        check_keys(r, _RULE_KEYS, f"{where} [[rule]]", error=RuleError)
        for key in ("id", "title", "verdict", "hint"):
            get_value(r, key, (str,), f"{where}.{key}", error=RuleError)
        refs = get_value(r, "references", (list,), f"{where}.references", error=RuleError, default=[])
        if not all(isinstance(x, str) for x in refs):
            raise RuleError(f"{where}.references must be a list of strings", hint='write references = ["pytorch#1"]')
        if not r.get("id") or not r.get("title"):
            raise RuleError(f"{where} needs id and title", hint="add id = \"...\" and title = \"...\"")
        verdict = r.get("verdict", "fail")
        if verdict not in ("fail", "warn", "info"):
            raise RuleError(f"{where} ({r['id']}) has verdict {verdict!r}", hint="use fail, warn or info")
        conds = []
        whens = r.get("when", []) or []
        if not isinstance(whens, list) or not all(isinstance(c, Mapping) for c in whens):
            raise RuleError(f"{where} ({r['id']}) when must be an array of tables", hint="write each condition as [[rule.when]]")
        for c in whens:
            check_keys(c, _CONDITION_KEYS, f"{where} ({r['id']}) [[rule.when]]", error=RuleError)
            for key, value in c.items():
                ok = isinstance(value, str) or (key in _LIST_KEYS and isinstance(value, list)
                                                and all(isinstance(v, str) for v in value))
                if not ok:
                    kind = "a string or a list of strings" if key in _LIST_KEYS else "a string"
                    raise RuleError(f"{where} ({r['id']}) [[rule.when]] {key} must be {kind}, not {value!r}",
                                    hint=f'quote it: {key} = "{value}"')
            if "version" in c:
                try:
                    SpecifierSet(c["version"])
                except InvalidSpecifier as exc:
                    raise RuleError(f"{where} ({r['id']}) version {c['version']!r} is not a specifier",
                                    hint='write e.g. version = "<2.12"') from exc
            conds.append(Condition(dict(c)))
        if not conds:
            raise RuleError(f"{where} ({r['id']}) has no [[rule.when]] condition", hint="add at least one")
        rules.append(Rule(str(r["id"]), str(r["title"]), verdict, r.get("hint"), tuple(conds),
                          tuple(r.get("references", []) or ()), source))
    return rules


def load_rules(dirs: Sequence[Path]) -> list[Rule]:
    """Every rule in ``*.toml`` under ``dirs`` (sorted by file name); duplicate ids are an error."""
    out: list[Rule] = []
    for d in dirs:
        for path in sorted(Path(d).glob("*.toml")):
            data = load_toml(path, what="rule file", error=RuleError,
                             hint="fix or remove it (extra rule folders come from WH_DOCTOR_RULES)")
            out += parse_rules(data, str(path))
    seen: dict[str, str] = {}
    for r in out:
        if r.id in seen:
            raise RuleError(f"rule id {r.id} is defined twice ({seen[r.id]}, {r.source})", hint="rename one")
        seen[r.id] = r.source
    return out


def evaluate_rule(rule: Rule, facts: RuleFacts) -> CheckResult:
    """Fires (the rule's verdict) when every condition holds, else ok with the clearing condition."""
    evidence, unknown = [], []
    for cond in rule.conditions:
        holds, why = cond.check(facts)
        evidence.append(why)
        if holds is None:
            unknown.append(why)
        elif not holds:
            return CheckResult(f"rule:{rule.id}", rule.title, "ok", "does not apply: " + why,
                               data={"fired": False, "references": list(rule.references)})
    refs = f" [{', '.join(rule.references)}]" if rule.references else ""
    if unknown:  # every other condition holds: it may well apply
        return CheckResult(f"rule:{rule.id}", rule.title, "info" if rule.verdict == "info" else "warn",
                           "cannot tell whether it applies: " + "; ".join(evidence) + refs,
                           hint=rule.hint or f"see rule {rule.id} in {rule.source}",
                           data={"fired": None, "references": list(rule.references)})
    hint = rule.hint
    if hint is None and rule.verdict in ("fail", "warn"):  # a finding always says where to read on
        hint = f"see {', '.join(rule.references)}" if rule.references else f"see rule {rule.id} in {rule.source}"
    return CheckResult(f"rule:{rule.id}", rule.title, rule.verdict, "; ".join(evidence) + refs, hint=hint,
                       data={"fired": True, "references": list(rule.references)})


def evaluate_rules(rules: Sequence[Rule], facts: RuleFacts) -> list[CheckResult]:
    return [evaluate_rule(r, facts) for r in rules]
