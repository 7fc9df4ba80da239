"""`wh build`: an engine recipe's source -> a wheel -> the wheelhouse's lock and wh.json.

``build_engine`` fetches and checks out the source (``wheelhouse.engine_source``)
at the recipe's commit (``wheelhouse.recipe``), builds it through its PEP 517
backend with the target interpreter (or reuses the cached wheel of the same
build key), and records the wheel, the backports and how it was built in the
wheelhouse; a failure leaves the wheelhouse as it was.

The recipe and source names are re-exported here: ``wheelhouse.engine`` is where
callers import them from.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .source import (
    AppliedBackport,
    BackportMismatch,
    CommitNotFound,
    GitError,
    SourceTree,
    WrongCommit,
    checkout_source,
    ensure_mirror,
    mirror_path,
    read_backports,
    sha256_bytes,
)
from wheelhouse.digest import sha256_of
from wheelhouse.errors import UsageError
from wheelhouse.progress import NullReporter, Reporter
from .recipe import Backport, BuildSettings, EngineRecipe, RecipeError, load_recipe, parse_recipe

__all__ = [
    "Backport",
    "BuildSettings",
    "EngineRecipe",
    "AppliedBackport",
    "SourceTree",
    "RecipeError",
    "GitError",
    "CommitNotFound",
    "WrongCommit",
    "BackportMismatch",
    "parse_recipe",
    "load_recipe",
    "mirror_path",
    "ensure_mirror",
    "read_backports",
    "checkout_source",
    "sha256_bytes",
    "EngineBuild",
    "WheelhouseMismatch",
    "build_key",
    "build_engine",
]


# --- the whole `wh build`: source -> wheel -> wheelhouse ----------------------------------
class WheelhouseMismatch(UsageError):
    code = "wheelhouse-mismatch"


@dataclass(frozen=True)
class EngineBuild:
    """What `wh build` produced and where it is recorded."""

    wheel: Path  # inside the wheelhouse
    sha256: str
    reused: bool
    log_path: Path | None
    record: Mapping[str, Any]  # what wh.json["engine"] now holds
    links: tuple[str, ...] = ()  # soname links created for this build


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
        return read_wh_json(wheelhouse)
    if wheelhouse.exists() and any(p for p in wheelhouse.iterdir() if not p.name.startswith(".") and p.name != "logs"):
        raise WheelhouseMismatch(
            f"{wheelhouse} is not empty and has no wh.json",
            hint="pass a wheelhouse made by `wh stage`, or a new/empty folder to -o",
        )
    target = interp.target.to_json()
    return {"target": target, "created_by": f"wh build {__import__('wheelhouse').__version__}"}


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
) -> EngineBuild:
    """Fetch, check out, backport, build (or reuse), and record the engine wheel in ``wheelhouse``."""
    from wheelhouse import __version__
    from wheelhouse.env.cuda import engine_environment
    from wheelhouse.target.interpreter import inspect_interpreter
    from wheelhouse.env.links import apply_links, plan_links, record_path
    from wheelhouse.lock import LockedFile, Lock, PYLOCK, read_pylock, write_pylock, write_wh_json
    from .pep517 import build_wheel
    from wheelhouse.atomic import probe_writable, write_atomic
    from packaging.utils import canonicalize_name, parse_wheel_filename

    reporter = reporter or NullReporter()
    wheelhouse = Path(wheelhouse).resolve()
    cache_dir = Path(cache_dir)
    for folder, what in ((wheelhouse, "-o"), (cache_dir, "--cache-dir")):  # before the fetch and the build
        try:
            probe_writable(folder)
        except OSError as exc:
            raise UsageError(f"{what} {folder}: cannot write there ({exc.strerror})",
                             hint="choose a folder you can write to") from exc
    interp = inspect_interpreter(python)
    data = _open_wheelhouse(wheelhouse, interp)

    mirror, refs = ensure_mirror(recipe, cache_dir, reporter)
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

    cached_dir = cache_dir / "builds" / key[:24]
    cached = sorted(cached_dir.glob("*.whl")) if cached_dir.is_dir() else []
    log_rel = f"logs/build-{recipe.name}-{recipe.commit[:12]}.log"
    log_path = wheelhouse / log_rel
    tree_status: tuple[str, ...] = ()
    reused = bool(cached)
    if cached:
        built = cached[0]
        status_file = cached_dir / "tree-status.txt"
        tree_status = tuple(status_file.read_text().splitlines()) if status_file.exists() else ()
        reporter.note(f"reusing {built.name}: commit, backports, build env and interpreter are unchanged")
    else:
        work = cache_dir / "src" / f"{recipe.name}-{recipe.commit[:12]}"
        reporter.start(f"checkout {recipe.name} {recipe.commit[:12]}")
        tree = checkout_source(recipe, mirror, refs, backports, work)
        reporter.finish(f"checkout {recipe.name} {recipe.commit[:12]}")
        tree_status = tree.status
        src = tree.path / recipe.build.subdirectory
        if not src.is_dir():
            raise RecipeError(f"[engine.build] subdirectory {recipe.build.subdirectory!r} is not in the tree", hint="fix it in the recipe")
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
        built = cached_dir / result.wheel.name
        (cached_dir / "tree-status.txt").write_text("\n".join(tree_status))

    _check_target(data, built.name, wheelhouse)
    name, version, _, _ = parse_wheel_filename(built.name)
    sha = sha256_of(built)
    dest = wheelhouse / "wheels" / built.name
    created: list[Path] = []
    try:
        if not dest.exists() or sha256_of(dest) != sha:
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.tmp")
            shutil.copyfile(built, tmp)
            os.replace(tmp, dest)
            created.append(dest)
        artifacts = []
        for b in backports:
            if b.export:
                target = wheelhouse / b.export
                if not target.exists():
                    created.append(target)
                write_atomic(target, b.content)
                artifacts.append({"path": b.export, "sha256": b.sha256, "before_sha256": b.before_sha256,
                                  "source": f"{b.ref}:{b.path}", "file": b.path})
        record = {
            "name": recipe.name,
            "recipe": recipe.path.name if recipe.path else recipe.name,
            "repo": recipe.repo,
            "commit": recipe.commit,
            "fetched_refs": dict(refs),
            "backports": [b.to_json() for b in backports],
            "tree_status": list(tree_status),
            "build": {
                "subdirectory": recipe.build.subdirectory,
                "no_build_isolation": recipe.build.no_build_isolation,
                "env": dict(recipe.build.env),
                "CUDA_HOME": env.get("CUDA_HOME"),
                "PATH_head": env.get("PATH", "").split(os.pathsep)[0],
                "link_sonames": recipe.build.link_sonames,
                "python": interp.executable,
                "python_version": interp.version,
            },
            "wheel": f"wheels/{built.name}",
            "sha256": sha,
            "key": key,
            "tool": {"name": "wh", "version": __version__},
            "log": log_rel if (wheelhouse / log_rel).exists() else None,
            "artifacts": artifacts,
        }
        norm = canonicalize_name(name)
        lock = read_pylock(wheelhouse) if (wheelhouse / PYLOCK).exists() else Lock(files=())
        old_lock = (wheelhouse / PYLOCK).read_bytes() if (wheelhouse / PYLOCK).exists() else None
        files = [f for f in lock.files if f.name != norm]
        files.append(LockedFile(
            name=norm, version=str(version), filename=built.name, path=f"wheels/{built.name}", sha256=sha,
            size=built.stat().st_size, tool={"source": "build", "recipe": record["recipe"], "commit": recipe.commit},
        ))
        write_pylock(wheelhouse, Lock(files=tuple(files), environments=lock.environments,
                                      requires_python=lock.requires_python, created_by=lock.created_by or "wh"))
        capture = wheelhouse / "capture_target.py"
        if not capture.exists():
            from wheelhouse.resources import capture_script

            write_atomic(capture, capture_script().read_bytes())
        write_wh_json(wheelhouse, {**data, "engine": record})
    except BaseException:
        if "old_lock" in locals():
            if old_lock is None:
                (wheelhouse / PYLOCK).unlink(missing_ok=True)
            else:
                write_atomic(wheelhouse / PYLOCK, old_lock)
        for p in created:
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        raise
    return EngineBuild(wheel=dest, sha256=sha, reused=reused, log_path=log_path if log_path.exists() else None,
                       record=record, links=tuple(made_links))
