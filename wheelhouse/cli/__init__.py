"""wh's command line. The only place (with its sibling modules) that imports click and rich.

Each command lives in its own module under ``wheelhouse.cli`` and is loaded only
when invoked, so ``wh --help`` stays fast and one broken command cannot take the
others down.

Exit codes: 0 success; 1 the thing asked for failed (doctor: a check failed);
2 bad input (nothing was changed), or doctor --strict with warnings; 3 wh itself
could not run.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from wheelhouse import __version__
from wheelhouse.errors import EXIT_INTERNAL, WhError

__all__ = ["main", "cli"]

# command name -> (module under wheelhouse.cli, attribute, one-line help)
_COMMANDS = {
    "target": ("target", "target", "Capture or show a target profile."),
    "stage": ("stage", "stage", "Resolve for the target and download a verified wheelhouse."),
    "pack": ("carry", "pack", "Write a wheelhouse as one deterministic archive (optionally in parts)."),
    "push": ("registry", "push", "Publish a wheelhouse to an OCI registry (wheels as shared blobs)."),
    "pull": ("registry", "pull", "Fetch a wheelhouse from an OCI registry, every blob verified."),
    "verify": ("carry", "verify", "Check a wheelhouse or its archive offline, before anything is installed."),
    "install": ("install", "install", "Install a wheelhouse offline into a venv or interpreter."),
    "links": ("links", "links", "Check, add or undo unversioned NVIDIA soname links."),
    "env": ("env", "env", "Print the environment the engine needs (PATH, CUDA_HOME, LD_LIBRARY_PATH)."),
    "doctor": ("doctor", "doctor", "Run executed probes and known-bug rules; gate CI on the result."),
    "drop": ("doctor", "drop", "Uninstall distributions whose executed probe failed."),
    "build": ("build", "build", "Build the engine from source at an exact commit."),
    "patch": ("patch", "patch", "Apply, verify or revert a one-file patch with preconditions."),
    "serve": ("serve", "serve", "Launch the engine and wait for its real readiness."),
    "stop": ("serve", "stop", "Stop a detached engine and its whole process group."),
    "smoke": ("serve", "smoke", "One streamed chat request: model id, TTFT and decode tok/s."),
}

EPILOG = (
    "Exit codes: 0 ok; 1 failed (doctor: a check failed); 2 bad input, nothing changed "
    "(doctor --strict: warnings only); 3 wh itself could not run. The data asked for goes to stdout, progress, "
    "notes and errors to stderr; -v/-q go before or after the command; NO_COLOR turns colour off."
)


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
            mod = importlib.import_module(f"{__name__}.{module}")
            return _with_verbosity(getattr(mod, attr))
        except (ImportError, AttributeError):
            @click.command(name=name, help=short + " (not available in this build)")
            def _missing() -> None:
                raise WhError(f"`wh {name}` is not available in this build", hint="upgrade wh")

            return _with_verbosity(_missing)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(n, s[2]) for n, s in _COMMANDS.items()])


@click.group(cls=_LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wh")
@click.option("-v", "--verbose", count=True, help="More output (repeatable).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors and the data asked for.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """wh: stage a Python GPU serving stack where the network is, install it where the GPUs are."""
    from . import _ui

    ctx.obj = _ui.Ui(verbose=verbose if not quiet else -1)


# click >= 8.2 raises this for a group called without a subcommand (older ones print the help and exit 0).
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _usage_error(exc: click.ClickException) -> WhError:
    """A click error as a WhError: its message, and where to read about the flags."""
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else "wh"
    message = " ".join(exc.format_message().split())  # click wraps some messages over lines
    return WhError(message, hint=f"see `{path} --help`")


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the CLI, render any WhError once, exit with its code."""
    from . import _ui

    try:
        # standalone_mode=False: click returns ctx.exit(n)'s code instead of exiting.
        rc = cli.main(args=argv, prog_name="wh", standalone_mode=False)
    except WhError as exc:
        _ui.print_error(exc)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except _NO_ARGS_IS_HELP as exc:  # `wh patch` alone: the group's help is the answer
        exc.show()
        sys.exit(2)
    except click.ClickException as exc:
        # click's own errors (a bad flag value, a missing argument) read like wh's: one line and a hint.
        _ui.print_error(_usage_error(exc))
        sys.exit(2)
    except click.exceptions.Abort:
        _ui.print_error(WhError("interrupted", hint="re-run the command; finished work is kept"))
        sys.exit(130)
    except KeyboardInterrupt:
        _ui.print_error(WhError("interrupted", hint="re-run the command; finished work is kept"))
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the last line of defence renders, then exits 3
        if os.environ.get("WH_DEBUG"):
            raise
        _ui.print_error(
            WhError(f"internal error: {type(exc).__name__}: {exc}", hint="re-run with WH_DEBUG=1 for the traceback")
        )
        sys.exit(EXIT_INTERNAL)
    sys.exit(rc if isinstance(rc, int) else 0)
