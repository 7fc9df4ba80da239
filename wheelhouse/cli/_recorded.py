"""A dry run answered again from its record, before click: ``wh stage ... --dry-run --offline`` repeated.

A ``wh stage --dry-run --offline`` answered from its stored resolution (``wheelhouse.stage.stored``) depends on
nothing but its command line, its environment and a few files. Such a run is recorded whole
(``<cache>/answers/<key>``): what it wrote to stdout and stderr, and the identity
(``wheelhouse.fileidentity``) of every file its answer stands for: the stored resolution and the cached index
pages it was checked against (taken before the check), pip's configuration files, what a bare name on the
command line could also name (a bundled manifest, a file here), wh's code and every module the run loaded, and
the folders of ``sys.path``. ``key`` is the sha256 of the command line, the working folder, the whole
environment, the interpreter (its path, version, flags and ``sys.path``) and which streams are terminals.

The same command line again, with every one of those files as it was, is answered here by writing the record's
output again (exit 0): byte for byte what the full path wrote, without importing click, packaging or the stage
(~0.03 s instead of ~0.2 s). Anything else (no record, a torn or foreign one, one file changed, appeared or
gone, another variable in the environment) is the full path's, which records afresh. Offline runs only: an
online run's answer also depends on how old each cached page is. ``WH_NO_RECORDED=1`` always takes the full
path and records nothing (tests compare the two with it).
"""

from __future__ import annotations

import os
import sys

__all__ = ["replay", "Recording", "offer"]

FORMAT = 1  # bump when the record's layout changes: older records are then misses
_MAGIC = "wh-recorded-answer"
_offered: tuple[str, tuple[list, ...]] | None = None  # set by the stage: (its cache folder, its evidence)


def _candidate(argv: list[str]) -> bool:
    """A command line that may have a record (the rest is decided by the key and the record)."""
    return (len(argv) > 1 and argv[0] == "stage" and "--dry-run" in argv
            and not os.environ.get("WH_NO_RECORDED") and not os.environ.get("WH_DEBUG"))


def _key(argv: list[str]) -> str:
    import hashlib

    def tty(stream) -> bool:
        try:
            return stream.isatty()
        except (AttributeError, ValueError):
            return False

    facts = (FORMAT, argv, os.getcwd(), sorted(os.environ.items()), sys.executable, sys.version, tuple(sys.flags),
             sys.path, [tty(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
             [getattr(s, "encoding", None) for s in (sys.stdout, sys.stderr)])
    return hashlib.sha256(repr(facts).encode("utf-8", "surrogateescape")).hexdigest()


def _record_path(folder: str, key: str) -> str:
    return os.path.join(folder, "answers", key)


def _folder(argv: list[str]) -> str:
    """Where a record of ``argv`` would be: the cache folder it names (the last ``--cache-dir``, as click takes
    it), else the default. Only where to look: a record found is checked against the key and its files."""
    folder = None
    for i, arg in enumerate(argv):
        if arg == "--cache-dir" and i + 1 < len(argv):
            folder = argv[i + 1]
        elif arg.startswith("--cache-dir="):
            folder = arg.partition("=")[2]
    if folder is None:
        from wheelhouse.cachedir import default_cache_dir

        folder = str(default_cache_dir())
    return folder


def _read(path: str, key: str) -> tuple[str, str] | None:
    """(stdout, stderr) of the record at ``path`` for ``key`` when every file it stands for is as it was."""
    import marshal

    from wheelhouse.fileidentity import identity_entry
    from wheelhouse.sealed import unseal

    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    body = unseal(raw, _MAGIC, FORMAT)
    if body is None:
        return None
    try:
        got, evidence, out, err = marshal.loads(body)
        if got != key or not isinstance(out, str) or not isinstance(err, str) or not isinstance(evidence, list):
            return None
        for entry in evidence:
            if not isinstance(entry, list) or not entry or identity_entry(entry[0]) != entry:
                return None
    except (ValueError, TypeError, EOFError, IndexError):
        return None
    return out, err


def replay(argv: list[str]) -> int | None:
    """Answer ``argv`` from its record (0); None: the full path answers."""
    if not _candidate(argv):
        return None
    key = _key(argv)
    found = _read(_record_path(_folder(argv), key), key)
    if found is None:
        return None
    for stream, text in zip((sys.stdout, sys.stderr), found):
        try:
            stream.reconfigure(errors="backslashreplace")  # as the full path writes (wheelhouse.cli._main)
        except (AttributeError, ValueError):
            pass
        stream.write(text)
        stream.flush()
    return 0


def offer(cache: str, evidence: tuple[list, ...]) -> None:
    """The stage answered from ``evidence`` alone (the files of its stored resolution and its other inputs):
    its run may be recorded in ``cache``."""
    global _offered
    _offered = (cache, evidence)


class _Tee:
    """A text stream that keeps what is written to it; a use that bypasses it (its buffer) spoils the copy."""

    def __init__(self, stream):
        self._stream = stream
        self.parts: list[str] = []
        self.whole = True

    def write(self, text: str) -> int:
        written = self._stream.write(text)  # first: what it refuses (click probes it with b"") is not kept
        self.parts.append(text)
        return written

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    @property
    def buffer(self):
        self.whole = False
        return self._stream.buffer

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class Recording:
    """The full path's run of a candidate command line, its output kept; ``finish`` writes the record when the
    stage offered its evidence (``offer``) and the run succeeded."""

    def __init__(self, argv: list[str]):
        self._key = _key(argv)  # before the run: it may set variables of its own
        self._code = _code_files()
        self._streams = (sys.stdout, sys.stderr)
        self._tees = (_Tee(sys.stdout), _Tee(sys.stderr))
        sys.stdout, sys.stderr = self._tees

    @classmethod
    def start(cls, argv: list[str]) -> Recording | None:
        """A recording when ``argv`` may be answered from a record later (off a terminal); else None."""
        if not _candidate(argv) or any(s is None or not hasattr(s, "isatty") or s.isatty()
                                       for s in (sys.stdout, sys.stderr)):
            return None
        return cls(argv)

    def finish(self, rc) -> None:
        sys.stdout, sys.stderr = self._streams
        if rc not in (0, None) or _offered is None or not all(t.whole for t in self._tees):
            return
        from wheelhouse.fileidentity import identity_entry

        cache, evidence = _offered
        loaded = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
        files = [*self._code, *(f for f in loaded if isinstance(f, str)), *(p for p in sys.path if p)]
        entries = [*map(list, evidence), *(identity_entry(os.path.abspath(f)) for f in dict.fromkeys(files))]
        _write(_record_path(cache, self._key), self._key, entries, *("".join(t.parts) for t in self._tees))


def _code_files() -> list[str]:
    """Every module of wh (those a stored resolution's key names but the run may not load, too)."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    for folder, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        out += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
    return out


def _write(path: str, key: str, evidence: list, out: str, err: str) -> None:
    """Write the record; a cache that cannot be written costs the full path next time, never this run."""
    import marshal

    from wheelhouse.atomic import write_atomic
    from wheelhouse.sealed import seal

    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, seal(_MAGIC, FORMAT, marshal.dumps((key, evidence, out, err))))
    except OSError:
        pass
