"""``wh --version``, ``wh --help`` and ``wh COMMAND --help`` without importing click or rich (start-up in a few
milliseconds).

The top-level help is click's, rendered the way click's ``HelpFormatter`` renders the group in ``_group.py``: the
same width rule (the terminal's columns, clamped to 80, minus 2, at least 50), the same indents and
definition-list columns. tests/cli/test_startup.py compares this rendering with click's at every width, so the
two cannot drift. A command's help (``wh stage --help``, ``wh cache prune -h``) is printed from ``_helptexts``
(click's own output, written by ``python -m wheelhouse.cli._helpgen``) when the terminal is 80 columns or more
(click's width is then 78, whatever the columns) and the texts were rendered from these very sources
(``sources_crc``); otherwise, and for anything else on the command line, click answers.
"""

from __future__ import annotations

import os
import sys

__all__ = ["answer", "sources_crc"]

HELP_FLAGS = ("--help", "-h")

# The group's own options, in click's order (declared, then the help option last).
OPTIONS = (
    ("--version", "Show the version and exit."),
    ("-v, --verbose", "More output (repeatable)."),
    ("-q, --quiet", "Only errors and the data asked for."),
    ("-h, --help", "Show this message and exit."),
)
USAGE_ARGS = "[OPTIONS] COMMAND [ARGS]..."


def _columns() -> int:
    """shutil.get_terminal_size().columns, without importing shutil (it loads zlib, bz2 and lzma)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns


def _wrap(text: str, width: int, indent: str = "", rest: str | None = None) -> list[str]:
    import textwrap

    wrapper = textwrap.TextWrapper(width, initial_indent=indent,
                                   subsequent_indent=indent if rest is None else rest, replace_whitespace=False)
    return wrapper.wrap(text)


def _dl(rows, width: int, indent: int) -> list[str]:
    """click's HelpFormatter.write_dl for one-line terms (col_max 30, col_spacing 2)."""
    first_col = min(max(len(term) for term, _ in rows), 30) + 2
    out = []
    for term, text in rows:
        lines = _wrap(text, max(width - first_col - 2, 10)) or [""]
        if len(term) <= first_col - 2:
            head = " " * indent + term + " " * (first_col - len(term))
        else:
            out.append(" " * indent + term)
            head = " " * (first_col + indent)
        out.append(head + lines[0])
        out.extend(" " * (first_col + indent) + line for line in lines[1:])
    return out


def help_text(width: int | None = None) -> str:
    """The top-level help, as ``click.Context.get_help()`` returns it (no final newline)."""
    from ._commands import _COMMANDS, DESCRIPTION, EPILOG

    width = max(min(_columns(), 80) - 2, 50) if width is None else width
    usage = "Usage: wh "  # width >= 50 always leaves room for the arguments beside it
    lines = _wrap(USAGE_ARGS, width, usage, " " * len(usage))
    lines += ["", *_wrap(DESCRIPTION, width, "  ")]
    lines += ["", "Options:", *_dl(OPTIONS, width, 2)]
    lines += ["", "Commands:", *_dl([(name, spec[2]) for name, spec in _COMMANDS.items()], width, 2)]
    lines += ["", *_wrap(EPILOG, width, "  ")]
    return "\n".join(lines)


# Modules outside wheelhouse/cli whose values the commands render into their help (``--ready``'s choices, the
# smoke prompt's default); tests/cli/test_startup.py fails when a command imports a constant from another.
RENDERED_FROM = ("serve/readiness.py", "serve/smoke.py")
# Modules of wheelhouse/cli that no help text is rendered from (output, the fast answers, the texts themselves): an
# edit there leaves the texts current.
_NOT_RENDERED = frozenset({"_helptexts.py", "_ui.py", "_fast.py", "_recorded.py"})


def sources_crc() -> int:
    """CRC-32 of wheelhouse/cli's Python sources (but :data:`_NOT_RENDERED`), in name order, then of
    :data:`RENDERED_FROM`: what the texts were rendered from. Reading them costs well under a millisecond;
    importing click to render them ~35 ms."""
    import zlib

    folder = os.path.dirname(os.path.abspath(__file__))
    names = [n for n in sorted(os.listdir(folder)) if n.endswith(".py") and n not in _NOT_RENDERED]
    crc = 0
    for name in names + [os.path.join("..", other) for other in RENDERED_FROM]:
        with open(os.path.join(folder, name), "rb") as f:
            crc = zlib.crc32(name.encode() + b"\0" + f.read(), crc)
    return crc


def _command_help(argv: list[str]) -> str | None:
    """``wh COMMAND [SUBCOMMAND] --help``'s text at 78 columns, if it was rendered from these sources."""
    words = argv[:-1]
    if not words or argv[-1] not in HELP_FLAGS or any(w.startswith("-") or not w for w in words):
        return None
    if min(_columns(), 80) - 2 != 78:  # a narrow terminal: click wraps to it
        return None
    from . import _helptexts

    text = _helptexts.TEXTS.get(" ".join(words))
    if text is None or _helptexts.SOURCES != sources_crc():
        return None
    return text


def _emit(stream, text: str) -> None:
    if stream is None:  # stdout or stderr closed (`wh --version >&-`): click's echo writes nothing either
        return
    stream.write(text)
    stream.flush()


def answer(argv: list[str]) -> int | None:
    """Answer ``--version``, ``--help``/``-h`` and a bare ``wh`` here; None: hand the command line to click."""
    if argv == ["--version"]:
        from wheelhouse import __version__

        _emit(sys.stdout, f"wh, version {__version__}\n")
        return 0
    if argv in (["--help"], ["-h"]):
        _emit(sys.stdout, help_text() + "\n")
        return 0
    if not argv:  # click: a group called alone prints its help to stderr and exits 2
        _emit(sys.stderr, help_text() + "\n")
        return 2
    text = _command_help(argv)
    if text is not None:
        _emit(sys.stdout, text + "\n")
        return 0
    return None
