"""``wh install --dry-run``: what an install would do, and the checks it would run, with nothing written.

The plan is the install's own (``_plan``: the wheelhouses that fit the receiving interpreter, the files
chosen for it, those already there), then each check the install runs before its first write, run here
too, each answered instead of raised: the target, every file against pylock.toml (size and sha256), the
image's assumed distributions, every requirement of the result. Per distribution the action is ``add``
(not installed), ``upgrade`` / ``downgrade`` (another version installed), ``reinstall`` (this version,
another file), ``keep`` (this version is there) or ``refused`` (a requirement of it would be unmet). No venv is made, no lock taken, no file written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

from packaging.version import InvalidVersion, Version

from wheelhouse.errors import WhError
from wheelhouse.progress import NullReporter, Reporter
from .installed import canonical_name, find_installed
from .options import InstallOptions

__all__ = ["PlannedDist", "PlanCheck", "InstallPlan", "plan_install"]

Action = Literal["add", "upgrade", "downgrade", "reinstall", "keep", "refused"]


@dataclass(frozen=True)
class PlannedDist:
    name: str
    version: str
    action: Action
    installed: str | None = None  # the version there now
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "action": self.action, "installed": self.installed,
                "why": self.why or None}


@dataclass(frozen=True)
class PlanCheck:
    check: str  # target | files | assumed | requirements
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class InstallPlan:
    interpreter: str
    venv: str | None
    wheelhouses: tuple[str, ...]
    dists: tuple[PlannedDist, ...]
    checks: tuple[PlanCheck, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": True, "ok": self.ok, "interpreter": self.interpreter, "venv": self.venv,
                "wheelhouses": list(self.wheelhouses), "distributions": [d.to_json() for d in self.dists],
                "checks": [c.to_json() for c in self.checks], "notes": list(self.notes)}


def plan_install(wheelhouses: Sequence[Path], options: InstallOptions, *,
                 reporter: Reporter | None = None) -> InstallPlan:
    """The plan of ``install_wheelhouses`` with the same arguments, every check run, nothing written (of the
    options, the target, ``only`` and ``jobs`` are read)."""
    from wheelhouse.carry.verify import require_intact
    from wheelhouse.install import closure
    from .closure import MissingRequirements
    from .run import _check_requirements, _plan, _receiving, require_target
    from .assumed import check_assumed
    from .checks import verify_files
    from .wheel import default_jobs
    from .wheelhouses import load_wheelhouse

    venv, python, system_site_packages = options.venv, options.python, options.system_site_packages
    require_target(venv, python)
    reporter = reporter or NullReporter()
    houses = [load_wheelhouse(p) for p in wheelhouses]
    require_intact([h.path for h in houses], closure=closure)
    venv = Path(venv).absolute() if venv is not None else None
    interp, existing = _receiving(venv, python)
    checks: list[PlanCheck] = []
    houses, chosen, todo, skipped, notes = _plan(houses, interp, options.only, existing, system_site_packages)
    checks.append(PlanCheck("target", True, f"{len(houses)} wheelhouse(s) staged for {interp.describe()}"))
    checks.append(_answer("files", lambda: verify_files(todo, options.jobs or default_jobs(), reporter),
                          f"{len(todo)} wheel(s) to install match pylock.toml (size and sha256)"))
    checks.append(_answer("assumed", lambda: check_assumed(houses, interp, existing=existing,
                                                           system_site_packages=system_site_packages,
                                                           incoming=[(f.name, f.version) for _, f in todo]),
                          "the image provides what the wheelhouse assumes"))
    unmet: dict[str, str] = {}
    try:
        if not checks[1].ok:  # the requirements are read from those files: not judged from damaged ones
            checks.append(PlanCheck("requirements", False, "not checked: the files did not match pylock.toml"))
        else:
            _check_requirements(todo, interp, existing, system_site_packages)
            checks.append(PlanCheck("requirements", True, "every requirement of the result is met"))
    except MissingRequirements as exc:
        checks.append(PlanCheck("requirements", False, exc.detail or exc.message))
        for line in (exc.detail or "").splitlines():  # "missing: WHO needs REQ (why)"
            if line.startswith("missing: "):
                who = canonical_name(line[len("missing: "):].split(" needs ")[0])
                unmet.setdefault(who, line[len("missing: "):])
    visible = interp.visible_site_dirs if (existing or system_site_packages) else ()
    kept = set(skipped)
    dists = [_action(f.name, f.version, visible, f"{canonical_name(f.name)}=={f.version}" in kept,
                     unmet.get(canonical_name(f.name))) for _, f in chosen]
    return InstallPlan(interp.executable, str(venv) if venv is not None else None,
                       tuple(str(h.path) for h in houses), tuple(sorted(dists, key=lambda d: d.name)), tuple(checks),
                       tuple(notes))


def _answer(name: str, run, ok_detail: str) -> PlanCheck:
    try:
        run()
    except WhError as exc:
        return PlanCheck(name, False, exc.message)
    return PlanCheck(name, True, ok_detail)


def _action(name: str, version: str, visible: Sequence[str], kept: bool, unmet: str | None) -> PlannedDist:
    there = [v for _, v in find_installed(visible, name)] if visible else []
    now = there[0] if there else None
    key = canonical_name(name)
    if unmet:
        return PlannedDist(key, version, "refused", now, unmet)
    if kept:
        return PlannedDist(key, version, "keep", now)
    if now is None:
        return PlannedDist(key, version, "add")
    try:
        order = (Version(version) > Version(now)) - (Version(version) < Version(now))
    except InvalidVersion:
        order = (version > now) - (version < now)
    action: Action = "upgrade" if order > 0 else "downgrade" if order < 0 else "reinstall"
    where = os.path.dirname(str(find_installed(visible, name)[0][0]))
    return PlannedDist(key, version, action, now, f"{now} installed in {where}"
                       + (" (another file than the wheelhouse's)" if action == "reinstall" else ""))
