"""`wh build`: an engine recipe's source -> a wheel -> the wheelhouse's lock, simple/ and wh.json.

``build_engine`` fetches and checks out the source (``engine.source``) at the
recipe's commit (``engine.recipe``), builds it through its PEP 517 backend with
the target interpreter (or reuses the cached wheel of the same build key), stages
the wheel's runtime requirements the wheelhouse lacks (``engine.requirements``),
and records the wheel, the backports and how it was built through the one
wheelhouse writer (``lock.writer``: pylock.toml, simple/ and wh.json together),
holding the wheelhouse's lock as ``wh stage`` does. A failure leaves the
wheelhouse as it was: exactly what this run created is removed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

from wheelhouse.errors import UsageError
from wheelhouse.progress import NullReporter, Reporter
from .recipe import EngineRecipe, RecipeError
from .record import Built, EngineBuild, add_to_wheelhouse
from .source import AppliedBackport, checkout_source, ensure_mirror, pin_commit, read_backports

__all__ = ["WheelhouseMismatch", "build_key", "build_engine"]


# --- the whole `wh build`: source -> wheel -> wheelhouse ----------------------------------
class WheelhouseMismatch(UsageError):
    code = "wheelhouse-mismatch"


def build_key(recipe: EngineRecipe, backports: tuple[AppliedBackport, ...], env: Mapping[str, str], python: Mapping[str, str]) -> str:
    """Same key, same wheel: commit + backport hashes + build env + interpreter + build settings."""
    body = {
        "commit": recipe.commit,
        "backports": [(b.path, b.sha256) for b in backports],
        "env": dict(sorted(env.items())),
        "python": dict(sorted(python.items())),
        "subdirectory": recipe.build.subdirectory,
        "isolation": not recipe.build.no_build_isolation,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _open_wheelhouse(wheelhouse: Path, interp) -> dict[str, Any]:
    """wh.json of ``wheelhouse``; a new or empty folder gets a minimal one (target = ``interp``)."""
    from wheelhouse.lock import WH_JSON, read_wh_json

    if (wheelhouse / WH_JSON).exists():
        return read_wh_json(wheelhouse)  # someone else's wh.json is refused here, with its reason
    if wheelhouse.exists() and any(p for p in wheelhouse.iterdir() if not p.name.startswith(".") and p.name != "logs"):
        raise WheelhouseMismatch(
            f"{wheelhouse} is not empty and has no wh.json",
            hint="pass a wheelhouse made by `wh stage`, or a new/empty folder to -o",
        )
    target = interp.target.to_json()
    return {"target": target, "created_by": f"wh build {__import__('wheelhouse').__version__}", "owned": []}


def _check_target(data: Mapping[str, Any], wheel_name: str, wheelhouse: Path) -> None:
    tgt = data.get("target")
    if not tgt:
        return
    from wheelhouse.target import target_from_json

    profile = target_from_json(tgt)
    if profile.wheel_rank(wheel_name) is None:
        raise WheelhouseMismatch(
            f"{wheel_name} cannot be installed on {wheelhouse}'s target ({profile.describe()})",
            hint="build with the target's interpreter: `wh build RECIPE --python /path/to/target/python3`",
        )


def build_engine(
    recipe: EngineRecipe,
    wheelhouse: Path,
    *,
    python: str | None = None,
    cache_dir: Path,
    reporter: Reporter | None = None,
    sink=None,
    base_env: Mapping[str, str] | None = None,
    index_urls: Sequence[str] | None = None,
    find_links: Sequence[str] | None = None,
    allow_incomplete: bool = False,
    lock_timeout: float = 600.0,
    client=None,
    env_overrides: Mapping[str, str] | None = None,
) -> EngineBuild:
    """Fetch, check out, backport, build (or reuse), complete and record the engine wheel in ``wheelhouse``.

    ``index_urls``/``find_links``: where the engine's missing requirements are staged from
    (default: what the wheelhouse was staged from, in its wh.json). ``allow_incomplete``:
    record the missing ones (wh.json["engine"]["incomplete"]) instead of failing. The same indexes
    serve the build requirements the interpreter lacks (``[engine.build] requires`` and the
    project's ``[build-system]``), which are installed into it before the build.
    ``env_overrides`` (``wh build --env``) replace the recipe's env entries of the same name.
    """
    from wheelhouse.lock.output import hold_output, real_output
    from wheelhouse.target.interpreter import inspect_interpreter

    reporter = reporter or NullReporter()
    wheelhouse = real_output(Path(wheelhouse))
    cache_dir = Path(cache_dir)
    _check_writable(wheelhouse, cache_dir)
    interp = inspect_interpreter(python)
    with hold_output(wheelhouse, timeout=lock_timeout, on_wait=reporter.note, what="wh stage or wh build") as notes:
        for note in notes:
            reporter.note(note)
        data = _open_wheelhouse(wheelhouse, interp)
        if env_overrides:
            recipe = dataclasses.replace(recipe, build=dataclasses.replace(
                recipe.build, env={**recipe.build.env, **env_overrides}))
        inputs = data.get("inputs") or {}
        where = (list(index_urls if index_urls is not None else inputs.get("indexes") or ()),
                 list(find_links if find_links is not None else inputs.get("find_links") or ()))
        recipe, built = _build_or_reuse(recipe, interp, wheelhouse, cache_dir, reporter, sink, base_env, where,
                                        client)
        _check_target(data, built.wheel.name, wheelhouse)
        return add_to_wheelhouse(recipe, built, interp, wheelhouse, data, cache_dir, reporter, index_urls,
                                 find_links, allow_incomplete, client)


def _check_writable(wheelhouse: Path, cache_dir: Path) -> None:
    from wheelhouse.atomic import probe_writable

    for folder, what in ((wheelhouse, "-o"), (cache_dir, "--cache-dir")):  # before the fetch and the build
        try:
            probe_writable(folder)
        except OSError as exc:
            raise UsageError(f"{what} {folder}: cannot write there ({exc.strerror})",
                             hint="choose a folder you can write to") from exc


def _build_or_reuse(recipe: EngineRecipe, interp, wheelhouse: Path, cache_dir: Path, reporter: Reporter, sink,
                    base_env: Mapping[str, str] | None, where, client) -> tuple[EngineRecipe, Built]:
    """The recipe at its exact commit, and its wheel for this interpreter: from the build cache when the key
    is unchanged, else built."""
    from wheelhouse.env.cuda import engine_environment
    from wheelhouse.env.links import apply_links, plan_links, record_path

    mirror, refs = ensure_mirror(recipe, cache_dir, reporter)
    pinned = pin_commit(recipe, refs)
    if pinned.commit != recipe.commit:
        reporter.note(f"tag {recipe.tag} is commit {pinned.commit}; pin it in the recipe: commit = \"{pinned.commit}\"")
    recipe = pinned
    backports = read_backports(recipe, mirror, refs)
    # The toolchain and links come first: they are part of what the build sees.
    sites = [Path(s) for s in interp.visible_site_dirs]
    made_links: list[str] = []
    if recipe.build.link_sonames:
        # Recorded in the build interpreter's own record (as `wh install` does), also for links made in a
        # parent venv's or the system's NVIDIA folders, so `wh links --undo --python PY` reverses them all.
        made_links = [c.path for c in apply_links(plan_links(sites), record_path(Path(interp.platlib)))]
        if made_links:
            reporter.note(f"created {len(made_links)} unversioned soname links (undo: `wh links --undo`)")
    env = dict(base_env if base_env is not None else os.environ)
    env.update(engine_environment(sites, env))
    env.update(recipe.build.env)
    keyed_env = {**recipe.build.env, "CUDA_HOME": env.get("CUDA_HOME", "")}
    key = build_key(recipe, backports, keyed_env, {"executable": interp.executable, "version": interp.version, "abi": interp.abi})
    log_rel = f"logs/build-{recipe.name}-{recipe.commit[:12]}.log"
    cached_dir = cache_dir / "builds" / key[:24]
    cached = sorted(cached_dir.glob("*.whl")) if cached_dir.is_dir() else []
    if cached:
        status_file = cached_dir / "tree-status.txt"
        tree_status = tuple(status_file.read_text().splitlines()) if status_file.exists() else ()
        reporter.note(f"reusing {cached[0].name}: commit, backports, build env and interpreter are unchanged")
        return recipe, Built(cached[0], key, True, refs, backports, tree_status, env, log_rel, tuple(made_links))
    wheel, tree_status = _build(recipe, mirror, refs, backports, interp, env, cached_dir, wheelhouse / log_rel,
                                reporter, sink, where, client)
    return recipe, Built(wheel, key, False, refs, backports, tree_status, env, log_rel, tuple(made_links))


def _build(recipe, mirror, refs, backports, interp, env, cached_dir: Path, log_path: Path, reporter, sink, where,
           client):
    """Check out, stage the build requirements into the interpreter, build through the PEP 517 backend."""
    from .build_deps import build_system_requires, stage_build_tools
    from .pep517 import build_wheel

    work = cached_dir.parents[1] / "src" / f"{recipe.name}-{recipe.commit[:12]}"
    reporter.start(f"checkout {recipe.name} {recipe.commit[:12]}")
    tree = checkout_source(recipe, mirror, refs, backports, work)
    reporter.finish(f"checkout {recipe.name} {recipe.commit[:12]}")
    src = tree.path / recipe.build.subdirectory
    if not src.is_dir():
        raise RecipeError(f"[engine.build] subdirectory {recipe.build.subdirectory!r} is not in the tree", hint="fix it in the recipe")
    if recipe.build.no_build_isolation:
        pyproject = src / "pyproject.toml"
        own = build_system_requires(pyproject.read_bytes() if pyproject.is_file() else None)
        tools = tuple(dict.fromkeys((*recipe.build.requires, *own)))
        stage_build_tools(tools, interp, index_urls=where[0], find_links=where[1], cache_dir=cached_dir.parents[1],
                          reporter=reporter, client=client)
    partial = cached_dir.with_name(cached_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    reporter.start(f"build {recipe.name}")
    try:
        result = build_wheel(
            src, partial, python=interp.executable, env=env,
            log_path=log_path, sink=sink, isolation=not recipe.build.no_build_isolation, label=recipe.name,
            target=interp.target,
        )
    finally:
        reporter.finish(f"build {recipe.name}")
    cached_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(cached_dir, ignore_errors=True)
    os.replace(result.wheel.parent, cached_dir)
    (cached_dir / "tree-status.txt").write_text("\n".join(tree.status))
    return cached_dir / result.wheel.name, tuple(tree.status)
