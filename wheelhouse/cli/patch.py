"""`wh patch apply|verify|revert SPEC`: one-file patches with preconditions, backup and rollback."""

from __future__ import annotations

import click

from wheelhouse.errors import EXIT_FAIL, WhError
from wheelhouse.patch import PatchOutcome, apply_patch, revert_patch, verify_patch
from ._ui import emit_json

__all__ = ["patch"]

_python = click.option("--python", "python", envvar="WH_PYTHON", help="Interpreter whose installed distribution is patched; default: this one.")
_json = click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON on stdout.")


def _report(ui, outcome: PatchOutcome, as_json: bool, spec: str, python: str | None) -> None:
    if as_json:
        emit_json(outcome.to_json())
    line = f"{outcome.name}: {outcome.state}"
    if outcome.file:
        line += f"  {outcome.file}"
    ui.info(line)
    if outcome.sha256:
        ui.info(f"  sha256 {outcome.sha256}")
    if outcome.reason:
        ui.info(f"  {outcome.reason}")
    v = outcome.verification
    if v is not None:
        if not v.ran:
            ui.info(f"  verification {v.call}: FAILED\n{v.output[-1500:]}")
        elif v.compared:
            ui.info(f"  verification {v.call}() = {v.value!r} (expected {v.expected!r}): {'ok' if v.matched else 'MISMATCH'}")
        else:
            ui.info(f"  verification {v.call}() = {v.value!r} (not compared: the conditions do not hold)")
    if not outcome.ok:
        raise _not_ok(outcome, spec, python)


class PatchNotOk(WhError):
    """The patch is not in the state asked for (exit 1): said as an error with the next command."""

    code = "patch-not-ok"
    exit_code = EXIT_FAIL


def _not_ok(outcome: PatchOutcome, spec: str, python: str | None) -> PatchNotOk:
    """The `error:` and `hint:` for an outcome that is not what the user wants."""
    py = f" --python {python}" if python else ""
    v = outcome.verification
    if outcome.state == "not-installed":
        return PatchNotOk(f"patch {outcome.name}: {outcome.reason}",
                          hint=f"install it first (`wh install WHEELHOUSE{py or ' --venv VENV'}`), "
                               f"then `wh patch apply {spec}{py}`")
    if outcome.state == "drifted":
        return PatchNotOk(f"patch {outcome.name}: {outcome.file} is neither the expected original nor the payload "
                          f"(sha256 {outcome.sha256})",
                          hint="it was changed by other means: reinstall the distribution (`wh install ... --only "
                               f"NAME`), then `wh patch apply {spec}{py}`")
    if outcome.state == "unpatched":
        return PatchNotOk(f"patch {outcome.name} is not applied to {outcome.file}",
                          hint=f"apply it: `wh patch apply {spec}{py}`")
    if v is not None and not v.ok:
        what = "did not run" if not v.ran else f"returned {v.value!r}, expected {v.expected!r}"
        return PatchNotOk(f"patch {outcome.name}: verification {v.call} {what}",
                          hint=f"the patched file does not behave as the spec says: `wh patch revert {spec}{py}` "
                               "restores the original")
    return PatchNotOk(f"patch {outcome.name}: {outcome.state}" + (f" ({outcome.reason})" if outcome.reason else ""),
                      hint=f"check it with `wh patch verify {spec}{py}`")


@click.group("patch")
def patch() -> None:
    """Apply, verify or revert a one-file patch of an installed distribution.

    SPEC is a patch spec TOML (a path, or a bundled name such as
    freetoken-fp8-rowwise.toml; wheelhouses keep theirs in patches/).

    An apply is journaled (intent first, record last): if it is killed (e.g. during
    verification), the next apply, verify or revert of that patch rolls it back from
    its backup first and says so; an apply then starts over.

    Exit codes: 0 done (applied, already patched, skipped, reverted; verify: patched,
    or unpatched where the conditions do not hold); 1 drifted, rolled back, or
    verification failed; 2 bad spec or arguments.
    """


@patch.command("apply")
@click.argument("spec")
@_python
@click.option("--force", is_flag=True, help="Apply even when the spec's conditions (GPU sm, versions) do not hold.")
@_json
@click.pass_obj
def apply_cmd(ui, spec, python, force, as_json) -> None:
    """Replace the file with the payload: only over an expected 'before' file, with backup and rollback."""
    _report(ui, apply_patch(spec, python, force=force), as_json, spec, python)


@patch.command("verify")
@click.argument("spec")
@_python
@_json
@click.pass_obj
def verify_cmd(ui, spec, python, as_json) -> None:
    """Say patched / unpatched / drifted, and run the verification call."""
    _report(ui, verify_patch(spec, python), as_json, spec, python)


@patch.command("revert")
@click.argument("spec")
@_python
@_json
@click.pass_obj
def revert_cmd(ui, spec, python, as_json) -> None:
    """Restore the bytes backed up by `wh patch apply`."""
    _report(ui, revert_patch(spec, python), as_json, spec, python)
