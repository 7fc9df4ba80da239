"""Install wheelhouses on the box: find them, check them, verify them, install them, record them.

Order matters and is the point of this module: nothing in the environment
changes until (1) the wheelhouse's target matches the receiving interpreter
(asked of that interpreter: its implementation, version, abi, its own tag list,
its glibc), and (2) every file to install has the sha256 (and size) the
``pylock.toml`` says. Installation itself has no index and no network: wh's own
parallel unpacker (``unpack``), or pip with ``--no-index --no-deps`` on the
verified files. Then: optional bytecode, the install state, links, patches,
and an activation snippet in the venv.

The steps live in their own modules: ``wheelhouses`` (finding them),
``install_checks`` (choosing files, the target check, hashes), ``install_state``,
``bytecode``, ``activation``; this one runs them in order.

Nothing here imports anything that can open a socket.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

from wheelhouse.env.activation import write_activation
from .bytecode import ByteCompiler
from .checks import check_target, fitting_wheelhouses, select_files, verify_files
from .errors import AmbiguousWheelhouse, HashMismatch, InstallFailed, PatchesUnavailable, TargetMismatch
from .state import read_install_state, state_path, write_install_state
from .installed import canonical_name, find_installed
from wheelhouse.target.interpreter import Interpreter, create_venv, inspect_interpreter, venv_python
from wheelhouse.env.links import LinkChange, apply_links, plan_links, record_path
from wheelhouse.lock import LockedFile, WheelhouseNotFound
from wheelhouse.progress import NullReporter, Reporter
from .wheel import InstalledDist, install_wheels
from .wheelhouses import Wheelhouse, check_unambiguous, find_wheelhouses, load_wheelhouse

__all__ = [
    "Wheelhouse",
    "InstallReport",
    "TargetMismatch",
    "HashMismatch",
    "AmbiguousWheelhouse",
    "InstallFailed",
    "PatchesUnavailable",
    "find_wheelhouses",
    "load_wheelhouse",
    "install_wheelhouses",
    "read_install_state",
    "state_path",
    "check_target",
    "verify_files",
    "write_activation",
]


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
            "installed": [{"name": canonical_name(d.name), "version": d.version, "wheel": d.wheel, "replaced": d.replaced}
                          for d in self.installed],
            "skipped": list(self.skipped),
            "links": [c.to_json() for c in self.links],
            "patches": list(self.patches),
            "compiled": self.compiled,
            "state_file": self.state_file,
            "activation": self.activation,
            "seconds": round(self.seconds, 3),
            "notes": list(self.notes),
        }


# ---- doing ----------------------------------------------------------------------------------------


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
    """Apply each wheelhouse's patch specs (``patches/**.toml``; the payload files beside them are data)."""
    from wheelhouse import patch  # checked to exist before anything changed

    applied = []
    for h in houses:
        for rel in h.patches:
            if not rel.endswith(".toml"):
                continue
            outcome = patch.apply_patch(h.path / rel, python=interp.executable)
            line = f"patch {rel}: {outcome.state}" + (f" ({outcome.reason})" if outcome.reason else "")
            reporter.note(line)
            applied.append(line)
    return applied


def install_wheelhouses(
    wheelhouses: Sequence[Path],
    *,
    python: str | None = None,
    venv: Path | None = None,
    system_site_packages: bool = False,
    only: set[str] | None = None,
    installer: Literal["wh", "pip"] = "wh",
    compile: bool = False,
    jobs: int | None = None,
    links: bool = True,
    patches: bool = True,
    reporter: Reporter | None = None,
) -> InstallReport:
    """Check, verify, then install ``wheelhouses`` into ``venv`` (created if missing) or ``python``'s environment."""
    reporter = reporter or NullReporter()
    started = time.monotonic()
    venv = Path(venv).absolute() if venv is not None else None
    jobs = jobs or min(32, (os.cpu_count() or 2) * 2)
    houses = [load_wheelhouse(p) for p in wheelhouses]
    if not houses:
        raise WheelhouseNotFound("no wheelhouse given", hint="pass one: `wh install PATH`")

    # 1. Facts of the receiving interpreter. A venv gets its base's tags, so the
    #    check runs before the venv exists: a refused wheelhouse creates nothing.
    created_venv = False
    if venv is not None and venv_python(venv).exists():
        interp = inspect_interpreter(venv_python(venv))
    else:
        interp = inspect_interpreter(python)
    # A mount can hold one wheelhouse per target (cp311 and cp312, say): keep the ones for this one.
    houses, target_notes = fitting_wheelhouses(houses, interp)
    check_unambiguous(houses)
    chosen = select_files(houses, interp, only)
    check_target(houses, chosen, interp)

    existing = venv is None or venv_python(venv).exists()
    state = read_install_state(interp.platlib) if existing else {"packages": {}}
    # What the receiving environment already imports: its own site folders, plus the base's
    # with --system-site-packages (the image's torch). The same version there counts as
    # installed, so it is not shadowed by a second copy.
    if existing:
        visible: tuple[str, ...] = interp.visible_site_dirs
    else:
        visible = interp.visible_site_dirs if system_site_packages else ()
    todo: list[tuple[Wheelhouse, LockedFile]] = []
    skipped: list[str] = []
    for h, f in chosen:
        key = canonical_name(f.name)
        installed = find_installed(visible, f.name) if visible else []
        rec = state["packages"].get(key)
        if any(v == f.version for _, v in installed) and (rec is None or rec.get("sha256") == f.sha256):
            skipped.append(f"{key}=={f.version}")
        else:
            todo.append((h, f))

    # 2. Every byte verified before the first one is written.
    paths = verify_files(todo, jobs, reporter)
    if patches and any(h.patches for h in houses) and importlib.util.find_spec("wheelhouse.patch") is None:
        raise PatchesUnavailable("the wheelhouse lists patches but this wh has no patch module",
                                 hint="install without them (`wh install --no-patches`) or upgrade wh")

    # 3. Change things.
    if venv is not None and not venv_python(venv).exists():
        interp = create_venv(venv, python=python, system_site_packages=system_site_packages, base=interp)
        created_venv = True
    notes: list[str] = list(target_notes)
    installed_dists: list[InstalledDist] = []
    compiled = 0
    try:
        if todo:
            if installer == "pip":
                _pip_install(interp, paths, compile)
                installed_dists = [InstalledDist(canonical_name(f.name), f.version, f.filename, "", 0)
                                   for _, f in todo]
            else:
                compiler = ByteCompiler(interp.executable, min(jobs, os.cpu_count() or 2)) if compile else None
                try:
                    installed_dists = install_wheels(
                        paths, interp.scheme(), interp.executable, jobs=jobs, reporter=reporter,
                        on_written=compiler.submit if compiler else None,
                        on_abort=compiler.abort if compiler else None,
                    )
                except BaseException:
                    if compiler is not None:
                        compiler.abort()
                    raise
                if compiler is not None:
                    # Launchers and .data scripts are not modules; everything importable was streamed.
                    compiled = compiler.finish()
        state_file = write_install_state(interp.platlib, chosen, houses)
    except BaseException:
        if created_venv:
            shutil.rmtree(venv, ignore_errors=True)
        raise
    link_changes: list[LinkChange] = []
    if links:
        link_changes = apply_links(plan_links([Path(d) for d in interp.visible_site_dirs]), record_path(interp.platlib))
    applied_patches: list[str] = []
    if patches and any(h.patches for h in houses):
        applied_patches = _apply_patches(houses, interp, reporter)
    activation = None
    if venv is not None:
        activation = str(write_activation(Path(venv), interp))
    return InstallReport(
        interpreter=interp.executable,
        venv=str(venv) if venv is not None else None,
        wheelhouses=tuple(str(h.path) for h in houses),
        installed=tuple(installed_dists),
        skipped=tuple(skipped),
        links=tuple(link_changes),
        patches=tuple(applied_patches),
        compiled=compiled,
        state_file=str(state_file),
        activation=activation,
        seconds=time.monotonic() - started,
        installer=installer,
        notes=tuple(notes),
    )

