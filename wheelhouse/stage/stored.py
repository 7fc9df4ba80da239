"""A stored resolution: a stage whose inputs have not changed is answered without resolving again.

After a resolution, its result is kept in the cache (``<cache>/resolutions/<key>.json``) with the
index pages it read and what identifies each page's content (the sha256 of the cached body, or a
remembered 404). ``key`` is the sha256 of everything the answer depends on: the requirements, the
constraints, overrides and exclusions, every other argument the resolver is given (pre-releases,
toolchain groups, what the image provides), the target profile, the indexes and find-links, wh's
version and the code that resolves (size and mtime of each module of ``wheelhouse.resolve``,
``wheelhouse.index`` and ``wheelhouse.target``: an edited checkout does not answer from an older
code's result).

The next stage with the same key asks each of those pages again through the page cache and its
rules (``PackageSource.unchanged``: offline, the cache alone; a fresh entry as it is; a stale one
revalidated; ``--refresh``, every one revalidated); when every page reads the same, the stored
result is the answer and resolvelib does not run. Any difference (a new upload, a yanked file, an
input changed) is a full resolve, whose result replaces the stored one.

Not stored: a run that read a find-links location or a file named directly (no page validator
covers them). A stored file is never trusted: its own sha256 is checked, and any doubt about its
content (torn, edited, another format, a wrong type anywhere) is a miss, never an error.

A stored resolution found current says which files it was read from (``Stored.evidence``): a dry run
answered from it is recorded whole for its command line (``wheelhouse.cli._recorded``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from wheelhouse import __version__
from wheelhouse.fileidentity import identity_entry
from wheelhouse.sealed import seal, unseal

__all__ = ["FORMAT", "Stored", "resolution_key", "load_stored", "store_resolution"]

FORMAT = 1  # bump when the stored layout changes: older files are then misses
_MAGIC = "wh-stored-resolution"
_CODE = ("resolve", "index", "target")  # the packages whose code decides an answer (see the docstring)


def resolution_key(requirements: Sequence[str], target, locations: Sequence[str], options: Mapping[str, Any]) -> str:
    """The sha256 naming one resolution's inputs; ``options``: the resolver's other arguments."""
    body = json.dumps({"format": FORMAT, "wh": __version__, "code": _code_identity(), "requirements": list(requirements),
                       "target": target.to_json(), "locations": list(locations),
                       "options": {k: _plain(v) for k, v in sorted(options.items())}},
                      sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(body.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Stored:
    """A stored resolution found current, and what it was read from: the identity entries
    (``wheelhouse.fileidentity``) of its file and of every cache file its pages' check reads, taken before
    the check (a file changed since then differs); None where a page is read from no cache file."""

    resolution: Any
    evidence: tuple[list, ...] | None


def load_stored(cache: Path, key: str, source) -> Stored | None:
    """The stored resolution for ``key`` when every page it read is unchanged (``source.unchanged``);
    None otherwise (none stored, any doubt about the file, a page that changed)."""
    path = _path(cache, key)
    stored_file = identity_entry(str(path))  # before reading: a file replaced after it differs
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    body = unseal(raw, _MAGIC, FORMAT)
    if body is None:
        return None
    try:
        data = json.loads(body)
        if data["key"] != key:
            return None
        pages = data["pages"]
        if not isinstance(pages, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in pages.items()):
            return None
        resolution = _resolution(data["resolution"])
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    files = source.page_files(pages)
    evidence = None if files is None else (stored_file, *(identity_entry(str(f)) for f in files))
    return Stored(resolution, evidence) if source.unchanged(pages) else None


def store_resolution(cache: Path, key: str, resolution, pages: Mapping[str, str] | None) -> None:
    """Keep ``resolution`` under ``key`` with the pages it read; nothing when ``pages`` is None. A cache
    that cannot be written costs a resolve next time, never the run."""
    if pages is None:
        return
    body = json.dumps({"key": key, "pages": dict(pages), "resolution": _encode(resolution)},
                      separators=(",", ":")).encode()
    path = _path(cache, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:  # not fsynced: a torn file fails its sha256 and is a miss
                fh.write(seal(_MAGIC, FORMAT, body))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass


def _path(cache: Path, key: str) -> Path:
    return Path(cache) / "resolutions" / f"{key}.json"


def _code_identity() -> list:
    here = Path(__file__).resolve().parent.parent
    out = []
    for package in _CODE:
        try:
            entries = sorted(os.scandir(here / package), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if e.name.endswith(".py"):
                st = e.stat()
                out.append([package, e.name, st.st_size, st.st_mtime_ns])
    return out


def _plain(value: Any) -> Any:
    """A JSON-able form of a resolver argument (dataclasses field by field, sequences as lists)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"type": type(value).__name__, **{f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_plain(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


# --- the Resolution, written and read back --------------------------------------------------------
_DISTFILE = ("name", "version", "filename", "url", "hashes", "requires_python", "yanked", "yanked_reason", "size",
             "metadata_url", "metadata_sha256", "origin")


def _encode(r) -> dict:
    return {
        "pins": [{"name": p.name, "version": p.version, "parents": list(p.parents), "extras": list(p.extras),
                  "requested_by": list(p.requested_by), "provided": p.provided,
                  "notes": [[n.code, n.message] for n in p.notes],
                  "distfile": {f: (dict(p.distfile.hashes) if f == "hashes" else getattr(p.distfile, f)) for f in _DISTFILE}}
                 for p in r.pins],
        "requirements": list(r.requirements), "constraints": list(r.constraints), "skipped": list(r.skipped),
        "changes": [dataclasses.asdict(c) for c in r.changes], "unknown_deps": list(r.unknown_deps),
        "rewritten": [{"name": w.name, "by": list(w.by), "requested": [list(x) for x in w.requested]} for w in r.rewritten],
        "warnings": list(r.warnings),
    }


def _strs(value) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError("a list of strings")
    return tuple(value)


def _resolution(d: dict):
    from wheelhouse.index.distfile import Distfile
    from wheelhouse.resolve.image import ImageChange
    from wheelhouse.resolve.overrides import Rewritten
    from wheelhouse.resolve.result import Pin, PinNote, Resolution

    pins = []
    for p in d["pins"]:
        f = p["distfile"]
        if set(f) != set(_DISTFILE) or not isinstance(f["hashes"], dict):
            raise TypeError("distfile fields")
        if not all(isinstance(f[k], str) for k in ("name", "version", "filename", "url", "origin")):
            raise TypeError("distfile types")
        if not isinstance(p["name"], str) or not isinstance(p["version"], str) or not isinstance(p["provided"], bool):
            raise TypeError("pin types")
        notes = tuple(PinNote(*_strs(n)) for n in p["notes"])
        pins.append(Pin(p["name"], p["version"], Distfile(**f), _strs(p["parents"]), _strs(p["extras"]),
                        _strs(p["requested_by"]), provided=p["provided"], notes=notes))
    changes = []
    for c in d["changes"]:
        if set(c) != {"name", "image", "staged", "direction"} or not all(isinstance(v, str) for v in c.values()):
            raise TypeError("change")
        changes.append(ImageChange(**c))
    rewritten = []
    for w in d["rewritten"]:
        requested = tuple(_strs(x) for x in w["requested"])
        if not isinstance(w["name"], str) or any(len(x) != 2 for x in requested):
            raise TypeError("rewritten")
        rewritten.append(Rewritten(w["name"], _strs(w["by"]), requested))
    return Resolution(pins=tuple(pins), requirements=_strs(d["requirements"]), constraints=_strs(d["constraints"]),
                      skipped=_strs(d["skipped"]), changes=tuple(changes), unknown_deps=_strs(d["unknown_deps"]),
                      rewritten=tuple(rewritten), warnings=_strs(d["warnings"]))
