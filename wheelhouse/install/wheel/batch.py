"""wh's own wheel installer: many wheels, extracted in parallel, checked against their RECORD.

The box never has a warm cache, so install time is extraction time. Each wheel
is planned first (every archive path checked: no absolute paths, no ``..``, nothing
into wh's ``.wh/`` state, a ``.dist-info`` that is the filename's, no script that
replaces the interpreter, every file listed in RECORD with a hash and its size, the
declared total fitting the free space); then all wheels' files are extracted
by one pool of threads (inflation, hashing and file writes release the GIL), each
file checked as it is written, while tasks of the same pool hash every wheel whose
sha256 the lock gives (``extract``: why that makes the per-file RECORD hash
redundant there); a wrong wheel rolls the whole batch back. Then each wheel is
finished (console-script launchers, INSTALLER, REQUESTED, a RECORD of what was
really installed). The batch is one transaction (``install.transaction``): every path it
writes or replaces is journaled and the previous content moved aside before the first
byte; on any failure, or on the next run after a crash, everything is put back exactly.

With an extraction cache (``linkcache``), a wheel installed before (the same sha256, the
lock's) has its files hardlinked from the cache, each link checked, instead of inflated and
written again; a wheel that had no valid entry gets one (hardlinks of the files just written
and checked, made while the other wheels are extracted: no byte written twice), put in place
once every wheel's sha256 is confirmed. Links are journaled like written files.

The steps live in their own modules: ``record`` (RECORD, safe paths), ``plan``
(planning), ``extract`` (the thread pool, sizes enforced while streaming),
``launchers`` (console scripts), and ``install.installed`` / ``install.uninstall``
(the installed side). This one runs the batch.

Only modules that cannot reach a network are imported here (no multiprocessing:
its connection module imports socket).
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Mapping, Sequence

from wheelhouse.faults import checkpoint
from wheelhouse.install.installed import (
    find_installed,
    inside_scheme,
    installed_paths,
    prune_empty_dirs,
    same_path,
)
from wheelhouse.install.sharedfiles import shared_with_others
from wheelhouse.install.transaction import Transaction
from wheelhouse.progress import NullReporter, Reporter
from .archive import FileIdentity
from .extract import create_new, extract_plans
from wheelhouse.inflate import choose as choose_inflater
from .launchers import shebang
from .linkcache import LinkCache, Linking
from .plan import PlannedFile, WheelPlan, plan_wheel
from .record import RecordMismatch, UnpackError, UnsafeWheelPath, record_digest, render_record

__all__ = ["InstalledDist", "NoSpace", "install_wheels", "plan_batch", "default_jobs"]


@dataclass(frozen=True)
class InstalledDist:
    name: str
    version: str
    wheel: str
    dist_info: str
    files: int
    replaced: str | None = None  # version that was there before
    linked: int = 0  # files hardlinked from the extraction cache
    # Its members hashed against RECORD while written: nothing had checked its RECORD before (a wheelhouse
    # staged before wh checked RECORD, a wheel from elsewhere); False: its stage-checked RECORD rows copied.
    members_hashed: bool = True
    kept: tuple = ()  # SharedFile of each file of the replaced version left for the other distributions that list it


class NoSpace(UnpackError):
    code = "no-space"


def _finish(plan: WheelPlan, scheme: Mapping[str, str], python: str, linked: int = 0,
            members_hashed: bool = True, later: frozenset[str] = frozenset()) -> InstalledDist:
    """Launchers, INSTALLER, REQUESTED, and a RECORD of what was really installed. ``later``: launchers a wheel
    after this one in the install writes too (two distributions declare one console script): the later one's is
    written, as installing them one after another would leave it; this one's RECORD lists its own bytes."""
    info_dir = os.path.join(plan.base, plan.dist_info)
    rows: list[tuple[str, str, str]] = []
    for m in plan.members:  # every one exists now: written by this wheel, or (write False) by a later one
        if m.script:  # its `#!python` line may have been rewritten: RECORD says what is on disk (as pip's does)
            with open(m.dest, "rb") as fh:
                rows.append(_row_of(m.dest, fh.read()))
            continue
        rows.append((m.dest, f"sha256={m.digest}", str(m.size)))
    extra: list[tuple[str, bytes, int]] = []
    for dest, body in plan.launchers:
        extra.append((dest, shebang(python) + body.encode(), 0o755))
    extra.append((os.path.join(info_dir, "INSTALLER"), b"wh\n", 0o644))
    extra.append((os.path.join(info_dir, "REQUESTED"), b"", 0o644))
    for dest, data, mode in extra:
        if dest in later:
            rows.append(_row_of(dest, data))
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with os.fdopen(create_new(dest, mode), "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), mode)  # this file's, not whatever another wheel's launcher put at the path
        rows.append(_row_of(dest, data))
    record = os.path.join(info_dir, "RECORD")
    with os.fdopen(create_new(record, 0o644), "wb") as out:
        out.write(render_record(rows, plan.base, record))
    return InstalledDist(plan.name, plan.version, plan.wheel.name, info_dir, len(rows) + 1, plan.replaced, linked,
                         members_hashed, plan.kept)


def _row_of(dest: str, data: bytes) -> tuple[str, str, str]:
    """RECORD's row for a file wh wrote with ``data``."""
    return dest, f"sha256={record_digest(hashlib.sha256(data).digest())}", str(len(data))


# ---- the whole batch ----------------------------------------------------------------------------


def default_jobs() -> int:
    """Extraction threads for this machine: one per core it may use, plus one to keep the cores busy
    while a thread waits in a file creation (2 cores, bench_install -j 2/3/4: within the noise of a shared
    machine of each other; the 2x cores of before, 8 threads on 4 cores' worth of GIL hand-offs, was slower)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 2
    return max(2, min(32, cores + 1))


def _refuse_if_altered(expected: Mapping[Path, str], jobs: int) -> None:
    """Raise HashMismatch when a wheel is not the lock's: a damaged wheel is named by its hash, not by
    whatever the damage broke first (its listing, its RECORD)."""
    from wheelhouse.digest import sha256_of
    from wheelhouse.install.checks import hash_mismatch

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        actual = list(pool.map(lambda w: sha256_of(w) if w.is_file() else "missing", expected))
    bad = [(str(w), sha, got) for (w, sha), got in zip(expected.items(), actual) if got != sha]
    if bad:
        raise hash_mismatch(bad)


def _missing_dirs(dirs: set[str]) -> set[str]:
    """``dirs`` and their parents that do not exist yet (what a rollback removes again)."""
    out: set[str] = set()
    for d in dirs:
        while d and not os.path.isdir(d) and d not in out:
            out.add(d)
            d = os.path.dirname(d)
    return out


def _check_space(plans: Sequence[WheelPlan], scheme: Mapping[str, str]) -> None:
    """The declared sizes must fit (extraction enforces them while streaming: a bomb cannot lie past this)."""
    need = sum(m.size for p in plans for m in p.members if m.write)
    try:
        st = os.statvfs(scheme["platlib"])
    except OSError:
        return
    free = st.f_bavail * st.f_frsize
    if need > free:
        raise NoSpace(f"the wheels unpack to {need / 1e6:.0f} MB, {scheme['platlib']} has {free / 1e6:.0f} MB free",
                      hint="free space there (or install into a venv on a larger disk: `wh install --venv PATH`)")


def _refuse_folder_clobber(plans: Sequence[WheelPlan]) -> None:
    """A file is never written where a folder is (one the batch does not remove): moved aside whole, that
    folder, another distribution's package or the venv's bin/, would be gone at the commit (pip fails there)."""
    removed = {os.path.normpath(r) for p in plans for r in p.removed}
    parents: dict[str, bool] = {}  # a new venv: most parents are not there, one stat each
    for plan in plans:
        for dest in plan.written_paths():
            parent = os.path.dirname(dest)
            there = parents.get(parent)
            if there is None:
                there = parents[parent] = os.path.isdir(parent)
            if there and dest not in removed and os.path.isdir(dest) and not os.path.islink(dest):
                name = next((m.name for m in plan.members if m.dest == dest), os.path.basename(dest))
                raise UnsafeWheelPath(f"{plan.wheel.name}: {name} would replace the folder {dest} with a file",
                                      hint="the wheel is malformed or hostile; remove it from the wheelhouse and "
                                           "re-run `wh stage`")


def plan_batch(wheels: Sequence[Path], scheme: Mapping[str, str], jobs: int) -> list[WheelPlan]:
    """Plan every wheel; mark files two wheels write (the later keeps it) and the previous versions' paths.

    Nothing is written; every refusal (unsafe path, altered RECORD, hostile name, no space) happens here.
    """
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        plans = list(pool.map(lambda w: plan_wheel(w, scheme), wheels))
    owner: dict[str, PlannedFile] = {}
    for plan in plans:
        for m in plan.members:
            prev = owner.get(m.dest)
            if prev is not None:
                prev.write = False
            owner[m.dest] = m
    _check_space(plans, scheme)
    site_dirs = [scheme["purelib"], scheme["platlib"]]
    olds = [find_installed(site_dirs, plan.name) for plan in plans]
    # A file another installed distribution lists too stays for it (opencv-contrib-python's cv2/ when
    # opencv-python moves to a version without it); one only the versions replaced here list goes with them.
    infos = [info for old in olds for info, _ in old]
    shared = shared_with_others(infos, site_dirs, {p.name for p, old in zip(plans, olds) if old}) if infos else {}
    for plan, old in zip(plans, olds):
        if old:
            plan.replaced = ",".join(v for _, v in old)
            for dist_info, _ in old:
                kept = shared.get(dist_info, ())
                keep = {same_path(str(dist_info.parent / k.path)) for k in kept}
                plan.removed += [p for p in inside_scheme(installed_paths(dist_info), scheme, plan.name)
                                 if same_path(p) not in keep]
                plan.kept += kept
    _refuse_folder_clobber(plans)
    return plans


def install_wheels(
    wheels: Sequence[Path],
    scheme: Mapping[str, str],
    python: str,
    *,
    jobs: int | None = None,
    reporter: Reporter | None = None,
    transaction: Transaction | None = None,
    on_written: Callable[[str], None] | None = None,
    on_abort: Callable[[], None] | None = None,
    expected: Mapping[Path, str] | None = None,
    verified: Collection[Path] | Mapping[Path, FileIdentity | None] = (),
    link_cache: Path | None = None,
    record_checked: Collection[Path] = (),
) -> list[InstalledDist]:
    """Install ``wheels`` into ``scheme`` (purelib, platlib, scripts, data, headers) for ``python``.

    All or nothing: on any error every path is put back as it was, then the error is raised.
    With a ``transaction`` the caller commits it (after writing its own record); without one
    the batch is its own transaction. ``on_written(path)`` hears of each verified ``.py`` file
    as soon as it is written (to byte-compile while extraction goes on); ``on_abort()`` is
    called before a rollback. ``expected`` maps wheels to the sha256 (hex) the lock gives them: they
    are hashed while they are extracted, and one that differs rolls the batch back (HashMismatch).
    ``verified``: wheels the caller already checked against the lock (``checks.verify_files``' answer: with
    the identity of each file it hashed, so a wheel replaced since is refused). The members of both are checked
    by CRC-32, and against their RECORD sha256 too unless the wheel is in ``record_checked`` (its wheelhouse
    records that its stage checked every member against RECORD); a wheel in neither has every member checked
    against its RECORD sha256. A member that differs from its RECORD row is refused: the installed RECORD
    never carries a false row.
    ``link_cache``: the folder of the verified extraction cache (``linkcache``), or None for none;
    used for the wheels of ``expected`` that are ``record_checked`` (the lock's sha256 names their entry;
    a linked file is not hashed), on the same filesystem. Such a wheel whose file has an identity its entry
    remembers (``Linking.trust``) is not hashed again: it is passed as ``verified``, that identity pinned.
    """
    from wheelhouse.install.checks import hash_mismatch

    reporter = reporter or NullReporter()
    wheels = [Path(w) for w in wheels]
    expected = {Path(w): sha for w, sha in (expected or {}).items()}
    record_checked = {Path(w) for w in record_checked}
    jobs = jobs or default_jobs()
    if not wheels:
        return []
    inflater = choose_inflater()
    try:
        plans = plan_batch(wheels, scheme, jobs)
    except (UnpackError, RecordMismatch):
        _refuse_if_altered(expected, jobs)
        raise
    txn = transaction or Transaction(scheme["platlib"], [w.name for w in wheels])
    txn.before_commit.append(lambda: prune_removed(plans, scheme))
    total = sum(m.size for p in plans for m in p.members if m.write) or 1
    task = f"installing {len(plans)} wheel{'' if len(plans) == 1 else 's'}"
    dirs = {os.path.dirname(m.dest) for p in plans for m in p.members}
    dirs |= {os.path.join(p.base, p.dist_info) for p in plans} | {scheme["scripts"]}
    reporter.start(task, total=total, unit="B")
    linking = None
    try:
        txn.begin([q for p in plans for q in (*p.removed, *p.written_paths())], _missing_dirs(dirs))
        os.makedirs(scheme["scripts"], exist_ok=True)  # the others: by the workers, wheel by wheel
        linking = _linking(link_cache, plans, {w: s for w, s in expected.items() if w in record_checked}, scheme)
        if linking is not None:
            # A wheel file the entry remembers, identity unchanged since its sha256 matched: passed as checked,
            # pinned (extraction refuses another file at the path), its bytes not read whole again.
            pinned = dict(verified) if isinstance(verified, Mapping) else {Path(w): None for w in verified}
            for wheel, identity in linking.trust(plans).items():
                expected.pop(wheel, None)
                pinned[wheel] = identity
            verified = pinned
        bad = extract_plans(plans, python, jobs=jobs, total=total, reporter=reporter, task=task,
                            on_written=on_written, expected=expected,
                            verified=verified, inflater=inflater, linking=linking, record_checked=record_checked)
        if bad:
            raise hash_mismatch(bad)
        if linking is not None:
            linking.publish(plans)  # every wheel's sha256 is the lock's now: its staged entry may be used
        counts = linking.linked if linking is not None else {}
        last = {dest: i for i, p in enumerate(plans) for dest, _ in p.launchers}  # who writes each launcher
        later = [frozenset(dest for dest, _ in p.launchers if last[dest] != i) for i, p in enumerate(plans)]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            hashed = set(expected) | {Path(w) for w in verified}
            done = list(pool.map(lambda i: _finish(plans[i], scheme, python, counts.get(plans[i].wheel, 0),
                                                   plans[i].wheel not in hashed or plans[i].wheel not in record_checked,
                                                   later[i]), range(len(plans))))
        checkpoint("install.files-done")
        if transaction is None:
            txn.commit()
    except BaseException as exc:
        if on_abort is not None:
            on_abort()
        if linking is not None:
            linking.discard()
        reporter.finish(task)
        if txn.active:
            txn.rollback()
        if isinstance(exc, OSError):
            raise UnpackError(f"could not write {exc.filename or 'a file'}: {exc.strerror or exc}",
                              hint="check free space and permissions of the environment, then re-run `wh install`") from exc
        raise
    reporter.finish(task)
    return done


def _linking(root: Path | None, plans: Sequence[WheelPlan], expected: Mapping[Path, str],
             scheme: Mapping[str, str]) -> Linking | None:
    """The batch's use of the extraction cache at ``root``: None when there is none, or it is on another
    filesystem than the environment (a hardlink cannot cross one), or no wheel has a known sha256."""
    if root is None or not expected:
        return None
    cache = LinkCache(root)
    if not cache.usable_for(scheme["platlib"]):
        return None
    keys = {p.wheel: expected[p.wheel] for p in plans if p.wheel in expected}
    found = {w: m for w, m in ((w, cache.lookup(sha)) for w, sha in keys.items()) if m is not None}
    return Linking(cache, found, keys)


def prune_removed(plans: Sequence[WheelPlan], scheme: Mapping[str, str]) -> None:
    """Just before the commit: folders only the replaced versions used are empty now."""
    prune_empty_dirs([o for p in plans for o in p.removed], set(scheme.values()))
