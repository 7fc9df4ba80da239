"""wh's own wheel installer: many wheels, extracted in parallel, checked against their RECORD.

The box never has a warm cache, so install time is extraction time. Each wheel
is planned first (every archive path checked: no absolute paths, no ``..``,
every file listed in RECORD with a hash); then all wheels' files are extracted
by one pool of threads (zlib, hashlib and file writes release the GIL), each
file hashed as it is written and compared with RECORD; then each wheel is
finished (console-script launchers, INSTALLER, REQUESTED, a RECORD of what was
really installed). A previously installed version of the same distribution is
moved aside first and deleted only when the batch succeeded; on any failure
the batch's new files are removed and the old ones put back.

The steps live in their own modules: ``wheel_record`` (RECORD, safe paths),
``wheel_plan`` (planning), ``extract`` (the thread pool), ``launchers``
(console scripts), ``installed`` (the installed side). This one runs the batch.

Only stdlib modules that cannot reach a network are imported here (no
multiprocessing: its connection module imports socket).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .extract import create_new, extract_plans
from wheelhouse.install.installed import (
    canonical_name,
    drop_bytecode,
    find_installed,
    inside_scheme,
    installed_paths,
    move_aside,
    prune_empty_dirs,
    remove_distribution,
)
from .launchers import console_launchers, shebang
from wheelhouse.progress import NullReporter, Reporter
from .plan import PlannedFile, WheelPlan, plan_wheel
from .record import RecordMismatch, UnpackError, UnsafeWheelPath, record_digest, render_record

__all__ = [
    "UnpackError",
    "UnsafeWheelPath",
    "RecordMismatch",
    "InstalledDist",
    "install_wheels",
    "find_installed",
    "remove_distribution",
    "canonical_name",
]


@dataclass(frozen=True)
class InstalledDist:
    name: str
    version: str
    wheel: str
    dist_info: str
    files: int
    replaced: str | None = None  # version that was there before


def _finish(plan: WheelPlan, scheme: Mapping[str, str], python: str) -> InstalledDist:
    """Launchers, INSTALLER, REQUESTED, and a RECORD of what was really installed."""
    info_dir = os.path.join(plan.base, plan.dist_info)
    rows: list[tuple[str, str, str]] = []
    for m in plan.members:
        if os.path.exists(m.dest):
            rows.append((m.dest, f"sha256={m.digest}", str(m.size)))
    extra: list[tuple[str, bytes, int]] = []
    for script, body in console_launchers(plan.entry_points):
        data = shebang(python) + body.encode()
        extra.append((os.path.join(scheme["scripts"], script), data, 0o755))
    extra.append((os.path.join(info_dir, "INSTALLER"), b"wh\n", 0o644))
    extra.append((os.path.join(info_dir, "REQUESTED"), b"", 0o644))
    for dest, data, mode in extra:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with os.fdopen(create_new(dest, mode), "wb") as out:
            plan.written.append(dest)
            out.write(data)
        os.chmod(dest, mode)
        rows.append((dest, f"sha256={record_digest(hashlib.sha256(data).digest())}", str(len(data))))
    record = os.path.join(info_dir, "RECORD")
    with os.fdopen(create_new(record, 0o644), "wb") as out:
        plan.written.append(record)
        out.write(render_record(rows, plan.base, record))
    return InstalledDist(plan.name, plan.version, plan.wheel.name, info_dir, len(rows) + 1, plan.replaced)


# ---- the whole batch ----------------------------------------------------------------------------


def _make_dirs(dirs: set[str]) -> list[str]:
    """Create ``dirs``; returns the ones that did not exist (parents first)."""
    created: list[str] = []
    for d in sorted(dirs):
        missing = []
        p = d
        while p and not os.path.isdir(p):
            missing.append(p)
            p = os.path.dirname(p)
        for m in reversed(missing):
            try:
                os.mkdir(m)
                created.append(m)
            except FileExistsError:
                pass
    return created


def _remove_trash(trash: Path) -> None:
    shutil.rmtree(trash, ignore_errors=True)
    for d in (trash.parent, trash.parent.parent):  # .wh/trash, .wh: only when empty
        try:
            d.rmdir()
        except OSError:
            break


def _rollback(plans: list[WheelPlan], scheme: Mapping[str, str], created: list[str]) -> None:
    for plan in plans:
        for p in plan.written:
            try:
                os.unlink(p)
            except OSError:
                pass
            if p.endswith(".py"):
                drop_bytecode(p)
        prune_empty_dirs(plan.written, set(scheme.values()))
        for original, trash in reversed(plan.moved):
            try:
                os.makedirs(os.path.dirname(original), exist_ok=True)
                shutil.move(trash, original)
            except OSError:
                pass
    for d in sorted(created, key=len, reverse=True):
        shutil.rmtree(os.path.join(d, "__pycache__"), ignore_errors=True)
        try:
            os.rmdir(d)
        except OSError:
            pass


def install_wheels(
    wheels: Sequence[Path],
    scheme: Mapping[str, str],
    python: str,
    *,
    jobs: int | None = None,
    reporter: Reporter | None = None,
    trash_dir: Path | None = None,
    on_written: Callable[[str], None] | None = None,
    on_abort: Callable[[], None] | None = None,
) -> list[InstalledDist]:
    """Install ``wheels`` into ``scheme`` (purelib, platlib, scripts, data, headers) for ``python``.

    All or nothing: on any error every file written by this call is removed
    and replaced versions are restored, then the error is raised.
    ``on_written(path)`` hears of each verified ``.py`` file as soon as it is written (to
    byte-compile while extraction goes on); ``on_abort()`` is called before a rollback.
    """
    reporter = reporter or NullReporter()
    wheels = [Path(w) for w in wheels]
    jobs = jobs or min(32, (os.cpu_count() or 2) * 2)
    if not wheels:
        return []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        plans = list(pool.map(lambda w: plan_wheel(w, scheme), wheels))
    # Two wheels of one batch writing the same file: the later one keeps it.
    owner: dict[str, PlannedFile] = {}
    for plan in plans:
        for m in plan.members:
            prev = owner.get(m.dest)
            if prev is not None:
                prev.write = False
            owner[m.dest] = m
    trash = Path(trash_dir or os.path.join(scheme["platlib"], ".wh", "trash")) / f"{os.getpid()}-{time.time_ns()}"
    total = sum(m.size for p in plans for m in p.members if m.write) or 1
    task = f"installing {len(plans)} wheels"
    reporter.start(task, total=total, unit="B")
    created: list[str] = []
    try:
        site_dirs = [scheme["purelib"], scheme["platlib"]]
        for i, plan in enumerate(plans):
            old = find_installed(site_dirs, plan.name)
            if old:
                plan.replaced = ",".join(v for _, v in old)
                paths: list[str] = []
                for dist_info, _ in old:
                    paths += installed_paths(dist_info)
                plan.moved = move_aside(inside_scheme(paths, scheme), trash / str(i))
        dirs = {os.path.dirname(m.dest) for p in plans for m in p.members}
        dirs |= {os.path.join(p.base, p.dist_info) for p in plans} | {scheme["scripts"]}
        created += _make_dirs(dirs)
        extract_plans(plans, python, jobs=jobs, total=total, reporter=reporter, task=task, on_written=on_written)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            done = list(pool.map(lambda p: _finish(p, scheme, python), plans))
    except BaseException as exc:
        if on_abort is not None:
            on_abort()
        reporter.finish(task)
        _rollback(plans, scheme, created)
        _remove_trash(trash)
        if isinstance(exc, OSError):
            raise UnpackError(f"could not write {exc.filename or 'a file'}: {exc.strerror or exc}",
                              hint="check free space and permissions of the environment, then re-run `wh install`") from exc
        raise
    reporter.finish(task)
    _remove_trash(trash)
    # Folders only the replaced versions used are empty now.
    prune_empty_dirs([o for p in plans for o, _ in p.moved], set(scheme.values()))
    return done
