"""The venv's activation snippet: CUDA toolchain and NVIDIA library paths for the shell.

``<venv>/bin/wh-env.sh`` (and ``.fish``) are rendered from ``env.cuda``'s plan and
sourced from the venv's own ``activate`` scripts, once.
"""

from __future__ import annotations

from pathlib import Path

from wheelhouse.atomic import write_atomic
from wheelhouse.datafile import read_text
from wheelhouse.errors import WhError
from .cuda import env_plan, render_bash, render_fish
from wheelhouse.target.interpreter import Interpreter

__all__ = ["write_activation"]

_HOOK = "# wh: CUDA toolchain and NVIDIA library paths"


def write_activation(venv: Path, interp: Interpreter) -> Path:
    """``<venv>/bin/wh-env.sh`` (and ``.fish``), sourced from the venv's activate scripts."""
    plan = env_plan([Path(d) for d in interp.visible_site_dirs])
    bindir = Path(venv) / "bin"
    snippet = write_atomic(bindir / "wh-env.sh", render_bash(plan))
    write_atomic(bindir / "wh-env.fish", render_fish(plan))
    for activate, line in (
        ("activate", f'{_HOOK}\n[ -f "$VIRTUAL_ENV/bin/wh-env.sh" ] && . "$VIRTUAL_ENV/bin/wh-env.sh"\n'),
        ("activate.fish", f'{_HOOK}\ntest -f "$VIRTUAL_ENV/bin/wh-env.fish"; and source "$VIRTUAL_ENV/bin/wh-env.fish"\n'),
    ):
        path = bindir / activate
        if not path.is_file():
            continue
        try:
            text = read_text(path, what="activate script")
        except WhError:  # unreadable or not text: leave the venv's own script alone
            continue
        if _HOOK not in text:
            write_atomic(path, text.rstrip("\n") + "\n\n" + line, mode=path.stat().st_mode & 0o777)
    return snippet
