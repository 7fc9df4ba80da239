"""What the previous wheelhouse at ``-o`` holds that a re-stage needs: the wheels its lock vouches
for (reused, not downloaded again) and an engine ``wh build`` added to it, carried over (its
wheel, wh.json["engine"], its log and exported files, and its requirements resolved with the
stack) unless the manifest's engine recipe now names another engine or commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from packaging.utils import canonicalize_name

from wheelhouse import __version__
from wheelhouse.digest import sha256_of
from wheelhouse.errors import WhError
from .staged import StagedFile

if TYPE_CHECKING:  # the readers are loaded by read_previous: a dry run has no previous wheelhouse
    from wheelhouse.lock import LockedFile
    from wheelhouse.manifest import StackManifest
    from wheelhouse.progress import Reporter
    from wheelhouse.target import TargetProfile

__all__ = ["KeptEngine", "Previous", "read_previous"]


@dataclass(frozen=True)
class KeptEngine:
    """A built engine of the previous wheelhouse that the new one carries over."""

    record: Mapping[str, Any]  # wh.json["engine"]
    file: StagedFile  # its lock entry (tool: source = build)
    paths: tuple[str, ...]  # wheel, log, exported files (relative to the wheelhouse)
    requirements: tuple[str, ...]  # its Requires-Dist that apply on the target


@dataclass(frozen=True)
class Previous:
    """The previous wheelhouse, as far as a re-stage is concerned."""

    wheels: Mapping[str, str]  # filename -> sha256 that the previous lock vouches for
    engine: KeptEngine | None = None
    notes: tuple[str, ...] = ()
    # The sha256 of the wheels whose RECORD the previous stage checked (its wh.json's record_checked, written by
    # this version of wh): a wheel placed now with one of these hashes has the same bytes, and the same answer.
    checked: frozenset[str] = frozenset()


def read_previous(out: Path, manifest: StackManifest | None, target: TargetProfile, reporter: Reporter) -> Previous:
    """The previous wheelhouse's verified wheels and the built engine to carry over (or why not)."""
    from wheelhouse.lock import read_pylock
    from wheelhouse.lock.output import read_meta
    from wheelhouse.recordfile import record_checked

    meta = read_meta(out) if out.is_dir() else None
    if meta is None:
        return Previous({})
    try:
        lock_files = read_pylock(out).files
    except WhError:
        lock_files = ()
    wheels = {f.filename: f.sha256 for f in lock_files}
    # Only from this version of wh: another may have checked by other rules (the answer is this check's, or none).
    tool = meta.get("tool")
    checked = record_checked(meta) if isinstance(tool, dict) and tool.get("version") == __version__ else frozenset()
    record = meta.get("engine")
    if not (isinstance(record, dict) and record.get("wheel") and record.get("sha256")):
        return Previous(wheels, checked=checked)  # no engine was built into it
    why_not = _engine_replaced(record, manifest, out)
    if why_not is None:
        kept = _kept_engine(out, record, lock_files, target)
        if isinstance(kept, KeptEngine):
            reporter.note(f"keeping the engine {kept.file.filename} that `wh build` added (commit "
                          f"{str(record.get('commit', ''))[:12]})")
            return Previous(wheels, kept, checked=checked)
        why_not = kept
    reporter.note(why_not)
    return Previous(wheels, None, (why_not,), checked)


def _engine_replaced(record: Mapping[str, Any], manifest: StackManifest | None, out: Path) -> str | None:
    """Why the built engine must go: the manifest's engine recipe names another engine or commit."""
    if manifest is None or manifest.engine_recipe is None:
        return None
    from wheelhouse.engine.recipe import load_recipe

    recipe = load_recipe(str(manifest.engine_recipe))
    # A tag-only recipe (no commit could be pinned) keeps the engine built from that tag.
    same = recipe.commit == record.get("commit") if recipe.commit else recipe.tag == record.get("tag")
    if recipe.name == record.get("name") and same:
        return None
    return (f"leaving out the engine {Path(str(record['wheel'])).name} built at commit "
            f"{str(record.get('commit', ''))[:12]}: the manifest's engine is now {recipe.name} at "
            f"{recipe.commit[:12] if recipe.commit else 'tag ' + str(recipe.tag)} (build it: wh build {manifest.engine_recipe} -o {out})")


def _kept_engine(out: Path, record: Mapping[str, Any], lock_files: Sequence[LockedFile],
                 target: TargetProfile) -> KeptEngine | str:
    """The engine to carry over, or the sentence saying why it cannot be (its wheel is gone or damaged)."""
    from wheelhouse.lock.journal import inside_wheelhouse

    rel = str(record["wheel"])
    wheel = out / rel
    # wh.json may have been edited: a path outside the wheelhouse is never read, linked or replaced
    if not inside_wheelhouse(out, rel) or not wheel.is_file() or sha256_of(wheel) != record["sha256"]:
        return f"leaving out the engine {Path(rel).name}: its wheel is missing or damaged (run `wh build` again)"
    entry = next((f for f in lock_files if f.filename == wheel.name), None)
    record = _inside_only(out, record)
    extra_paths = [record.get("log"), *[a.get("path") for a in record.get("artifacts") or () if isinstance(a, dict)]]
    paths = (rel, *[p for p in extra_paths if isinstance(p, str) and (out / p).is_file()])
    reqs: tuple[str, ...] = ()
    if not record.get("incomplete"):  # `wh build --allow-incomplete`: its requirements were never all here
        from wheelhouse.lock.bootstrap import wheel_requirements  # (a restage with a built engine only)

        reqs = tuple(str(r) for r in wheel_requirements(wheel) if r.marker is None or target.evaluate(r.marker, extra=None))
    file = StagedFile(
        name=entry.name if entry else canonicalize_name(wheel.name.split("-")[0]),
        version=entry.version if entry else wheel.name.split("-")[1],
        filename=wheel.name, url=str(wheel), sha256=record["sha256"], size=wheel.stat().st_size,
        requires_python=entry.requires_python if entry else None,
        tool=dict(entry.tool) if entry else {"source": "build", "commit": record.get("commit")},
    )
    return KeptEngine(record, file, paths, reqs)


def _inside_only(out: Path, record: Mapping[str, Any]) -> Mapping[str, Any]:
    """The engine's record without the log or exported files it names outside the wheelhouse (an edited wh.json)."""
    from wheelhouse.lock.journal import inside_wheelhouse

    def outside(p: object) -> bool:
        return isinstance(p, str) and not inside_wheelhouse(out, p)

    cleaned = dict(record)
    if outside(cleaned.get("log")):
        cleaned["log"] = None
    if isinstance(cleaned.get("artifacts"), list):
        cleaned["artifacts"] = [a for a in cleaned["artifacts"] if not (isinstance(a, dict) and outside(a.get("path")))]
    return cleaned
