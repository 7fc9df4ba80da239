"""install: no install into this interpreter's site folders was left half-done.

``wh install`` is a transaction: an intent journal is written before the first
file and removed after the record (``wheelhouse.install.transaction``). A journal
whose run is gone means files of a killed install are on disk; whatever the other
checks find, the environment is neither what it was nor what the lock says, so
it is a fail until the next ``wh install`` rolls it back.

Any installer can be killed, or a clean-up go too far: a ``.dist-info`` without a
RECORD (installers write it last), a RECORD that cannot be read, or one that lists
files no longer on disk (byte code aside) is an install that is not what it says.
The other checks read RECORD to know what to load, so what it cannot vouch for
would pass unseen: ``install:records`` names it (a warning for what wh did not
install, once wh has installed here, as for ``deps``).
"""

from __future__ import annotations

import os

from wheelhouse.doctor.report import CheckResult
from wheelhouse.target.interpreter import distinct_dirs
from wheelhouse.install.state import unfinished_transaction
from packaging.utils import canonicalize_name

from .context import DoctorContext, installed_by_wh, reinstall_command

__all__ = ["GROUP", "CHECKS", "run"]

GROUP = "install"
CHECKS = {"install:transaction": "no `wh install` into the interpreter's site folders was left unfinished",
          "install:records": "every distribution's metadata and RECORD can be read, and every file RECORD lists "
                             "(byte code aside) is on disk",
          "install:scripts": "every console/GUI script a distribution declares has a launcher whose interpreter is "
                             "there, and the module its entry point names is installed"}


def run(ctx: DoctorContext) -> list[CheckResult]:
    out = [_records(ctx)] if ctx.wants("install:records") else []
    out += [_scripts(ctx)] if ctx.wants("install:scripts") else []
    return ([_transaction(ctx)] if ctx.wants("install:transaction") else []) + out


def _scripts(ctx: DoctorContext) -> CheckResult:
    """A command a user or the engine's recipe runs (``vllm serve``) that cannot start: a fail where it is the
    program of the manifest's ``[serve] command``, else a warning ``--strict`` counts (nothing in the stack runs
    it that wh knows of)."""
    title = CHECKS["install:scripts"]
    serve = ctx.manifest.serve if ctx.manifest else None
    program = os.path.basename(serve.command[0]) if serve and serve.command else None
    broken, count = [], 0  # (script, its distribution, the line)
    for rec in ctx.facts.get("distributions") or ():
        for name, value, problem in (rec.get("scripts") or ()) if isinstance(rec, dict) else ():
            count += 1
            if problem:
                broken.append((str(name), str(rec.get("name")),
                               f"{rec.get('name')} {rec.get('version')}: {name} ({value}): {problem}"))
    if not broken:
        return CheckResult("install:scripts", title, "ok", f"{count} script(s): every launcher and entry point is there")
    lines = [line for _, _, line in broken]
    served = any(name == program for name, _, _ in broken)
    return CheckResult("install:scripts", title, "fail" if served else "warn",
                       "\n".join(lines) + (f"\nthe manifest's [serve] command runs {program}" if served else ""),
                       hint=("this environment was moved or copied from where it was made: make it again here "
                             "(a new venv, then `wh install`)" if any("is not there (a venv moved" in line
                                                                       for line in lines)
                             else f"reinstall what is named: `{reinstall_command(ctx, *sorted({d for _, d, _ in broken}))}`"),
                       data={"broken": lines, "serve_program": program,
                             "reinstall": sorted({canonicalize_name(d) for _, d, _ in broken})})  # --fix rewrites them


# Installers that always write a RECORD, last (and INSTALLER before it): a folder of theirs without one is an
# install that did not finish. No INSTALLER at all is one too (it is written before RECORD).
_WRITES_RECORD = frozenset({"", "pip", "uv", "wh", "installer", "poetry", "pdm", "pipenv", "hatch", "pex"})


def _damage(rec: dict) -> str | None:
    """What is wrong with one facts record of a distribution (None: nothing)."""
    if rec.get("error"):
        return f"{rec.get('name')}: its metadata could not be read: {rec['error']}"
    who = f"{rec.get('name')} {rec.get('version')}"
    if rec.get("record") == "none":
        if str(rec.get("installer") or "").lower() not in _WRITES_RECORD:
            return None  # a system package manager's folder (INSTALLER: rpm, conda, ...): it owns the files
        return f"{who}: no RECORD in {rec.get('dist_info')} (installers write it last: an install that did not finish)"
    if rec.get("record") == "unreadable":
        return f"{who}: its RECORD cannot be read: {rec.get('record_error')}"
    if rec.get("record") == "empty":  # a RECORD lists itself: empty is a crash before its bytes reached the disk
        return f"{who}: its RECORD in {rec.get('dist_info')} lists nothing (a RECORD lists at least itself: cut short)"
    out = []
    # Presence only: whether a file's bytes (size and sha256) are RECORD's is stack:files' verdict, with the
    # digest cache and the code/data rule; judged here too, a changed CA bundle was two fails.
    for key, what in (("missing", "its RECORD lists are not on disk"),):
        n = int(rec.get(f"{key}_count") or 0)
        if n:
            shown = list(rec.get(f"{key}_files") or [])
            more = f", and {n - len(shown)} more" if n > len(shown) else ""
            out.append(f"{who}: {n} file(s) {what}: {', '.join(shown)}{more}")
    return "; ".join(out) or None


def _two_copies(duplicates) -> list[str]:
    """Two ``.dist-info`` folders of one name in one site folder (an interrupted upgrade, a merged image layer; the
    facts probe's ``duplicates``): ``importlib.metadata`` and the checks answer with whichever the folder lists
    first, an order that differs between filesystems, so one image gets different verdicts on different nodes."""
    return [f"{d.get('name')}: a second copy of its metadata in {d.get('location')}: "
            f"{os.path.basename(str(d.get('dist_info')))} ({d.get('version')}) beside "
            f"{os.path.basename(str(d.get('first')))}: which one is read depends on the order the folder lists them "
            "(it differs between filesystems): remove the stale one"
            for d in duplicates if isinstance(d, dict)]


def _records(ctx: DoctorContext) -> CheckResult:
    title = CHECKS["install:records"]
    records = [r for r in ctx.facts.get("distributions") or () if isinstance(r, dict)]
    by_wh = installed_by_wh(ctx)
    fails, warns, names = _two_copies(ctx.facts.get("duplicates") or ()), [], []
    for rec in records:
        why = _damage(rec)
        if why is None:
            continue
        key = canonicalize_name(str(rec.get("name") or ""))
        (fails if rec.get("error") or not by_wh or key in by_wh else warns).append(why)
        names.append(str(rec.get("name") or key))
    if not fails and not warns:
        return CheckResult("install:records", title, "ok",
                           f"{len(records)} distribution(s): metadata read, every file their RECORD lists is on disk")
    lines = fails + [f"{w} (not installed by wh: a warning)" for w in warns]
    return CheckResult("install:records", title, "fail" if fails else "warn", "\n".join(lines),
                       hint=f"reinstall what is named: `{reinstall_command(ctx, *names)}`",
                       data={"damaged": lines, "reinstall": [canonicalize_name(n) for n in names]})


def _transaction(ctx: DoctorContext) -> CheckResult:
    title = CHECKS["install:transaction"]
    sites = distinct_dirs([*(p for p in (ctx.facts.get("platlib"), ctx.facts.get("purelib")) if p),
                           *map(str, ctx.site_dirs)])  # (lib64 -> lib: one folder, one journal, named once)
    found = [(site, u) for site in sites if (u := unfinished_transaction(site)) is not None]
    if not found:
        return CheckResult("install:transaction", title, "ok", f"no unfinished install in {len(sites)} site folder(s)")
    running = any(u.running for _, u in found)
    evidence = "; ".join(f"unfinished install in {site}: {u.describe()} (journal {u.journal})" for site, u in found)
    hint = ("wait for the running `wh install` to finish, then run `wh doctor` again" if running else
            f"run `wh install` again (e.g. `wh install WHEELHOUSE --python {ctx.python}`) to roll it back")
    return CheckResult("install:transaction", title, "fail", evidence, hint=hint,
                       data={"unfinished": [{"site": site, "journal": u.journal, "pid": u.pid, "started": u.started,
                                             "wheels": list(u.wheels), "running": u.running} for site, u in found]})
