"""Reading the files people write (TOML) and machines capture (JSON): one loader, one set of errors.

Every data file wh reads (stack manifests, engine recipes, patch specs, doctor rules, the JIT
registry, target profiles, ``wh.json``, requirements files) goes through here, so each failure
reads the same and names the file: it does not exist, is a folder, is not a regular file (a FIFO
or ``/dev/zero`` would block or never end), cannot be read, is larger than the bound, is not
UTF-8, is nested deeper than :data:`MAX_DEPTH` (a file made to exhaust the parser's recursion, e.g. a
``wh.json`` pulled from a registry), or does not parse (with the line). Each is raised as the caller's error class (a
:class:`~wheelhouse.errors.WhError` subclass, so its ``code`` and exit status stay the caller's).

Validation helpers for parsed tables live here too: :func:`check_keys` rejects unknown keys
with a did-you-mean (a typo must never silently drop a requirement) and :func:`get_value`
checks a value's TOML type, so a wrong type is a clear error rather than a crash later.
"""

from __future__ import annotations

import difflib
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Mapping

from wheelhouse.errors import UsageError, WhError

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "open_regular",
    "read_bytes",
    "read_text",
    "parse_toml",
    "parse_json",
    "too_deep",
    "load_toml",
    "load_json",
    "find_bundled",
    "check_keys",
    "get_value",
    "did_you_mean",
    "load_tables",
]

# No manifest, recipe, rule file, profile or requirements file comes near this; a bigger one is
# the wrong file (or /dev/zero behind a link), and reading it whole would only grow wh.
MAX_BYTES = 16 << 20

# No file wh writes or reads nests near this (a doctor report: about 6 levels); deeper is a file made to
# exhaust the parser (RecursionError) or every recursive walk after it.
MAX_DEPTH = 64

_KIND = {str: "a string", bool: "true or false", int: "an integer", float: "a number", list: "a list",
         dict: "a table", Mapping: "a table"}


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


def open_regular(path: str | Path, *, what: str = "file", error: type[WhError] = UsageError, hint: str | None = None,
                 max_bytes: int | None = None) -> BinaryIO:
    """``path`` opened for reading in binary, once checked to be a regular file (of at most ``max_bytes``).

    Opened without blocking (a FIFO would wait for a writer forever) and checked with fstat on
    the open descriptor, so what is read is what was checked.
    """
    p = Path(path)
    where_hint = hint or f"check the path of the {what}"
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        raise error(f"{what} {p} does not exist", hint=where_hint) from exc
    except IsADirectoryError as exc:  # pragma: no cover - Linux opens folders read-only
        raise error(f"{what} {p} is a folder, not a file", hint=where_hint) from exc
    except OSError as exc:
        raise error(f"{what} {p} cannot be read ({exc.strerror or exc})", hint=where_hint) from exc
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{what} {p} is a folder, not a file", hint=where_hint)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                    or stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a file")
            raise error(f"{what} {p} is not a regular file ({kind}); refusing to read it", hint=where_hint)
        if max_bytes is not None and st.st_size > max_bytes:
            raise error(f"{what} {p} is {_mib(st.st_size)}, more than the {_mib(max_bytes)} a {what} may be",
                        hint=where_hint)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | Path, *, what: str = "file", error: type[WhError] = UsageError, hint: str | None = None,
               max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes``; anything else is ``error``."""
    where_hint = hint or f"check the path of the {what}"
    with open_regular(path, what=what, error=error, hint=hint, max_bytes=max_bytes) as fh:
        try:
            data = fh.read(max_bytes + 1)  # bounded even if the file grew since fstat
        except OSError as exc:
            raise error(f"{what} {path} cannot be read ({exc.strerror or exc})", hint=where_hint) from exc
    if len(data) > max_bytes:
        raise error(f"{what} {path} is more than the {_mib(max_bytes)} a {what} may be", hint=where_hint)
    return data


def read_text(path: str | Path, *, what: str = "file", error: type[WhError] = UsageError, hint: str | None = None,
              max_bytes: int = MAX_BYTES) -> str:
    """:func:`read_bytes` decoded as UTF-8 (a BOM is accepted and dropped)."""
    raw = read_bytes(path, what=what, error=error, hint=hint, max_bytes=max_bytes)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error(f"{what} {path} is not UTF-8 text (line {line}) and cannot be read", hint="save it as UTF-8") from exc


def too_deep(data: Any, limit: int = MAX_DEPTH) -> bool:
    """True when ``data`` (parsed JSON/TOML) nests lists/tables deeper than ``limit`` (walked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def _deep_error(what: str, source: str, error: type[WhError], hint: str | None) -> WhError:
    return error(f"{what} {source} nests deeper than the {MAX_DEPTH} levels a {what} may have",
                 hint=hint or "this is not a file wh wrote: replace it with a good copy")


def parse_toml(text: str, *, source: str, what: str = "file", error: type[WhError] = UsageError,
               hint: str | None = None) -> dict[str, Any]:
    """Parsed TOML; a syntax error names ``source`` and the line; nesting deeper than MAX_DEPTH is ``error``."""
    if sys.version_info >= (3, 11):  # imported here: the JSON readers of this module are on paths that read no TOML
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib says "Expected '=' after a key in a key/value pair (at line 3, column 5)"
        raise error(f"{what} {source} is not valid TOML: {exc}", hint="fix the line it names") from exc
    except RecursionError:
        raise _deep_error(what, source, error, hint) from None
    if too_deep(data):
        raise _deep_error(what, source, error, hint)
    return data


def parse_json(text: str | bytes, *, source: str, what: str = "file", error: type[WhError] = UsageError,
               hint: str | None = None) -> Any:
    """Parsed JSON; a syntax error names ``source``, the line and column; nesting deeper than MAX_DEPTH is ``error``."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise _deep_error(what, source, error, hint) from None
    except ValueError as exc:
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise error(f"{what} {source} is not valid JSON: {msg}{where}",
                    hint=hint or "fix the line it names, or write the file again") from exc
    if too_deep(data):
        raise _deep_error(what, source, error, hint)
    return data


def load_toml(path: str | Path, *, what: str = "file", error: type[WhError] = UsageError, hint: str | None = None,
              max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """Read and parse the TOML file ``path`` (bounded, regular files only)."""
    text = read_text(path, what=what, error=error, hint=hint, max_bytes=max_bytes)
    return parse_toml(text, source=str(path), what=what, error=error, hint=hint)


def load_json(path: str | Path, *, what: str = "file", error: type[WhError] = UsageError, hint: str | None = None,
              max_bytes: int = MAX_BYTES, expect: type = dict) -> Any:
    """Read and parse the JSON file ``path``; its top level must be ``expect`` (a dict unless told)."""
    text = read_text(path, what=what, error=error, hint=hint, max_bytes=max_bytes)
    data = parse_json(text, source=str(path), what=what, error=error, hint=hint)
    if expect is not object and not isinstance(data, expect):
        held = _KIND.get(type(data), type(data).__name__)
        want = "a JSON object" if expect is dict else _KIND.get(expect, expect.__name__)
        raise error(f"{what} {path} is not {want} (it holds {held})", hint=hint or f"check that {path} is a {what}")
    return data


def find_bundled(ref: str | Path, folder: Path, suffix: str = ".toml") -> Path | None:
    """The bundled file a bare name means (``demo`` -> ``folder/demo.toml``), when ``ref`` is not a path that exists.

    Only a bare name (no folder part) is looked up; ``None`` when there is no such bundled file.
    """
    p = Path(ref)
    if os.path.lexists(p) or len(p.parts) != 1:
        return None
    name = p.name if p.name.endswith(suffix) else p.name + suffix
    bundled = Path(folder) / name
    return bundled if bundled.is_file() else None


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The closest of ``choices`` to ``word`` (difflib), or None when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def check_keys(table: Mapping[str, Any], allowed: Iterable[str], where: str, *,
               error: type[WhError] = UsageError, noun: str = "key") -> None:
    """Refuse keys of ``table`` not in ``allowed``, each with a did-you-mean; ``where`` names the table.

    ``where`` reads like ``"manifest x.toml [stack]"``; the message lists every unknown key at once.
    """
    allowed = sorted(allowed)
    unknown = sorted(str(k) for k in table if k not in allowed)
    if not unknown:
        return
    parts = []
    for k in unknown:
        guess = did_you_mean(k, allowed)
        parts.append(f"{k!r} (did you mean {guess!r}?)" if guess else repr(k))
    nouns = noun if len(unknown) == 1 else noun + "s"
    raise error(f"{where}: unknown {nouns} {', '.join(parts)}", hint=f"known {noun}s there: {', '.join(allowed)}")


def get_value(table: Mapping[str, Any], key: str, kinds: tuple[type, ...], where: str, *,
              error: type[WhError] = UsageError, default: Any = None) -> Any:
    """``table[key]`` checked against TOML types ``kinds`` (absent: ``default``); ``where`` names the key.

    ``bool`` is an ``int`` in Python but not in TOML: ``gpus = true`` is refused unless bool is asked for.
    """
    if key not in table or table[key] is None:
        return default
    value = table[key]
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        what = " or ".join(_KIND.get(k, k.__name__) for k in kinds if not (k is int and float in kinds))
        hint = (f'quote it: {key} = "{value}"' if kinds == (str,) and isinstance(value, (int, float))
                else f"give {key} {what}")
        raise error(f"{where} must be {what}, not {value!r}", hint=hint)
    return value


def load_tables(path: str | Path, key: str, allowed: Iterable[str], *, what: str,
                error: type[WhError] = UsageError) -> list[tuple[str, Mapping[str, Any]]]:
    """The ``[[key]]`` tables of the TOML data file ``path``, each checked for unknown keys, with where it is
    (``"<path> [[key]] #2"``, for the errors its values raise)."""
    data = load_toml(path, what=what, error=error)
    check_keys(data, [key], str(path), error=error)
    tables = data.get(key) or []
    if not isinstance(tables, list):
        raise error(f"{path}: {key} must be a list of tables", hint=f"write each entry as [[{key}]]")
    out = []
    for i, table in enumerate(tables):
        where = f"{path} [[{key}]] #{i + 1}"
        if not isinstance(table, Mapping):
            raise error(f"{where} must be a table", hint=f"write each entry as [[{key}]]")
        check_keys(table, allowed, where, error=error)
        out.append((where, table))
    return out
