"""Requirements files (pip's format), the part wh takes: one requirement a line, with ``--hash`` options.

``parse_requirements_text(text, where)`` is pure; reading the file is the caller's. Lines are joined
at a trailing backslash and comments dropped the way pip does it, so the output of
``pip-compile --generate-hashes`` and ``uv pip compile --generate-hashes`` reads as written::

    markupsafe==3.0.2 \\
        --hash=sha256:<hex> \\
        --hash=sha256:<hex>
        # via jinja2

Every other option (``-r``, ``-c``, ``-e``, ``--index-url``, ``--find-links``, ...) is refused: indexes,
find-links and constraints are ``wh stage`` flags and manifest keys, one place each.

The hashes are enforced after resolution (``check_hashes``): a pinned file whose sha256 is not
among the hashes listed for its requirement is ``HashNotAllowed`` -- pip's ``--hash`` rule, for the
target's wheel instead of the host's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Iterable, Iterator, Protocol, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from wheelhouse.errors import UsageError, WhError

__all__ = [
    "RequirementLine",
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
        # pip's break_args_options: the requirement runs up to the first token that starts with '-'.
        tokens = line.split()
        cut = next((i for i, tok in enumerate(tokens) if tok.startswith("-")), len(tokens))
        req, hashes = " ".join(tokens[:cut]), _hashes(tokens[cut:], here)
        name = _project(req)
        if hashes and name is None:
            raise RequirementsFileError(f"{here}: cannot tell which project the --hash options of {req!r} are for",
                                        hint="write the requirement like `name==1.0 --hash=sha256:...`")
        out.append(RequirementLine(req, name, hashes, here))
    return tuple(out)


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
