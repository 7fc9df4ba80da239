"""`wh build`: the engine from source at an exact commit, through its PEP 517 backend."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from wheelhouse.engine import build_engine
from wheelhouse.engine.recipe import load_recipe
from wheelhouse.redact import redact
from ._options import FiniteFloatRange
from ._ui import emit_json

__all__ = ["build"]


def _default_cache() -> str:
    from wheelhouse.cachedir import default_cache_dir  # the one rule ($WH_CACHE_DIR, XDG, ~/.cache/wh)

    return str(default_cache_dir())


DEFAULT_OUT = "wheelhouse"


def _refuse_source_folder(folder: Path) -> None:
    """Before any work: the default ./wheelhouse may be a repository's own package (wh's is), never a wheelhouse."""
    from wheelhouse.errors import UsageError

    if not folder.is_dir() or (folder / "wh.json").exists():
        return
    if (folder / "__init__.py").exists() or any(folder.glob("*.py")):
        raise UsageError(f"{folder}/ holds Python sources (a package), not a wheelhouse; wh build writes nothing there",
                         hint="name the wheelhouse with -o, for example: wh build RECIPE -o engine-wheelhouse")


def _stream(line: str) -> None:
    # The compiler's own words, as they come; only URL credentials are hidden (wheelhouse.redact).
    sys.stderr.write(redact(line) + "\n")
    sys.stderr.flush()


def _env_pairs(pairs) -> dict[str, str]:
    from wheelhouse.errors import UsageError

    out = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name or not name.replace("_", "a").isalnum():
            raise UsageError(f"--env {pair!r} is not NAME=VALUE", hint="e.g. --env TORCH_CUDA_ARCH_LIST=9.0a")
        out[name] = value
    return out


def _show_plan(say, plan) -> None:
    """The dry run for people, one line per ``say`` (stdout; stderr when --json carries it as data)."""
    net = plan["network"]
    commit = plan["commit"] or f"not pinned: tag {plan['tag']} is resolved when the mirror is fetched"
    if plan["commit"] and not plan["commit_pinned"]:
        commit += f" (tag {plan['tag']} in the cached mirror; not pinned in the recipe)"
    elif plan["commit"] and plan["tag"]:
        commit += f" (tag {plan['tag']}: checked to point here when fetched)"
    lines = [
        "dry run: nothing is fetched, linked or written",
        f"recipe     {plan['recipe']}",
        f"source     {plan['repo']} at {commit}",
        f"fetch      {', '.join(plan['fetch']) or 'branches and tags only'}"
        + (f"  (mirror cached: {plan['mirror']['path']})" if plan["mirror"]["cached"] else "  (no cached mirror: needs the network)"),
    ]
    for b in plan["backports"]:
        lines.append(f"backport   {b['path']} from {b['ref']}" + (f" sha256 {b['sha256'][:16]}..." if b["sha256"] else " (sha256 not pinned)"))
    interp = plan["interpreter"]
    lines.append(f"python     {interp['executable']} ({interp['version']}, {interp['abi']})")
    lines.append(f"build deps {', '.join(plan['build_requires']) or 'none named'}")
    lines.append(f"lacks      {'; '.join(plan['lacks']) or 'nothing'}" + ("  (wh build stages them from -i/-f or the "
                 "wheelhouse's recorded indexes)" if plan["lacks"] else ""))
    for k, v in plan["env"].items():
        lines.append(f"env        {k}={v}")
    if plan["cuda"].get("CUDA_HOME"):
        lines.append(f"env        CUDA_HOME={plan['cuda']['CUDA_HOME']} (from the pinned nvidia-cuda-nvcc)")
    for link in plan["links"]:
        lines.append(f"link       {link}")
    verdict = {True: "yes", False: "no", None: "unknown"}[net["during_build"]]
    lines.append(f"network    during the build: {verdict} (checked {net['checked']})")
    for r in net["reasons"]:
        lines.append(f"           {r}")
    for f in net["fetch_content"]:
        lines.append(f"           FetchContent {f['name']}: {f['from']} ({f['file']})")
    wh_ = plan["wheelhouse"]
    state = "existing wheelhouse" if wh_["has_wh_json"] else ("a folder without wh.json" if wh_["exists"] else "new")
    lines.append(f"wheelhouse {wh_['path']} ({state}): writes {', '.join(wh_['writes'])}")
    for line in lines:
        say(line)


@click.command("build")
@click.argument("recipe")
@click.option("-o", "--output", "wheelhouse", default=DEFAULT_OUT, show_default=True, envvar="WH_WHEELHOUSE",
              type=click.Path(file_okay=False), help="Wheelhouse to add the wheel to (a new/empty folder gets a "
              "minimal one; a folder holding Python sources, such as a repository's own wheelhouse/ package, is refused).")
@click.option("--python", "python", envvar="WH_PYTHON", help="Interpreter that builds (and will run) the engine; default: this one.")
@click.option("--cache-dir", default=_default_cache, envvar="WH_CACHE_DIR", type=click.Path(file_okay=False),
              help="Git mirrors, work trees and built wheels.  [default: ~/.cache/wh]")
@click.option("--index-url", "-i", "index_url", envvar="WH_INDEX_URL",
              help="Index to stage the engine's missing requirements from (with --extra-index-url: replaces the "
                   "indexes recorded in WHEELHOUSE/wh.json).")
@click.option("--extra-index-url", multiple=True, help="More indexes for the engine's requirements. Repeatable.")
@click.option("--find-links", "-f", multiple=True,
              help="Folder of wheels or page of links for the engine's requirements (replaces the recorded ones). Repeatable.")
@click.option("--allow-incomplete", is_flag=True,
              help="Add the engine even when its requirements cannot be staged; they are listed in wh.json.")
@click.option("--lock-timeout", type=FiniteFloatRange(0), default=600, show_default=True, envvar="WH_LOCK_TIMEOUT",
              help="Seconds to wait for another wh stage/build writing the same wheelhouse.")
@click.option("--env", "env_pairs", multiple=True, metavar="NAME=VALUE",
              help="Override one of the recipe's build env entries (TORCH_CUDA_ARCH_LIST=9.0a on an H200 host). Repeatable.")
@click.option("--dry-run", is_flag=True, help="Print the plan (commit, refs, backports, what the interpreter lacks, "
              "env, whether the build needs the network, the wheelhouse it writes) and change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the build record (with --dry-run: the plan) as JSON on stdout.")
@click.pass_obj
def build(ui, recipe, wheelhouse, python, cache_dir, index_url, extra_index_url, find_links, allow_incomplete,
          lock_timeout, env_pairs, dry_run, as_json) -> None:
    """Build the engine RECIPE (a path or a bundled name such as freetoken-pr70).

    Clones or updates a cached mirror, fetches the recipe's refs, checks out the
    exact commit, applies the backports (checking their sha256), links the
    unversioned NVIDIA sonames and puts the pinned toolchain on PATH, then runs
    the PEP 517 backend with the TARGET interpreter (--python) and its installed
    build dependencies (those it lacks, of the recipe's [engine.build] requires and the
    project's [build-system], are staged into it first from -i/-f or the wheelhouse's
    indexes) -- never `pip wheel`. Compiler output streams to stderr and
    to WHEELHOUSE/logs/. The wheel, its hash and provenance go into pylock.toml,
    simple/ and wh.json. A re-run with nothing changed reuses the wheel.

    The engine's runtime requirements (markers judged for the wheelhouse's
    target) that the wheelhouse lacks are resolved with its lock and staged
    from the indexes it was staged from (or --index-url/--find-links); when
    they cannot be, each is listed and the build fails, unless
    --allow-incomplete. A later `wh stage` into WHEELHOUSE keeps the engine.

    --dry-run prints the plan (commit and refs, backports, what the interpreter
    lacks, env, whether the build needs the network, the wheelhouse it writes)
    and fetches, links and writes nothing.

    Exit codes: 0 built or reused; 1 fetch/checkout/build failed (the compiler's
    error lines and the log path are printed), or requirements missing; 2 bad
    recipe or arguments.
    """
    rec = load_recipe(recipe)
    _refuse_source_folder(Path(wheelhouse))
    overrides = _env_pairs(env_pairs)
    if dry_run:
        from wheelhouse.engine.plan import plan_build

        plan = plan_build(rec, Path(wheelhouse), python=python, cache_dir=Path(cache_dir), env_overrides=overrides)
        _show_plan(ui.info if as_json else ui.data, plan)  # the plan is the data asked for, unless --json is
        if as_json:
            emit_json(plan)
        return
    reporter = ui.reporter()
    try:
        indexes = [index_url, *extra_index_url] if index_url else (list(extra_index_url) or None)
        result = build_engine(rec, Path(wheelhouse), python=python, cache_dir=Path(cache_dir), reporter=reporter,
                              sink=None if ui.quiet else _stream, index_urls=indexes,
                              find_links=list(find_links) or None, allow_incomplete=allow_incomplete,
                              lock_timeout=lock_timeout, env_overrides=overrides)
    finally:
        reporter.close()
    verb = "reused" if result.reused else "built"
    ui.info(f"{verb} {result.wheel.name} (sha256 {result.sha256[:16]}...) -> {result.wheel}")
    for art in result.record.get("artifacts", []):
        ui.info(f"exported {art['path']} (sha256 {art['sha256'][:16]}...) from {art['source']}")
    if result.added:
        ui.info(f"staged its requirements: {', '.join(result.added)}")
    if result.missing:
        ui.info(f"incomplete (--allow-incomplete): not in the wheelhouse: {', '.join(result.missing)}")
    if result.log_path:
        ui.info(f"build log: {result.log_path}")
    if as_json:
        emit_json({"wheel": str(result.wheel), "sha256": result.sha256, "reused": result.reused,
                   "log": str(result.log_path) if result.log_path else None, "links": list(result.links),
                   "added": list(result.added), "missing": list(result.missing),
                   "engine": dict(result.record)})
