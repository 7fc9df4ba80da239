"""Undoing the activation snippet: the venv's ``deactivate`` puts back what ``wh-env.sh`` changed.

The snippet records each variable's state before it changes it (``set:<value>``, or empty for
unset, so an empty value and an unset variable stay apart) and wraps the venv's ``deactivate``:
the wrapper restores the record exactly, then runs the venv's own. PATH is not recorded: the
venv's activate saved it (``_OLD_VIRTUAL_PATH``) before the snippet put nvcc's folder first, and
the venv's deactivate puts it back.

A venv's activate redefines ``deactivate`` and then calls ``deactivate nondestructive``, so
activating B over A (or A twice) never runs A's wrapper. The snippet therefore first restores a
record it finds, for each variable that is still exactly as a snippet left it: a record left
behind by a venv wh did not hook (whose deactivate is the plain one) must not undo what was set
by hand since.

sh has no portable way to copy a function (dash has no ``declare -f``), so the venv's
``deactivate`` is copied from its activate script's text when the snippet is written; the fish
snippet copies it at source time with ``functions -c``.
"""

from __future__ import annotations

import re

from .cuda import EnvPlan, render_bash, render_fish

__all__ = ["RESTORED", "recorded_variables", "copy_deactivate", "render_bash_undoable", "render_fish_undoable"]

# What a snippet may have recorded: a record left by another venv's snippet is restored whatever
# this venv's plan changes.
RESTORED = ("CUDA_HOME", "LIBRARY_PATH", "LD_LIBRARY_PATH")
_COPY = "_wh_venv_deactivate"
# `deactivate () {` ... `}` at the start of a line: CPython's venv, virtualenv and uv write it so.
_DEACTIVATE = re.compile(r"^deactivate\s*\(\)\s*\{[ \t]*\n(?P<body>.*?)^\}[ \t]*$", re.MULTILINE | re.DOTALL)


def recorded_variables(plan: EnvPlan) -> tuple[str, ...]:
    """The variables the snippet for ``plan`` changes, whose prior state it records."""
    return tuple(name for name, changed in (
        ("CUDA_HOME", bool(plan.cuda_home)),
        ("LIBRARY_PATH", bool(plan.library_path)),
        ("LD_LIBRARY_PATH", True),  # stubs folders left out, the system folder appended
    ) if changed)


def copy_deactivate(activate_text: str) -> str | None:
    """The venv's ``deactivate`` function, from its activate script, renamed for the wrapper to call
    (None when there is none wh recognises: then nothing is wrapped and nothing recorded)."""
    match = _DEACTIVATE.search(activate_text)
    return f"{_COPY} () {{\n{match['body']}}}" if match else None


def _sh_restore() -> str:
    lines = [
        "# Puts back what a wh-env.sh recorded. With `if-unchanged`, only the variables still as it left them.",
        "_wh_env_restore () {",
    ]
    for n in RESTORED:
        old, new = f"_WH_ENV_OLD_{n}", f"_WH_ENV_NEW_{n}"
        lines += [
            f'    if [ -n "${{{old}+x}}" ]; then',
            f'        if [ "${{1:-}}" != if-unchanged ] || [ "${{{n}+set:${n}}}" = "${{{new}:-}}" ]; then',
            f'            case "${old}" in',
            f'                set:*) {n}="${{{old}#set:}}"; export {n} ;;',
            f"                *) unset {n} ;;",
            "            esac",
            "        fi",
            f"        unset {old} {new}",
            "    fi",
        ]
    return "\n".join(lines + ["}"])


def render_bash_undoable(plan: EnvPlan, venv_deactivate: str | None) -> str:
    """``render_bash(plan)`` that the venv's ``deactivate`` undoes exactly; ``venv_deactivate`` is
    ``copy_deactivate``'s copy (None: the plain snippet, which only adds)."""
    if venv_deactivate is None:
        return render_bash(plan)
    names = recorded_variables(plan)
    # `${X+set:$X}`: "set:<value>" when X is set (even to ""), "" when it is unset.
    record = [f'_WH_ENV_OLD_{n}="${{{n}+set:${n}}}"' for n in names]
    left = [f'_WH_ENV_NEW_{n}="${{{n}+set:${n}}}"' for n in names]
    wrapper = f"""# The venv's deactivate, wrapped: put back what this snippet changed, then the venv's own.
{venv_deactivate}
deactivate () {{
    _wh_env_restore
    {_COPY} "$@"  # its `unset -f deactivate` drops this wrapper too
    if [ "${{1:-}}" != nondestructive ]; then
        unset -f {_COPY} _wh_env_restore
    fi
}}"""
    return "\n".join([
        _sh_restore(),
        "# Activated over a venv whose deactivate did not run (activate redefines it first): undo that one.",
        "_wh_env_restore if-unchanged",
        *record,
        render_bash(plan).rstrip("\n"),
        *left,
        wrapper,
    ]) + "\n"


_FISH_HELPERS = f"""# "set:<value>" when the variable is set (even to nothing), nothing when it is unset.
function _wh_env_state -a name
    set -q $name; or return
    set -l value (string join : -- $$name)
    echo "set:$value"
end
# Puts back what a wh-env.fish recorded. With `if-unchanged`, only the variables still as it left them.
function _wh_env_restore
    for v in {" ".join(RESTORED)}
        set -l old _wh_env_old_$v
        set -l new _wh_env_new_$v
        set -q $old; or continue
        set -l now (_wh_env_state $v)
        if test "$argv[1]" != if-unchanged; or test "$now" = "$$new"
            if string match -q 'set:*' -- "$$old"
                set -gx $v (string sub -s 5 -- "$$old")
            else
                set -e $v
            end
        end
        set -e $old
        set -e $new
    end
end
# Activated over a venv whose deactivate did not run (activate redefines it first): undo that one.
_wh_env_restore if-unchanged"""

_FISH_WRAPPER = f"""# The venv's deactivate, wrapped: put back what this snippet changed, then the venv's own.
if functions -q deactivate
    # Sourced again without activate, deactivate is already the wrapper: copying it would recurse.
    if not functions deactivate | string match -q '*{_COPY}*'
        functions -q {_COPY}; and functions -e {_COPY}
        functions -c deactivate {_COPY}
    end
    function deactivate -d "Exit virtual environment and return to normal shell environment"
        _wh_env_restore
        {_COPY} $argv  # its `functions -e deactivate` drops this wrapper too
        if test "$argv[1]" != nondestructive
            functions -e {_COPY} _wh_env_restore _wh_env_state
        end
    end
end"""


def render_fish_undoable(plan: EnvPlan) -> str:
    """``render_fish(plan)`` that the venv's ``deactivate`` undoes exactly (outside a venv: only adds)."""
    names = recorded_variables(plan)
    record = "\n".join(f"    set -g _wh_env_old_{n} (_wh_env_state {n})" for n in names)
    left = "\n".join(f"    set -g _wh_env_new_{n} (_wh_env_state {n})" for n in names)
    return "\n".join([
        _FISH_HELPERS,
        f"if functions -q deactivate\n{record}\nend",
        render_fish(plan).rstrip("\n"),
        f"if functions -q deactivate\n{left}\nend",
        _FISH_WRAPPER,
    ]) + "\n"
