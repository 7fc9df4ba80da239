"""The click group behind ``wh``: lazily loaded commands, -v/-q anywhere, click's errors read like wh's.

Imported only when a command runs (or a command's help is asked for): ``wh --version`` and ``wh --help`` are
answered by ``wheelhouse.cli._fast`` without importing click or rich.
"""

from __future__ import annotations

import importlib
import os

import click

from wheelhouse import __version__
from wheelhouse.errors import WhError

from ._commands import _COMMANDS, DESCRIPTION, EPILOG

__all__ = ["cli", "usage_error", "NO_ARGS_IS_HELP"]


def _merge_verbosity(ctx: click.Context, param: click.Parameter, value) -> None:
    """`wh doctor -v` is `wh -v doctor`: a subcommand's -v/-q add to the group's (a -q anywhere wins)."""
    ui = ctx.find_root().obj
    if ui is None or not value:
        return
    if param.name == "quiet":
        ui.verbose = -1
    elif not ui.quiet:
        ui.verbose += value


def _with_verbosity(cmd: click.Command) -> click.Command:
    """Add -v/-q to ``cmd`` (and a group's subcommands) once, unless it has its own (``wh serve -v``)."""
    if getattr(cmd, "_wh_verbosity", False):
        return cmd
    taken = {opt for p in cmd.params for opt in getattr(p, "opts", ())}
    if "-v" not in taken:
        cmd.params.append(click.Option(["-v", "--verbose"], count=True, expose_value=False, callback=_merge_verbosity,
                                       help="More output (repeatable); same as `wh -v COMMAND`."))
    if "-q" not in taken:
        cmd.params.append(click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, callback=_merge_verbosity,
                                       help="Only errors and the data asked for; same as `wh -q COMMAND`."))
    cmd._wh_verbosity = True  # type: ignore[attr-defined]
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            _with_verbosity(sub)
    return cmd


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        spec = _COMMANDS.get(name)
        if spec is None:
            return None
        module, attr, short = spec
        try:
            mod = importlib.import_module(f"wheelhouse.cli.{module}")
            return _with_verbosity(getattr(mod, attr))
        except (ImportError, AttributeError) as exc:
            if os.environ.get("WH_DEBUG"):
                raise  # with its traceback (wheelhouse.cli.main re-raises under WH_DEBUG)
            why = f"{type(exc).__name__}: {exc}"

            @click.command(name=name, help=f"{short} (could not be loaded: {why})",
                           context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
            @click.argument("args", nargs=-1, type=click.UNPROCESSED)
            def _missing(args) -> None:  # (whatever was asked of it: the command itself is what failed)
                raise WhError(f"`wh {name}` could not be loaded: {why}",
                              hint="re-run with WH_DEBUG=1 for the traceback; a missing dependency: reinstall wh")

            return _with_verbosity(_missing)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(n, s[2]) for n, s in _COMMANDS.items()])


@click.group(cls=_LazyGroup, help=DESCRIPTION, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wh")
@click.option("-v", "--verbose", count=True, help="More output (repeatable).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors and the data asked for.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    from . import _ui

    ctx.obj = _ui.Ui(verbose=verbose if not quiet else -1)


# click >= 8.2 raises this for a group called without a subcommand (older ones print the help and exit 0).
NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def usage_error(exc: click.ClickException) -> WhError:
    """A click error as a WhError: its message, and where to read about the flags."""
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else "wh"
    message = " ".join(exc.format_message().split())  # click wraps some messages over lines
    return WhError(message, hint=f"see `{path} --help`")
