"""An engine wheel's runtime requirements in the wheelhouse it is added to (issue 10.4).

A built engine whose Requires-Dist are not in the wheelhouse makes the offline install
incomplete by construction (a delta wheelhouse counts what the image provides, and records what the
engine relies on in ``assumed_present``). ``missing_requirements`` judges each requirement for the
wheelhouse's TARGET (markers, never the host) against what the lock pins; ``complete``
resolves the engine together with the lock (every locked wheel pinned ``==``, the
wheelhouse's own wheels/ as a find-links folder, then the indexes the wheelhouse was
staged from or the flags give) and fetches what is missing through the verified fetch.
Offline, or when an index cannot serve them, ``EngineIncomplete`` lists every missing
requirement (unless the caller accepts an incomplete wheelhouse).
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from wheelhouse.digest import sha256_of
from wheelhouse.errors import WhError
from wheelhouse.lock import LockedFile
from wheelhouse.progress import NullReporter, Reporter
from wheelhouse.target import TargetProfile

__all__ = ["EngineIncomplete", "Completion", "missing_requirements", "relied_on_image", "image_versions", "complete"]


class EngineIncomplete(WhError):
    """The engine's requirements are not all in the wheelhouse and could not be staged."""

    code = "engine-incomplete"


@dataclass(frozen=True)
class Completion:
    """What ``complete`` added to wheels/ (lock entries, files) and what is still missing."""

    added: tuple[LockedFile, ...] = ()
    paths: tuple[Path, ...] = ()
    missing: tuple[str, ...] = ()
    assumed: tuple[tuple[str, str], ...] = ()  # (name, version) the image provides and the engine relies on


def _engine_requirements(wheel: Path, target: TargetProfile) -> list[Requirement]:
    from wheelhouse.lock.bootstrap import wheel_requirements

    return [r for r in wheel_requirements(wheel) if r.marker is None or target.evaluate(r.marker, extra=None)]


def _admits(req: Requirement, version: str | None) -> bool:
    try:
        return version is not None and req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def image_versions(target: TargetProfile, data: Mapping[str, Any]) -> dict[str, str]:
    """What the box's image provides, as {name: version}, when ``data`` (a wh.json) is a delta against it.

    A wheelhouse staged with ``--full`` (or before deltas existed) relies on nothing of the image,
    so neither does its engine: empty then.
    """
    image = data.get("image")
    if not isinstance(image, Mapping) or image.get("full", True):
        return {}
    return {canonicalize_name(d.name): d.version for d in target.provided}


def missing_requirements(wheel: Path, lock_files: Sequence[LockedFile], target: TargetProfile,
                         image: Mapping[str, str] | None = None) -> list[str]:
    """The engine's requirements (markers judged for ``target``) that no locked wheel satisfies,
    nor (for a delta) the version the target's image provides."""
    engine = canonicalize_name(parse_wheel_filename(wheel.name)[0])
    have: dict[str, str] = {f.name: f.version for f in lock_files if f.name != engine}
    image = image or {}
    return [str(req) for req in _engine_requirements(wheel, target)
            if not _admits(req, have.get(canonicalize_name(req.name)))
            and not _admits(req, image.get(canonicalize_name(req.name)))]


def relied_on_image(wheel: Path, lock_files: Sequence[LockedFile], target: TargetProfile,
                    image: Mapping[str, str]) -> dict[str, str]:
    """The engine's requirements that only the image satisfies: {name: version} the box must keep."""
    engine = canonicalize_name(parse_wheel_filename(wheel.name)[0])
    have: dict[str, str] = {f.name: f.version for f in lock_files if f.name != engine}
    out = {}
    for req in _engine_requirements(wheel, target):
        name = canonicalize_name(req.name)
        if not _admits(req, have.get(name)) and _admits(req, image.get(name)):
            out[name] = image[name]
    return out


def complete(wheel: Path, wheelhouse: Path, lock_files: Sequence[LockedFile], target: TargetProfile, *,
             index_urls: Sequence[str], find_links: Sequence[str], cache_dir: Path, allow_incomplete: bool,
             client=None, reporter: Reporter | None = None,
             on_create: Callable[[Path], None] | None = None, image: Mapping[str, str] | None = None) -> Completion:
    """Stage into ``wheelhouse/wheels`` what the engine needs and the lock lacks (see the module docstring).

    Returns the new lock entries and the files written; ``on_create(path)`` is told of each
    BEFORE it is written (the caller's undo journal). ``image`` ({name: version}, a delta's
    image): requirements it satisfies are not staged but listed in ``Completion.assumed``.
    """
    reporter = reporter or NullReporter()
    image = dict(image or {})
    missing = missing_requirements(wheel, lock_files, target, image)
    relied = relied_on_image(wheel, lock_files, target, image)
    if not missing:
        return Completion(assumed=tuple(sorted(relied.items())))
    where = [*index_urls, *find_links]
    try:
        if not where:
            raise EngineIncomplete("no index recorded in the wheelhouse and none given")
        reporter.note(f"resolving {len(missing)} requirement(s) of {wheel.name} for the wheelhouse's target: "
                      + ", ".join(missing))
        done = _stage_missing(wheel, wheelhouse, lock_files, target, index_urls, find_links, cache_dir, client,
                              reporter, on_create, image)
        return replace(done, assumed=tuple(sorted({**relied, **dict(done.assumed)}.items())))
    except WhError as exc:
        from wheelhouse.resolve import ResolutionConflict, ToolchainSkew

        if isinstance(exc, (ResolutionConflict, ToolchainSkew)):
            raise  # not a question of reach: the engine cannot live with this lock
        if allow_incomplete:
            reporter.note(f"the wheelhouse stays incomplete (--allow-incomplete): {', '.join(missing)}")
            return Completion(missing=tuple(missing), assumed=tuple(sorted(relied.items())))
        raise EngineIncomplete(
            f"{wheel.name} needs {len(missing)} requirement(s) the wheelhouse does not have: {', '.join(missing)}",
            hint=("stage them from an index: wh build ... --index-url URL (or --find-links DIR); "
                  "or accept an incomplete wheelhouse with --allow-incomplete"),
            detail=f"could not stage them from {', '.join(where) or 'anywhere (offline)'}: {exc}",
        ) from exc


def _stage_missing(wheel, wheelhouse, lock_files, target, index_urls, find_links, cache_dir, client,
                   reporter, on_create, image: Mapping[str, str]) -> Completion:
    from wheelhouse.fetch import FetchItem, fetch_all
    from wheelhouse.fetch.cache import place
    from wheelhouse.index import PackageSource
    from wheelhouse.index.http import HttpClient
    from wheelhouse.index.metadata import MetadataReader
    from wheelhouse.resolve import resolve

    client = client or HttpClient(cache_dir=cache_dir)
    engine = canonicalize_name(parse_wheel_filename(wheel.name)[0])
    kept = [f for f in lock_files if f.name != engine]
    source = PackageSource(list(index_urls), [str(wheelhouse / "wheels"), *find_links], client=client)
    provided = [d for d in target.provided if canonicalize_name(d.name) in image]
    pins = resolve([str(wheel), *(f"{f.name}=={f.version}" for f in kept)], target, source,
                   reporter=reporter, metadata=MetadataReader(client, cache_dir=cache_dir), provided=provided).pins
    have = {f.name for f in kept}
    assumed = tuple(sorted((p.name, p.version) for p in pins if p.provided and p.name not in have))
    new = [p for p in pins if p.name not in have and p.name != engine and not p.provided]
    if not new:
        return Completion(assumed=assumed)
    scratch = wheelhouse / f".wh-fetch-{uuid.uuid4().hex[:8]}"
    items = [FetchItem(p.distfile.url, p.distfile.filename, p.distfile.sha256, p.distfile.size) for p in new]
    added, paths = [], []
    try:
        fetched = fetch_all(items, scratch, cache_dir, client=client, reporter=reporter, task="download")
        for pin, got in zip(new, fetched):
            dest = wheelhouse / "wheels" / pin.distfile.filename
            if dest.exists():
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            if on_create is not None:
                on_create(dest)
            paths.append(place(got, dest))
            origin = getattr(pin.distfile, "origin", "") or ""
            added.append(LockedFile(
                name=pin.name, version=str(pin.version), filename=dest.name, path=f"wheels/{dest.name}",
                sha256=pin.distfile.sha256 or sha256_of(dest), size=dest.stat().st_size,
                requires_python=pin.distfile.requires_python,
                index=origin if origin.startswith(("http://", "https://", "file://")) else None,
                tool={"parents": [engine], "source": "engine-requirement"},
            ))
    except BaseException:
        for p in paths:
            p.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    reporter.note(f"staged {len(added)} requirement(s) of {wheel.name}: "
                  + ", ".join(f"{f.name}=={f.version}" for f in added))
    return Completion(tuple(added), tuple(paths), assumed=assumed)
