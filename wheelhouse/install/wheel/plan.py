"""Planning one wheel's install: where each of its files goes, and the hash it must have.

Nothing is written here. Every archive path is checked (``wheel_record``), the one
``.dist-info`` folder is found, WHEEL's version and Root-Is-Purelib are read, and each
file is mapped to its destination in the scheme (``.data/<key>/`` folders to their
scheme folder) with the sha256 and size RECORD gives it. A file missing from RECORD,
or listed without a sha256, refuses the wheel.
"""

from __future__ import annotations

import os
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .archive import FileIdentity, WheelArchive, read_wheel
from .launchers import check_script_name, console_launchers
from .record import RecordMismatch, UnpackError, UnsafeWheelPath, check_archive_paths, check_inside, parse_record

__all__ = ["SCHEME_KEYS", "PlannedFile", "WheelPlan", "plan_wheel", "plan_ahead", "forget_ahead"]

SCHEME_KEYS = ("purelib", "platlib", "scripts", "data", "headers")


# Not frozen: the batch marks files another wheel overwrites (``write``), and records what it
# wrote and moved aside so a failure can be rolled back.
@dataclass
class PlannedFile:
    name: str  # archive path
    dest: str  # absolute destination
    size: int
    digest: str | None  # urlsafe-b64 sha256 from RECORD
    mode: int  # unix permission bits from the archive
    script: bool  # from .data/scripts: shebang rewrite
    offset: int = 0  # local header offset in the archive
    compress_size: int = 0
    compress_type: int = zipfile.ZIP_STORED
    crc: int = 0  # CRC-32 from the central directory (checked when the wheel's sha256 is the lock's)
    write: bool = True  # False when another wheel of the batch writes the same path


@dataclass
class WheelPlan:
    wheel: Path
    name: str
    version: str
    dist_info: str  # folder name
    base: str  # site folder that holds the dist-info
    members: list[PlannedFile]
    entry_points: str | None
    launchers: list[tuple[str, str]] = field(default_factory=list)  # (absolute path, body without shebang)
    removed: list[str] = field(default_factory=list)  # the previous version's paths, moved aside by the batch
    replaced: str | None = None
    kept: tuple = ()  # SharedFile of each previous version's file another installed distribution lists too: left
    dirs_made: bool = False  # set by the first extraction worker to reach this wheel
    lock: threading.Lock = field(default_factory=threading.Lock)
    # The identity of the wheel file this plan was read from (``WheelArchive.identity``), None if unknown.
    identity: FileIdentity | None = None

    def written_paths(self) -> list[str]:
        """Every path installing this plan writes: its files, launchers, INSTALLER, REQUESTED, RECORD."""
        info = os.path.join(self.base, self.dist_info)
        return ([m.dest for m in self.members if m.write] + [p for p, _ in self.launchers]
                + [os.path.join(info, n) for n in ("INSTALLER", "REQUESTED", "RECORD")])


def _find_dist_info(wheel: Path, names: list[str]) -> str:
    """The wheel's one ``.dist-info`` folder, which must be its filename's name and version (PEP 427/491).

    A wheel named ``wrongdist-1.0`` shipping ``numpy-1.0.dist-info/`` would otherwise replace the
    real numpy (pip refuses it too); a second ``.dist-info`` folder, with or without METADATA, the same.
    """
    try:
        name, version, _, _ = parse_wheel_filename(wheel.name)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise UnpackError(f"{wheel.name} is not a valid wheel filename ({exc})",
                          hint="the wheel was renamed; re-stage it with `wh stage`") from exc
    tops = sorted({n.split("/", 1)[0] for n in names if "/" in n and n.split("/", 1)[0].endswith(".dist-info")})
    infos = [t for t in tops if f"{t}/METADATA" in names]
    if len(infos) != 1 or len(tops) != 1:
        raise UnpackError(f"{wheel.name} has {len(tops)} .dist-info folders ({', '.join(tops) or 'none'}); "
                          "exactly one, with METADATA, is expected",
                          hint="the wheel is malformed or hostile; remove it from the wheelhouse and re-run `wh stage`")
    info_name, _, info_version = infos[0][: -len(".dist-info")].partition("-")
    try:
        same = canonicalize_name(info_name) == name and Version(info_version) == version
    except InvalidVersion:
        same = False
    if not same:
        raise UnpackError(f"{wheel.name} ships {infos[0]}/, not the {name} {version} its filename names",
                          hint="the wheel is malformed or hostile; remove it from the wheelhouse and re-run `wh stage`")
    # What the requirements check, pip and importlib.metadata read as its name and version: a
    # METADATA saying "torch 2.5" in evil-1.0.dist-info/ would satisfy torch>=2 and install no torch.
    from ..closure import wheel_dist  # here: closure imports this package

    meta = wheel_dist(wheel)
    try:
        same = canonicalize_name(meta.name) == name and Version(meta.version) == version
    except InvalidVersion:
        same = False
    if not same:
        raise UnpackError(f"{wheel.name}: its METADATA names {meta.name} {meta.version}, not the {name} {version} "
                          "its filename names",
                          hint="the wheel is malformed or hostile; remove it from the wheelhouse and re-run `wh stage`")
    return infos[0]


def _state_dirs(scheme: Mapping[str, str]) -> tuple[str, ...]:
    """wh's own records (installed.json, links, drops, patches, the journal) are never a wheel's to write."""
    return tuple(os.path.join(os.path.normpath(scheme[k]), ".wh") for k in ("purelib", "platlib"))


def _refuse_state(wheel: Path, name: str, dest: str, states: tuple[str, ...]) -> UnsafeWheelPath:
    state = next(s for s in states if dest == s or dest.startswith(s + os.sep))
    return UnsafeWheelPath(f"{wheel.name}: {name} would be written into wh's state folder {state}",
                           hint="remove this wheel from the wheelhouse and re-run `wh stage`")


def _check_venv_file(wheel: Path, dist: str, name: str, dest: str, venv_files: tuple[str, str]) -> None:
    """Refuse a member that lands on the venv's interpreter, activation scripts, pyvenv.cfg or scripts folder,
    by any path."""
    scripts_sep, pyvenv = venv_files
    if dest == pyvenv:
        raise UnsafeWheelPath(f"{wheel.name}: {name} would replace the environment's pyvenv.cfg",
                              hint="remove this wheel from the wheelhouse and re-run `wh stage`")
    if dest + os.sep == scripts_sep:
        raise UnsafeWheelPath(f"{wheel.name}: {name} would replace the environment's scripts folder",
                              hint="remove this wheel from the wheelhouse and re-run `wh stage`")
    if dest.startswith(scripts_sep) and os.sep not in dest[len(scripts_sep):]:  # scripts/sub/x replaces nothing
        check_script_name(wheel, dist, dest[len(scripts_sep):])


def _check_dist_info(wheel: Path, name: str, dest: str, dist_info: str, sites: set[str]) -> None:
    """Refuse a member that lands in another distribution's ``.dist-info`` folder of a site folder."""
    for site in sites:
        if dest.startswith(site):
            top = dest[len(site):].partition(os.sep)[0]
            if top.endswith(".dist-info") and top != dist_info:
                raise UnpackError(f"{wheel.name}: {name} would be written into {top}/, a second .dist-info "
                                  f"besides {dist_info}/",
                                  hint="the wheel is malformed or hostile; remove it from the wheelhouse and "
                                       "re-run `wh stage`")


def _meta(text: str) -> dict[str, str]:
    return dict((k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in text.splitlines()) if v)


# Plans made ahead (``plan_ahead``), each taken once by the next ``plan_wheel`` of the same wheel and scheme.
_ahead: dict[tuple[Path, tuple[tuple[str, str], ...]], tuple[WheelArchive, WheelPlan]] = {}
_ahead_lock = threading.Lock()


def _scheme_key(scheme: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, os.path.normpath(v)) for k, v in scheme.items() if k in SCHEME_KEYS))


def plan_ahead(wheels: Sequence[Path], scheme: Mapping[str, str]) -> None:
    """Plan ``wheels`` for ``scheme`` before its folders exist (while a venv is being made, say); each plan
    is kept for the one ``plan_wheel`` call that asks for the same wheel, read from the same file, and the
    same scheme. A wheel that would be refused is not kept: ``plan_wheel`` refuses it when asked."""
    key = _scheme_key(scheme)
    for wheel in wheels:
        try:
            plan = _plan(Path(wheel), scheme)
            archive = read_wheel(wheel)
        except Exception:
            continue
        with _ahead_lock:
            _ahead[(Path(wheel), key)] = (archive, plan)


def forget_ahead() -> None:
    """Drop the plans made ahead that nobody took (the scheme turned out another)."""
    with _ahead_lock:
        _ahead.clear()


def plan_wheel(wheel: Path, scheme: Mapping[str, str]) -> WheelPlan:
    """Read ``wheel``'s listing, WHEEL and RECORD; raise before anything is written if it is unsafe or altered."""
    with _ahead_lock:
        hit = _ahead.pop((Path(wheel), _scheme_key(scheme)), None)
    if hit is not None and read_wheel(wheel) is hit[0]:  # the same file, read once: the same plan
        return hit[1]
    return _plan(Path(wheel), scheme)


def _plan(wheel: Path, scheme: Mapping[str, str]) -> WheelPlan:
    archive = read_wheel(wheel)
    names = archive.names
    check_archive_paths(wheel, names)
    dist_info = _find_dist_info(wheel, names)
    texts = archive.texts
    if f"{dist_info}/RECORD" not in texts:
        raise RecordMismatch(f"{wheel.name} has no RECORD", hint="the wheel is malformed; rebuild it")
    meta = _meta(texts.get(f"{dist_info}/WHEEL", ""))
    record = parse_record(wheel, texts[f"{dist_info}/RECORD"])
    entry_points = texts.get(f"{dist_info}/entry_points.txt")
    if not meta.get("wheel-version", "1").startswith("1."):
        raise UnpackError(f"{wheel.name} has Wheel-Version {meta.get('wheel-version')}; wh installs 1.x",
                          hint="install it with `--installer pip`")
    purelib = meta.get("root-is-purelib", "true").lower() == "true"
    root = scheme["purelib" if purelib else "platlib"]
    stem = dist_info[: -len(".dist-info")]
    name, _, version = stem.partition("-")
    data_prefix = f"{stem}.data/"
    skip = {f"{dist_info}/RECORD", f"{dist_info}/RECORD.jws", f"{dist_info}/RECORD.p7s"}
    states = _state_dirs(scheme)
    inside_states = tuple(d + os.sep for d in states)
    root_norm = os.path.normpath(root)
    root_sep = os.path.join(root_norm, "")
    scripts_sep = os.path.join(os.path.normpath(scheme["scripts"]), "")
    venv_files = (scripts_sep, os.path.join(os.path.normpath(scheme["data"]), "pyvenv.cfg"))
    sites = {os.path.join(os.path.normpath(scheme[k]), "") for k in ("purelib", "platlib")}
    members: list[PlannedFile] = []
    for n, file_size, compress_size, compress_type, crc, offset, mode in archive.members:
        if n.endswith("/") or n in skip:
            continue
        entry = record.get(n)
        if entry is None:
            raise RecordMismatch(f"{wheel.name}: {n} is not listed in RECORD", hint="the wheel was altered; re-stage it")
        digest, size = entry
        if digest is None:
            raise RecordMismatch(f"{wheel.name}: {n} has no sha256 in RECORD", hint="the wheel was altered; re-stage it")
        if size is not None and size != file_size:
            raise RecordMismatch(f"{wheel.name}: {n} is {file_size} bytes in the archive, {size} in RECORD",
                                 hint="the wheel was altered; re-stage it")
        script = False
        if n.startswith(data_prefix):
            key, _, rest = n[len(data_prefix):].partition("/")
            if key not in SCHEME_KEYS or not rest:
                raise UnpackError(f"{wheel.name}: {n} names an unknown .data folder {key!r}",
                                  hint="the wheel is malformed; rebuild it")
            base_dir = scheme[key]
            if key == "headers":
                rest = f"{name}/{rest}"
            script = key == "scripts"
            dest = os.path.normpath(os.path.join(base_dir, rest))
            check_inside(wheel, n, dest, base_dir)
            # Judged by where it lands, not by its name: scripts/./python and data/bin/python are bin/python,
            # data/lib/.../site-packages/numpy-1.0.dist-info is a second distribution.
            _check_venv_file(wheel, name, n, dest, venv_files)
            _check_dist_info(wheel, n, dest, dist_info, sites)
        else:
            # check_archive_path refused absolute names and '..': normalising root/n cannot leave root
            # (the same test as check_inside, without a commonpath per member).
            dest = os.path.normpath(root_sep + n)
            if not dest.startswith(root_sep) and dest != root_norm:
                check_inside(wheel, n, dest, root)
            if n.startswith("./"):  # another name for a top-level folder
                _check_dist_info(wheel, n, dest, dist_info, sites)
            if dest.startswith(venv_files[0]):  # a scheme whose scripts folder is inside the site folder
                _check_venv_file(wheel, name, n, dest, venv_files)
        if dest.startswith(inside_states) or dest in states:
            raise _refuse_state(wheel, n, dest, states)
        members.append(PlannedFile(n, dest, file_size, digest, mode, script, offset, compress_size, compress_type,
                                   crc))
    launchers = []
    for script, body in console_launchers(entry_points):
        check_script_name(wheel, name, script)
        launchers.append((os.path.normpath(os.path.join(scheme["scripts"], script)), body))
    return WheelPlan(wheel, name, version, dist_info, root, members, entry_points, launchers,
                     identity=archive.identity)
