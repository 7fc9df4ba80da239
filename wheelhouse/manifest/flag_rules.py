"""Serve flag rules: what a launch command may carry, per flag or per key inside a JSON flag value.

A stack manifest writes them as ``[[serve.rule]]`` tables (docs/manifest.md)::

    [[serve.rule]]
    flag = "--gpu-memory-utilization"
    max = 0.97
    reason = "0.98 loads, then OOMs on a 383K-token prompt"
    source = "dkpoulsen/dsv41-320e-dspark, known issues"

    [[serve.rule]]
    flag = "--speculative-config"
    key = "num_speculative_tokens"      # a key of the flag's JSON value
    multiple-of = 5

``[serve.forbid-flags]`` (``"--flag" = "reason"``) is the short form of ``forbid = true``.
Parsing is pure; checking argv against the rules is ``wheelhouse.serve.lint``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from wheelhouse.datafile import check_keys
from wheelhouse.errors import UsageError

__all__ = ["FlagRule", "RULE_KEYS", "parse_flag_rules", "forbid_rules", "number_text"]

RULE_KEYS = frozenset({"flag", "key", "forbid", "max", "min", "values", "multiple-of", "reason", "hint", "source"})
_KINDS = ("forbid", "max", "min", "values", "multiple-of")


@dataclass(frozen=True)
class FlagRule:
    """One rule on one flag (or one key of its JSON value); ``name`` is what ``--allow-flag`` overrides."""

    flag: str
    reason: str
    source: str  # where the rule was written: a manifest's path and table, or wh's built-in table
    key: str | None = None  # dotted path inside the flag's JSON value
    forbid: bool = False
    max: float | None = None
    min: float | None = None
    values: tuple[str, ...] = ()
    multiple_of: int | None = None
    hint: str | None = None  # the next step on refusal; derived from the limit when absent

    @property
    def name(self) -> str:
        return f"{self.flag}.{self.key}" if self.key else self.flag

    def limit(self) -> str:
        """The limit in words: ``at most 0.97``, ``a multiple of 5``, ``absent``."""
        parts = []
        if self.forbid:
            parts.append("absent")
        if self.min is not None:
            parts.append(f"at least {number_text(self.min)}")
        if self.max is not None:
            parts.append(f"at most {number_text(self.max)}")
        if self.multiple_of is not None:
            parts.append(f"a multiple of {self.multiple_of}")
        if self.values:
            parts.append("one of " + ", ".join(self.values))
        return " and ".join(parts)

    def next_step(self) -> str:
        if self.hint:
            return self.hint
        if self.forbid:
            return f"remove {self.name} from the command"
        return f"set {self.name} to {self.limit()}"


def number_text(x: float) -> str:
    """A limit as the manifest wrote it: 2048, not 2048.0."""
    return str(int(x)) if float(x).is_integer() else str(x)


def _rule(table: Mapping[str, Any], where: str, source: str, error: type[UsageError]) -> FlagRule:
    check_keys(table, RULE_KEYS, where, error=error)
    flag = table.get("flag")
    if not isinstance(flag, str) or not flag.startswith("-") or "=" in flag or " " in flag:
        raise error(f"{where} needs flag = \"--name\" (the flag as the engine spells it)",
                    hint='e.g. flag = "--gpu-memory-utilization"')
    key = table.get("key")
    if key is not None and (not isinstance(key, str) or not key):
        raise error(f"{where} key must be a non-empty string", hint='e.g. key = "num_speculative_tokens"')
    if not any(k in table for k in _KINDS):
        raise error(f"{where} ({flag}) sets no limit", hint="give one of: " + ", ".join(_KINDS))
    for k in ("max", "min"):
        if k in table and (isinstance(table[k], bool) or not isinstance(table[k], (int, float))):
            raise error(f"{where} {k} must be a number, not {table[k]!r}", hint=f"{k} = 0.97")
    mult = table.get("multiple-of")
    if mult is not None and (isinstance(mult, bool) or not isinstance(mult, int) or mult < 1):
        raise error(f"{where} multiple-of must be a positive integer, not {mult!r}", hint="multiple-of = 5")
    values = table.get("values", [])
    if not isinstance(values, list) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                               for v in values):
        raise error(f"{where} values must be a list of strings or numbers", hint='values = ["auto", "fp8"]')
    if not isinstance(table.get("forbid", False), bool):
        raise error(f"{where} forbid must be true or false", hint="forbid = true")
    for k in ("reason", "hint", "source"):
        if k in table and not isinstance(table[k], str):
            raise error(f"{where} {k} must be a string", hint=f'{k} = "..."')
    if not table.get("reason"):
        raise error(f"{where} ({flag}) has no reason", hint="say what goes wrong: it is shown when the rule refuses")
    written = table.get("source")
    return FlagRule(
        flag=flag, key=key, reason=table["reason"], forbid=bool(table.get("forbid", False)),
        source=f"{source} ({written})" if written else source,
        max=float(table["max"]) if "max" in table else None, min=float(table["min"]) if "min" in table else None,
        values=tuple(str(v) for v in values), multiple_of=mult, hint=table.get("hint"),
    )


def parse_flag_rules(tables: Sequence[Any], where: str, source: str,
                     error: type[UsageError] = UsageError) -> tuple[FlagRule, ...]:
    """``[[serve.rule]]`` tables as FlagRules; ``source`` names where they were written (shown on refusal)."""
    if not isinstance(tables, list) or not all(isinstance(t, Mapping) for t in tables):
        raise error(f"{where} must be an array of tables", hint="write each rule as [[serve.rule]]")
    rules = [_rule(t, f"{where} #{i + 1}", source, error) for i, t in enumerate(tables)]
    seen: set[str] = set()
    for r in rules:
        if r.name in seen:
            raise error(f"{where}: two rules for {r.name}", hint="merge them into one table (min and max may share it)")
        seen.add(r.name)
    return tuple(rules)


def forbid_rules(table: Mapping[str, str], source: str) -> tuple[FlagRule, ...]:
    """``[serve.forbid-flags]`` (flag -> reason) as forbid rules."""
    return tuple(FlagRule(flag=f, reason=why, source=source, forbid=True) for f, why in table.items())
