"""``wh``'s console entry point: the fast answers first (``_fast``, ``_recorded``), then the click group; any WhError
rendered once.

Exit codes: 0 success; 1 the thing asked for failed (doctor: a check failed);
2 bad input (nothing was changed), or doctor --strict with warnings; 3 wh itself
could not run.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the CLI, render any WhError once, exit with its code."""
    args = sys.argv[1:] if argv is None else list(argv)
    from . import _fast

    rc = _fast.answer(args)
    if rc is None:
        from . import _recorded

        rc = _recorded.replay(args)
    if rc is not None:
        sys.exit(rc)

    import atexit
    import gc

    import click

    from wheelhouse.errors import EXIT_INTERNAL, WhError

    # The interpreter's collections at exit walk every object still alive (after a cold resolve,
    # millions: ~0.07 s) only to free what the process's end frees anyway: frozen, they are skipped.
    atexit.register(gc.freeze)

    for stream in (sys.stdout, sys.stderr):  # a lone surrogate in a hostile file's name or text is shown escaped,
        try:                                 # never a UnicodeEncodeError that loses the rest of the output
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):
            pass

    from . import _ui
    from ._group import NO_ARGS_IS_HELP, cli, usage_error

    recording = _recorded.Recording.start(args)  # a dry run answered from its stored resolution is kept
    try:
        # standalone_mode=False: click returns ctx.exit(n)'s code instead of exiting.
        rc = cli.main(args=args, prog_name="wh", standalone_mode=False)
        if recording is not None:
            recording.finish(rc)
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
