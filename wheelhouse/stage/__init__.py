"""Stage: resolve a stack for the TARGET, fetch it verified, and write a self-bootstrapping wheelhouse.

``stage(...)`` is the whole of ``wh stage`` without the command line. It
resolves (wheelhouse.resolve) against the target profile, never the host;
fetches every pinned wheel through the verified, cached fetch; and writes the
layout described in wheelhouse.lock: ``wheels/``, ``pylock.toml``, ``simple/``,
``wh.json``, ``bootstrap/`` and ``capture_target.py``.

Nothing is half-done: the new wheelhouse is assembled in a sibling folder and
swapped in at the end, so a failure (a bad hash, a dead network, Ctrl-C)
leaves the previous wheelhouse exactly as it was. Restaging is incremental:
wheels already in the old wheelhouse are verified and reused, never
downloaded again, and wheels no longer pinned simply are not carried over.
This module decides what goes in; wheelhouse.stage_writer writes it.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet

from wheelhouse import __version__
from .bootstrap import BOOTSTRAP_DIR, BootstrapError, bootstrap_command, self_wheel, wheel_requirements
from wheelhouse.errors import UsageError, WhError
from wheelhouse.fetch import FetchItem, fetch_all
from wheelhouse.fetch.cache import add_to_cache, cached_path, default_cache_dir, place, sha256_of
from wheelhouse.index.http import HttpClient
from wheelhouse.manifest import StackManifest
from wheelhouse.progress import NullReporter, Reporter
from .release import ReleaseArtifact, load_releases, release_links_page
from wheelhouse.manifest.requirements_file import RequirementLine, check_hashes
from .writer import (
    WHEELS,
    BadOutput,
    StagedFile,
    StageError,
    check_out,
    environment_marker,
    new_tree,
    previous_wheels,
    requires_python_for,
    swap_in,
    write_wheelhouse,
)
from wheelhouse.target import TargetProfile

__all__ = ["StageError", "BadOutput", "StagedFile", "StageResult", "stage", "environment_marker", "requires_python_for"]


@dataclass(frozen=True)
class StageResult:
    out: Path
    target: TargetProfile
    files: tuple[StagedFile, ...]
    dry_run: bool
    bootstrap: tuple[StagedFile, ...] = ()
    bootstrap_command: str | None = None
    removed: tuple[str, ...] = ()  # wheels of the previous wheelhouse that are no longer pinned
    reused: int = 0  # wheels taken from the cache or the previous wheelhouse, not downloaded
    indexes: tuple[str, ...] = ()

    @property
    def total_size(self) -> int:
        return sum(f.size or 0 for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "out": str(self.out),
            "target": self.target.describe(),
            "indexes": list(self.indexes),
            "count": len(self.files),
            "total_size": self.total_size,
            "packages": [f.to_json() for f in self.files],
            "bootstrap": {
                "command": self.bootstrap_command,
                "packages": [f.to_json() for f in self.bootstrap],
            } if self.bootstrap_command else None,
            "removed": list(self.removed),
            "reused": self.reused,
        }


# --- requirements --------------------------------------------------------------------------------

def _parse_requirements(reqs: Sequence[str], what: str) -> list[str]:
    out = []
    for r in reqs:
        r = r.strip()
        if not r:
            continue
        if r.endswith(".whl") or "/" in r.split(";")[0] and "@" not in r:
            out.append(r)  # a wheel file or URL: the resolver's direct reference
            continue
        try:
            Requirement(r)
        except InvalidRequirement as exc:
            # packaging's message is a line and a caret under the bad spot: the line says it, the caret follows.
            first, _, rest = str(exc).partition("\n")
            raise UsageError(f"{what} {r!r} is not a valid requirement: {first}", detail=rest or None,
                             hint="write it like `name==1.0` or `name>=2; python_version < \"3.12\"`") from exc
        out.append(r)
    return out


# --- the main entry point ------------------------------------------------------------------------

def stage(
    manifest: StackManifest | None,
    requirements: Sequence[str],
    target: TargetProfile,
    out: Path,
    *,
    index_urls: Sequence[str] | None = None,
    find_links: Sequence[str] = (),
    constraints: Sequence[str] = (),
    jobs: int = 8,
    dry_run: bool = False,
    cache_dir: Path | None = None,
    reporter: Reporter | None = None,
    bootstrap: bool = True,
    client: HttpClient | None = None,
    prereleases: bool | None = None,
    hashed_requirements: Sequence[RequirementLine] = (),
) -> StageResult:
    """Resolve ``requirements`` (plus the manifest's) for ``target`` and write a wheelhouse at ``out``.

    ``index_urls``: the first is the main index, the rest extra indexes; None
    means the manifest's indexes, else pip's configured/default index. With
    ``dry_run`` nothing is downloaded but index pages and metadata, and nothing
    is written; the result lists the pins.

    ``hashed_requirements`` (with the manifest's): requirement/constraint lines whose ``--hash``
    options a pinned file of their project must match (those whose marker holds for the target);
    checked after resolution and again once downloaded, before anything is written.
    """
    from wheelhouse.index import PackageSource, default_index_url
    from wheelhouse.index.metadata import MetadataReader
    from wheelhouse.resolve import ResolveError, resolve

    reporter = reporter or NullReporter()
    out = Path(out)
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    client = client or HttpClient(cache_dir=cache)
    if not dry_run:
        check_out(out)
        try:  # before resolving: an unusable cache must not fail the run after the downloads began
            cache.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cache folder {cache}: cannot create it ({exc.strerror})",
                             hint="pass --cache-dir DIR (or set WH_CACHE_DIR) to a folder you can write to") from exc

    for spec in (manifest.patches if manifest else ()):  # found now, not after the downloads
        if not Path(spec).is_file():
            raise UsageError(f"patch spec {spec} does not exist",
                             hint="fix [[patch]] spec in the stack manifest (it is looked up beside the manifest, "
                                  "then under engine_src/)")
    reqs = _parse_requirements([*(manifest.requirements if manifest else ()), *requirements], "requirement")
    cons = _parse_requirements([*(manifest.constraints if manifest else ()), *constraints], "constraint")
    if index_urls is None or len(index_urls) == 0:
        if manifest and (manifest.index_url or manifest.extra_index_urls):
            index_urls = [manifest.index_url or default_index_url(), *manifest.extra_index_urls]
        else:
            index_urls = [default_index_url()]
    for u in index_urls:  # a typo here would only surface as a connection error, mid-resolve
        if urllib.parse.urlsplit(u).scheme.lower() not in ("http", "https", "file"):
            raise UsageError(f"index URL {u!r} is not an http(s):// or file:// URL",
                             hint="write it like https://HOST/simple or file:///path/to/simple (--index-url, "
                                  "--extra-index-url, or the manifest's index-url)")
    links = [*(manifest.find_links if manifest else ()), *find_links]
    toolchains = manifest.toolchains if manifest else ()
    pre = prereleases if prereleases is not None else bool(manifest and manifest.prereleases)
    hash_rules = [line for line in (*(manifest.hashed_requirements if manifest else ()), *hashed_requirements)
                  if _applies(line, target)]

    with tempfile.TemporaryDirectory(prefix="wh-stage-") as scratch:
        scratch_dir = Path(scratch)
        # [[manifest]] release wheels: a find-links page with their sha256, pinned ==.
        artifacts: list[ReleaseArtifact] = []
        release_prov: list[dict] = []
        if manifest and manifest.release_manifests:
            reporter.note(f"reading {len(manifest.release_manifests)} release manifest(s)")
            artifacts, release_prov = load_releases(manifest.release_manifests, client)
            page = scratch_dir / "release-links.html"
            page.write_text(release_links_page(artifacts), encoding="utf-8")
            links.append(str(page))
            reqs += [a.requirement for a in artifacts if a.requirement not in reqs]
        if not reqs:
            raise UsageError("nothing to stage: no requirements given", hint="wh stage manifests/demo.toml -o DIR, or wh stage 'name==1.0' -o DIR")

        source = PackageSource(index_urls, links, client=client)
        reader = MetadataReader(client, cache_dir=cache)
        reporter.note(f"resolving {len(reqs)} requirement(s) for {target.describe()}")
        resolution = resolve(reqs, target, source, constraints=cons, toolchains=toolchains, prereleases=pre,
                             reporter=reporter, metadata=reader)
        by_url = {a.url: a for a in artifacts}
        files = tuple(sorted((_staged(p, by_url) for p in resolution.pins), key=lambda f: f.name))
        check_hashes(files, hash_rules)  # files with a published sha256; the rest once downloaded

        boot_files: tuple[StagedFile, ...] = ()
        boot_reqs: list[str] = []
        wh_wheel = None
        if bootstrap:
            wh_wheel = self_wheel(cache)
            boot_reqs = _bootstrap_requirements(wh_wheel.path, target)
            if boot_reqs:
                reporter.note(f"resolving wh's own {len(boot_reqs)} dependencies for the target (bootstrap/)")
                try:
                    boot = resolve(boot_reqs, target, source, constraints=(), toolchains=(), prereleases=False,
                                   reporter=reporter, metadata=reader)
                except ResolveError as exc:
                    # The stack resolved; only bootstrap/ did not -- say which, or it reads like the stack failed.
                    raise BootstrapError(
                        f"could not resolve wh's own dependencies for bootstrap/ from "
                        f"{', '.join(source.locations())}: {exc.message}",
                        hint="pass --no-bootstrap, or add --find-links with wh's dependencies for the target",
                        detail="\n".join(filter(None, [
                            f"the stack itself resolved ({len(files)} package{'s' if len(files) != 1 else ''}); "
                            f"wh's own dependencies: "
                            + ", ".join(boot_reqs),
                            exc.detail,
                        ])),
                    ) from exc
                boot_files = tuple(sorted((_staged(p, {}) for p in boot.pins), key=lambda f: f.name))

        indexes = tuple(source.locations())
        if dry_run:
            return StageResult(out, target, files, True, bootstrap=boot_files,
                               bootstrap_command=bootstrap_command() if bootstrap else None, indexes=indexes)

        # --- fetch, into a new tree beside the old one ---------------------------------------
        cache.mkdir(parents=True, exist_ok=True)
        old = previous_wheels(out)
        reused = _seed_cache_from(out, old, [*files, *boot_files], cache)
        new = new_tree(out)
        try:
            # One parallel pass for the stack and the bootstrap, then each file to its folder.
            files, boot_files = _fetch_groups([(files, new / WHEELS), (boot_files, new / BOOTSTRAP_DIR)],
                                              new / ".fetch", cache, jobs, client, reporter)
            check_hashes(files, hash_rules)
            if bootstrap and wh_wheel is not None:
                shutil.copyfile(wh_wheel.path, new / BOOTSTRAP_DIR / wh_wheel.path.name)
                own = _local_file("wh", __version__, new / BOOTSTRAP_DIR / wh_wheel.path.name, origin=wh_wheel.origin)
                boot_files = tuple(sorted((*boot_files, own), key=lambda f: f.name))
            write_wheelhouse(new, manifest, target, files, boot_files, wh_wheel, {
                "requirements": reqs, "constraints": cons, "indexes": indexes, "find_links": links,
                "release_manifests": release_prov,
            })
            removed = tuple(sorted(set(old) - {f.filename for f in files}))
            swap_in(new, out)
        finally:
            if new.exists():
                shutil.rmtree(new, ignore_errors=True)
        return StageResult(
            out, target, files, False, bootstrap=boot_files,
            bootstrap_command=bootstrap_command() if bootstrap else None,
            removed=removed, reused=reused, indexes=indexes,
        )


def _staged(pin, releases: dict[str, ReleaseArtifact]) -> StagedFile:
    d = pin.distfile
    art = releases.get(d.url)
    return StagedFile(
        name=pin.name,
        version=str(pin.version),
        filename=d.filename,
        url=d.url,
        sha256=d.sha256 or (art.sha256 if art else None),
        size=d.size if d.size is not None else (art.size if art else None),
        requires_python=d.requires_python,
        parents=tuple(getattr(pin, "parents", ()) or ()),
        extras=tuple(sorted(getattr(pin, "extras", ()) or ())),
        origin=art.manifest_url if art else getattr(d, "origin", ""),
        release_key=art.key if art else None,
    )


def _applies(line: RequirementLine, target: TargetProfile) -> bool:
    """Whether a requirement line's marker holds for the target (uv's universal output pins a
    project twice, under exclusive markers, each with its own hashes)."""
    try:
        marker = Requirement(line.text).marker
    except InvalidRequirement:
        return True  # a wheel path or URL: no marker
    return marker is None or target.evaluate(marker, extra=None)


def _local_file(name: str, version: str, path: Path, origin: str) -> StagedFile:
    return StagedFile(name=name, version=version, filename=path.name, url=path.name, sha256=sha256_of(path),
                      size=path.stat().st_size, origin=origin)


def _bootstrap_requirements(wheel: Path, target: TargetProfile) -> list[str]:
    """wh's own Requires-Dist that apply on the target (markers judged for the target, no extras)."""
    with_python = SpecifierSet(">=3.10")
    if not target.accepts_python(with_python):
        raise BootstrapError(
            f"wh needs Python {with_python}; the target runs {target.python_version}",
            hint="stage with --no-bootstrap and install wh on the box another way",
        )
    out = []
    for req in wheel_requirements(wheel):
        if req.marker is None or target.evaluate(req.marker, extra=None):
            out.append(str(Requirement(f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}{req.specifier}")))
    return out


def _seed_cache_from(out: Path, old: dict[str, str], files: Sequence[StagedFile], cache: Path) -> int:
    """Put the previous wheelhouse's still-pinned wheels into the cache (verified); count reuses."""
    reused = 0
    for f in files:
        if f.sha256 and cached_path(cache, f.sha256).exists():
            reused += 1
            continue
        for folder in (WHEELS, BOOTSTRAP_DIR):
            prev = out / folder / f.filename
            if f.sha256 and prev.is_file() and (folder == BOOTSTRAP_DIR or old.get(f.filename) == f.sha256):
                try:
                    add_to_cache(cache, prev, f.sha256)
                    reused += 1
                    break
                except WhError:
                    pass  # the old copy was damaged: download it again
    return reused


def _fetch_groups(groups, scratch: Path, cache: Path, jobs: int, client, reporter) -> list[tuple[StagedFile, ...]]:
    """Fetch every group's files in one parallel pass, place each group in its folder, and fill in
    sha256/size for sources that published none (find-links folders)."""
    everything = [f for files, _ in groups for f in files]
    items = [FetchItem(f.url, f.filename, f.sha256, f.size) for f in everything]
    paths = iter(fetch_all(items, scratch, cache, jobs=jobs, client=client, reporter=reporter, task="download"))
    out = []
    for files, dest in groups:
        done = []
        for f in files:
            p = place(next(paths), dest / f.filename)
            done.append(dataclasses.replace(f, sha256=f.sha256 or sha256_of(p), size=p.stat().st_size))
        out.append(tuple(done))
    shutil.rmtree(scratch, ignore_errors=True)
    return out
