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
from typing import Mapping

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .launchers import check_script_name, console_launchers
from .record import RecordMismatch, UnpackError, UnsafeWheelPath, check_archive_path, check_inside, parse_record

__all__ = ["SCHEME_KEYS", "PlannedFile", "WheelPlan", "plan_wheel"]

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
    dirs_made: bool = False  # set by the first extraction worker to reach this wheel
    lock: threading.Lock = field(default_factory=threading.Lock)

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
    return infos[0]


def _check_not_state(wheel: Path, name: str, dest: str, scheme: Mapping[str, str]) -> None:
    """wh's own records (installed.json, links, drops, patches, the journal) are never a wheel's to write."""
    for key in ("purelib", "platlib"):
        state = os.path.join(os.path.normpath(scheme[key]), ".wh")
        if dest == state or dest.startswith(state + os.sep):
            raise UnsafeWheelPath(f"{wheel.name}: {name} would be written into wh's state folder {state}",
                                  hint="remove this wheel from the wheelhouse and re-run `wh stage`")


def plan_wheel(wheel: Path, scheme: Mapping[str, str]) -> WheelPlan:
    """Read ``wheel``'s listing, WHEEL and RECORD; raise before anything is written if it is unsafe or altered."""
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise UnpackError(f"{wheel.name} is not a readable wheel: {exc}", hint="re-stage it with `wh stage`") from exc
    with zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        for n in names:
            check_archive_path(wheel, n)
        dist_info = _find_dist_info(wheel, names)
        wheel_meta = zf.read(f"{dist_info}/WHEEL").decode("utf-8", "replace")
        if f"{dist_info}/RECORD" not in names:
            raise RecordMismatch(f"{wheel.name} has no RECORD", hint="the wheel is malformed; rebuild it")
        record = parse_record(wheel, zf.read(f"{dist_info}/RECORD").decode("utf-8"))
        entry_points = None
        if f"{dist_info}/entry_points.txt" in names:
            entry_points = zf.read(f"{dist_info}/entry_points.txt").decode("utf-8")
    meta = dict(
        (k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in wheel_meta.splitlines()) if v
    )
    if not meta.get("wheel-version", "1").startswith("1."):
        raise UnpackError(f"{wheel.name} has Wheel-Version {meta.get('wheel-version')}; wh installs 1.x",
                          hint="install it with `--installer pip`")
    purelib = meta.get("root-is-purelib", "true").lower() == "true"
    root = scheme["purelib" if purelib else "platlib"]
    stem = dist_info[: -len(".dist-info")]
    name, _, version = stem.partition("-")
    data_prefix = f"{stem}.data/"
    members: list[PlannedFile] = []
    for info in infos:
        n = info.filename
        if n.endswith("/"):
            continue
        if n in (f"{dist_info}/RECORD", f"{dist_info}/RECORD.jws", f"{dist_info}/RECORD.p7s"):
            continue
        if n not in record:
            raise RecordMismatch(f"{wheel.name}: {n} is not listed in RECORD", hint="the wheel was altered; re-stage it")
        digest, size = record[n]
        if digest is None:
            raise RecordMismatch(f"{wheel.name}: {n} has no sha256 in RECORD", hint="the wheel was altered; re-stage it")
        if size is not None and size != info.file_size:
            raise RecordMismatch(f"{wheel.name}: {n} is {info.file_size} bytes in the archive, {size} in RECORD",
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
            if script and "/" not in rest:  # scripts/sub/x replaces nothing of the venv's
                check_script_name(wheel, name, rest)
        else:
            base_dir, rest = root, n
        dest = os.path.normpath(os.path.join(base_dir, rest))
        check_inside(wheel, n, dest, base_dir)
        _check_not_state(wheel, n, dest, scheme)
        mode = (info.external_attr >> 16) & 0o777
        members.append(PlannedFile(n, dest, info.file_size, digest, mode, script, info.header_offset,
                                   info.compress_size, info.compress_type, info.CRC))
    launchers = []
    for script, body in console_launchers(entry_points):
        check_script_name(wheel, name, script)
        launchers.append((os.path.normpath(os.path.join(scheme["scripts"], script)), body))
    return WheelPlan(wheel, name, version, dist_info, root, members, entry_points, launchers)
