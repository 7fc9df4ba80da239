"""Requirements files (pip's format), the part wh takes: one requirement a line, with ``--hash`` options.

``parse_requirements_text(text, where)`` is pure; reading the file is the caller's. Lines are joined
at a trailing backslash and comments dropped the way pip does it, so the output of
``pip-compile --generate-hashes`` and ``uv pip compile --generate-hashes`` reads as written::

    markupsafe==3.0.2 \\
        --hash=sha256:<hex> \\
        --hash=sha256:<hex>
        # via jinja2

``parse_requirements_text`` (a manifest's ``requirements-file``) refuses every option line.
``read_requirements_files`` reads the files ``wh stage -r/-c`` names as pip writes them: nested ``-r``
and ``-c`` are followed (relative to the file that names them); ``--pre``, ``-i/--index-url``,
``--extra-index-url`` and ``-f/--find-links`` are honoured (a relative find-links folder is relative to
the file, as pip takes it when it exists there); ``--only-binary`` and ``--prefer-binary`` are what wh
does anyway (wheels only); the rest (``-e``, ``--no-binary``, ``--no-index``, ``--trusted-host``, ...)
is refused with the reason. A file with no requirement is an empty request, with a note.

The hashes are enforced after resolution (``check_hashes``): a pinned file whose sha256 is not
among the hashes listed for its requirement is ``HashNotAllowed`` -- pip's ``--hash`` rule, for the
target's wheel instead of the host's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Iterator, Protocol, Sequence

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from wheelhouse.errors import UsageError, WhError

__all__ = [
    "RequirementLine",
    "RequirementsFiles",
    "read_requirements_files",
    "RequirementsFileError",
    "DisallowedFile",
    "HashNotAllowed",
    "parse_requirements_text",
    "check_hashes",
]

# pip's req_file.COMMENT_RE: a comment starts at a `#` at the start of a line or after whitespace
# (a `#` inside a URL, `x.whl#sha256=...`, is not one).
_COMMENT = re.compile(r"(^|\s+)#.*$")
_SHA256 = re.compile(r"sha256:([0-9a-fA-F]{64})")


class RequirementsFileError(UsageError):
    code = "bad-requirements-file"


@dataclass(frozen=True)
class RequirementLine:
    """One requirement of a file: its text (options removed), its project and the sha256 digests
    its ``--hash`` options allow (lower-case hex; empty: no hash was given)."""

    text: str
    name: str | None
    hashes: tuple[str, ...] = ()
    where: str = ""  # "FILE line N", for messages


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, line) with backslash continuations joined; pip's ``join_lines``:
    a comment line ends a continuation."""
    start, parts = 0, []
    for n, line in enumerate(text.splitlines(), 1):
        if line.endswith("\\") and not _COMMENT.match(line):
            if not parts:
                start = n
            parts.append(line[:-1])
        elif parts:
            parts.append(" " + line if _COMMENT.match(line) else line)
            yield start, "".join(parts)
            parts = []
        else:
            yield n, line
    if parts:
        yield start, "".join(parts)


def _project(text: str) -> str | None:
    from packaging.requirements import InvalidRequirement, Requirement  # here: a stage with no file loads no parser

    try:
        return canonicalize_name(Requirement(text).name)
    except InvalidRequirement:
        pass
    if text.endswith(".whl"):  # a wheel file by path or URL, the way wh stage takes one
        try:
            return canonicalize_name(parse_wheel_filename(PurePosixPath(text.split("#")[0]).name)[0])
        except InvalidWheelFilename:
            return None
    return None


def _hashes(options: list[str], where: str) -> tuple[str, ...]:
    out: list[str] = []
    i = 0
    while i < len(options):
        opt = options[i]
        if opt == "--hash" and i + 1 < len(options):  # optparse also takes `--hash VALUE`
            value, i = options[i + 1], i + 2
        elif opt.startswith("--hash="):
            value, i = opt[len("--hash="):], i + 1
        else:
            raise RequirementsFileError(f"{where}: the option {opt.split('=')[0]} is not supported on a requirement",
                                        hint="only --hash=sha256:HEX may follow a requirement")
        m = _SHA256.fullmatch(value)
        if not m:
            algo = value.split(":", 1)[0] if ":" in value else value
            what = f"{algo} hashes are not supported" if ":" in value and algo != "sha256" else f"{value!r} is not a sha256 hash"
            raise RequirementsFileError(f"{where}: --hash {what}", hint="write --hash=sha256:<64 hex digits>")
        out.append(m.group(1).lower())
    return tuple(dict.fromkeys(out))


def parse_requirements_text(text: str, where: str, *, option_hint: str) -> tuple[RequirementLine, ...]:
    """The requirements of a requirements file's ``text``; ``where`` names the file in errors and
    ``option_hint`` says where options belong instead (a flag or a manifest key)."""
    out = []
    for n, raw in _logical_lines(text):
        line = _COMMENT.sub("", raw).strip()
        if not line:
            continue
        here = f"{where} line {n}"
        if line.startswith("-"):
            raise RequirementsFileError(f"{here}: option lines ({line.split()[0].split('=')[0]}) are not supported",
                                        hint=option_hint)
        out.append(_requirement_line(line, here))
    return tuple(out)


def _requirement_line(line: str, here: str) -> RequirementLine:
    # pip's break_args_options: the requirement runs up to the first token that starts with '-'.
    tokens = line.split()
    cut = next((i for i, tok in enumerate(tokens) if tok.startswith("-")), len(tokens))
    req, hashes = " ".join(tokens[:cut]), _hashes(tokens[cut:], here)
    name = _project(req)
    if hashes and name is None:
        raise RequirementsFileError(f"{here}: cannot tell which project the --hash options of {req!r} are for",
                                    hint="write the requirement like `name==1.0 --hash=sha256:...`")
    return RequirementLine(req, name, hashes, here)


# --- files as pip writes them (wh stage -r / -c) ---------------------------------------------------

@dataclass(frozen=True)
class RequirementsFiles:
    """What ``-r``/``-c`` files (and the files they name) ask for."""

    requirements: tuple[RequirementLine, ...] = ()
    constraints: tuple[RequirementLine, ...] = ()
    prereleases: bool = False
    index_url: str | None = None  # the last -i/--index-url of the files
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


# option -> (takes a value, what wh does with it); "" is honoured, any other text is the refusal's reason
_OPTIONS: dict[str, tuple[bool, str]] = {
    "-r": (True, ""), "--requirement": (True, ""), "-c": (True, ""), "--constraint": (True, ""),
    "--pre": (False, ""), "-i": (True, ""), "--index-url": (True, ""), "--extra-index-url": (True, ""),
    "-f": (True, ""), "--find-links": (True, ""), "--only-binary": (True, ""), "--prefer-binary": (False, ""),
    "--require-hashes": (False, ""),
    "-e": (True, "an editable install is a source tree; wh stages wheels only (build one with `wh build`)"),
    "--editable": (True, "an editable install is a source tree; wh stages wheels only (build one with `wh build`)"),
    "--no-binary": (True, "wh stages wheels only, so nothing can be taken as source"),
    "--no-index": (False, "give wh stage's own sources instead (-f alone stages with no index)"),
    "--trusted-host": (True, "set it where pip reads it (trusted-host in pip.conf, or PIP_TRUSTED_HOST)"),
    "--use-feature": (True, "pip's feature switches do not apply to wh"),
}


def _option(line: str, where: str) -> tuple[str, str | None]:
    """``(option, value)`` of an option line (``-r x``, ``-rx``, ``--index-url=x``, ``--index-url x``)."""
    first, _, rest = line.partition(" ")
    name, eq, value = first.partition("=")
    if name not in _OPTIONS and len(name) > 2 and not name.startswith("--") and name[:2] in _OPTIONS:
        name, value, eq = name[:2], name[2:], "="  # pip's short form: -rfile.txt
    if name not in _OPTIONS:
        raise RequirementsFileError(f"{where}: the option {name} is not supported in a requirements file",
                                    hint="remove it; wh stage takes -r, -c, --pre, -i, --extra-index-url, -f, "
                                         "--only-binary and --hash lines")
    takes, _ = _OPTIONS[name]
    if not takes:
        return name, None
    value = (value if eq else rest).strip()
    if not value:
        raise RequirementsFileError(f"{where}: {name} needs a value", hint=f"write it like `{name} VALUE`")
    return name, value


def read_requirements_files(paths: Sequence[str], read: Callable[[Path], str], *, constraints: bool = False,
                            flag: str = "-r") -> RequirementsFiles:
    """The requirements (or, ``constraints``, the constraints) of ``paths`` and every file they name.

    ``read(path) -> text`` is the caller's (errors included); a file named twice is read once."""
    acc = {"req": [], "con": [], "pre": False, "index": None, "extra": [], "links": [], "notes": []}
    seen: set[Path] = set()
    for p in paths:
        _read_one(Path(p), f"{flag} {p}", constraints, read, acc, seen)
    return RequirementsFiles(tuple(acc["req"]), tuple(acc["con"]), acc["pre"], acc["index"], tuple(dict.fromkeys(acc["extra"])),
                             tuple(dict.fromkeys(acc["links"])), tuple(acc["notes"]))


def _read_one(path: Path, where: str, as_constraints: bool, read, acc: dict, seen: set) -> None:
    key = path.resolve()
    if key in seen:
        return  # pip reads a file again; its lines would only repeat (and a cycle would not end)
    seen.add(key)
    lines = 0
    for n, raw in _logical_lines(read(path)):
        line = _COMMENT.sub("", raw).strip()
        if not line:
            continue
        here = f"{where} line {n}"
        if not line.startswith("-"):
            lines += 1
            acc["con" if as_constraints else "req"].append(_requirement_line(line, here))
            continue
        name, value = _option(line, here)
        reason = _OPTIONS[name][1]
        if reason:
            raise RequirementsFileError(f"{here}: {name} is not supported: {reason}", hint=f"remove the {name} line")
        lines += 1
        if name in ("-r", "--requirement", "-c", "--constraint"):
            nested = path.parent / value  # pip: relative to the file that names it
            _read_one(nested, f"{name} {nested}", as_constraints or name in ("-c", "--constraint"), read, acc, seen)
        elif name == "--pre":
            acc["pre"] = True
        elif name in ("-i", "--index-url"):
            acc["index"] = value
        elif name == "--extra-index-url":
            acc["extra"].append(value)
        elif name in ("-f", "--find-links"):
            local = path.parent / value
            acc["links"].append(str(local) if "://" not in value and local.exists() else value)
        # --only-binary, --prefer-binary, --require-hashes: wheels only and hashes enforced, always
    if not lines:
        acc["notes"].append(f"{where} lists no requirements: nothing is asked of it")


# --- enforcing the hashes --------------------------------------------------------------------------

class _Pinned(Protocol):
    name: str
    filename: str
    sha256: str | None


@dataclass(frozen=True)
class DisallowedFile:
    """A pinned file whose sha256 is not among those its requirement line allows."""

    name: str
    filename: str
    sha256: str
    allowed: tuple[str, ...]
    where: str


class HashNotAllowed(WhError):
    """The resolution picked a file that a ``--hash`` of the requirements does not allow."""

    code = "hash-not-allowed"

    def __init__(self, bad: Sequence[DisallowedFile]):
        def shown(d: DisallowedFile) -> str:
            listed = ", ".join(f"sha256:{h}" for h in d.allowed[:3])
            more = f" and {len(d.allowed) - 3} more" if len(d.allowed) > 3 else ""
            return f"{d.name}: {d.filename} has sha256:{d.sha256}, not a hash {d.where} allows ({listed}{more})"

        detail = "\n".join(f"{d.where} allows for {d.name}:\n" + "\n".join(f"  sha256:{h}" for h in d.allowed)
                           for d in bad if len(d.allowed) > 3)
        super().__init__(
            "; ".join(shown(d) for d in bad),
            hint="the index serves other files than the requirements were compiled from: recompile them "
                 "(--generate-hashes) against this index for the target's platform, or drop the --hash options",
            detail=detail or None,
        )
        self.bad = tuple(bad)


def check_hashes(files: Iterable[_Pinned], lines: Sequence[RequirementLine]) -> None:
    """Refuse (``HashNotAllowed``, listing every one) the files whose sha256 a hashed line for their
    project does not allow. ``lines`` are those that apply to the target; files whose sha256 is not
    known yet are skipped (check them again once fetched)."""
    rules = [line for line in lines if line.hashes]
    bad = [
        DisallowedFile(f.name, f.filename, f.sha256.lower(), rule.hashes, rule.where)
        for f in files if f.sha256
        for rule in rules
        if rule.name == canonicalize_name(f.name) and f.sha256.lower() not in rule.hashes
    ]
    if bad:
        raise HashNotAllowed(bad)
