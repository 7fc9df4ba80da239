"""The venv's activation snippet: CUDA toolchain and NVIDIA library paths for the shell.

``<venv>/bin/wh-env.sh`` (and ``.fish``) are rendered from ``env.cuda``'s plan and
sourced from the venv's own ``activate`` scripts, once; the venv's ``deactivate`` undoes them
(``env.deactivate``).
"""

from __future__ import annotations

from pathlib import Path

from wheelhouse.atomic import write_atomic
from wheelhouse.datafile import read_text
from wheelhouse.errors import WhError
from .cuda import env_plan
from .deactivate import copy_deactivate, render_bash_undoable, render_fish_undoable
from wheelhouse.target.interpreter import Interpreter

__all__ = ["write_activation"]

_HOOK = "# wh: CUDA toolchain and NVIDIA library paths"
_OLD_HOOK = f'{_HOOK}\n[ -f "$VIRTUAL_ENV/bin/wh-env.sh" ] && . "$VIRTUAL_ENV/bin/wh-env.sh"\n'


def write_activation(venv: Path, interp: Interpreter) -> Path:
    """``<venv>/bin/wh-env.sh`` (and ``.fish``), sourced from the venv's activate scripts."""
    plan = env_plan([Path(d) for d in interp.visible_site_dirs])
    bindir = Path(venv) / "bin"
    # The copy of the venv's deactivate that the snippet's wrapper calls (sh cannot copy a function).
    venv_deactivate = copy_deactivate(_read_activate(bindir / "activate") or "")
    snippet = write_atomic(bindir / "wh-env.sh", render_bash_undoable(plan, venv_deactivate))
    write_atomic(bindir / "wh-env.fish", render_fish_undoable(plan))
    for activate, line in (
        # if/then, not `[ -f ] &&`: with the snippet gone, that list would end `activate` with status 1
        # and stop a `set -e` script that sources it.
        ("activate", f'{_HOOK}\nif [ -f "$VIRTUAL_ENV/bin/wh-env.sh" ]; then . "$VIRTUAL_ENV/bin/wh-env.sh"; fi\n'),
        ("activate.fish", f'{_HOOK}\ntest -f "$VIRTUAL_ENV/bin/wh-env.fish"; and source "$VIRTUAL_ENV/bin/wh-env.fish"\n'),
    ):
        path = bindir / activate
        text = _read_activate(path)
        if text is None:
            continue
        if _OLD_HOOK in text:  # hooked by an older wh: the same place, the safe form
            write_atomic(path, text.replace(_OLD_HOOK, line), mode=path.stat().st_mode & 0o777)
        elif _HOOK not in text:
            write_atomic(path, text.rstrip("\n") + "\n\n" + line, mode=path.stat().st_mode & 0o777)
    return snippet


def _read_activate(path: Path) -> str | None:
    """The venv's activate script, or None where it is missing, unreadable or not text (left alone)."""
    if not path.is_file():
        return None
    try:
        return read_text(path, what="activate script")
    except WhError:
        return None
