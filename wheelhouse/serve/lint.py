"""Serve command lint: fill ``{placeholders}`` and refuse flags known to do harm, before anything starts.

A launch that takes nine minutes to load and then dies of an out-of-memory error is
the expensive way to learn that a flag overrides a solver instead of constraining
it. The lint is pure: it sees argv and a table of forbidden flags with reasons.
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Sequence
from urllib.parse import urlsplit

from wheelhouse.errors import UsageError

__all__ = [
    "BUILTIN_FORBIDDEN",
    "ForbiddenFlag",
    "MissingPlaceholder",
    "fill_placeholders",
    "placeholders",
    "forbidden_flags_for",
    "lint_command",
    "port_from_command",
    "url_values",
]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_-]*)\}")

# (program basename, subcommand) -> {flag: reason}. Applied even when the command comes
# after `--` without a manifest, so the lint protects a hand-typed launch too.
BUILTIN_FORBIDDEN: Mapping[tuple[str, str], Mapping[str, str]] = {
    ("ft", "serve"): {
        # FreeToken kvcache/dsv4_paged_pool.py: a page override skips dsv4_solve_num_pages and only
        # checks a floor, so the pool is allocated whether or not it fits (OOM in _alloc_buffers).
        "--num-tokens": "overrides FreeToken's KV memory solver instead of constraining it: the pool is "
        "allocated whether or not it fits (OutOfMemoryError in _alloc_buffers) and, with --moe-backend "
        "offload, double-spends the budget moe_cache_auto already gave the experts",
        "--num-pages": "overrides FreeToken's KV memory solver instead of constraining it: only a lower "
        "bound is checked, the pool never consults free memory (OutOfMemoryError in _alloc_buffers)",
    },
}


class ForbiddenFlag(UsageError):
    """The command carries a flag this engine must not be given."""

    code = "forbidden-flag"

    def __init__(self, found: Mapping[str, str]):
        self.found = dict(found)
        names = ", ".join(self.found)
        reasons = "\n".join(f"  {flag}: {why}" for flag, why in self.found.items())
        super().__init__(
            f"refusing to launch: {names} {'is' if len(self.found) == 1 else 'are'} forbidden for this engine",
            hint=f"remove {names} from the command and let the engine size memory itself",
            detail=reasons,
        )


class MissingPlaceholder(UsageError):
    """The manifest's command needs a value (like ``{model}``) that was not given."""

    code = "missing-value"

    def __init__(self, names: Sequence[str]):
        self.names = tuple(names)
        flags = " ".join(f"--{n.replace('_', '-')} VALUE" for n in self.names)
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


def forbidden_flags_for(argv: Sequence[str], manifest_rules: Mapping[str, str] | None = None) -> dict[str, str]:
    """The forbidden-flag table for this command: the manifest's rules over the built-in ones."""
    rules: dict[str, str] = {}
    if len(argv) >= 2:
        rules.update(BUILTIN_FORBIDDEN.get((os.path.basename(argv[0]), argv[1]), {}))
    rules.update(manifest_rules or {})
    return rules


def lint_command(argv: Sequence[str], manifest_rules: Mapping[str, str] | None = None) -> None:
    """Raise ForbiddenFlag naming every forbidden flag in argv (``--flag`` and ``--flag=value``)."""
    if not argv:
        raise UsageError("no serve command given", hint="wh serve MANIFEST (with a [serve] command) or wh serve -- COMMAND ...")
    rules = forbidden_flags_for(argv, manifest_rules)
    found: dict[str, str] = {}
    for arg in argv[1:]:
        flag = arg.split("=", 1)[0]
        if flag in rules and flag not in found:
            found[flag] = rules[flag]
    if found:
        raise ForbiddenFlag(found)


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
