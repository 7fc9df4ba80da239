"""`wh doctor` and `wh drop`: executed probes, known-bug rules, a CI gate; uninstall what is broken."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from wheelhouse.errors import WhError
from ._options import FiniteFloatRange
from ._ui import check_writable, emit_json, plural, sigterm_as_interrupt, write_output

if TYPE_CHECKING:  # the doctor and rich load when the command runs, not for --help
    from wheelhouse.doctor.report import DoctorReport

__all__ = ["doctor", "drop", "compare"]

_LABEL = {"ok": ("OK", "green"), "warn": ("WARN", "yellow"), "fail": ("FAIL", "bold red"),
          "skip": ("skip", "dim"), "error": ("ERROR", "bold magenta"), "info": ("info", "cyan")}


def _common(fn):
    opts = [
        click.option("--python", "python", envvar="WH_PYTHON", metavar="PY",
                     help="Target interpreter to examine (default: the one running wh)."),
        click.option("--manifest", "manifest_path", metavar="FILE",
                     help="Stack manifest: [doctor] expectations, [[toolchain]] pins, [[drop]] entries."),
        click.option("--wheelhouse", callback=_wheelhouse_arg, metavar="SOURCE",
                     help="Wheelhouse whose facts (target, [doctor], [[toolchain]], [[drop]]) the doctor uses: a "
                          "folder, an archive or an oci:// reference (default: the install records)."),
        click.option("--jobs", "-j", type=click.IntRange(1, 256), help="Probe processes at once (default: CPU count)."),
        click.option("--timeout", type=FiniteFloatRange(0.1), default=60, show_default=True,
                     help="Seconds one probe (one import) may take before it is killed and failed."),
        click.option("--json", "as_json", is_flag=True, help="Write the report as JSON to stdout."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn




def _wheelhouse_arg(ctx, param, value):
    """A folder or an archive as a Path; an oci:// reference as it was written (a Path would fold its //)."""
    if not value:
        return None
    return value if value.startswith("oci://") else Path(value)


def _check_python(python: str | None, command: str) -> None:
    """A --python that does not exist is bad input (exit 2, as in install, env and links); the hint names ``command``."""
    import os
    import shutil

    from wheelhouse.target.interpreter import InterpreterError

    if not python:
        return
    exe = python if os.sep in python else (shutil.which(python) or python)  # a bare name, as a shell would run it
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        where = "does not exist or is not executable" if os.sep in python else "is not on PATH"
        raise InterpreterError(f"interpreter {python} {where}",
                               hint=f"pass the target interpreter: `{command} --python /path/to/venv/bin/python`")


def _manifest(path):
    if not path:
        return None
    from wheelhouse.manifest import load_manifest

    return load_manifest(path, read_files=False)  # the requirements files stay on the networked host


_EVIDENCE_LINES = 8  # lines of a fail/error's evidence shown without -v (--json always has all of it)


def _evidence(r, verbose: int) -> str:
    """What the table shows of ``r.evidence``: the first line, or for a fail/error the lines that say why; a
    warning ``--strict`` does not count (``r.strict`` False, whatever the check) says so."""
    lines = (r.evidence or "").splitlines()
    if r.verdict not in ("fail", "error"):
        first = lines[0] if lines else ""
        return f"{first} (not counted by --strict)" if r.verdict == "warn" and not r.strict else first
    if verbose > 0:
        return "\n".join(lines)
    # importlib's own frames say nothing about the package that broke; the frames after them do.
    lines = [ln for ln in lines if not ln.lstrip().startswith('File "<frozen importlib')]
    if len(lines) <= _EVIDENCE_LINES:
        return "\n".join(lines)
    more = len(lines) - _EVIDENCE_LINES + 1
    return "\n".join(lines[:_EVIDENCE_LINES - 1] + [f"... {more} more line(s): -v or --json show them"])


def _check_line(r, verbose: int) -> str:
    """One line for a CI log: verdict, id, the evidence's first (or -v: every) line, the hint."""
    label = _LABEL[r.verdict][0]
    shown = _evidence(r, verbose).splitlines()
    line = f"{label:5} {r.id}: {shown[0] if shown else ''}"
    if r.hint:
        line += f" (hint: {r.hint})"
    return "\n".join([line] + [f"      {x}" for x in shown[1:]]) if verbose > 0 else line


def _render(con, report: DoctorReport, verbose: int) -> None:
    """The report for people on ``con``: a table on a terminal, one line per check elsewhere (CI logs).

    Evidence, hints and titles are text, never rich markup: ``[/opt/lib]`` or ``[[toolchain]]`` are shown as written.
    """
    from rich.table import Table
    from rich.text import Text
    from wheelhouse.install.sharedfiles import describe_kept

    native_ok = [r for r in report.results if r.group == "native" and r.verdict == "ok"]
    shown = [r for r in report.results if verbose > 0 or r not in native_ok]
    native_note = (f"{plural(len(native_ok), 'distribution')} with extension modules: every top-level name and extension "
                   "module loaded in separate processes (-v lists them)")
    if not con.is_terminal:
        for r in shown:
            con.print(_check_line(r, verbose), markup=False, highlight=False, soft_wrap=True)
        if native_ok and verbose <= 0:
            con.print(f"OK    native ({len(native_ok)}): {native_note}", markup=False, highlight=False, soft_wrap=True)
    else:
        with_hints = any(r.hint for r in shown)  # no empty column taking half the width
        table = Table(title=Text(f"wh doctor: {report.python}"), show_lines=False, expand=False)
        table.add_column("verdict", no_wrap=True)
        table.add_column("check", no_wrap=True)
        table.add_column("evidence", overflow="fold")
        if with_hints:
            table.add_column("hint", overflow="fold")
        for r in shown:
            label, style = _LABEL[r.verdict]
            table.add_row(Text(label, style=style), Text(r.id), Text(_evidence(r, verbose)),
                          *([Text(r.hint or "")] if with_hints else []))
        if native_ok and verbose <= 0:
            table.add_row(Text("OK", style="green"), Text(f"native ({len(native_ok)})"), Text(native_note),
                          *([Text("")] if with_hints else []))
        con.print(table)
    c = report.counts()
    summary = ", ".join(f"{n} {v}" for v, n in c.items() if n)
    by_design = sum(1 for r in report.warnings if not r.strict)
    if by_design:  # the warnings whose line says "(not counted by --strict)"
        summary = summary.replace(f"{c['warn']} warn", f"{c['warn']} warn ({by_design} optional by design, not "
                                  "counted by --strict)", 1)
    con.print(f"{summary} in {report.seconds:.1f}s", markup=False, highlight=False)
    for f in report.fixes:
        if f.action == "not-dropped":
            con.print(f"not dropped: {f.what}: {f.reason}", markup=False, highlight=False)
        elif f.action == "not-repaired":
            con.print(f"not repaired: {f.what}: {f.reason}", markup=False, highlight=False)
        elif f.action == "reinstall":
            con.print(f"fixed: reinstalled {f.what} from the wheelhouse: {f.reason}", markup=False, highlight=False)
        elif f.action == "rollback":
            con.print(f"fixed: rolled back {f.what}", markup=False, highlight=False)
        elif f.action == "drop" and f.confirmed is False:
            con.print(f"dropped {f.what}, NOT confirmed: find_spec still finds {', '.join(f.still_found)}",
                      markup=False, highlight=False)
        else:
            con.print(f"fixed: {f.action} {f.what}", markup=False, highlight=False)
            if f.dependents:
                con.print(f"  required by {', '.join(f.dependents)}: they lose it", markup=False, highlight=False)
            if f.kept:
                con.print(f"  {describe_kept(f.kept)}", markup=False, highlight=False)


class _DoctorGroup(click.Group):
    """``wh doctor [OPTIONS]`` runs the doctor; ``wh doctor compare REPORT.json...`` compares nodes' reports."""

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[OPTIONS]")
        formatter.write_usage(ctx.command_path, "compare [OPTIONS] REPORT.json...", prefix="       ")


@click.group(cls=_DoctorGroup, invoke_without_command=True, subcommand_metavar="compare REPORT.json...")
@_common
@click.option("--check", "checks", multiple=True, metavar="ID",
              help="Run only checks whose id starts with ID (repeatable): native, native:numpy, rule:, gpu.")
@click.option("--list-checks", is_flag=True, help="List check ids and exit.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Also write a JUnit XML file (one testcase per check) for CI.")
@click.option("--strict", is_flag=True, help="Exit 2 when there are warnings (and no failures).")
@click.option("--fix", is_flag=True, help="Add missing soname links (`wh links --fix`), reinstall damaged installs "
                                          "and the owners of missing files from the wheelhouse (`wh install "
                                          "--reinstall`), drop only what cannot work in a correct install, then "
                                          "check again (docs/doctor.md#fix).")
@click.option("--include-forced", is_flag=True,
              help="With --fix: also drop manifest [[drop]] entries with force = true whose probe passed.")
@click.option("--include-requested", is_flag=True,
              help="With --fix: also drop what the wheelhouse requested (a stack requirement, or required by one).")
@click.option("--model", type=click.Path(file_okay=False, exists=True, path_type=Path), metavar="DIR",
              help="Checkpoint folder: TP divisibility and fit, from config.json and safetensors headers.")
@click.option("--tp", type=click.IntRange(1), help="Tensor-parallel size for --model (default: the GPU count).")
@click.option("--thorough", is_flag=True, help="Hash every installed file again (stack:files) and execute every probe "
                                               "again: reuse no digest and no verdict whose evidence is unchanged.")
@click.pass_context
def doctor(ctx, python, manifest_path, wheelhouse, jobs, timeout, as_json, checks, list_checks, junit, strict, fix,
           include_forced, include_requested, model, tp, thorough) -> None:
    """Run executed probes and known-bug rules against an interpreter; gate CI on the exit code.

    Every top-level name and every extension module of each native
    distribution is loaded in a separate process, every installed requirement
    is checked against what the interpreter imports, JIT libraries compile and
    launch a kernel, the loader's libcuda is dlopened: "available" means it ran.
    Off a terminal, one line per check. Exit codes: 0 nothing failed; 1 a check
    failed; 2 warnings only, with --strict; 3 the doctor itself could not run;
    130 interrupted (its probes are killed).

    `wh doctor compare reports/*.json` compares the --json reports of many
    nodes (see `wh doctor compare --help`).

    \b
    Example:
      wh doctor --python /opt/venv/bin/python --json --junit doctor.xml > report.json
    """
    if ctx.invoked_subcommand:
        _no_doctor_options_before(ctx)
        return
    ui = ctx.obj
    from wheelhouse.doctor import (apply_fixes, interrupted_report, list_checks as _list, roll_back_unfinished,
                                   run_doctor, with_fixes)

    if list_checks:
        rows = _list()
        if as_json:
            emit_json([{"id": i, "title": t} for i, t in rows])
        else:
            for i, t in rows:
                click.echo(f"{i:40} {t}")
        return
    _check_python(python, "wh doctor")
    if include_forced and not fix:
        raise click.UsageError("--include-forced needs --fix (doctor drops nothing without it)")
    if include_requested and not fix:
        raise click.UsageError("--include-requested needs --fix (doctor drops nothing without it)")
    if tp is not None and model is None:
        raise click.UsageError("--tp needs --model (the checkpoint whose heads it must divide)")
    if junit:
        check_writable("--junit", junit)
        _not_stdout(junit)
    manifest = _manifest(manifest_path)
    reporter = ui.reporter()
    kw = dict(manifest=manifest, wheelhouse=wheelhouse, checks=list(checks) or None, jobs=jobs, timeout=timeout,
              model=model, tp=tp, reporter=reporter, thorough=thorough)
    first, fixes = None, None
    try:
        with sigterm_as_interrupt():
            rolled = roll_back_unfinished(python) if fix else None  # what a killed install left, first
            report = first = run_doctor(python, **kw)
            if fix:
                fixes = [rolled] if rolled is not None else []
                fixes += apply_fixes(report, python, wheelhouse=wheelhouse, include_forced=include_forced,
                                     include_requested=include_requested, reporter=reporter)
                if any(f.changed for f in fixes):  # something changed: check again
                    report = run_doctor(python, **kw)
                report = with_fixes(report, fixes)
    except KeyboardInterrupt as exc:
        # Ctrl-C or a CI timeout's SIGTERM: what finished, and an error for the rest, still reach the JUnit and
        # the JSON (never green), so CI shows which check hung, not nothing or an earlier run's file. Exit 130.
        # Stopped in --fix's re-run, the report keeps what --fix did; stopped inside the fixes, the first run's
        # report is what finished. Stopped before any check ran: the groups the run would have run.
        done = getattr(exc, "report", None) or first or interrupted_report(
            python or sys.executable, list(checks) or list(manifest.doctor.checks if manifest else ()),
            model is not None)
        _write_reports(with_fixes(done, fixes) if fixes else done, junit, as_json, strict)
        raise
    finally:
        reporter.close()
    # The files CI reads first: a table that cannot be drawn must not cost the JUnit or the JSON.
    _write_reports(report, junit, as_json, strict)
    if as_json:
        if not ui.quiet:  # stdout has the JSON: the report for people goes to the log (stderr)
            _render(ui.console, report, ui.verbose)
    else:  # the report is the data asked for: stdout, even with -q
        _render(ui.out, report, ui.verbose)
    code = report.exit_code(strict)
    if code:
        sys.exit(code)


def _not_stdout(junit: Path) -> None:
    """``--junit F > F``: the JUnit would replace the file the shell opened for stdout; the report sent
    there (the JSON) would go to an unlinked file and be lost. Bad input, before any work."""
    import os

    from wheelhouse.errors import UsageError

    try:
        same = os.path.samestat(os.fstat(sys.stdout.fileno()), os.stat(junit))
    except (OSError, ValueError, AttributeError):  # no such file yet, or stdout is no file
        return
    if same:
        raise UsageError(f"--junit {junit} is the file stdout is redirected to: the JUnit would replace the report",
                         hint="write the JUnit file elsewhere, e.g. --junit doctor.xml")


def _write_reports(report: DoctorReport, junit: Path | None, as_json: bool, strict: bool) -> None:
    """The JUnit file, then the JSON; a JUnit that cannot be written (a full disk) does not cost the JSON:
    its error is raised once the JSON is out."""
    from wheelhouse.doctor.report import render_junit

    failed = None
    if junit:
        try:
            write_output("--junit", junit, render_junit(report), fault="doctor.junit")
        except WhError as exc:
            failed = exc
    if as_json:
        emit_json(report.to_json(strict))
    if failed is not None:
        raise failed


def _no_doctor_options_before(ctx: click.Context) -> None:
    """`wh doctor --json compare ...` would silently drop --json: the doctor's own options do not apply there."""
    # -v/-q (not passed to the command: they set the session's verbosity) are fine anywhere.
    given = [p.opts[0] for p in ctx.command.params
             if isinstance(p, click.Option) and p.expose_value
             and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError(f"{', '.join(given)} before `{ctx.invoked_subcommand}` is an option of `wh doctor` itself: "
                               f"put the compare options after it (`wh doctor {ctx.invoked_subcommand} --json ...`)")


@doctor.command("compare")
@click.argument("reports", nargs=-1, required=True, metavar="REPORT.json...")
@click.option("--json", "as_json", is_flag=True, help="Write the comparison as JSON to stdout.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Also write a JUnit XML file (one testcase per compared aspect; a difference is a failure).")
@click.option("--expect", type=click.IntRange(1), metavar="N",
              help="How many nodes there are: fewer (or more) reports than N is a failure, not a smaller fleet.")
@click.pass_obj
def compare(ui, reports, as_json, junit, expect) -> None:
    """Compare `wh doctor --json` reports from many nodes; print what differs between them.

    Compared: wh and Python versions, driver, CUDA, GPU model / sm / count /
    interconnect, installed distributions (versions, then file and wheel
    hashes), link checks and every check's verdict. One line per difference,
    the majority first, then the outliers (`numpy: 2.1.3 on node-a, node-b;
    2.2.0 on node-c`). Nodes are named by the report (WH_NODE_NAME,
    SLURMD_NODENAME, else the host name). Exit codes: 0 identical; 1 the
    nodes differ, or --expect N does not match the reports; 2 bad input (a
    file that is not a readable report is named; the others are still
    compared and the JSON and JUnit still written).

    \b
    Example (docs/fleet.md has the Slurm and Kubernetes recipes):
      srun --nodes=4 --ntasks-per-node=1 --output='reports/%N.json' --error='reports/%N.log' wh doctor --json
      wh doctor compare --expect 4 --junit compare.xml reports/*.json
    """
    from wheelhouse.doctor.compare import compare_reports, load_reports, render_junit as compare_junit, render_lines

    if junit:
        check_writable("--junit", junit)
        _not_stdout(junit)
        if any(Path(r).resolve() == Path(junit).resolve() for r in reports):
            from wheelhouse.errors import UsageError

            raise UsageError(f"--junit {junit} is one of the reports to compare: it would be overwritten",
                             hint="write the JUnit file elsewhere, e.g. --junit compare.xml")
    reporter = ui.reporter()
    try:
        nodes, bad = load_reports(reports, reporter=reporter)
    finally:
        reporter.close()
    result = compare_reports(nodes, bad, expected=expect)
    # The files CI reads first: written before anything is printed, whatever the inputs were.
    if junit:
        write_output("--junit", junit, compare_junit(result))
    if as_json:
        emit_json(result.to_json())
    from wheelhouse.errors import UsageError
    from ._ui import print_error

    for b in result.bad:
        print_error(UsageError(f"{b.file}: {b.reason}", hint=b.hint))
    show = ui.info if as_json else ui.data  # the lines are the data asked for, unless --json has them
    for line in render_lines(result):
        show(line)
    code = result.exit_code()
    if code:
        sys.exit(code)


@click.command()
@_common
@click.option("--dry-run", is_flag=True, help="Show what would be dropped; change nothing.")
@click.option("--restore", metavar="NAME", help="Reinstall a dropped distribution from --wheelhouse, else from its recorded wheelhouse.")
@click.option("--list", "list_", is_flag=True, help="List what was dropped from this interpreter.")
@click.option("--include-forced", is_flag=True,
              help="Also drop manifest [[drop]] entries with force = true whose probe passed (or did not run).")
@click.pass_obj
def drop(ui, python, manifest_path, wheelhouse, jobs, timeout, as_json, dry_run, restore, list_,
         include_forced) -> None:
    """Uninstall distributions whose executed probe failed (import or JIT); confirm find_spec is None; record it.

    Manifest [[drop]] entries with force = true whose probe passed are only
    reported; --include-forced drops them too (recorded as "forced by
    manifest"). `--restore NAME` reinstalls one offline from the wheelhouse it
    was installed from. Exit codes: 0 done (or nothing to drop); 1 a drop could not
    be confirmed; 2 bad input; 3 the probes could not run.
    """
    from wheelhouse.doctor.drop import FORCED_NOT_DROPPED, DropFailed, drop_distributions, forced_kept
    from wheelhouse.install.sharedfiles import describe_kept

    if restore and list_:
        raise click.UsageError("--restore and --list are exclusive")
    if include_forced and (restore or list_):
        raise click.UsageError(f"--include-forced applies to dropping, not to {'--restore' if restore else '--list'}")
    if dry_run and (restore or list_):
        raise click.UsageError(f"--dry-run applies to dropping, not to {'--restore' if restore else '--list'}")

    _check_python(python, f"wh drop --restore {restore}" if restore else "wh drop --list" if list_
                  else "wh drop --dry-run" if dry_run else "wh drop")
    if restore:
        return _restore(ui, python, restore, wheelhouse, as_json)
    if list_:
        return _list_drops(ui, python, as_json)
    from wheelhouse.doctor import run_doctor

    manifest = _manifest(manifest_path)
    reporter = ui.reporter()
    try:
        with sigterm_as_interrupt():
            report = run_doctor(python, manifest=manifest, wheelhouse=wheelhouse, checks=["native", "jit"],
                                jobs=jobs, timeout=timeout, reporter=reporter)
        from wheelhouse.doctor.repair import plan_repair
        from wheelhouse.target.interpreter import inspect_interpreter

        interp = inspect_interpreter(python or sys.executable)
        # The owner of a broken file, a missing requirement, a failing requirement, a shadowing copy: not drops.
        plan = plan_repair(report, interp, include_forced=include_forced, wheelhouse=wheelhouse)
        kept = [] if include_forced else forced_kept(report)
        records = drop_distributions(interp.executable, plan.drops, dry_run=dry_run, wheelhouse=wheelhouse,
                                     reporter=reporter)
    finally:
        reporter.close()
    verb = "would drop" if dry_run else "dropped"
    show = ui.data if dry_run and not as_json else ui.info  # --dry-run's plan is the data asked for: stdout
    for r in records:
        tag = " (--include-forced)" if r.forced else ""
        first = (r.evidence.splitlines() or [""])[0]
        show(f"{verb} {r.name} {r.version}{tag}: {r.reason}: {first}")
        if r.dependents:
            show(f"  required by {', '.join(r.dependents)}: they lose it")
        if r.kept:
            show(f"  {describe_kept(r.kept)}")
        if not dry_run:
            ui.info(f"  find_spec is None for {', '.join(r.modules)}: {'confirmed' if r.confirmed else 'NO: ' + ', '.join(r.still_found)}")
    for k in plan.kept:
        ui.info(f"not dropped: {k.distribution} {k.version}: {k.reason}")
    for p in kept:
        ui.info(f"kept {p.distribution} {p.version}: {FORCED_NOT_DROPPED}")
    names = ",".join(r.name for r in plan.reinstall)
    if names:  # `wh drop` uninstalls only; the repair is one command (`wh doctor --fix` runs it)
        ui.info(f"to repair: `wh install --reinstall {names} --python {interp.executable}` "
                f"({'; '.join(f'{r.name}: {r.reason}' for r in plan.reinstall)})")
    if not records and not plan.kept and not plan.reinstall:
        ui.info("nothing to drop: every executed probe passed")
    elif not records:
        ui.info("nothing to drop")
    if as_json:
        emit_json({"dry_run": dry_run, "dropped": [r.to_json() for r in records],
                   "not_dropped": [{"name": k.distribution, "version": k.version, "forced": False,
                                    "reason": k.reason, "check": k.check_id} for k in plan.kept]
                   + [{"name": p.distribution, "version": p.version, "modules": list(p.modules),
                       "forced": True, "reason": FORCED_NOT_DROPPED, "evidence": p.evidence} for p in kept],
                   "reinstall": [{"name": r.name, "reason": r.reason, "check": r.check_id} for r in plan.reinstall]})
    unconfirmed = [r.name for r in records if not dry_run and not r.confirmed]
    if unconfirmed:
        raise DropFailed(f"{', '.join(unconfirmed)} still found by find_spec after uninstalling",
                         hint="another copy is on sys.path (a second site dir or PYTHONPATH): remove it by hand")


def _restore(ui, python, name: str, wheelhouse, as_json: bool) -> None:
    """`wh drop --restore NAME`: reinstall it offline from its recorded (or the given) wheelhouse."""
    from wheelhouse.doctor.drop import restore_dropped

    reporter = ui.reporter()
    try:
        out = restore_dropped(python or sys.executable, name, wheelhouse=wheelhouse, reporter=reporter)
    finally:
        reporter.close()
    if out.already_installed:
        ui.info(f"{out.name} is installed again (not by wh drop --restore): removed from the drop record")
    else:
        ui.info(f"restored {out.name} {out.version or ''} from {out.wheelhouse}")
    if as_json:
        emit_json(out.to_json())


def _list_drops(ui, python, as_json: bool) -> None:
    """`wh drop --list`: what was dropped from this interpreter (entries installed again are noted and removed)."""
    from wheelhouse.doctor.drop import list_dropped

    listed = list_dropped(python or sys.executable)
    entries = list(listed.entries)
    for name in listed.reinstalled:
        ui.info(f"note: {name} is installed again: removed from the drop record")
    if as_json:
        emit_json(entries)
    show = ui.info if as_json else ui.data  # the list is the data asked for: stdout, unless --json has it
    for e in entries:
        show(f"{e['name']} {e.get('version', '')}  {e.get('time', '')}  {e.get('reason', '')}"
             f"  (wheelhouse: {e.get('wheelhouse') or 'unknown'})")
    if not entries:
        ui.info("nothing was dropped")
