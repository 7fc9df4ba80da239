"""`wh target`: capture the running interpreter's profile, or show one built from flags/files."""

from __future__ import annotations

import json

import click

from ._ui import emit_json, write_output

__all__ = ["target", "target_options", "target_from_options"]


def target_options(fn):
    """The shared target flags (stage, doctor); see target_from_options."""
    opts = [
        click.option("--target", "target_file", type=click.Path(dir_okay=False), envvar="WH_TARGET",
                     help="Target profile JSON (from `wh target capture`, or a pex complete-platform file)."),
        click.option("--python-version", help="Target Python, e.g. 3.12 or 3.13t (alone: on this host's platform)."),
        click.option("--platform", "platforms", multiple=True,
                     help="Target platform tag, e.g. manylinux_2_35_x86_64 (means that glibc and every older one). Repeatable."),
        click.option("--implementation", default="cp", show_default=True, help="Target implementation (cp, pp)."),
        click.option("--abi", help="Target ABI (default: derived from implementation and version)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def target_from_options(target_file, python_version, platforms, implementation, abi):
    """A TargetProfile from the shared flags; no flags means the current interpreter."""
    from wheelhouse.target import host_target, load_target, target_from_flags

    if target_file:
        if python_version or platforms:
            raise click.UsageError("--target cannot be combined with --python-version/--platform")
        return load_target(target_file)
    if python_version and not platforms:
        # As pip does: another Python on this machine's platform.
        host = host_target().platforms
        platforms = [next((p for p in host if not p.startswith("linux_")), host[0])]
        ctx = click.get_current_context(silent=True)
        ui = ctx.find_root().obj if ctx is not None else None
        if ui is None or not ui.quiet:
            click.echo(f"note: --python-version {python_version} without --platform: this host's platform "
                       f"({platforms[0]}); pass --platform for another machine", err=True)
    if python_version or platforms:
        if not python_version:
            raise click.UsageError("--python-version and --platform go together")
        return target_from_flags(python_version, list(platforms), implementation, abi)
    return host_target()


@click.group()
def target() -> None:
    """Target profiles: what interpreter and machine a wheelhouse is for."""


@target.command("capture")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the profile here instead of stdout.")
@click.option("--no-gpus", is_flag=True, help="Skip the nvidia-smi query.")
@click.option("--no-distributions", is_flag=True,
              help="Leave out the distributions this interpreter imports (then a stage against it is a full one).")
@click.option("--python", "python", metavar="PY", envvar="WH_PYTHON",
              help="Capture this interpreter (the image's python), not the one running wh: run from ~/wh-venv, "
                   "wh's own venv would otherwise be captured.")
def capture_cmd(output, no_gpus, no_distributions, python) -> None:
    """Print this interpreter's profile as JSON: tags, markers, libc, GPUs, driver, and the
    distributions it imports (what `wh stage --target` then treats as already on the box).

    On a box without wh, run the same thing with `python capture_target.py` from any wheelhouse.

    \b
    Example (on the box, with the interpreter that will receive the wheelhouse):
      /opt/venv/bin/python capture_target.py -o h200.json
      wh target capture --python /opt/venv/bin/python -o h200.json
      wh target capture -o h200.json --no-gpus          # wh's own interpreter
    """
    if python:
        from wheelhouse.target.interpreter import capture_in

        data = capture_in(python, include_gpus=not no_gpus, include_distributions=not no_distributions)
    else:
        from wheelhouse.target.capture import capture

        data = capture(include_gpus=not no_gpus, include_distributions=not no_distributions)
    if output:
        write_output("-o", output, json.dumps(data, indent=2) + "\n")
        click.echo(f"wrote {output} ({len(data.get('distributions') or [])} distributions)", err=True)
    else:
        emit_json(data)


@target.command("show")
@target_options
@click.option("--json", "as_json", is_flag=True, help="Print the whole profile as JSON.")
def show_cmd(target_file, python_version, platforms, implementation, abi, as_json) -> None:
    """Show the profile the target flags describe (the first tags, libc, GPUs, how many distributions
    the image provides).

    \b
    Example:
      wh target show --target manifests/targets/h200-offline.json
      wh target show --target h200.json --json | jq '.distributions | length'
    """
    t = target_from_options(target_file, python_version, platforms, implementation, abi)
    if as_json:
        emit_json(t.to_json())
        return
    # The profile is the data asked for: stdout, as --json's is.
    click.echo(f"{t.describe()}  [{t.source}]")
    click.echo(f"tags: {len(t.tags)} (best: {', '.join(t.tags[:3])})")
    for g in t.gpus:
        click.echo(f"gpu: {g.name} sm {g.compute_capability} {g.memory_total_mib} MiB")
    if t.provided:
        kinds = ", ".join(f"{n} {w}" for w in ("venv", "parent", "system")
                          if (n := sum(d.where == w for d in t.provided)))
        click.echo(f"{len(t.provided)} distributions provided by the image ({kinds}); "
                   "`wh stage --target` treats them as installed unless --full")
    else:
        click.echo("no distributions recorded: a stage against it is a full one")
