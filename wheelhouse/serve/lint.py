"""Serve command lint: fill ``{placeholders}`` and refuse flags and values known to do harm, before anything starts.

A launch that takes nine minutes to load and then dies of an out-of-memory error is
the expensive way to learn that a flag overrides a solver instead of constraining
it, or that a value one step past the tested one wedges the pipeline. The lint is
pure: it sees argv and a set of rules (``wheelhouse.manifest.flag_rules``): a flag
forbidden outright, or a limit on its value (max, min, allowed values, a multiple),
also on one key inside a JSON value (``--speculative-config``'s
``num_speculative_tokens``). A refusal names the value, the limit, the reason and
where the rule was written; ``allow`` (``wh serve --allow-flag NAME``) overrides one
rule by name, and the override is returned so the caller can record it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from wheelhouse.errors import UsageError
from wheelhouse.manifest.flag_rules import FlagRule, forbid_rules, number_text

__all__ = [
    "BUILTIN_RULES",
    "ForbiddenFlag",
    "MissingPlaceholder",
    "UnknownAllowedFlag",
    "Violation",
    "fill_placeholders",
    "placeholders",
    "rules_for",
    "lint_command",
    "port_from_command",
    "url_values",
]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_-]*)\}")

_FT_SOURCE = "wh's built-in rules for `ft serve` (FreeToken kvcache/dsv4_paged_pool.py)"
_FT_HINT = "remove {flag} and let the memory solver size the KV pool (lower --memory-ratio to leave more room)"

# (program basename, subcommand) -> rules. Applied even when the command comes after `--`
# without a manifest, so the lint protects a hand-typed launch too.
BUILTIN_RULES: Mapping[tuple[str, str], tuple[FlagRule, ...]] = {
    ("ft", "serve"): (
        # FreeToken kvcache/dsv4_paged_pool.py: a page override skips dsv4_solve_num_pages and only
        # checks a floor, so the pool is allocated whether or not it fits (OOM in _alloc_buffers).
        FlagRule(flag="--num-tokens", forbid=True, source=_FT_SOURCE, hint=_FT_HINT.format(flag="--num-tokens"),
                 reason="overrides FreeToken's KV memory solver instead of constraining it: the pool is "
                 "allocated whether or not it fits (OutOfMemoryError in _alloc_buffers) and, with --moe-backend "
                 "offload, double-spends the budget moe_cache_auto already gave the experts"),
        FlagRule(flag="--num-pages", forbid=True, source=_FT_SOURCE, hint=_FT_HINT.format(flag="--num-pages"),
                 reason="overrides FreeToken's KV memory solver instead of constraining it: only a lower "
                 "bound is checked, the pool never consults free memory (OutOfMemoryError in _alloc_buffers)"),
    ),
}


@dataclass(frozen=True)
class Violation:
    """A rule the command breaks: the value it carries and why that is refused."""

    rule: FlagRule
    value: str | None  # as written in argv (None: the flag carries no value)
    why: str  # "0.98 is above the limit 0.97"

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule.name, "value": self.value, "limit": self.rule.limit(), "why": self.why,
                "reason": self.rule.reason, "source": self.rule.source}


class ForbiddenFlag(UsageError):
    """The command carries a flag, or a value, that this engine must not be given."""

    code = "forbidden-flag"

    def __init__(self, violations: Sequence[Violation]):
        self.violations = tuple(violations)
        self.found = {v.rule.name: v.rule.reason for v in self.violations}
        what = "; ".join(v.why for v in self.violations)
        detail = "\n".join(f"  {v.rule.name}: {v.rule.reason}\n    rule from {v.rule.source}" for v in self.violations)
        steps = "; ".join(dict.fromkeys(v.rule.next_step() for v in self.violations))
        names = " ".join(f"--allow-flag {n}" for n in dict.fromkeys(v.rule.name for v in self.violations))
        super().__init__(f"refusing to launch: {what}",
                         hint=f"{steps} (or, knowing the reason below, override with {names})", detail=detail)


class UnknownAllowedFlag(UsageError):
    """``--allow-flag NAME`` names no rule of this command: a typo must not pass for an override."""

    code = "unknown-allowed-flag"


class MissingPlaceholder(UsageError):
    """The manifest's command needs a value (like ``{model}``) that was not given."""

    code = "missing-value"

    def __init__(self, names: Sequence[str]):
        self.names = tuple(names)
        # {api_key} comes from the environment only: a key on the command line lands in shell history.
        flags = " ".join("(WH_API_KEY in the environment)" if n == "api_key" else f"--{n.replace('_', '-')} VALUE"
                         for n in self.names)
        super().__init__(
            f"the serve command needs {', '.join('{' + n + '}' for n in self.names)} and no value was given",
            hint=f"pass {flags} (e.g. wh serve MANIFEST --model /path/to/model)",
        )


def placeholders(argv: Sequence[str]) -> list[str]:
    """The ``{name}`` placeholders in argv, in order of first appearance."""
    seen: list[str] = []
    for arg in argv:
        for name in _PLACEHOLDER.findall(arg):
            if name not in seen:
                seen.append(name)
    return seen


def fill_placeholders(argv: Sequence[str], values: Mapping[str, str | None]) -> tuple[str, ...]:
    """Replace every ``{name}`` with ``values[name]``; every missing one is reported at once.

    Text that is not a placeholder (a JSON argument like ``{"cpu_offload":true}``) is left alone.
    """
    missing = [n for n in placeholders(argv) if values.get(n) in (None, "")]
    if missing:
        raise MissingPlaceholder(missing)
    return tuple(_PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), arg) for arg in argv)


def rules_for(argv: Sequence[str], manifest_rules: Mapping[str, str] | Iterable[FlagRule] | None = None
              ) -> tuple[FlagRule, ...]:
    """The rules for this command: wh's built-in ones for its program, then the manifest's (same name: the manifest's).

    ``manifest_rules`` is ``ServeSpec.rules``, or a ``[serve.forbid-flags]`` table (flag -> reason).
    """
    if isinstance(manifest_rules, Mapping):
        manifest_rules = forbid_rules(manifest_rules, "the manifest [serve.forbid-flags]")
    rules: dict[str, FlagRule] = {}
    if len(argv) >= 2:
        rules.update((r.name, r) for r in BUILTIN_RULES.get((os.path.basename(argv[0]), argv[1]), ()))
    rules.update((r.name, r) for r in manifest_rules or ())
    return tuple(rules.values())


def _flag_name(arg: str) -> str:
    # vLLM's argument parser reads --max_num_seqs as --max-num-seqs: judge both spellings alike.
    return "--" + arg[2:].replace("_", "-") if arg.startswith("--") else arg


def _occurrences(argv: Sequence[str], rule: FlagRule) -> list[tuple[str | None, str | None]]:
    """Each place ``rule.flag`` appears: (its value, the key's value when it was given as ``--flag.key V``).

    vLLM also takes a JSON flag in pieces (``--speculative-config.num_speculative_tokens 7``): such a
    piece is the key's value for a key rule, and the flag's presence for a forbid rule.
    """
    flag, key = rule.flag, rule.key
    out: list[tuple[str | None, str | None]] = []
    args = list(argv[1:])
    for i, arg in enumerate(args):
        head, eq, inline = arg.partition("=")
        name = _flag_name(head)
        piece = name[len(flag) + 1:].replace("-", "_") if name.startswith(flag + ".") else None
        if not _names(name, flag) and piece is None:
            continue
        if piece is not None and not (rule.forbid or (key and piece == key.replace("-", "_"))):
            continue
        value = inline if eq else (args[i + 1] if i + 1 < len(args) and not _is_flag(args[i + 1]) else None)
        out.append((value, value if piece is not None and not rule.forbid else None))
    return out


def _names(name: str, flag: str) -> bool:
    """``name`` reaches ``flag``: the flag itself, or a prefix of it (argparse takes an unambiguous prefix,
    and vLLM's parser leaves abbreviations on: --gpu-memory-util is --gpu-memory-utilization)."""
    return name == flag or (name.startswith("--") and len(name) >= 5 and "." not in name and flag.startswith(name))


def _is_flag(arg: str) -> bool:
    if not arg.startswith("-"):
        return False
    try:
        float(arg)  # -1 is a value
        return False
    except ValueError:
        return True


def _key_value(value: str | None, key: str) -> tuple[bool, Any]:
    """(parsed, the key's value or None when absent) from a JSON flag value."""
    try:
        data = json.loads(value) if value is not None else None
    except ValueError:
        return False, None
    for part in key.split("."):
        if not isinstance(data, Mapping) or part not in data:
            return True, None
        data = data[part]
    return True, data


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _judge(rule: FlagRule, shown: str | None, value: Any) -> str | None:
    """Why ``value`` breaks ``rule`` (``shown``: how argv wrote it), or None when it keeps it."""
    label = f"{rule.name} {shown}" if shown is not None else rule.name
    if rule.forbid:
        return f"{rule.name} is forbidden for this engine"
    if rule.values and _text(value) not in rule.values:
        return f"{label} is not one of the allowed values {', '.join(rule.values)}"
    if rule.max is None and rule.min is None and rule.multiple_of is None:
        return None
    try:
        number = float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        number = None
    if number is None:
        return f"{label} is not a number, so it cannot be checked against the limit ({rule.limit()})"
    if rule.max is not None and number > rule.max:
        return f"{label} is above the limit {number_text(rule.max)}"
    if rule.min is not None and number < rule.min:
        return f"{label} is below the limit {number_text(rule.min)}"
    if rule.multiple_of is not None and (not number.is_integer() or int(number) % rule.multiple_of):
        return f"{label} is not a multiple of {rule.multiple_of}"
    return None


def _violations(argv: Sequence[str], rule: FlagRule) -> list[Violation]:
    found = []
    for value, dotted in _occurrences(argv, rule):
        if rule.key is None or rule.forbid:
            why = _judge(rule, value, value)
            shown = value
        elif dotted is not None:
            why, shown = _judge(rule, dotted, dotted), dotted
        else:
            parsed, inner = _key_value(value, rule.key)
            if not parsed:
                why = f"{rule.flag} {value} is not JSON, so its {rule.key} cannot be checked ({rule.limit()})"
                shown = value
            elif inner is None:
                continue  # the key is not set: the engine's default applies
            else:
                shown = _text(inner)
                why = _judge(rule, shown, inner)
        if why:
            found.append(Violation(rule, shown, why))
            if rule.forbid:
                break
    return found


def lint_command(argv: Sequence[str], manifest_rules: Mapping[str, str] | Iterable[FlagRule] | None = None, *,
                 allow: Iterable[str] = ()) -> tuple[Violation, ...]:
    """Raise ForbiddenFlag naming every broken rule (``--flag V``, ``--flag=V``, JSON keys), all at once.

    ``allow``: rule names (``--gpu-memory-utilization``, ``--speculative-config.num_speculative_tokens``)
    whose violations are let through; those are returned, for the caller to show and record. A name that
    matches no rule of this command is an UnknownAllowedFlag.
    """
    if not argv:
        raise UsageError("no serve command given", hint="wh serve MANIFEST (with a [serve] command) or wh serve -- COMMAND ...")
    rules = rules_for(argv, manifest_rules)
    allow = tuple(dict.fromkeys(allow))
    unknown = [a for a in allow if a not in {r.name for r in rules}]
    if unknown:
        raise UnknownAllowedFlag(f"--allow-flag {', '.join(unknown)}: no rule of this command has that name",
                                 hint="rules here: " + (", ".join(r.name for r in rules) or "none"))
    found = [v for r in rules for v in _violations(argv, r)]
    refused = [v for v in found if v.rule.name not in allow]
    if refused:
        raise ForbiddenFlag(refused)
    return tuple(found)


def port_from_command(argv: Sequence[str]) -> int | None:
    """The value of ``--port N`` / ``--port=N`` in argv, if any (so --url can default from it)."""
    for i, arg in enumerate(argv):
        value = None
        if arg == "--port" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--port="):
            value = arg.split("=", 1)[1]
        if value is not None and value.isdigit():
            return int(value)
    return None


def url_values(url: str) -> dict[str, str]:
    """Placeholder values a URL provides: ``{host}`` and ``{port}``."""
    parts = urlsplit(url)
    out = {}
    if parts.hostname:
        out["host"] = parts.hostname
    if parts.port:
        out["port"] = str(parts.port)
    return out
