"""Record a built engine in its wheelhouse: the wheel, exported backports, its missing requirements,
and (through the one writer, lock.writer) pylock.toml, simple/ and wh.json["engine"].

A failure at any step puts back exactly what was there (``_Undo``): the index files are copied
aside first, and every file this run creates is listed as it is made.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from packaging.utils import canonicalize_name, parse_wheel_filename

from wheelhouse.atomic import write_atomic
from wheelhouse.digest import sha256_of
from wheelhouse.lock.journal import UndoJournal
from wheelhouse.progress import Reporter

from .recipe import EngineRecipe
from .requirements import Completion, complete, image_versions
from .source import AppliedBackport

__all__ = ["EngineBuild", "Built", "add_to_wheelhouse"]


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
class Built:
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


def _engine_record(recipe: EngineRecipe, built: Built, interp, sha: str, artifacts: list[dict],
                   log_exists: bool) -> dict[str, Any]:
    """wh.json["engine"]: what was built from what, how, and where its pieces are."""
    from wheelhouse import __version__

    return {
        "name": recipe.name,
        "recipe": recipe.path.name if recipe.path else recipe.name,
        "repo": recipe.repo,
        "commit": recipe.commit,
        **({"tag": recipe.tag} if recipe.tag else {}),
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


def add_to_wheelhouse(recipe, built: Built, interp, wheelhouse: Path, data: dict[str, Any], cache_dir: Path,
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
    undo = UndoJournal(wheelhouse, (PYLOCK, WH_JSON, SIMPLE))
    try:
        if not dest.exists() or sha256_of(dest) != sha:
            undo.replacing(dest)
            _copy_in(built.wheel, dest)
        artifacts = _export_backports(built.backports, wheelhouse, undo)
        image = image_versions(target, data)
        done: Completion = complete(
            dest, wheelhouse, lock.files if lock else (), target,
            index_urls=list(index_urls if index_urls is not None else inputs.get("indexes") or ()),
            find_links=list(find_links if find_links is not None else inputs.get("find_links") or ()),
            cache_dir=cache_dir, allow_incomplete=allow_incomplete, client=client, reporter=reporter,
            on_create=undo.created, image=image)
        data = _with_assumed(data, done.assumed)
        data = _with_record_checked(data, [dest, *done.paths], [sha, *(f.sha256 for f in done.added)])
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
                        created_by=(lock.created_by if lock else "") or "wh",
                        tool=lock.tool if lock else {})  # the stage's overrides and exclusions stay recorded
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


def _with_record_checked(data: dict[str, Any], wheels, shas) -> dict[str, Any]:
    """wh.json with these wheels recorded as RECORD-checked, once each has been (wheelhouse.lock.records:
    one whose RECORD lies about a file is refused, RecordMismatch)."""
    from wheelhouse.recordfile import RECORD_CHECKED, record_checked
    from wheelhouse.lock.records import RecordChecks

    checks = RecordChecks()
    try:
        for w in wheels:
            checks.submit(w)
        checks.wait()
    finally:
        checks.close()
    return {**data, RECORD_CHECKED: sorted(record_checked(data) | set(shas))}


def _with_assumed(data: dict[str, Any], assumed) -> dict[str, Any]:
    """wh.json with the image distributions the engine relies on added to ``assumed_present``
    (``wh install`` refuses a box that no longer provides them)."""
    if not assumed:
        return data
    rows = {r["name"]: r["version"] for r in data.get("assumed_present") or () if isinstance(r, dict) and "name" in r}
    rows.update(dict(assumed))
    return {**data, "assumed_present": [{"name": n, "version": v} for n, v in sorted(rows.items())]}


def _copy_in(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def _export_backports(backports, wheelhouse: Path, undo: UndoJournal) -> list[dict]:
    """Write each backport that names an ``export`` path into the wheelhouse (a patch payload)."""
    artifacts = []
    for b in backports:
        if b.export:
            target = wheelhouse / b.export
            undo.replacing(target)
            write_atomic(target, b.content)
            artifacts.append({"path": b.export, "sha256": b.sha256, "before_sha256": b.before_sha256,
                              "source": f"{b.ref}:{b.path}", "file": b.path})
    return artifacts
