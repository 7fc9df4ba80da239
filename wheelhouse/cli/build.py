"""`wh build`: the engine from source at an exact commit, through its PEP 517 backend."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from wheelhouse.engine import build_engine
from wheelhouse.engine.recipe import load_recipe
from ._ui import emit_json

__all__ = ["build"]


def _default_cache() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "wh")


def _stream(line: str) -> None:
    # The compiler's own words, unfiltered, as they come.
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


@click.command("build")
@click.argument("recipe")
@click.option("-o", "--output", "wheelhouse", default="wheelhouse", show_default=True, envvar="WH_WHEELHOUSE",
              type=click.Path(file_okay=False), help="Wheelhouse to add the wheel to (a new/empty folder gets a minimal one).")
@click.option("--python", "python", envvar="WH_PYTHON", help="Interpreter that builds (and will run) the engine; default: this one.")
@click.option("--cache-dir", default=_default_cache, envvar="WH_CACHE_DIR", type=click.Path(file_okay=False),
              help="Git mirrors, work trees and built wheels.  [default: ~/.cache/wh]")
@click.option("--json", "as_json", is_flag=True, help="Print the build record as JSON on stdout.")
@click.pass_obj
def build(ui, recipe, wheelhouse, python, cache_dir, as_json) -> None:
    """Build the engine RECIPE (a path or a bundled name such as freetoken-pr70).

    Clones or updates a cached mirror, fetches the recipe's refs, checks out the
    exact commit, applies the backports (checking their sha256), links the
    unversioned NVIDIA sonames and puts the pinned toolchain on PATH, then runs
    the PEP 517 backend with the TARGET interpreter (--python) and its installed
    build dependencies -- never `pip wheel`. Compiler output streams to stderr and
    to WHEELHOUSE/logs/. The wheel, its hash and provenance go into pylock.toml and
    wh.json. A re-run with nothing changed reuses the wheel.

    Exit codes: 0 built or reused; 1 fetch/checkout/build failed (the compiler's
    error lines and the log path are printed); 2 bad recipe or arguments.
    """
    rec = load_recipe(recipe)
    reporter = ui.reporter()
    try:
        result = build_engine(rec, Path(wheelhouse), python=python, cache_dir=Path(cache_dir), reporter=reporter,
                              sink=None if ui.quiet else _stream)
    finally:
        reporter.close()
    verb = "reused" if result.reused else "built"
    ui.info(f"{verb} {result.wheel.name} (sha256 {result.sha256[:16]}...) -> {result.wheel}")
    for art in result.record.get("artifacts", []):
        ui.info(f"exported {art['path']} (sha256 {art['sha256'][:16]}...) from {art['source']}")
    if result.log_path:
        ui.info(f"build log: {result.log_path}")
    if as_json:
        emit_json({"wheel": str(result.wheel), "sha256": result.sha256, "reused": result.reused,
                   "log": str(result.log_path) if result.log_path else None, "links": list(result.links),
                   "engine": dict(result.record)})
