"""`wh links`: unversioned soname links, lib64 -> lib, libcuda stub removal; recorded and undoable."""

from __future__ import annotations

from pathlib import Path

import click

from wheelhouse.errors import WhError
from ._ui import emit_json, plural

__all__ = ["links"]


class LinksNeeded(WhError):
    """`wh links --check` found something to change (exit 1, like a failed check)."""

    code = "links-needed"


@click.command()
@click.option("--check", "check", is_flag=True, help="Show what would change; exit 1 if anything would (default).")
@click.option("--fix", "fix", is_flag=True, help="Make the changes and record them.")
@click.option("--undo", "undo", is_flag=True, help="Reverse exactly the recorded changes.")
@click.option("--python", "python", envvar="WH_PYTHON", help="Interpreter whose site-packages to look at (default: the one running wh).")
@click.option("--path", "paths", multiple=True, type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="A site-packages-like folder holding nvidia/ (instead of --python's). Repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the changes as JSON on stdout.")
@click.pass_obj
def links(ui, check, fix, undo, python, paths, as_json) -> None:
    """Check, add or undo the links NVIDIA wheels lack (libcudart.so -> libcudart.so.13, lib64 -> lib).

    A libcuda.so inside the environment that is a stub (or links to one) is moved aside: it would
    shadow the system driver. System libraries are never touched. Every change is recorded, with
    its absolute path, in <site-packages>/.wh/links.json so --undo reverses exactly those.

    --undo only touches what wh made: a recorded entry that is not a soname link, lib64 -> lib or
    moved stub inside the NVIDIA library folders of these site folders, or whose link was changed
    since, is refused and named (exit 1) and stays recorded. Exit codes: 0 done (or nothing to
    change); 1 --check found changes, or --undo refused entries; 2 bad input.
    """
    from wheelhouse.env.links import LinkError, run_links
    from wheelhouse.target.interpreter import inspect_interpreter

    if check + fix + undo > 1:  # one flag value each used to let the last one win silently
        raise click.UsageError("--check, --fix and --undo are exclusive")
    mode = "fix" if fix else "undo" if undo else "check"
    if paths and python:
        raise click.UsageError("--path and --python are exclusive")
    # Absolute from here on: a record must name what it changed wherever --undo is run from.
    roots = [p.absolute() for p in paths] if paths else [Path(d) for d in inspect_interpreter(python).visible_site_dirs]
    result = run_links(mode, roots)
    if as_json:
        emit_json(result.to_json())
    if not result.lib_dirs:
        ui.info(f"no NVIDIA library folders under {', '.join(map(str, roots))}")
    for loop in result.skipped:
        ui.info(f"note: skipped {loop}: a symlink loop (it resolves to nothing); no link made to it")
    verb = {"check": "would", "fix": "did", "undo": "undid"}[mode]
    # --check's plan is the data asked for (stdout, unless --json has it); what --fix/--undo did is progress.
    show = ui.data if mode == "check" and not as_json else ui.info
    for c in result.changes:
        show(f"{verb} {c.action}: {c.path}" + (f" -> {c.target}" if c.target else "") + f"  ({c.reason})")
    for c in result.gone:
        ui.info(f"note: {c.path} was already reverted; dropped from the record")
    if result.refused:
        for r in result.refused:
            ui.info(f"refused {r.change.action}: {r.change.path}" + (f" -> {r.change.target}" if r.change.target else "")
                    + f": {r.reason}")
        records = sorted({str(r) for r in result.records_kept})
        raise LinkError(f"{len(result.refused)} recorded change(s) not undone: "
                        + "; ".join(f"{r.change.path} ({r.reason})" for r in result.refused),
                        hint=f"they stay recorded in {', '.join(records)}: inspect them, fix by hand, then "
                             "`wh links --undo` again (undo never touches what wh did not make)")
    if mode == "check":
        if result.changes:
            raise LinksNeeded(f"{plural(len(result.changes), 'link change')} needed under {', '.join(map(str, roots))}",
                              hint="apply them with `wh links --fix" + (f" --python {python}" if python else "")
                              + "".join(f" --path {p}" for p in roots if paths) + "`")
        ui.info("links: nothing to change")
    else:
        ui.info(f"{plural(len(result.changes), 'change')} {'made' if mode == 'fix' else 'reverted'}")
