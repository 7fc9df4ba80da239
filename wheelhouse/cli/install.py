"""`wh install`: install wheelhouses offline into a venv or an interpreter's environment."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import click

from ._ui import emit_json

__all__ = ["install"]

_ALL = ":all:"


@click.command()
@click.argument("wheelhouses", nargs=-1)
@click.option("--search", "search_roots", multiple=True, type=click.Path(path_type=Path), envvar="WH_SEARCH",
              help="Look for wheelhouses (wh.json) under this folder, e.g. a read-only mount. Repeatable.")
@click.option("--venv", type=click.Path(file_okay=False, path_type=Path),
              help="Install into this venv (created with --python if missing).")
@click.option("--system-site-packages", is_flag=True,
              help="A created venv sees the packages of the interpreter it is made with (--python, else the "
                   "python3 on PATH that is not wh's own), never wh's own environment.")
@click.option("--python", "python", envvar="WH_PYTHON",
              help="Interpreter to install into (or to create the venv with). wh's own is used only when named here.")
@click.option("--only", multiple=True, help="Install only this package (repeatable), e.g. to restore a dropped one.")
@click.option("--reinstall", "reinstall", multiple=True, is_flag=False, flag_value=_ALL, metavar="NAME",
              help="Install NAME again from the wheelhouse even when its version is there (a damaged install: a "
                   "truncated .so, a file that no longer matches RECORD); repeatable or comma-separated. Alone "
                   "(`--reinstall` before another option or at the end): every distribution of the wheelhouse. "
                   "Without a WHEELHOUSE, the one each NAME was installed from (installed.json).")
@click.option("--installer", type=click.Choice(["wh", "pip"]), default="wh", show_default=True,
              help="wh: parallel unpacker; pip: `pip install --no-index --no-deps` on the verified files.")
@click.option("--compile/--no-compile", "compile_", default=False, show_default=True,
              help="Byte-compile the installed files (in parallel). Where the wheelhouse carries bytecode for "
                   "this Python (`wh stage --bytecode`), its .pyc files are written instead of compiled.")
@click.option("--recompile", is_flag=True,
              help="With --compile: compile every module here, even where the wheelhouse carries its bytecode.")
@click.option("--link-cache/--no-link-cache", "link_cache", default=None, envvar="WH_LINK_CACHE",
              help="Hardlink the files of a wheel installed before (same sha256) from the verified extraction "
                   "cache in wh's cache folder ($WH_CACHE_DIR/unpacked), and add the wheels installed now to it. "
                   "Same filesystem only. Default: off (adding to the cache costs a first install ~5% CPU); "
                   "$WH_LINK_CACHE=1 turns it on. See docs/install-cache.md.")
@click.option("-j", "--jobs", type=click.IntRange(1, 256), help="Parallel workers (default: usable cores + 1, at most 32).")
@click.option("--no-links", is_flag=True, help="Do not create soname links / remove libcuda stubs afterwards.")
@click.option("--no-patches", is_flag=True, help="Do not apply the wheelhouse's patches afterwards.")
@click.option("--allow-missing", is_flag=True,
              help="Install even when a requirement of the result would be unmet (listed as a note).")
@click.option("--dry-run", is_flag=True,
              help="Say what would be added, upgraded, downgraded or kept, and run every check the install runs "
                   "first (target, files, the image's assumptions, requirements); write nothing, make no venv.")
@click.option("--json", "as_json", is_flag=True, help="Print the install report as JSON on stdout.")
@click.pass_obj
def install(ui, wheelhouses, search_roots, venv, system_site_packages, python, only, reinstall, installer, compile_,
            recompile, link_cache, jobs, no_links, no_patches, allow_missing, dry_run, as_json) -> None:
    """Install WHEELHOUSE... (folders holding wh.json, or folders to search; an archive from `wh pack` or any
    of its parts; an oci:// reference) with no index and no network.

    Before anything changes, the wheelhouse's target is checked against the receiving interpreter, every
    requirement of the result against what that interpreter imports, and every file's sha256 against
    pylock.toml; any mismatch leaves the environment untouched. The install is one transaction: killed or
    failed, the environment is left as it was (the next run rolls back what a killed one left). One run at
    a time per target. A target is required: --venv, or --python (also to install into wh's own environment).

    With --link-cache (or WH_LINK_CACHE=1), a wheel installed before into another venv on the same
    filesystem is hardlinked from the verified extraction cache (each file checked against the cache's
    manifest; launchers, scripts, bytecode and the files an install writes are always written per venv).

    \b
    Examples:
      wh install ./wheelhouse --venv /opt/venv --system-site-packages
      wh install --search /kaggle/input --python /usr/bin/python3
      wh install /media/stick/wh.tar.part-0001 --venv /opt/venv
      wh install ./wheelhouse --venv /opt/venv-a --link-cache
      wh install ./wheelhouse --venv /opt/venv-b --link-cache    # links what venv-a wrote
      wh install --reinstall msgpack --venv /opt/venv            # from the wheelhouse it came from
    """
    from wheelhouse.carry import materialize, origin_of
    from wheelhouse.errors import UsageError
    from wheelhouse.install import (InstallOptions, find_wheelhouses, install_wheelhouses, recorded_wheelhouses,
                                    require_target)
    from wheelhouse.install.sharedfiles import describe_kept
    from wheelhouse.install.wheel import linkcache

    require_target(venv, python)
    names = [n.strip() for r in reinstall if r != _ALL for n in r.split(",") if n.strip()]
    again: bool | list[str] = names if names else bool(reinstall)
    if names and not wheelhouses and not search_roots:
        wheelhouses = tuple(recorded_wheelhouses(venv, python, names))
        for w in wheelhouses:
            ui.info(f"reinstalling from the recorded wheelhouse {w}")
    if venv is not None and python and Path(venv, "bin", "python").exists():
        ui.info(f"note: {venv} exists; --python is only used to create a venv")
    if not wheelhouses and not search_roots:
        search_roots = (Path.cwd(),)
    if system_site_packages and venv is None:
        raise UsageError("--system-site-packages needs --venv", hint="add --venv PATH, or drop the flag")
    held = ExitStack()
    ctx_close = click.get_current_context().call_on_close
    ctx_close(held.close)
    options = InstallOptions(
        venv=venv, python=python, system_site_packages=system_site_packages, only=frozenset(only) if only else None,
        installer=installer, compile=compile_, precompiled=not recompile, jobs=jobs, links=not no_links,
        patches=not no_patches, allow_missing=allow_missing,
        link_cache=linkcache.default_dir() if linkcache.enabled(link_cache) else None, reinstall=again,
    )
    reporter = ui.reporter()
    try:
        # An archive (or a part of one) is checked against its sidecar and unpacked first; an oci:// ref pulled.
        found = find_wheelhouses(materialize(list(wheelhouses), held, reporter), list(search_roots))
        for h in found:  # an archive's or an oci:// reference's name, never the folder it was unpacked into
            ui.info(f"wheelhouse: {origin_of(h)}")
        if dry_run:
            from wheelhouse.install.dry_run import plan_install

            plan = plan_install(found, options, reporter=reporter)
            plan = replace(plan, wheelhouses=tuple(origin_of(p) for p in plan.wheelhouses))
        else:
            report = install_wheelhouses(found, options, reporter=reporter)
            report = replace(report, wheelhouses=tuple(origin_of(p) for p in report.wheelhouses))
    finally:
        reporter.close()
    if dry_run:
        _print_plan(ui, plan, as_json)
        return
    if as_json:
        emit_json(report.to_json())
    for d in report.installed:
        ui.info(f"  + {d.name.replace('_', '-').lower()} {d.version}" + (f" (was {d.replaced})" if d.replaced else "")
                + (f"; {describe_kept(d.kept)}" if d.kept else ""))
    for c in report.links:
        ui.info(f"  link: {c.action} {c.path}" + (f" -> {c.target}" if c.target else ""))
    for line in report.patches:  # after what was installed: a patch applies to it
        ui.info(f"  {line}")
    for note in report.notes:
        ui.info(f"note: {note}")
    linked = [d.linked for d in report.installed if d.linked]
    if linked:
        ui.info(f"linked {sum(linked)} files of {len(linked)} wheel{'' if len(linked) == 1 else 's'} "
                "from the extraction cache")
    if report.compiled:
        ui.info(f"byte-compiled {report.compiled} modules"
                + (f" ({report.precompiled} written from the wheelhouse's bytecode)" if report.precompiled else ""))
    ui.info(
        f"installed {len(report.installed)}, already there {len(report.skipped)}, "
        f"into {report.interpreter} in {report.seconds:.1f}s"
    )
    if report.activation:
        ui.info(f"environment for the engine: source {report.activation} (hooked into bin/activate)")


def _print_plan(ui, plan, as_json: bool) -> None:
    """``--dry-run``: the plan is the data (stdout), one line per distribution, then one per check."""
    if as_json:
        emit_json(plan.to_json())
    else:
        for d in plan.dists:
            was = f" (now {d.installed})" if d.installed and d.action != "keep" else ""
            click.echo(f"{d.action:<9} {d.name} {d.version}{was}" + (f": {d.why}" if d.action == "refused" else ""))
        for c in plan.checks:
            click.echo(f"check {c.check}: {'ok' if c.ok else 'FAIL'}: {c.detail.splitlines()[0] if c.detail else ''}")
    for note in plan.notes:
        ui.info(f"note: {note}")
    counts = {a: sum(d.action == a for d in plan.dists) for a in ("add", "upgrade", "downgrade", "reinstall", "keep",
                                                                   "refused")}
    ui.info("dry run, nothing written: " + ", ".join(f"{n} {a}" for a, n in counts.items() if n) + f" into "
            f"{plan.interpreter}" + ("" if plan.ok else "; the install would be refused"))
    if not plan.ok:
        raise click.exceptions.Exit(1)
