"""wh leans on resolvelib's public API only: a change inside resolvelib cannot silently give wrong
answers through a subclass of its private ``Resolution`` (what ``resolve/rounds.py`` did, for ~0.1 s)."""

from __future__ import annotations

import ast
from pathlib import Path

import resolvelib

import wheelhouse

PACKAGE = Path(wheelhouse.__file__).parent


def _uses() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "resolvelib":
                found += [f"{where} from {node.module} import {a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                found += [f"{where} import {a.name}" for a in node.names if a.name.split(".")[0] == "resolvelib"]
    return found


def test_every_resolvelib_name_wh_uses_is_one_resolvelib_exports():
    used = _uses()
    assert used, "wh resolves with resolvelib"
    private = [u for u in used if not (" from resolvelib import " in u and u.rsplit(" ", 1)[1] in resolvelib.__all__)]
    assert private == []


def test_the_resolver_is_resolvelibs_own():
    from wheelhouse.resolve import resolver  # the module resolve() searches in

    assert resolver.Resolver is resolvelib.Resolver
