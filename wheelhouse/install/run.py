"""Install wheelhouses on the box: find them, check them, verify them, install them, record them.

Order matters and is the point of this module: nothing in the environment
changes until (1) the wheelhouse's target matches the receiving interpreter
(asked of that interpreter: its implementation, version, abi, its own tag list,
its glibc), (2) the wheelhouse together with what that interpreter already
imports satisfies every requirement (``closure``), and (3) every file to install
is there with the size the ``pylock.toml`` says, and, for an environment
that holds distributions or for pip, its sha256. Into a new venv, wh's unpacker
checks each wheel's sha256 while it extracts it (no separate pass, spread over
all cores); nothing is committed before every hash matched, and one that does
not rolls the whole transaction back. Installation itself has no index and no
network: wh's own parallel unpacker (``wheel``), or pip with ``--no-index
--no-deps`` on the verified files.

One run at a time per target (``wheelhouse.folderlock``), and each run is a transaction
(``transaction``): an unfinished one left by a crash is rolled back first; the
files, the wheelhouse's patches and ``installed.json`` (written last) either
all land or the environment is left exactly as it was (a venv this run created
is removed). Then links and an activation snippet in the venv.

The steps live in their own modules: ``wheelhouses`` (finding them), ``checks``
(choosing files, the target check, hashes), ``closure``, ``transaction``,
``wheelhouse.folderlock``, ``state``, ``bytecode``; this one runs them in order.

Nothing here imports anything that can open a socket.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Sequence

from wheelhouse.env.activation import write_activation
from wheelhouse.env.links import LinkChange, apply_links, plan_links, record_path
from wheelhouse.errors import UsageError, WhError
from wheelhouse.faults import checkpoint
from wheelhouse.lock import LockedFile, WheelhouseNotFound
from wheelhouse.progress import NullReporter, Reporter
from wheelhouse.recordfile import build_digest, read_installed_record, read_record, record_checked
from wheelhouse.target.interpreter import Interpreter, create_venv, inspect_interpreter, venv_python
from .bytecode import ByteCompiler
from .pycs import Precompiled
from .assumed import check_assumed
from .checks import check_target, fitting_wheelhouses, select_files, verify_files
from .digests import record_installed
from .closure import (Dist, MissingRequirements, check_closure, installed_view, requested_with_extras, rewrites_of,
                      wheel_dist)
from .errors import InstallFailed, PatchesUnavailable
from .installed import canonical_name, drop_bytecode, find_installed
from .options import InstallOptions
from .state import read_install_state, state_path, write_install_state
from wheelhouse.folderlock import FolderLock, lockable
from .transaction import Transaction, recover
from .wheel import InstalledDist, default_jobs, install_wheels, plan_batch
from .wheel.archive import read_wheel
from .wheel.archive import FileIdentity
from .wheel.plan import forget_ahead, plan_ahead
from .wheelhouses import Wheelhouse, check_unambiguous, load_wheelhouse

__all__ = ["InstallReport", "NoTarget", "require_target", "install_wheelhouses", "recorded_wheelhouses"]


@dataclass(frozen=True)
class InstallReport:
    interpreter: str
    venv: str | None
    wheelhouses: tuple[str, ...]
    installed: tuple[InstalledDist, ...]
    skipped: tuple[str, ...]
    links: tuple[LinkChange, ...] = ()
    patches: tuple[str, ...] = ()
    compiled: int = 0
    precompiled: int = 0  # of ``compiled``: written from the bytecode the wheelhouse carries
    state_file: str | None = None
    activation: str | None = None
    seconds: float = 0.0
    installer: str = "wh"
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "interpreter": self.interpreter,
            "venv": self.venv,
            "wheelhouses": list(self.wheelhouses),
            "installer": self.installer,
            "installed": [{"name": canonical_name(d.name), "version": d.version, "wheel": d.wheel, "replaced": d.replaced,
                           "linked_files": d.linked, "members_hashed": d.members_hashed,
                           "kept": [k.to_json() for k in d.kept]} for d in self.installed],
            "linked": {"wheels": sum(1 for d in self.installed if d.linked),
                       "files": sum(d.linked for d in self.installed)},
            "skipped": list(self.skipped),
            "links": [c.to_json() for c in self.links],
            "patches": list(self.patches),
            "compiled": self.compiled,
            "precompiled": self.precompiled,
            "state_file": self.state_file,
            "activation": self.activation,
            "seconds": round(self.seconds, 3),
            "notes": list(self.notes),
        }


class NoTarget(UsageError):
    code = "no-target"


def require_target(venv: Path | None, python: str | None) -> None:
    """Raise NoTarget unless a venv or an interpreter is named: wh's own environment is never a default."""
    if venv is None and not python:
        raise NoTarget("no target: pass --venv PATH (created if missing) or --python PATH",
                       hint="`wh install WHEELHOUSE --venv /opt/venv`; to install into wh's own environment, "
                            f"name it: `wh install WHEELHOUSE --python {sys.executable}`")


def recorded_wheelhouses(venv: Path | None, python: str | None, names: Sequence[str]) -> list[str]:
    """The wheelhouses ``names`` were installed from into the target (``installed.json``), for a reinstall
    that names no wheelhouse; each one once, in the order of ``names``."""
    exe = str(venv_python(Path(venv).absolute())) if venv is not None else python
    if venv is not None and not Path(exe).exists():
        raise UsageError(f"--venv {venv} has no interpreter: nothing is installed there to reinstall",
                         hint=f"install it first: `wh install WHEELHOUSE --venv {venv}`")
    packages = read_install_state(inspect_interpreter(exe).platlib).get("packages", {})
    target = f"--venv {venv}" if venv is not None else f"--python {python}"
    out: list[str] = []
    for name in names:
        rec = packages.get(canonical_name(name))
        if not rec or not rec.get("wheelhouse"):
            raise UsageError(f"{name} was not installed into {exe} by wh: no wheelhouse is recorded for it",
                             hint=f"name the wheelhouse: `wh install WHEELHOUSE --reinstall {name} {target}`")
        if rec["wheelhouse"] not in out:
            out.append(rec["wheelhouse"])
    return out


def _venv_root(exe: str) -> str | None:
    """The venv ``exe`` belongs to (``bin/python`` below a ``pyvenv.cfg``), real path; None for an installation."""
    root = Path(exe).absolute().parent.parent
    return os.path.realpath(root) if (root / "pyvenv.cfg").is_file() else None


def _own_base() -> str:
    """The interpreter wh's own venv was made from (its ``home``): a venv made with it knows nothing of wh's."""
    return getattr(sys, "_base_executable", None) or sys.executable


def venv_base(venv: Path | None, python: str | None, system_site_packages: bool) -> tuple[str | None, str | None]:
    """The interpreter to make a NEW ``venv`` with, and a note that says which, when it is not ``python`` as given.

    The engine's venv is the engine's (issue 29.10): it never depends on wh's own environment. With
    ``--system-site-packages`` it sees the packages of the interpreter it is made with: ``--python``, else the
    ``python3`` on PATH that is not wh's own. Made from wh's own venv interpreter, it would have seen wh's
    packages (a parent-venv ``.pth``), and a wheelhouse's rich or click at wh's version been skipped as "already
    there" and loaded from wh's folder: its base interpreter is taken instead.
    """
    if venv is None or venv_python(Path(venv).absolute()).exists() or not system_site_packages:
        return python, None
    own = os.path.realpath(sys.prefix) if sys.prefix != sys.base_prefix else None
    if python is None:
        for name in ("python3", "python"):
            for folder in os.environ.get("PATH", "").split(os.pathsep):
                exe = os.path.join(folder or ".", name)
                if os.path.isfile(exe) and os.access(exe, os.X_OK) and (own is None or _venv_root(exe) != own):
                    return exe, (f"the venv is made with {exe} (the {name} on PATH, not wh's own interpreter): "
                                 "--system-site-packages gives it that interpreter's packages; name another with --python")
        return _own_base(), (f"the venv is made with {_own_base()} (no python3 on PATH but wh's own): "
                             "--system-site-packages gives it that interpreter's packages, not wh's")
    if own is not None and _venv_root(python) == own:
        return _own_base(), (f"--python {python} is wh's own environment: the venv is made with its base "
                             f"{_own_base()} and does not see wh's packages")
    return python, None


# ---- the steps ------------------------------------------------------------------------------------


def _private_copy(path: Path, folder: Path, expected: Mapping[Path, str] | None,
                  verified: Mapping[Path, FileIdentity | None] | None) -> Path:
    """``path`` copied into ``folder`` (only this run writes there) from the file that was verified: hashed against
    the lock's sha256 here (``expected``), or, where verify_files hashed it, the same file still (its identity then
    and now: a wheel replaced or written to since is refused)."""
    import hashlib

    from wheelhouse.fileidentity import file_identity

    dest = folder / path.name
    digest = hashlib.sha256()
    with open(path, "rb") as src:
        want = (verified or {}).get(path)
        if want is not None and file_identity(os.fstat(src.fileno())) != want:
            raise InstallFailed(f"{path.name} changed after its sha256 was checked (replaced or written to while wh "
                                "ran); nothing was installed",
                                hint="make the wheelhouse read-only to others (or copy it), then re-run `wh install`")
        with open(dest, "wb") as out:
            for block in iter(lambda: src.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
        if want is not None and file_identity(os.fstat(src.fileno())) != want:  # written to while copied
            raise InstallFailed(f"{path.name} was written to while wh copied it; nothing was installed",
                                hint="make the wheelhouse read-only to others (or copy it), then re-run `wh install`")
    sha = (expected or {}).get(path)
    if sha is not None and digest.hexdigest() != sha:
        raise InstallFailed(f"{path.name}: sha256 is {digest.hexdigest()}, the lock records {sha}; nothing was "
                            "installed", hint="re-stage the wheelhouse (`wh stage`), or run `wh verify` on it")
    return dest


def _pip_install(interp: Interpreter, paths: Sequence[Path], compile: bool) -> None:
    if interp.has_pip:
        cmd = [interp.executable, "-m", "pip"]
    else:
        cmd = [sys.executable, "-m", "pip", "--python", interp.executable]
    cmd += ["install", "--no-index", "--no-deps", "--disable-pip-version-check", "--no-input",
            "--compile" if compile else "--no-compile"]
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull)
    proc = subprocess.run(cmd + [str(p) for p in paths], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise InstallFailed(f"pip could not install the verified wheels (exit {proc.returncode})",
                            hint="re-run with the default installer: `wh install --installer wh`",
                            detail=(proc.stdout[-3000:] + proc.stderr[-3000:]))


def _apply_patches(houses: Sequence[Wheelhouse], interp: Interpreter, reporter: Reporter) -> list[str]:
    """Apply each wheelhouse's patch specs (``patches/**.toml``; the payload files beside them are data).

    All or none: when one fails, the ones this run applied are reverted before the error goes up
    (and the caller rolls back the wheels).
    """
    from wheelhouse import patch  # checked to exist before anything changed

    applied, done = [], []
    try:
        for h in houses:
            for rel in h.patches:
                if not rel.endswith(".toml"):
                    continue
                outcome = patch.apply_patch(h.path / rel, python=interp.executable)
                if outcome.state == "applied":
                    done.append((h.path / rel, outcome.file))
                # Reported by the caller, after the list of what was installed (not in the middle of the install).
                applied.append(f"patch {rel}: {outcome.state}" + (f" ({outcome.reason})" if outcome.reason else ""))
    except BaseException:
        for spec, file in reversed(done):
            patch.revert_patch(spec, python=interp.executable)
            # apply byte-compiled the payload: a .pyc of the same size and second would pass for the original
            drop_bytecode(file)
            try:
                os.rmdir(os.path.join(os.path.dirname(file), "__pycache__"))
            except OSError:
                pass
        raise
    return applied


def _read_ahead(houses: Sequence[Wheelhouse]) -> list[Future]:
    """Read every listed wheel's listing and small text members in the background (``wheel.archive``
    remembers them), while the receiving interpreter is asked about itself, the venv is made, and so
    on: the requirements check and planning then find them read. Reading only: nothing is written,
    and a failure here is left for the check that names it (the same read, raised there)."""
    paths = list(dict.fromkeys(h.path / f.path for h in houses for f in h.files))
    if not paths:
        return []
    pool = ThreadPoolExecutor(max_workers=min(2, len(paths)), thread_name_prefix="wh-read-ahead")

    def quiet(path: Path) -> None:
        try:
            read_wheel(path)
        except Exception:
            pass

    futures = [pool.submit(quiet, p) for p in paths]
    pool.shutdown(wait=False)
    return futures


def _receiving_exe(venv: Path | None, python: str | None) -> tuple[str | None, bool]:
    """The interpreter to check against, and whether its environment exists yet (a venv to create does not:
    its base's facts and tags stand for it, so a refused wheelhouse creates nothing)."""
    if venv is not None and venv_python(venv).exists():
        return str(venv_python(venv)), True
    return python, venv is None


def _in_background(name: str, call: Callable[[], object]) -> Future:
    """``call()`` in a daemon thread (a run refused before the answer is needed does not wait for it at exit)."""
    future: Future = Future()

    def run() -> None:
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(call())
            except BaseException as exc:
                future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _ask_ahead(venv: Path | None, python: str | None) -> tuple[str | None, Future] | None:
    """For a venv still to be made: ask its base interpreter about itself in the background (a subprocess,
    ~0.1 s) while the wheelhouse is checked; ``_receiving`` uses the answer only when, once the target is
    locked, the venv is still to be made. An existing environment is asked only once it is locked (another
    run may be changing what it imports: a .pth, a parent venv's folders)."""
    if venv is None or venv_python(Path(venv).absolute()).exists():
        return None
    return python, _in_background("wh-ask-ahead", lambda: inspect_interpreter(python))


def _receiving(venv: Path | None, python: str | None,
               asked: tuple[str | None, Future] | None = None) -> tuple[Interpreter, bool]:
    exe, existing = _receiving_exe(venv, python)
    if asked is not None and asked[0] == exe and not existing:
        return asked[1].result(), existing  # its failure is raised here, as asking now would raise it
    return inspect_interpreter(exe), existing


def _holds_no_distribution(interp: Interpreter) -> bool:
    """Whether the environment's own site folders hold no installed distribution (a venv just made)."""
    for d in interp.site_dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        if any(n.endswith((".dist-info", ".egg-info", ".egg-link")) for n in names):
            return False
    return True


def _recover(interp: Interpreter) -> list[str]:
    """Roll back what a killed run left (the caller holds the target lock); a note says so."""
    found = recover(interp.platlib, interp.scheme())
    return [f"rolled back an unfinished install: {found.describe()}"] if found is not None else []


def _plan(houses: Sequence[Wheelhouse], interp: Interpreter, only: set[str] | None, existing: bool,
          system_site_packages: bool, reinstall: bool | frozenset[str] = False
          ) -> tuple[list, list, list, list[str], list[str]]:
    """Files chosen for ``interp`` (target checked), those to install, those already there, and notes.

    ``reinstall``: these names (True: every chosen one) are installed again even when their version is
    there: a damaged install (a truncated ``.so``, a file that no longer matches RECORD) is replaced whole."""
    houses, notes = fitting_wheelhouses(houses, interp)
    check_unambiguous(houses)
    chosen = select_files(houses, interp, only)
    check_target(houses, chosen, interp)
    state = read_install_state(interp.platlib) if existing else {"packages": {}}
    # What the receiving environment already imports: its own site folders, plus the base's with
    # --system-site-packages (the image's torch). The same version there counts as installed, so it is
    # not shadowed by a second copy.
    visible = interp.visible_site_dirs if (existing or system_site_packages) else ()
    todo, skipped = [], []
    own = {os.path.normpath(d) for d in interp.site_dirs}
    for h, f in chosen:
        # In the environment's own site folders only a complete install counts (METADATA and RECORD: a
        # copy another tool was killed writing does not); a base's dist-packages may lack RECORD.
        installed = [(d, v) for d, v in (find_installed(visible, f.name) if visible else [])
                     if os.path.normpath(d.parent) not in own or ((d / "RECORD").is_file() and (d / "METADATA").is_file())]
        rec = state["packages"].get(canonical_name(f.name))
        again = reinstall is True or (reinstall and canonical_name(f.name) in reinstall)
        if not again and any(v == f.version for _, v in installed) and (rec is None or rec.get("sha256") == f.sha256):
            other = _another_build(h, f, [d for d, v in installed if v == f.version and os.path.normpath(d.parent) in own],
                                   rec)
            if other is None:
                skipped.append(f"{canonical_name(f.name)}=={f.version}")
                continue
            notes.append(f"{f.name} {f.version} is installed, but {other}: installed again from {f.filename}")
        todo.append((h, f))
    return list(houses), chosen, todo, skipped, notes


def _builds(interp: Interpreter, chosen, dists: Sequence[InstalledDist]) -> dict[str, str | None]:
    """``build_digest`` of the copy of each chosen distribution the environment now imports: the one this install
    wrote (``dists``), else the one already there at the locked version (the site folders listed for those only)."""
    written = {canonical_name(d.name): Path(d.dist_info) for d in dists if d.dist_info}  # (pip's: not named)
    out: dict[str, str | None] = {}
    for _h, f in chosen:
        key = canonical_name(f.name)
        copy = written.get(key) or next(
            (d for d, v in find_installed(interp.visible_site_dirs, f.name) if v == f.version), None)
        out[key] = build_digest(read_installed_record(copy).rows) if copy is not None else None
    return out


def _another_build(h: Wheelhouse, f: LockedFile, own_copies: Sequence[Path], rec: Mapping[str, Any] | None) -> str | None:
    """Why the same version already in the environment's own site folders is not the locked wheel's build (None:
    it is, or it is a base's copy, which is never shadowed). Recorded by wh: its files are the build recorded then
    (a later ``pip install`` of another build rewrote them); not recorded (pip put it there): its RECORD lists the
    files the locked wheel's RECORD does."""
    for info in own_copies:
        have = build_digest(read_installed_record(info).rows)
        if rec is not None:
            if rec.get("build") and have != rec["build"]:
                return "its files are not the build wh installed (another install replaced them)"
            continue
        try:
            texts = read_wheel(h.path / f.path).texts
        except (WhError, OSError):
            return "the locked wheel could not be read to compare with it"
        record = next((v for k, v in texts.items() if k.count("/") == 1 and k.endswith(".dist-info/RECORD")), None)
        want = build_digest(read_record(record), wheel=True) if record is not None else None
        if have != want:  # (a wheel of metadata alone: None both, nothing to tell builds apart by)
            return "its files are another build's than the locked wheel's (not installed by wh)"
    return None


def _venv_scheme(base: Interpreter, venv: Path) -> dict[str, str] | None:
    """Where a venv made at ``venv`` from ``base`` will install (its base's layout under the venv; headers
    in the venv's include/site/), or None when ``base``'s folders are not all below its prefix (then no guess)."""
    prefix = os.path.normpath(base.prefix)
    out = {}
    for key, path in base.scheme().items():
        path = os.path.normpath(path)
        if key == "headers":
            out[key] = os.path.join(str(venv), "include", "site", "python" + ".".join(base.version.split(".")[:2]))
        elif path == prefix or path.startswith(prefix + os.sep):
            out[key] = str(venv) + path[len(prefix):]
        else:
            return None
    return out


def _create_planning_ahead(venv: Path, python: str | None, system_site_packages: bool, base: Interpreter,
                           paths: Sequence[Path]) -> Interpreter:
    """Make the venv; while its subprocess runs, plan the wheels for the folders it will most likely have
    (``plan_ahead``: reading only). Plans for another scheme than the venv's real one are dropped."""
    guess = _venv_scheme(base, venv) if paths else None
    ahead = None
    if guess is not None:
        ahead = threading.Thread(target=plan_ahead, args=(list(paths), guess), name="wh-plan-ahead", daemon=True)
        ahead.start()
    try:
        interp = create_venv(venv, python=python, system_site_packages=system_site_packages, base=base)
    finally:
        if ahead is not None:
            ahead.join()
    if guess is not None and {k: os.path.normpath(v) for k, v in guess.items()} != \
            {k: os.path.normpath(v) for k, v in interp.scheme().items()}:
        forget_ahead()
    return interp


def _check_requirements(todo: Sequence[tuple[Wheelhouse, LockedFile]], interp: Interpreter, existing: bool,
                        system_site_packages: bool, listed: Future | None = None) -> None:
    """Refuse before any write when the install would leave a requirement unmet (see ``closure``).

    ``listed``: ``installed_view(interp.executable)`` started by the caller once the target was locked and
    recovered (nothing the caller does in between writes to it)."""
    view: dict[str, Dist] = {}
    if existing or system_site_packages:
        view = listed.result() if listed is not None else installed_view(interp.executable)
    incoming = [wheel_dist(h.path / f.path) for h, f in todo]
    houses = {id(h): h for h, _ in todo}.values()  # the wheelhouses' overrides and exclusions hold here too
    excluded, overrides = rewrites_of(h.meta for h in houses)
    check_closure(view, incoming, interp.target, excluded=excluded, overrides=overrides,
                  requested=requested_with_extras(h.meta for h in houses))


def _unpack(paths: Sequence[Path], interp: Interpreter, txn: Transaction, options: InstallOptions,
            reporter: Reporter, expected: dict[Path, str] | None = None, pycs: Precompiled | None = None,
            verified: Mapping[Path, FileIdentity | None] | None = None,
            record_checked: Collection[Path] = ()) -> tuple[list[InstalledDist], int]:
    """The verified files into the environment, inside ``txn``; returns what was installed and compiled.

    ``options.jobs`` is settled (a number). ``pycs``: bytecode the wheelhouse carries; a module it covers
    gets its .pyc written from there by a compile worker, the others are compiled."""
    installer, compile, jobs, link_cache = options.installer, options.compile, options.jobs, options.link_cache
    if installer == "pip":
        plans = plan_batch(paths, interp.scheme(), jobs)  # pip writes these paths: journal them first
        txn.begin([q for p in plans for q in (*p.removed, *p.written_paths())])
        import tempfile

        with tempfile.TemporaryDirectory(prefix="wh-pip-") as tmp:
            # pip reads each wheel by its path again: it gets a private copy of the bytes that were verified
            _pip_install(interp, [_private_copy(p, Path(tmp), expected, verified) for p in paths], compile)
        return [InstalledDist(canonical_name(p.name), p.version, p.wheel.name, "", 0, p.replaced) for p in plans], 0
    compiler = (ByteCompiler(interp.executable, min(jobs, os.cpu_count() or 2),
                             resolver=pycs.lookup if pycs is not None else None) if compile else None)
    try:
        try:
            dists = install_wheels(paths, interp.scheme(), interp.executable, jobs=jobs, reporter=reporter,
                                   transaction=txn, on_written=compiler.submit if compiler else None,
                                   on_abort=compiler.abort if compiler else None, expected=expected,
                                   # not expected: verify_files hashed them (those very files)
                                   verified=() if expected else (verified if verified is not None else paths),
                                   link_cache=link_cache, record_checked=record_checked)
        except BaseException:
            if compiler is not None:
                compiler.abort()
            raise
        # Launchers and .data scripts are not modules; everything importable was streamed.
        compiled = compiler.finish() if compiler is not None else 0
    finally:
        if pycs is not None:
            pycs.close()  # the private copies of the packs: the workers are done with them
    if pycs is not None and compiler is not None:
        pycs.written = compiler.precompiled
    return dists, compiled


def _transact(paths, interp, chosen, houses, options: InstallOptions, *, reporter, expected=None, pycs=None,
              verified=None, record_checked=()):
    """Files, patches, then installed.json, as one transaction: all of it lands, or none of it.

    ``expected``: the lock's sha256 of each wheel, checked while unpacking (a wrong one rolls it all back).
    """
    txn = Transaction(interp.platlib, [p.name for p in paths], extra=[str(state_path(interp.platlib))])
    # Read before the transaction begins: it moves the record aside with everything it will write.
    previous = read_install_state(interp.platlib)
    try:
        dists, compiled = (_unpack(paths, interp, txn, options, reporter, expected, pycs, verified, record_checked)
                           if paths else ([], 0))
        applied = (_apply_patches(houses, interp, reporter) if options.patches and any(h.patches for h in houses)
                   else [])
        checkpoint("install.before-state")
        # Written beside it and renamed into place by the commit (while the journal is still there, so a kill
        # in between rolls it back too): until then installed.json names what is installed, not the new set.
        # (The pending name is one clean_leftovers sweeps after a kill.)
        state_file = state_path(interp.platlib)
        pending = write_install_state(interp.platlib, chosen, houses, previous,
                                      to=state_file.with_name(f".installed.json.{txn.id}.tmp"),
                                      builds=_builds(interp, chosen, dists))
        checkpoint("install.before-commit")
        if txn.active:
            txn.before_commit.append(lambda: txn.put(pending, state_file))
            txn.commit()
        else:
            os.replace(pending, state_file)
    except BaseException as exc:
        if "pending" in locals():
            Path(pending).unlink(missing_ok=True)
        if txn.active:
            txn.rollback()
        if isinstance(exc, OSError):  # a full disk while writing the record: one line, environment as it was
            raise InstallFailed(f"could not write {exc.filename or interp.platlib}: {exc.strerror or exc}; "
                                "the environment was left as it was",
                                hint="free space or fix permissions there, then re-run `wh install`") from exc
        raise
    return dists, compiled, applied, state_file


def install_wheelhouses(wheelhouses: Sequence[Path], options: InstallOptions, *,
                        reporter: Reporter | None = None) -> InstallReport:
    """Check, verify, then install ``wheelhouses`` as ``options`` say, into ``options.venv`` (created if
    missing) or ``options.python``'s environment (see ``InstallOptions``)."""
    require_target(options.venv, options.python)
    python, base_note = venv_base(options.venv, options.python, options.system_site_packages)
    reinstall = (options.reinstall if isinstance(options.reinstall, bool)
                 else frozenset(canonical_name(n) for n in options.reinstall))
    only = options.only
    if reinstall and reinstall is not True:
        only = frozenset(only or ()) | reinstall
    options = replace(options, python=python, only=only, reinstall=reinstall)
    reporter = reporter or NullReporter()
    started = time.monotonic()
    houses = [load_wheelhouse(p) for p in wheelhouses]
    # Reading only, in the background, while the checks below run: nothing is written before they pass.
    asked = _ask_ahead(options.venv, options.python)
    reading = _read_ahead(houses) if options.only is None else []
    try:
        report = _install_all(houses, options, reporter=reporter, reading=reading, asked=asked)
    finally:
        for f in reading:  # refused early: stop reading what will not be installed
            f.cancel()
    if base_note:
        report = replace(report, notes=(base_note, *report.notes))
    return replace(report, seconds=time.monotonic() - started)


def _install_all(houses, options: InstallOptions, *, reporter, reading, asked) -> InstallReport:
    from wheelhouse.carry.verify import require_intact  # `wh verify`'s checks, before anything; hashes: verify_files
    from wheelhouse.install import closure
    # closure: install's rule, carry is below
    require_intact([h.path for h in houses], patches=options.patches, closure=closure)
    if not houses:
        raise WheelhouseNotFound("no wheelhouse given", hint="pass one: `wh install PATH --venv VENV`")
    venv = Path(options.venv).absolute() if options.venv is not None else None
    options = replace(options, venv=venv)
    if venv is not None and venv.exists() and not venv.is_dir():
        raise UsageError(f"--venv {venv} is a file, not a folder", hint="pass a new or empty folder, or a venv")
    with ExitStack() as held:
        try:
            venv_lock = held.enter_context(FolderLock(venv, create=True, on_wait=reporter.note)) if venv else None
        except OSError as exc:
            raise UsageError(f"--venv {venv}: cannot make or open that folder ({exc.strerror or exc})",
                             hint="pass a folder in a writable place: `wh install WHEELHOUSE --venv PATH`") from exc
        # Only what this run makes is removed on failure: a venv folder missing or empty once the lock is
        # ours (another run may have made it while we waited). A user's folder with files is never emptied.
        fresh = venv_lock is not None and (venv_lock.created or not any(venv.iterdir()))
        try:
            return _install_locked(houses, held, options, reporter=reporter, reading=reading, asked=asked)
        except BaseException:
            if fresh:  # no half-made venv: the next run would take it for a finished one
                _remove_venv(venv, made_folder=venv_lock.created)
            raise


def _remove_venv(venv: Path, made_folder: bool) -> None:
    if made_folder:
        shutil.rmtree(venv, ignore_errors=True)
        return
    for child in venv.iterdir():  # the folder was there, empty: leave it empty
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _install_locked(houses, held: ExitStack, options: InstallOptions, *, reporter, reading=(),
                    asked=None) -> InstallReport:
    options = replace(options, jobs=options.jobs or default_jobs())
    venv, python, system_site_packages = options.venv, options.python, options.system_site_packages
    installer, compile, jobs, patches = options.installer, options.compile, options.jobs, options.patches
    interp, existing = _receiving(venv, python, asked)
    notes: list[str] = []
    if existing:
        held.enter_context(FolderLock(lockable(interp.platlib), on_wait=reporter.note))
        notes += _recover(interp)
    # What the target imports, asked now (a subprocess) while the checks below only read: it is locked and
    # recovered, and nothing is written to it before the requirements check takes the answer.
    listed = (_in_background("wh-list-installed", lambda: installed_view(interp.executable))
              if existing or system_site_packages else None)
    houses, chosen, todo, skipped, target_notes = _plan(houses, interp, options.only, existing, system_site_packages,
                                                        options.reinstall)
    notes += target_notes
    notes += check_assumed(houses, interp, existing=existing, system_site_packages=system_site_packages,
                           incoming=[(f.name, f.version) for _, f in todo])
    # Into a venv this run creates, or one with no distribution installed yet (nothing there for a running
    # process to import), wh's unpacker hashes each wheel while it extracts it (spread over all cores) and
    # a wrong one rolls the whole transaction back. pip cannot check the lock's sha256, and an environment
    # with distributions may be in use while files land: there every byte is hashed before the first write.
    folded = installer == "wh" and (not existing or _holds_no_distribution(interp))
    verified = verify_files(todo, jobs, reporter, hashes=not folded)
    paths = list(verified)
    wait(reading)  # the read-ahead has read (or failed to read) every wheel: nothing is read twice
    try:
        _check_requirements(todo, interp, existing, system_site_packages, listed)
    except BaseException as exc:
        if folded and isinstance(exc, Exception):  # a damaged wheel is named by its hash, not its METADATA
            verify_files(todo, jobs, reporter)
        if not isinstance(exc, MissingRequirements) or not options.allow_missing:
            raise
        notes += [f"unmet, installed anyway (--allow-missing): {line}" for line in (exc.detail or "").splitlines()]
    if patches and any(h.patches for h in houses) and importlib.util.find_spec("wheelhouse.patch") is None:
        raise PatchesUnavailable("the wheelhouse lists patches but this wh has no patch module",
                                 hint="install without them (`wh install --no-patches`) or upgrade wh")
    if not existing:
        interp = _create_planning_ahead(venv, python, system_site_packages, interp, paths if installer == "wh" else ())
        held.enter_context(FolderLock(lockable(interp.platlib), on_wait=reporter.note))
    expected = {h.path / f.path: f.sha256 for h, f in todo} if folded else {}
    # Every wheel's sha256 is checked (while unpacking or before): a pack bound to it fits its files.
    pycs = (Precompiled.start(todo, interp, interp.scheme()) if compile and installer == "wh" and options.precompiled
            else None)
    try:
        dists, compiled, applied, state_file = _transact(paths, interp, chosen, houses, options,
                                                         reporter=reporter, expected=expected,
                                                         pycs=pycs, verified=verified,
                                                         # RECORD rows copied unchecked only where the stage checked them
                                                         record_checked=[h.path / f.path for h, f in todo
                                                                         if f.sha256 in record_checked(h.meta)])
    finally:
        forget_ahead()  # a plan made ahead that was not taken (an error before planning) is not kept
    if pycs is not None:
        notes += pycs.finished()
    if installer == "wh" and dists:
        # What was just written, by RECORD's digest: the doctor's stack:files check hashes none of it again.
        record_installed(d.dist_info for d in dists if d.dist_info)
    link_changes: list[LinkChange] = []
    if options.links:
        link_changes = apply_links(plan_links([Path(d) for d in interp.visible_site_dirs]), record_path(interp.platlib))
    activation = str(write_activation(Path(venv), interp)) if venv is not None else None
    return InstallReport(
        interpreter=interp.executable, venv=str(venv) if venv is not None else None,
        wheelhouses=tuple(str(h.path) for h in houses), installed=tuple(dists), skipped=tuple(skipped),
        links=tuple(link_changes), patches=tuple(applied), compiled=compiled,
        precompiled=pycs.written if pycs is not None else 0, state_file=str(state_file),
        activation=activation, installer=installer, notes=tuple(notes),
    )
