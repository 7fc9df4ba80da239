"""`wh build`: an engine recipe's source -> a wheel -> the wheelhouse's lock, simple/ and wh.json.

``build_engine`` fetches and checks out the source (``engine.source``) at the
recipe's commit (``engine.recipe``), builds it through its PEP 517 backend with
the target interpreter (or reuses the cached wheel of the same build key), stages
the wheel's runtime requirements the wheelhouse lacks (``engine.requirements``),
and records the wheel, the backports and how it was built through the one
wheelhouse writer (``lock.writer``: pylock.toml, simple/ and wh.json together),
holding the wheelhouse's lock as ``wh stage`` does. A failure leaves the
wheelhouse as it was: exactly what this run created is removed.

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
from typing import Any, Mapping, Sequence

from packaging.utils import canonicalize_name, parse_wheel_filename

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
from wheelhouse.atomic import write_atomic
from wheelhouse.digest import sha256_of
from wheelhouse.errors import UsageError
from wheelhouse.progress import NullReporter, Reporter
from .recipe import Backport, BuildSettings, EngineRecipe, RecipeError, load_recipe, parse_recipe
from .requirements import Completion, EngineIncomplete, complete

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
    "EngineIncomplete",
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
    added: tuple[str, ...] = ()  # requirements staged with it ("name==version")
    missing: tuple[str, ...] = ()  # requirements still not in the wheelhouse (--allow-incomplete)


@dataclass(frozen=True)
class _Built:
    """The wheel of one build (or the reused one) and what made it."""

    wheel: Path  # in the build cache
    key: str
    reused: bool
    refs: Mapping[str, str]
    backports: tuple[AppliedBackport, ...]
    tree_status: tuple[str, ...]
    env: Mapping[str, str]
    log_rel: str
    links: tuple[str, ...]


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
) -> EngineBuild:
    """Fetch, check out, backport, build (or reuse), complete and record the engine wheel in ``wheelhouse``.

    ``index_urls``/``find_links``: where the engine's missing requirements are staged from
    (default: what the wheelhouse was staged from, in its wh.json). ``allow_incomplete``:
    record the missing ones (wh.json["engine"]["incomplete"]) instead of failing.
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
        built = _build_or_reuse(recipe, interp, wheelhouse, cache_dir, reporter, sink, base_env)
        _check_target(data, built.wheel.name, wheelhouse)
        return _add_to_wheelhouse(recipe, built, interp, wheelhouse, data, cache_dir, reporter, index_urls,
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
                    base_env: Mapping[str, str] | None) -> _Built:
    """The wheel for this recipe and interpreter: from the build cache when the key is unchanged, else built."""
    from wheelhouse.env.cuda import engine_environment
    from wheelhouse.env.links import apply_links, plan_links, record_path

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
    log_rel = f"logs/build-{recipe.name}-{recipe.commit[:12]}.log"
    cached_dir = cache_dir / "builds" / key[:24]
    cached = sorted(cached_dir.glob("*.whl")) if cached_dir.is_dir() else []
    if cached:
        status_file = cached_dir / "tree-status.txt"
        tree_status = tuple(status_file.read_text().splitlines()) if status_file.exists() else ()
        reporter.note(f"reusing {cached[0].name}: commit, backports, build env and interpreter are unchanged")
        return _Built(cached[0], key, True, refs, backports, tree_status, env, log_rel, tuple(made_links))
    wheel, tree_status = _build(recipe, mirror, refs, backports, interp, env, cached_dir, wheelhouse / log_rel,
                                reporter, sink)
    return _Built(wheel, key, False, refs, backports, tree_status, env, log_rel, tuple(made_links))


def _build(recipe, mirror, refs, backports, interp, env, cached_dir: Path, log_path: Path, reporter, sink):
    """Check out and build through the PEP 517 backend; the wheel lands in the build cache."""
    from .pep517 import build_wheel

    work = cached_dir.parents[1] / "src" / f"{recipe.name}-{recipe.commit[:12]}"
    reporter.start(f"checkout {recipe.name} {recipe.commit[:12]}")
    tree = checkout_source(recipe, mirror, refs, backports, work)
    reporter.finish(f"checkout {recipe.name} {recipe.commit[:12]}")
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
    (cached_dir / "tree-status.txt").write_text("\n".join(tree.status))
    return cached_dir / result.wheel.name, tuple(tree.status)


def _engine_record(recipe: EngineRecipe, built: _Built, interp, sha: str, artifacts: list[dict],
                   log_exists: bool) -> dict[str, Any]:
    """wh.json["engine"]: what was built from what, how, and where its pieces are."""
    from wheelhouse import __version__

    return {
        "name": recipe.name,
        "recipe": recipe.path.name if recipe.path else recipe.name,
        "repo": recipe.repo,
        "commit": recipe.commit,
        "fetched_refs": dict(built.refs),
        "backports": [b.to_json() for b in built.backports],
        "tree_status": list(built.tree_status),
        "build": {
            "subdirectory": recipe.build.subdirectory,
            "no_build_isolation": recipe.build.no_build_isolation,
            "env": dict(recipe.build.env),
            "CUDA_HOME": built.env.get("CUDA_HOME"),
            "PATH_head": built.env.get("PATH", "").split(os.pathsep)[0],
            "link_sonames": recipe.build.link_sonames,
            "python": interp.executable,
            "python_version": interp.version,
        },
        "wheel": f"wheels/{built.wheel.name}",
        "sha256": sha,
        "key": built.key,
        "tool": {"name": "wh", "version": __version__},
        "log": built.log_rel if log_exists else None,
        "artifacts": artifacts,
    }


def _add_to_wheelhouse(recipe, built: _Built, interp, wheelhouse: Path, data: dict[str, Any], cache_dir: Path,
                       reporter: Reporter, index_urls, find_links, allow_incomplete: bool, client) -> EngineBuild:
    """Copy the wheel and exported backports in, stage its missing requirements, and write the lock,
    simple/ and wh.json through the one writer; on any failure undo exactly this."""
    from wheelhouse.lock import PYLOCK, Lock, LockedFile, WH_JSON, read_pylock
    from wheelhouse.lock.writer import SIMPLE, environment_marker, requires_python_for, with_owned, write_index_files
    from wheelhouse.target import target_from_json

    name, version, _, _ = parse_wheel_filename(built.wheel.name)
    sha = sha256_of(built.wheel)
    dest = wheelhouse / "wheels" / built.wheel.name
    target = target_from_json(data["target"], where=f"{wheelhouse / WH_JSON} target")
    lock = read_pylock(wheelhouse) if (wheelhouse / PYLOCK).exists() else None
    inputs = data.get("inputs") or {}
    undo = _Undo(wheelhouse, (PYLOCK, WH_JSON, SIMPLE))
    try:
        if not dest.exists() or sha256_of(dest) != sha:
            undo.created(dest)
            _copy_in(built.wheel, dest)
        artifacts = _export_backports(built.backports, wheelhouse, undo)
        done: Completion = complete(
            dest, wheelhouse, lock.files if lock else (), target,
            index_urls=list(index_urls if index_urls is not None else inputs.get("indexes") or ()),
            find_links=list(find_links if find_links is not None else inputs.get("find_links") or ()),
            cache_dir=cache_dir, allow_incomplete=allow_incomplete, client=client, reporter=reporter)
        for p in done.paths:
            undo.created(p)
        record = _engine_record(recipe, built, interp, sha, artifacts, (wheelhouse / built.log_rel).exists())
        if done.missing:
            record["incomplete"] = list(done.missing)
        norm = canonicalize_name(name)
        files = [f for f in (lock.files if lock else ()) if f.name != norm] + list(done.added)
        files.append(LockedFile(
            name=norm, version=str(version), filename=built.wheel.name, path=f"wheels/{built.wheel.name}", sha256=sha,
            size=built.wheel.stat().st_size, tool={"source": "build", "recipe": record["recipe"], "commit": recipe.commit},
        ))
        capture = wheelhouse / "capture_target.py"
        if not capture.exists():
            from wheelhouse.resources import capture_script

            undo.created(capture)
            write_atomic(capture, capture_script().read_bytes())
        new_lock = Lock(files=tuple(files),
                        environments=lock.environments if lock else (environment_marker(target),),
                        requires_python=lock.requires_python if lock else requires_python_for(target),
                        created_by=(lock.created_by if lock else "") or "wh")
        owned = ["wheels", "capture_target.py", *(a["path"] for a in artifacts), *([record["log"]] if record["log"] else [])]
        write_index_files(wheelhouse, new_lock, with_owned({**data, "engine": record}, owned))
    except BaseException:
        undo.rollback()
        raise
    undo.commit()
    return EngineBuild(wheel=dest, sha256=sha, reused=built.reused,
                       log_path=wheelhouse / built.log_rel if (wheelhouse / built.log_rel).exists() else None,
                       record=record, links=built.links,
                       added=tuple(f"{f.name}=={f.version}" for f in done.added), missing=done.missing)


def _copy_in(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def _export_backports(backports, wheelhouse: Path, undo: "_Undo") -> list[dict]:
    """Write each backport that names an ``export`` path into the wheelhouse (a patch payload)."""
    artifacts = []
    for b in backports:
        if b.export:
            target = wheelhouse / b.export
            if not target.exists():
                undo.created(target)
            write_atomic(target, b.content)
            artifacts.append({"path": b.export, "sha256": b.sha256, "before_sha256": b.before_sha256,
                              "source": f"{b.ref}:{b.path}", "file": b.path})
    return artifacts


class _Undo:
    """What one build changed in a wheelhouse, so a failure puts back exactly what was there.

    The index files (pylock.toml, wh.json, simple/) are copied aside first; files the build
    creates are listed as they are made.
    """

    def __init__(self, root: Path, index_paths: Sequence[str]):
        self.root = root
        self.saved = root / f".wh-build-undo-{os.getpid()}"
        self.paths: list[Path] = []
        self.had: list[str] = []
        shutil.rmtree(self.saved, ignore_errors=True)
        for rel in index_paths:
            src = root / rel
            if src.is_dir():
                shutil.copytree(src, self.saved / rel)
            elif src.is_file():
                (self.saved / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, self.saved / rel)
            else:
                continue
            self.had.append(rel)
        self.index_paths = tuple(index_paths)

    def created(self, path: Path) -> None:
        self.paths.append(path)

    def rollback(self) -> None:
        for rel in self.index_paths:
            cur = self.root / rel
            if cur.is_dir():
                shutil.rmtree(cur)
            elif cur.exists():
                cur.unlink()
            if rel in self.had:
                os.replace(self.saved / rel, cur)
        for p in self.paths:
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        self.commit()

    def commit(self) -> None:
        shutil.rmtree(self.saved, ignore_errors=True)
