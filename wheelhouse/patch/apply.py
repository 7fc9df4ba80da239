"""One-file patches of an installed distribution that refuse to guess.

The spec (``wheelhouse.patch_spec``) names the file inside an installed
distribution, the sha256 it must have before, the payload that replaces it,
optional conditions on facts (``wheelhouse.patch_conditions``) and an optional
verification call. With no known "before" hash at all, apply refuses: a patch
never lands on a file nobody vouched for.

apply: drifted file -> PatchDrifted with both hashes, nothing changed; else a
journal: the intent first (``<site>/.wh/patches/<name>/intent.json``), a backup
(``<sha>.orig``), an atomic replace, ``py_compile`` and the verification in the
target interpreter, the record last (``record.json``); a byte-exact rollback on
any failure. Already patched is success.

A process killed mid-apply (kill -9 during verification) leaves the intent: the
next apply, verify or revert of that patch rolls the unfinished apply back from
its backup before anything else, and says so (an apply then starts over, so the
verification runs to the end). A revert killed after restoring the file is
finished by the next revert.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

from wheelhouse.atomic import write_atomic
from wheelhouse.datafile import read_bytes
from wheelhouse.digest import sha256_of
from wheelhouse.errors import UsageError
from wheelhouse.faults import checkpoint
from wheelhouse.script_answer import PRINT_ANSWER, read_answer
from .conditions import check_conditions, gather_facts
from .journal import (PatchDrifted, backup_name, intent_path, patch_dir, patch_lock, read_journal, recover_interrupted,
                      remove_patch_dir, write_source)
from .outcome import PatchOutcome, PatchRolledBack, PatchTargetMissing, PatchTargetSymlink, State, VerifyResult
from .spec import PatchSpec, PatchSpecError, PatchVerify, load_patch_spec

__all__ = ["apply_patch", "verify_patch", "revert_patch"]

_RESULT_MARK = "__WH_PATCH_RESULT__"


# --- the installed file ---------------------------------------------------------------------
_LOCATE = (
    "import json, sys, importlib.metadata as m\n"
    "try:\n    d = m.distribution(sys.argv[1])\n"
    "    answer = {'found': True, 'version': d.version, 'file': str(d.locate_file(sys.argv[2])),"
    " 'site': str(d.locate_file(''))}\n"
    "except m.PackageNotFoundError:\n    answer = {'found': False}\n"
    + PRINT_ANSWER + "\n"
)

_CALL = (
    "import importlib, json, sys\n"
    "mod, _, attr = sys.argv[1].partition(':')\n"
    "obj = importlib.import_module(mod)\n"
    "for part in attr.split('.'):\n    obj = getattr(obj, part)\n"
    "value = obj()\n"
    f"print('\\n{_RESULT_MARK}' + json.dumps(value, default=repr))\n"
)


def _locate(spec: PatchSpec, python: str | None) -> tuple[Path, Path] | None:
    try:
        proc = subprocess.run([python or sys.executable, "-c", _LOCATE, spec.distribution, spec.file], capture_output=True, text=True)
    except OSError as exc:  # missing or not executable
        raise UsageError(f"cannot run interpreter {python}: {exc.strerror}", hint="pass a working interpreter with --python") from exc
    if proc.returncode != 0:
        raise UsageError(f"cannot run {python or sys.executable}: {proc.stderr.strip()[-300:]}", hint="pass a working interpreter with --python")
    try:  # a sitecustomize may print before the script runs (wheelhouse.script_answer)
        info = read_answer(proc.stdout)
        found = bool(info["found"])
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{python or sys.executable} did not answer where {spec.distribution} is installed: "
                         f"{proc.stdout.strip()[-300:]!r}", hint="check the interpreter runs plain scripts") from exc
    if not found:
        return None
    return Path(info["file"]), Path(info["site"])


def _run_call(verify: PatchVerify, python: str | None, compare: bool) -> VerifyResult:
    env = {**os.environ, **verify.env}
    with tempfile.TemporaryDirectory(prefix="wh-verify-") as cwd:  # nothing local shadows the installed module
        try:
            proc = subprocess.run([python or sys.executable, "-c", _CALL, verify.call], capture_output=True, text=True,
                                  timeout=verify.timeout, cwd=cwd, env=env)
        except subprocess.TimeoutExpired as exc:
            return VerifyResult(verify.call, ran=False, expected=verify.expect, output=f"timed out after {exc.timeout:.0f}s")
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 or _RESULT_MARK not in proc.stdout:
        return VerifyResult(verify.call, ran=False, expected=verify.expect, output=out.strip())
    value = json.loads(proc.stdout.rsplit(_RESULT_MARK, 1)[1].strip())
    compared = compare and verify.has_expect
    return VerifyResult(verify.call, ran=True, value=value, expected=verify.expect, compared=compared,
                        matched=(value == verify.expect) if compared else None, output=out.strip())


def _prepare(spec_path, python, facts):
    spec = spec_path if isinstance(spec_path, PatchSpec) else load_patch_spec(spec_path)
    needed = [k for k in spec.when if k != "sm"]
    if facts is None:
        facts = gather_facts(python, needed)
    else:
        facts = dict(facts)
        missing = [k for k in needed if k not in facts]
        if missing:
            facts.update({k: v for k, v in gather_facts(python, missing).items() if k in missing})
    met, reasons = check_conditions(spec.when, facts)
    return spec, met, reasons


def _payload(spec: PatchSpec) -> tuple[bytes, str]:
    if not spec.payload.exists():
        raise PatchSpecError(f"payload {spec.payload} of patch {spec.name} does not exist",
                             hint="build it into the wheelhouse with `wh build RECIPE -o WHEELHOUSE`, or fix payload in the spec")
    data = read_bytes(spec.payload, what=f"payload of patch {spec.name}", error=PatchSpecError,
                      hint="fix payload in the spec (a regular file, relative to the spec)")
    actual = hashlib.sha256(data).hexdigest()
    if spec.payload_sha256 and actual != spec.payload_sha256:
        raise PatchSpecError(f"payload {spec.payload} has sha256 {actual}, the spec expects {spec.payload_sha256}",
                             hint="the payload was changed or replaced: rebuild it with `wh build`, or fix payload-sha256")
    return data, actual


def _interpreter(python: str | None) -> str:
    """``python`` as a path that works from any folder (the verify call runs in a temp folder)."""
    if not python:
        return sys.executable
    if os.sep in python:
        return os.path.abspath(python)
    return shutil.which(python) or python


def _joined(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


# --- the three verbs ----------------------------------------------------------------------
def apply_patch(spec_path, python: str | None = None, *, facts: Mapping[str, Any] | None = None, force: bool = False) -> PatchOutcome:
    """Apply one patch spec to the distribution installed for ``python``; see the module docstring."""
    python = _interpreter(python)
    spec, met, reasons = _prepare(spec_path, python, facts)
    if not met and not force:
        return PatchOutcome(name=spec.name, action="apply", state="skipped", reason="; ".join(reasons),
                            before_sha256=spec.before_sha256, payload_sha256=spec.payload_sha256, conditions_met=met)
    payload, payload_sha = _payload(spec)
    base = dict(name=spec.name, action="apply", before_sha256=spec.before_sha256, payload_sha256=payload_sha, conditions_met=met)
    located = _locate(spec, python)
    if located is None:
        raise PatchTargetMissing(f"{spec.distribution} is not installed for {python}",
                                 hint=f"install it first (`wh install`), then `wh patch apply {spec.path or spec.name}`")
    target, site = located
    if not target.is_file():
        raise PatchTargetMissing(f"{spec.distribution} has no file {spec.file} ({target})",
                                 hint="check file = ... in the spec against the installed distribution")
    if target.is_symlink():  # replacing the link leaves a copy in its place; no revert puts the link back
        raise PatchTargetSymlink(f"{target} is a symlink to {os.path.realpath(target)}; wh patches only the file itself",
                                 hint="patch the file it links to at its source (a checkout), or reinstall the distribution normally")
    with patch_lock(site):  # a second apply waits, then finds the payload (already-patched)
        return _apply_locked(spec, python, target, site, payload, payload_sha, met, reasons, base)


def _apply_locked(spec: PatchSpec, python: str, target: Path, site: Path, payload: bytes, payload_sha: str,
                  met: bool, reasons: list[str], base: dict[str, Any]) -> PatchOutcome:
    """The journaled replace of ``target``, under the site's patch lock."""
    pdir = patch_dir(site, spec.name)
    recovered = recover_interrupted(spec.name, spec.distribution, target, pdir)
    original = target.read_bytes()
    current = hashlib.sha256(original).hexdigest()
    base["file"] = str(target)
    if current == payload_sha:
        verification = _run_call(spec.verify, python, met) if spec.verify else None
        return PatchOutcome(state="already-patched", sha256=current, reason="the file already is the payload", verification=verification, **base)
    if not spec.before_sha256:
        raise PatchDrifted(
            f"patch {spec.name}: no expected before-sha256 is known for {target} (it has {current}); refusing to guess",
            hint=f"add before-sha256 = \"{current}\" to {spec.path} only if you have checked that file, or use the spec from a wheelhouse made by `wh build`",
        )
    if current not in spec.before_sha256:
        raise PatchDrifted(
            f"{target} has drifted: sha256 {current}, expected {' or '.join(spec.before_sha256)} (payload {payload_sha}); nothing changed",
            hint=f"the installed {spec.distribution} is not the version this patch is for: reinstall it (`wh install`) or update the spec",
        )
    backup = pdir / f"{current}.orig"
    record = pdir / "record.json"
    mode = target.stat().st_mode & 0o777
    existed = pdir.exists()
    # The journal: intent first (what is about to change and where its backup is), record last.
    write_atomic(intent_path(pdir), json.dumps({"name": spec.name, "file": str(target), "before_sha256": current,
                                            "after_sha256": payload_sha, "backup": backup.name, "mode": mode}) + "\n")
    write_atomic(backup, original, mode=0o644)

    def rollback(message: str, detail: str) -> PatchRolledBack:
        write_source(target, original, mode)
        if existed:
            for f in (backup, record, intent_path(pdir)):
                f.unlink(missing_ok=True)
        else:
            remove_patch_dir(pdir)
        return PatchRolledBack(f"patch {spec.name}: {message}; {target} restored (sha256 {current})",
                               hint="the payload does not work with this install: check the payload and the installed versions",
                               detail=detail)

    try:
        write_source(target, payload, mode)
        comp = subprocess.run([python, "-c", "import py_compile, sys; py_compile.compile(sys.argv[1], doraise=True)", str(target)],
                              capture_output=True, text=True)
        if comp.returncode != 0:
            raise rollback("the payload does not compile", (comp.stderr or comp.stdout).strip()[-3000:])
        checkpoint("patch.apply.verify")
        verification = _run_call(spec.verify, python, met) if spec.verify else None
        if verification and not verification.ran:
            raise rollback(f"verification {spec.verify.call} failed", verification.output[-3000:])
        if verification and verification.matched is False:
            raise rollback(f"verification {spec.verify.call} returned {verification.value!r}, expected {verification.expected!r}", verification.output[-3000:])
        write_atomic(record, json.dumps({"name": spec.name, "distribution": spec.distribution, "file": str(target),
                                         "before_sha256": current, "after_sha256": payload_sha, "backup": backup.name,
                                         "spec": str(spec.path), "applied_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                                        indent=2) + "\n")
        intent_path(pdir).unlink()
    except PatchRolledBack:
        raise
    except BaseException:
        rollback("interrupted", "")
        raise
    reason = _joined(recovered, "" if met else "forced: " + "; ".join(reasons))
    return PatchOutcome(state="applied", sha256=payload_sha, backup=str(backup), reason=reason, verification=verification, **base)


def verify_patch(spec_path, python: str | None = None, *, facts: Mapping[str, Any] | None = None) -> PatchOutcome:
    """patched / unpatched / drifted / not-installed, plus the verification call's result."""
    python = _interpreter(python)
    spec, met, reasons = _prepare(spec_path, python, facts)
    payload_sha = _payload(spec)[1] if spec.payload.exists() else spec.payload_sha256
    base = dict(name=spec.name, action="verify", before_sha256=spec.before_sha256, payload_sha256=payload_sha,
                conditions_met=met, reason="; ".join(reasons))
    located = _locate(spec, python)
    if located is None or not located[0].is_file():
        return PatchOutcome(state="not-installed", **{**base, "reason": f"{spec.distribution} or {spec.file} is not installed"})
    with patch_lock(located[1]):
        base["reason"] = _joined(recover_interrupted(spec.name, spec.distribution, located[0], patch_dir(located[1], spec.name)),
                                 base["reason"])
        current = sha256_of(located[0])
    if current == payload_sha:
        state: State = "patched"
    elif current in spec.before_sha256:
        state = "unpatched"
    else:
        state = "drifted"
    verification = _run_call(spec.verify, python, met) if spec.verify else None
    backup = patch_dir(located[1], spec.name) / f"{current}.orig"
    return PatchOutcome(state=state, file=str(located[0]), sha256=current, verification=verification,
                        backup=str(backup) if backup.exists() else None, **base)


def revert_patch(spec_path, python: str | None = None) -> PatchOutcome:
    """Put the backed-up bytes back; refuses when the file changed since it was patched."""
    python = _interpreter(python)
    spec = spec_path if isinstance(spec_path, PatchSpec) else load_patch_spec(spec_path)
    located = _locate(spec, python)
    if located is None or not located[0].is_file():
        raise PatchTargetMissing(f"{spec.distribution} ({spec.file}) is not installed for {python}",
                                 hint="nothing to revert")
    with patch_lock(located[1]):
        return _revert_locked(spec, *located)


def _revert_locked(spec: PatchSpec, target: Path, site: Path) -> PatchOutcome:
    pdir = patch_dir(site, spec.name)
    recovered = recover_interrupted(spec.name, spec.distribution, target, pdir)
    current = sha256_of(target)
    base = dict(name=spec.name, action="revert", file=str(target), before_sha256=spec.before_sha256, payload_sha256=spec.payload_sha256)
    record = pdir / "record.json"
    if not os.path.lexists(record):
        if current in spec.before_sha256 or recovered:
            return PatchOutcome(state="unpatched", sha256=current,
                                reason=_joined(recovered, "not patched; nothing to revert"), **base)
        raise PatchDrifted(f"no backup of {target} was recorded by `wh patch apply` (it has sha256 {current})",
                           hint=f"reinstall {spec.distribution} to get the original file back")
    rec = read_journal(record, spec.distribution)
    if current == rec.get("before_sha256") and current != rec.get("after_sha256"):
        # A revert restored the file and was stopped before it cleaned up: finish it.
        remove_patch_dir(pdir)
        return PatchOutcome(state="reverted", sha256=current, reason="finished an interrupted revert", **base)
    if current != rec.get("after_sha256"):
        raise PatchDrifted(f"{target} changed since it was patched: sha256 {current}, patched {rec.get('after_sha256')}; nothing changed",
                           hint=f"reinstall {spec.distribution} to get a known file back")
    backup = pdir / backup_name(rec, pdir)
    original = backup.read_bytes() if backup.is_file() else b""
    if hashlib.sha256(original).hexdigest() != rec.get("before_sha256"):
        raise PatchDrifted(f"backup {backup} does not match its recorded sha256 {rec.get('before_sha256')}", hint=f"reinstall {spec.distribution}")
    write_source(target, original, target.stat().st_mode & 0o777)
    checkpoint("patch.revert.restored")
    remove_patch_dir(pdir)
    return PatchOutcome(state="reverted", sha256=rec["before_sha256"], reason=f"restored from {backup.name}", **base)
