"""The folder a ``[serve] command`` puts first on the engine's ``sys.path``, and the stack's packages it holds.

``python -m app.server`` and ``python -c ...`` search the working folder before site-packages, and ``python
path/run.py`` the script's folder: an engine started so from a checkout of its own source (``mypkg/`` beside the
command) imports that copy, not the installed one the doctor verified. ``-P``, ``-I`` and ``PYTHONSAFEPATH`` take
that folder off ``sys.path``. A console script (``ft serve``) runs from its own folder in ``bin/``.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

__all__ = ["command_module", "first_path_entry", "interpreter_flags", "shadowing_modules"]

_VALUED = frozenset("WXQ")  # short options that take a value (-W error, -X dev, -Q new on old interpreters)


def _is_python(program: str) -> bool:
    base = os.path.basename(program)
    return base.startswith("python") and all(c.isdigit() or c in ".tw" for c in base[len("python"):])


@dataclass(frozen=True)
class _Invocation:
    """What a Python command line asks of the interpreter before its program: the options given (``flags``, those
    :func:`interpreter_flags` passes on), every short option letter seen (``letters``), and how the program is
    named: ``"m"`` (``target`` the module), ``"c"``, ``"script"`` (``target`` its path), ``"stdin"``, or ``""``
    (none: an interactive interpreter)."""

    flags: tuple[str, ...]
    letters: frozenset[str]
    run: str
    target: str | None = None


# Options that change nothing an import does, or that would break the probe (it reads no standard input):
# interactive mode, verbose and quiet output, the version and help options.
_NOT_GIVEN = frozenset("ivqVh")


def _invocation(command: Sequence[str]) -> _Invocation | None:
    """The command line read as the interpreter reads it; None where ``command`` does not run a Python."""
    if not command or not _is_python(command[0]):
        return None
    args = list(command[1:])
    out: list[str] = []
    letters: set[str] = set()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            script = args[i + 1] if arg == "--" and i + 1 < len(args) else arg
            if script == "-" or script.startswith("-"):
                return _Invocation(tuple(out), frozenset(letters), "stdin")
            return _Invocation(tuple(out), frozenset(letters), "script", script)
        if arg.startswith("--"):
            if arg == "--check-hash-based-pycs" and i + 1 < len(args):
                out += [arg, args[i + 1]]
            i += 2 if arg == "--check-hash-based-pycs" else 1
            continue
        flags, kept = arg[1:], ""
        for j, flag in enumerate(flags):
            if flag in "mc":
                out += [f"-{kept}"] if kept else []
                module = (flags[j + 1:] or (args[i + 1] if i + 1 < len(args) else "")) if flag == "m" else None
                return _Invocation(tuple(out), frozenset(letters), flag, module)
            letters.add(flag)
            if flag in _VALUED:
                value = flags[j + 1:] or (args[i + 1] if i + 1 < len(args) else "")
                out += ([f"-{kept}"] if kept else []) + [f"-{flag}", value]
                kept = ""
                if not flags[j + 1:]:
                    i += 1  # the value is the next argument
                break
            if flag not in _NOT_GIVEN:
                kept += flag
        else:
            out += [f"-{kept}"] if kept else []
        i += 1
    return _Invocation(tuple(out), frozenset(letters), "")


def first_path_entry(command: Sequence[str], env: Mapping[str, str], cwd: str) -> tuple[str, str] | None:
    """(folder, how) the command puts first on ``sys.path``, where it runs a Python interpreter that searches one;
    None for anything else (a console script, a shell), or where ``-P``/``-I``/``PYTHONSAFEPATH`` turn it off."""
    inv = _invocation(command)
    if inv is None or env.get("PYTHONSAFEPATH") or inv.letters & {"P", "I"}:
        return None
    if inv.run == "stdin":
        return (cwd, "reads its program from standard input")
    if inv.run == "script":
        return (os.path.dirname(os.path.join(cwd, inv.target or "")) or cwd, f"runs the script {inv.target}")
    return (cwd, f"runs `python -{inv.run}`") if inv.run else None


def interpreter_flags(command: Sequence[str]) -> tuple[str, ...]:
    """The interpreter options a ``[serve] command`` that runs Python gives before its program (``-OO``, ``-I``,
    ``-E``, ``-s``, ``-S``, ``-X pycache_prefix=...``, ``-W error``, ``--check-hash-based-pycs never``): what the
    engine's imports run under, so the import probes are run under them too. Empty for anything else."""
    inv = _invocation(command)
    return inv.flags if inv is not None else ()


def command_module(command: Sequence[str], scripts: Mapping[str, str]) -> str | None:
    """The module the ``[serve] command`` starts the engine from: ``python -m MOD``'s MOD (a package's ``__main__``
    aside: the package itself), or the module of the entry point of a console script it runs (``scripts``: script
    name -> ``module:attr``); None for ``-c``, a script file or another program."""
    if not command:
        return None
    inv = _invocation(command)
    if inv is None:
        value = scripts.get(os.path.basename(command[0]))
        module = value.split(":", 1)[0].strip() if value else ""
    elif inv.run == "m":
        module = inv.target or ""
        module = module[:-len(".__main__")] if module.endswith(".__main__") else module
    else:
        return None
    return module if module and all(p.isidentifier() for p in module.split(".")) else None


def shadowing_modules(folder: str, names: Iterable[str]) -> list[str]:
    """Which of the top-level ``names`` ``folder`` holds as something the import system takes before site-packages:
    a package (``name/__init__.py``), a module (``name.py``) or an extension (``name.*.so``). A folder without
    ``__init__`` is only a namespace portion, which a regular package found later wins over."""
    out = []
    for name in sorted(set(names)):
        base = os.path.join(folder, name)
        if (os.path.isfile(os.path.join(base, "__init__.py")) or os.path.isfile(base + ".py")
                or glob.glob(glob.escape(base) + ".*so")):
            out.append(name + ("/" if os.path.isdir(base) else ""))
    return out
