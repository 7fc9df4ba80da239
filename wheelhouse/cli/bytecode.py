"""`wh bytecode`: compile a wheelhouse's wheels once, for the target's Python, so the box only writes .pyc files."""

from __future__ import annotations

from pathlib import Path

import click

from ._options import FiniteFloatRange
from ._ui import emit_json, sigterm_as_interrupt

__all__ = ["bytecode"]


def add_bytecode(wheelhouse: Path, python: str | None, jobs: int | None, lock_timeout: float, reporter):
    """Hold the wheelhouse, find an interpreter of its target's version, compile, record (see stage.bytecode)."""
    from wheelhouse.errors import UsageError
    from wheelhouse.lock import read_wh_json
    from wheelhouse.lock.output import hold_output, real_output
    from wheelhouse.stage.bytecode import compile_wheelhouse, find_compiler
    from wheelhouse.target import target_from_json

    root = real_output(Path(wheelhouse))
    meta = read_wh_json(root)
    try:
        target = target_from_json(meta["target"], source="wh.json", where=str(root / "wh.json"))
    except Exception as exc:  # an old or hand-written wh.json: say which, not a traceback
        raise UsageError(f"{root}/wh.json names no target profile, so the Python to compile for is unknown",
                         hint="re-stage it with `wh stage ... --bytecode`") from exc
    compiler = find_compiler(target.python_version, target.implementation, python, flag="--python")
    with hold_output(root, timeout=lock_timeout, on_wait=reporter.note, what="wh stage, wh build or wh bytecode"):
        return compile_wheelhouse(root, compiler, jobs=jobs, reporter=reporter, reuse=root)


@click.command("bytecode")
@click.argument("wheelhouse", type=click.Path(exists=True, file_okay=False))
@click.option("--python", "python", metavar="PATH",
              help="The CPython that compiles (its version must be the target's). Default: this one or "
                   "pythonX.Y on PATH.")
@click.option("--jobs", "-j", type=click.IntRange(1, 256), help="Compiling processes (default: one per core).")
@click.option("--lock-timeout", type=FiniteFloatRange(0), default=600, show_default=True, envvar="WH_LOCK_TIMEOUT",
              help="Seconds to wait for another wh stage/build/bytecode writing the same wheelhouse.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.pass_context
def bytecode(ctx, wheelhouse, python, jobs, lock_timeout, as_json) -> None:
    """Compile every wheel's modules for the target's Python, into WHEELHOUSE/bytecode/.

    \b
    wh bytecode wh-kaggle                          # a CPython of the target's version is found
    wh bytecode wh-kaggle --python /usr/bin/python3.12 --json

    `wh install --compile` then writes these .pyc files instead of compiling on the box
    (most of an install's time there). Each pack is bound to its wheel's sha256 and the
    interpreter's magic number; anything else is compiled on the box, as before.
    `wh stage --bytecode` does the same as part of the stage.
    """
    ui = ctx.obj
    reporter = ui.reporter()
    try:
        with sigterm_as_interrupt():  # `kill <wh pid>` stops the compiling processes too, as Ctrl-C does
            result = add_bytecode(Path(wheelhouse), python, jobs, lock_timeout, reporter)
    finally:
        reporter.close()
    if as_json:
        emit_json(result.to_json())
    ui.info(f"bytecode for Python {result.record.python} ({result.record.cache_tag}): {result.files} files of "
            f"{len(result.record.packs)} wheels, {result.size / 1e6:.1f} MB in {result.wheelhouse}/bytecode/"
            + (f" ({result.reused} pack(s) kept as they were)" if result.reused else ""))
