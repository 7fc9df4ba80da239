"""wh's command line. The only place (with its sibling modules) that imports click and rich.

Each command lives in its own module under ``wheelhouse.cli`` and is loaded only
when invoked, so one broken command cannot take the others down. ``wh --version``
and ``wh --help`` import neither click nor rich (``_fast``); the click group is in
``_group`` and is imported only when a command runs.

Exit codes: 0 success; 1 the thing asked for failed (doctor: a check failed);
2 bad input (nothing was changed), or doctor --strict with warnings; 3 wh itself
could not run.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main", "cli"]

DESCRIPTION = "wh: stage a Python GPU serving stack where the network is, install it where the GPUs are."

# command name -> (module under wheelhouse.cli, attribute, one-line help)
_COMMANDS = {
    "target": ("target", "target", "Capture or show a target profile."),
    "stage": ("stage", "stage", "Resolve for the target and download a verified wheelhouse."),
    "cache": ("cache", "cache", "Show, prune or clean wh's download cache."),
    "bytecode": ("bytecode", "bytecode", "Compile a wheelhouse's modules for the target's Python, once."),
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


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the CLI, render any WhError once, exit with its code."""
    args = sys.argv[1:] if argv is None else list(argv)
    from . import _fast

    rc = _fast.answer(args)
    if rc is not None:
        sys.exit(rc)

    import click

    from wheelhouse.errors import EXIT_INTERNAL, WhError

    for stream in (sys.stdout, sys.stderr):  # a lone surrogate in a hostile file's name or text is shown escaped,
        try:                                 # never a UnicodeEncodeError that loses the rest of the output
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):
            pass

    from . import _ui
    from ._group import NO_ARGS_IS_HELP, cli, usage_error

    try:
        # standalone_mode=False: click returns ctx.exit(n)'s code instead of exiting.
        rc = cli.main(args=args, prog_name="wh", standalone_mode=False)
    except WhError as exc:
        _ui.print_error(exc)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except NO_ARGS_IS_HELP as exc:  # `wh patch` alone: the group's help is the answer
        exc.show()
        sys.exit(2)
    except click.ClickException as exc:
        # click's own errors (a bad flag value, a missing argument) read like wh's: one line and a hint.
        _ui.print_error(usage_error(exc))
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


_LAZY = {"cli": "cli", "_LazyGroup": "_LazyGroup", "_with_verbosity": "_with_verbosity",
         "_usage_error": "usage_error", "_NO_ARGS_IS_HELP": "NO_ARGS_IS_HELP"}


def __getattr__(name: str):
    """``wheelhouse.cli.cli`` (the click group) and its helpers, imported on first use."""
    if name in _LAZY:
        from . import _group

        return getattr(_group, _LAZY[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
