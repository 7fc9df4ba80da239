"""`wh env`: the environment the engine needs (pinned nvcc on PATH, CUDA_HOME, library paths)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ._ui import emit_json

__all__ = ["env"]


@click.command()
@click.option("--shell", type=click.Choice(["bash", "fish"]), help="Print a snippet to source (reads the variables at source time).")
@click.option("--dotenv", is_flag=True, help="Print KEY=value lines (values computed now).")
@click.option("--json", "as_json", is_flag=True, help="Print the computed variables and their parts as JSON.")
@click.option("--python", "python", envvar="WH_PYTHON", help="Interpreter whose site-packages hold the NVIDIA wheels.")
@click.option("--path", "paths", multiple=True, type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="A site-packages-like folder holding nvidia/ (instead of --python's). Repeatable.")
def env(shell, dotenv, as_json, python, paths) -> None:
    """Print PATH (pinned nvcc first), CUDA_HOME, LIBRARY_PATH and LD_LIBRARY_PATH for the engine.

    LD_LIBRARY_PATH keeps its current entries first, then the system library folder (the driver),
    then the NVIDIA wheel lib folders. No stubs folder stays on it: a current entry that is one is
    left out (said on stderr, and under "removed" with --json). Variables with nothing to put in
    them are not printed.

    \b
    Examples:
      eval "$(wh env --shell bash)"
      wh env --dotenv > engine.env
    """
    from wheelhouse.env.cuda import (
        apply_plan,
        env_plan,
        removed_entries,
        render_bash,
        render_dotenv,
        render_fish,
        render_json,
    )
    from wheelhouse.target.interpreter import inspect_interpreter

    if sum(bool(x) for x in (shell, dotenv, as_json)) > 1:
        raise click.UsageError("choose one of --shell, --dotenv, --json")
    if paths and python:
        raise click.UsageError("--path and --python are exclusive")
    roots = list(paths) if paths else [Path(d) for d in inspect_interpreter(python).visible_site_dirs]
    plan = env_plan(roots)
    computed = apply_plan(plan, os.environ)
    removed = removed_entries(os.environ)
    if as_json:
        emit_json(render_json(plan, computed, removed))
    elif dotenv:
        click.echo(render_dotenv(computed), nl=False)
    elif shell == "fish":
        click.echo(render_fish(plan), nl=False)
    else:
        click.echo(render_bash(plan), nl=False)
    for r in removed:
        click.echo(f"note: {r.variable} entry {r.entry} left out: {r.reason}", err=True)
    if plan.nvcc is None:
        click.echo("note: no nvcc from an nvidia-cuda-nvcc wheel found; PATH and CUDA_HOME unchanged", err=True)
