"""`wh stage`: resolve for the target, download a verified wheelhouse, print how to bootstrap it."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from wheelhouse.errors import UsageError
from ._options import FiniteFloatRange
from ._ui import check_writable, emit_json, errors_as_json, sigterm_as_interrupt, write_output
from .target import target_from_options, target_options

if TYPE_CHECKING:
    from wheelhouse.manifest.requirements_file import RequirementsFiles

__all__ = ["stage"]


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _image_lines(ui, result) -> None:
    """What the stage assumed of the target's image, and what of it the stack changes (stderr)."""
    if result.image is None:
        return
    ui.info(result.image.summary(len(result.files), "would stage" if result.dry_run else "staged"))
    for line in result.image.lines():
        ui.info(line)


def _pin_lines(result, table: bool) -> list[str]:
    """A dry run's pins: ``name==version`` lines a tool reads back (the image's as comments), or a table."""
    provided = result.image.assumed if result.image else ()
    if table:
        pins = [(f.name, f"{f.name}=={f.version}  {f.filename}  {_human(f.size) if f.size is not None else '?'}")
                for f in result.files]
        pins += [(n, f"{n}=={v}  (provided by the image)") for n, v in provided]
    else:
        pins = [(f.name, f"{f.name}=={f.version}") for f in result.files]
        pins += [(n, f"# {n}=={v}  (provided by the image)") for n, v in provided]
    return [line for _, line in sorted(pins)]


def _rewrite_lines(ui, result) -> None:
    """What the overrides replaced and the exclusions left out (stderr); an exclusion nothing required, said too."""
    for line in result.rewrite_lines():
        ui.info(line)
    hit = {r.name for r in result.rewritten}
    from packaging.utils import canonicalize_name

    for e in result.excludes:
        if canonicalize_name(e.distribution) not in hit:
            ui.info(f"exclusion of {e.distribution} changed nothing: nothing in the closure requires it")


def _parity_lines(ui, result) -> None:
    """Once per difference from uv that wh keeps on purpose, the pins it decided (stderr; ``--json``: each pin's notes)."""
    for line in result.parity_lines():
        ui.info(f"note: {line}")


def _exclusion(name: str):
    from wheelhouse.manifest import exclusion

    return exclusion(name, "given with --exclude", "--exclude", error=UsageError)


def export_pins(result, fmt: str) -> str:
    from wheelhouse.stage.writer import StageError

    """The dry run's pins as ``requirements`` (as `uv pip compile --generate-hashes` writes them) or ``pylock``."""
    missing = [f"{f.name}=={f.version}" for f in result.files if not f.sha256]
    if missing:
        raise StageError(f"the index published no sha256 for {', '.join(missing)}, so they cannot be exported "
                         "with hashes", hint="stage the wheelhouse instead (wh stage -o DIR): it hashes what it "
                         "downloads and writes DIR/pylock.toml")
    if fmt == "pylock":
        from wheelhouse import __version__
        from wheelhouse.lock import Lock, render_pylock
        from wheelhouse.stage import environment_marker, requires_python_for
        from wheelhouse.stage.writer import to_locked

        files = tuple(replace(to_locked(f, f.filename), url=f.url) for f in result.files)
        tool = {k: v for k, v in (("overrides", list(result.overrides)),
                                  ("excludes", [dataclasses.asdict(e) for e in result.excludes])) if v}
        return render_pylock(Lock(files=files, environments=(environment_marker(result.target),),
                                  requires_python=requires_python_for(result.target), created_by=f"wh {__version__}",
                                  tool=tool))
    lines = [f"# This file was written by wh {_version()} (wh stage --dry-run --format requirements)",
             f"# for {result.target.describe()}"]
    lines += [f"# provided by the image (not listed): {n}=={v}" for n, v in (result.image.assumed if result.image else ())]
    lines += [f"# excluded by the stack (not listed): {e.distribution}" + (f" ({e.reason})" if e.reason else "")
              for e in result.excludes]
    for f in sorted(result.files, key=lambda f: f.name):
        lines += [f"{f.name}=={f.version} \\", f"    --hash=sha256:{f.sha256}"]
        via = sorted({p.split("==")[0] for p in f.parents})
        if len(via) == 1:
            lines.append(f"    # via {via[0]}")
        elif via:
            lines += ["    # via", *(f"    #   {p}" for p in via)]
    return "\n".join(lines) + "\n"


def _version() -> str:
    from wheelhouse import __version__
    return __version__


def _read_requirement_files(req_files, constraint_files) -> RequirementsFiles:
    """``-r`` and ``-c`` files as pip writes them (nested files followed; see ``read_requirements_files``)."""
    from wheelhouse.datafile import read_text
    from wheelhouse.manifest.requirements_file import RequirementsFiles, read_requirements_files

    def reader(flag):
        return lambda p: read_text(p, what=flag, error=UsageError, hint="give the path of a requirements file")

    r = read_requirements_files(req_files, reader("-r"))
    c = read_requirements_files(constraint_files, reader("-c"), constraints=True, flag="-c")
    return RequirementsFiles(r.requirements, r.constraints + c.constraints, r.prereleases or c.prereleases,
                             c.index_url or r.index_url, r.extra_index_urls + c.extra_index_urls,
                             r.find_links + c.find_links, r.notes + c.notes)


def _refuse_requirements_file(arg: str) -> None:
    """`wh stage requirements.txt` means `-r requirements.txt` (pip and uv need -r too); never a project lookup."""
    if any(c in arg for c in "=<>!~[;@ "):
        return
    if arg.endswith(".txt") or (arg.endswith(".in") and Path(arg).is_file()):
        raise UsageError(f"{arg} is a requirements file, not a requirement",
                         hint=f"give it with -r: wh stage -r {arg} ...")


def _split_manifest(args: tuple[str, ...], extras=(), groups=()):
    """The first argument is a manifest when it is a .toml file or a bundled name (a ``pyproject.toml`` is read
    as one: its dependencies, extras and groups), or a PEP 751 lock staged as it is; the rest are requirements.
    Returns (manifest, requirements, lock file or None)."""
    from wheelhouse.resources import manifests_dir

    if not args:
        return None, [], None
    for arg in args:
        _refuse_requirements_file(arg)
    first = args[0]
    if Path(first).name == "uv.lock":
        raise UsageError(f"{first} is uv's own lock format, which wh does not read",
                         hint="export it as PEP 751 first: uv export --format pylock.toml -o pylock.toml && "
                              "wh stage pylock.toml ... (docs/inputs.md)")
    # The readers are imported only for a file of theirs: a stage of requirements alone (the common case, and
    # the whole of a stage answered from its stored resolution) loads no TOML nor pylock code.
    if first.endswith(".toml"):
        from wheelhouse.manifest.pyproject import is_pyproject_name, load_pyproject
        from wheelhouse.stage.locked import is_pylock_name

        if is_pylock_name(first):
            return None, list(args[1:]), Path(first)
        if is_pyproject_name(first):
            return load_pyproject(first, extras, groups), list(args[1:]), None
    if first.endswith(".toml") or (not any(c in first for c in "=<>!~[;@ ") and (manifests_dir() / f"{first}.toml").is_file()
                                   and not Path(first).exists()):
        from wheelhouse.manifest import load_manifest

        return load_manifest(first), list(args[1:]), None
    return None, list(args), None


def _pyproject_name(arg: str) -> bool:
    from wheelhouse.manifest.pyproject import is_pyproject_name

    return is_pyproject_name(arg)


def _check_lock_input(lock, reqs, req_lines, con_lines, override_lines, excludes) -> None:
    """A lock is staged as it is: nothing may add to it or rewrite it."""
    more = [flag for flag, given in (("requirements", reqs or req_lines), ("-c", con_lines),
                                     ("--override", override_lines), ("--exclude", excludes)) if given]
    if more:
        raise UsageError(f"{lock} is staged exactly as locked; {', '.join(more)} cannot be added to it",
                         hint="lock again with them (pip lock, uv lock && uv export --format pylock.toml), or stage "
                              "requirements instead of the lock")


def _source_record(path: Path, kind: str, extras, groups) -> dict:
    from wheelhouse.digest import sha256_of

    return {"kind": kind, "path": str(path.resolve()), "sha256": sha256_of(path), "extras": list(extras),
            "groups": list(groups)}


@click.command("stage")
@click.argument("inputs", nargs=-1, metavar="[MANIFEST.toml|NAME] [REQUIREMENT]...")
@click.option("-r", "--requirement", "req_files", multiple=True, type=click.Path(dir_okay=False),
              help="Requirements file, as pip writes them (nested -r/-c followed, --pre and index options honoured; "
                   "--hash=sha256:... options are enforced). Repeatable.")
@click.option("-o", "--output", "out", type=click.Path(file_okay=True, dir_okay=True),
              help="Wheelhouse folder to write (created; an earlier wheelhouse there is updated in place).")
@target_options
@click.option("--index-url", "-i", envvar="WH_INDEX_URL",
              help="Main package index (PEP 503/691); replaces the manifest's index-url (its extra-index-urls "
                   "stay). Default: the manifest's, else pip's configured index.")
@click.option("--extra-index-url", multiple=True,
              help="More indexes, searched after the main one; added to the manifest's. Repeatable.")
@click.option("--find-links", "-f", multiple=True,
              help="Folder of wheels or an HTML page of links; added to the manifest's. Repeatable.")
@click.option("-c", "--constraint", "constraint_files", multiple=True, type=click.Path(dir_okay=False),
              help="Constraints file (--hash options enforced, as for -r). Repeatable.")
@click.option("--override", "override_files", multiple=True, type=click.Path(dir_okay=False),
              help="Overrides file: each line replaces every requirement on its project, wherever it appears "
                   "(uv's --override); added to the manifest's overrides. Repeatable.")
@click.option("--exclude", "excludes", multiple=True, metavar="NAME",
              help="Leave this distribution out of the closure wherever it is required; added to the manifest's "
                   "[[exclude]]. Repeatable.")
@click.option("--extra", "extras", multiple=True, metavar="NAME",
              help="With a pyproject.toml or pylock.toml: also stage this extra's requirements. Repeatable.")
@click.option("--group", "groups", multiple=True, metavar="NAME",
              help="With a pyproject.toml (PEP 735 [dependency-groups], include-group expanded) or pylock.toml: "
                   "also stage this dependency group. Repeatable.")
@click.option("--jobs", "-j", type=click.IntRange(1, 64), default=8, show_default=True, envvar="WH_JOBS",
              help="Parallel downloads.")
@click.option("--cache-dir", type=click.Path(file_okay=False), envvar="WH_CACHE_DIR",
              help="Download cache (default: ~/.cache/wh).")
@click.option("--pre", is_flag=True, help="Allow pre-releases.")
@click.option("--dry-run", is_flag=True, help="Resolve and list the pins; download no wheel and write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--format", "fmt", type=click.Choice(["requirements", "pylock", "table"]),
              metavar="FORMAT",
              help="With --dry-run, one of requirements|pylock|table: export the pins as a hashed requirements file (for pip install "
                   "--require-hashes) or a PEP 751 pylock.toml, to stdout or -o FILE; `table` lists each pin's "
                   "wheel and size (the default on a terminal; off one, stdout is `name==version` lines).")
@click.option("--no-bootstrap", is_flag=True, help="Leave out bootstrap/ (wh's own wheel and dependencies).")
@click.option("--lock-timeout", type=FiniteFloatRange(0), default=600, show_default=True, envvar="WH_LOCK_TIMEOUT",
              help="Seconds to wait for another wh stage/build writing the same -o (0: refuse at once).")
@click.option("--allow-missing-kernels", is_flag=True, envvar="WH_ALLOW_MISSING_KERNELS",
              help="When the target profile lists GPUs, a wheel whose CUDA device code none of them can run is "
                   "refused (exit 1); with this flag it is staged with a warning.")
@click.option("--keep-image", "keep_image", multiple=True, metavar="NAME",
              help="Hold this distribution at the version the target profile's image provides (a hard constraint "
                   "NAME==<image version>); added to the manifest's keep-image. Repeatable.")
@click.option("--full", is_flag=True,
              help="Stage the whole closure, even what the target profile says its image already provides.")
@click.option("--offline", is_flag=True, envvar="WH_OFFLINE",
              help="Resolve from the cache alone (index pages and metadata); anything not cached is an error.")
@click.option("--refresh", is_flag=True, help="Revalidate every cached index page, however recently fetched.")
@click.option("--bytecode", is_flag=True,
              help="Compile every wheel's modules for the target's Python here, so `wh install --compile` on the "
                   "box writes them instead of compiling (needs a CPython of the target's version).")
@click.option("--bytecode-python", metavar="PATH", help="The CPython that compiles for --bytecode (default: this one "
              "or pythonX.Y on PATH).")
@click.pass_context
def stage(ctx, inputs, req_files, out, target_file, python_version, platforms, implementation, abi,
          index_url, extra_index_url, find_links, constraint_files, override_files, excludes, extras, groups, jobs, cache_dir, pre, dry_run, as_json, fmt,
          no_bootstrap, lock_timeout, allow_missing_kernels, keep_image, full, offline, refresh, bytecode,
          bytecode_python) -> None:
    """Resolve a stack for the TARGET (not this machine) and write a verified wheelhouse.

    \b
    wh stage manifests/demo.toml -o demo-wheelhouse
    wh stage freetoken-dsv4-kaggle-4xl4 -o wh-kaggle
    wh stage pylock.toml --target box.json -o wh        # a PEP 751 lock, as locked
    wh stage pyproject.toml --extra cuda --group serve -o wh
    wh stage 'rich==14.*' markupsafe --python-version 3.12 --platform manylinux_2_35_x86_64 -o wh
    wh stage -r requirements.txt --target box.json --dry-run --json
    wh stage freetoken-dsv4-kaggle-4xl4 --target box.json -o wh-delta   # only what the image lacks

    The wheelhouse holds wheels/, pylock.toml (PEP 751), a simple/ index, wh.json
    (provenance) and bootstrap/ (wh itself, for the box). On the box:
    `wh install DIR --venv VENV && wh doctor --python VENV/bin/python`.

    \b
    Manifest and command line: lists ADD to the manifest's (requirements, -r,
    -c, --override, --exclude, --extra-index-url, -f); single values REPLACE it (--index-url or
    WH_INDEX_URL replaces its index-url, target flags its [target]).

    \b
    A target profile captured on the box lists what its image provides: those
    distributions count as installed (their version is kept when the stack
    allows it) and are not staged; wh.json's assumed_present lists them, and
    `wh install` checks the box still has them. --full stages everything.

    Re-staging into -o updates what wh wrote there (listed in wh.json) and keeps
    everything else (NOTES.md, logs/, an engine `wh build` added, unless the
    manifest's engine recipe changed). -o may be a symlink (its target is
    written). One run at a time per -o: a second one waits (--lock-timeout).
    With --json, a failure prints {"error": {"code", "message", "hint"}} on stdout.
    """
    with errors_as_json(as_json):
        _stage(ctx.obj, inputs, req_files, out, target_file, python_version, platforms, implementation, abi, index_url,
               extra_index_url, find_links, constraint_files, override_files, excludes, extras, groups, jobs, cache_dir,
               pre, dry_run, as_json, fmt, no_bootstrap, lock_timeout, allow_missing_kernels, full, offline, refresh,
               bytecode, bytecode_python, keep_image)


def _stage(ui, inputs, req_files, out, target_file, python_version, platforms, implementation, abi,
           index_url, extra_index_url, find_links, constraint_files, override_files, excludes, extras, groups, jobs,
           cache_dir, pre, dry_run, as_json, fmt, no_bootstrap, lock_timeout, allow_missing_kernels, full, offline,
           refresh, bytecode, bytecode_python, keep_image=()) -> None:
    from wheelhouse.stage import StageFlags, merge_inputs, stage as run_stage

    manifest, reqs, lock = _split_manifest(tuple(inputs), extras, groups)
    files = _read_requirement_files(req_files, constraint_files)
    req_lines, con_lines = files.requirements, files.constraints
    for note in files.notes:
        ui.info(f"note: {note}")
    override_lines = _read_requirement_files(override_files, ()).requirements
    is_pyproject = bool(inputs) and inputs[0].endswith(".toml") and _pyproject_name(inputs[0])
    if (extras or groups) and not (lock or is_pyproject):
        raise UsageError("--extra and --group select from a pyproject.toml or a pylock.toml",
                         hint="give one first: wh stage pyproject.toml --extra cuda -o DIR")
    if lock is not None:
        _check_lock_input(lock, reqs, req_lines, con_lines, override_lines, excludes)
    source = _source_record(Path(inputs[0]), "pylock" if lock else "pyproject", extras, groups) \
        if lock or is_pyproject else None
    if not out and not dry_run:
        raise UsageError("wh stage needs -o DIR (where to write the wheelhouse)", hint="for example: wh stage manifests/demo.toml -o demo-wheelhouse")
    if fmt and not dry_run:
        raise UsageError(f"--format {fmt} exports the pins of a dry run; a staged wheelhouse has its own pylock.toml",
                         hint=f"add --dry-run (wh stage --dry-run --format {fmt} ... -o FILE)")
    if fmt and as_json:
        raise UsageError("--format and --json both choose what goes to stdout", hint="give one of them")
    export_to = None
    if dry_run and out == "-":  # -o - with --dry-run: the pins to stdout, as without -o
        out = None
    table = fmt == "table" or (fmt is None and sys.stdout.isatty())
    fmt = None if fmt == "table" else fmt
    if fmt:  # -o names the exported file ("-" or none: stdout), not a wheelhouse
        export_to, out = (None if out in (None, "-") else out), None
        if export_to:
            check_writable("-o", export_to)
    if not (manifest or reqs or req_lines or lock or req_files):  # an empty -r file is an empty request (noted above)
        raise UsageError("nothing to stage: give a manifest, requirements or -r FILE",
                         hint="for example: wh stage manifests/demo.toml -o demo-wheelhouse")
    flags_given = bool(target_file or python_version or platforms)
    flags = StageFlags(
        requirements=tuple([*reqs, *(line.text for line in req_lines)]),
        constraints=tuple(line.text for line in con_lines),
        hashed_requirements=tuple(line for line in (*req_lines, *con_lines) if line.hashes),
        overrides=tuple(line.text for line in override_lines),
        excludes=tuple(_exclusion(name) for name in excludes),
        index_url=index_url or files.index_url or None,  # the command line's before the files' (pip: the same)
        extra_index_urls=(*extra_index_url, *files.extra_index_urls),
        find_links=(*find_links, *files.find_links),
        target=target_from_options(target_file, python_version, platforms, implementation, abi) if flags_given else None,
        prereleases=pre or files.prereleases,
        keep_image=tuple(keep_image),
        target_name=target_file,
    )
    run = merge_inputs(manifest, flags, Path(out) if out else Path("."), jobs=jobs, dry_run=dry_run,
                       cache_dir=Path(cache_dir) if cache_dir else None, bootstrap=not no_bootstrap,
                       lock_timeout=lock_timeout, allow_missing_kernels=allow_missing_kernels, full=full,
                       offline=offline, refresh=refresh, bytecode=bytecode or bool(bytecode_python),
                       bytecode_python=bytecode_python, lock_input=lock, extras=tuple(extras), groups=tuple(groups),
                       source=source, empty_request=bool(req_files) and not (manifest or reqs or req_lines or lock),
                       explain=ui.verbose > 0)
    target = run.target
    reporter = ui.reporter()
    try:
        # --bytecode runs compiling processes: `kill <wh pid>` stops them too, as Ctrl-C does
        with (sigterm_as_interrupt() if run.bytecode else contextlib.nullcontext()):
            result = run_stage(run, reporter=reporter)
    except KeyboardInterrupt:
        reporter.close()
        _say_partials_kept(ui, Path(cache_dir) if cache_dir else None)
        raise
    finally:
        reporter.close()

    if as_json:
        data = result.to_json()
        if dry_run and not out:
            data["out"] = None  # a dry run without -o names no folder
        emit_json(data)
    if dry_run:
        if fmt:
            text = export_pins(result, fmt)
            if export_to:
                write_output("-o", export_to, text)
                ui.info(f"wrote {len(result.files)} pins ({fmt}) to {export_to}")
            else:
                click.echo(text, nl=False)
        elif not as_json:
            for line in _pin_lines(result, table):  # the pins are the data asked for: stdout (`> pins.txt`)
                click.echo(line)
        ui.info(f"{_count(len(result.files), 'wheel')} for {target.describe()}, {_human(result.total_size)} "
                "(dry run: nothing downloaded)")
        _image_lines(ui, result)
        _rewrite_lines(ui, result)
        _parity_lines(ui, result)
        read_files = manifest or lock or req_files or constraint_files or override_files or target_file or export_to
        # the target from flags, never the host's (its facts are read from files no record names)
        given = index_url and (python_version or platforms) and not read_files
        if result.evidence is not None and run.offline and not run.refresh and given:
            _offer_record(run.cache_dir, result.evidence, inputs)
        return
    ui.info(f"staged {_count(len(result.files), 'wheel')} ({_human(result.total_size)}) for {target.describe()} in {result.out}")
    _image_lines(ui, result)
    _rewrite_lines(ui, result)
    _parity_lines(ui, result)
    if result.reused:  # wheels/ and bootstrap/ together; the notes above counted each download on its own
        total = len(result.files) + len(result.bootstrap)
        ui.info(f"{result.reused} of {total} files (wheels/ and bootstrap/) were not downloaded again: "
                "taken from the cache or the previous wheelhouse, each verified")
    if result.removed:
        ui.info(f"removed {len(result.removed)} wheel(s) no longer staged: {', '.join(result.removed)}")
    if result.engine:
        ui.info(f"kept the engine {result.engine} that `wh build` added")
    if result.bootstrap_command:
        ui.info(f"on the box, install wh first (from {result.out}): {result.bootstrap_command}")
    ui.info(f"then: wh install {result.out} --venv /path/to/venv && wh doctor --python /path/to/venv/bin/python")


def _offer_record(cache_dir: Path | None, evidence, inputs) -> None:
    """A dry run of requirements, answered offline from its stored resolution: recorded (``_recorded``) with the
    files it stands for, and the others its answer depends on (pip's configuration files; what a bare name
    could also name: a bundled manifest, a file here)."""
    from wheelhouse.cachedir import default_cache_dir
    from wheelhouse.fileidentity import identity_entry
    from wheelhouse.index.pip_config import pip_config_candidates
    from wheelhouse.resources import manifests_dir

    from . import _recorded

    names = [*(str(Path(a).resolve()) for a in inputs), *(str(manifests_dir() / f"{a}.toml") for a in inputs)]
    more = [identity_entry(str(f)) for f in (*pip_config_candidates(), *names)]
    _recorded.offer(str(cache_dir or default_cache_dir()), (*evidence, *more))


def _say_partials_kept(ui, cache_dir: Path | None) -> None:
    """After Ctrl-C: what the unfinished downloads keep on disk (what arrived; the reservations are given
    back), and the command that removes them."""
    from wheelhouse.cachedir import default_cache_dir
    from wheelhouse.fetch.usage import cache_usage

    cache = cache_dir or default_cache_dir()
    partials = next((u for u in cache_usage(cache) if u.kind == "partials"), None)
    if partials and partials.bytes:
        ui.info(f"kept {_human(partials.bytes)} of unfinished downloads in {cache / 'partial'}: the next "
                f"`wh stage` resumes them; `wh cache clean --kind partials` removes them")
