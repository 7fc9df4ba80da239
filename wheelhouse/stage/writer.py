"""Write a staged wheelhouse: its layout, lock, simple index, patches and provenance, swapped in whole.

The layout is the one described in wheelhouse.lock: ``wheels/``, ``pylock.toml``,
``simple/``, ``wh.json``, ``bootstrap/``, ``patches/`` and ``capture_target.py``.
A new wheelhouse is written into a sibling folder and swapped in at the end
(two renames in one folder), so a failure leaves the previous one exactly as it
was. wheelhouse.stage decides what goes in; this module only writes it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import shutil
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from wheelhouse import __version__
from wheelhouse.datafile import load_toml
from wheelhouse.errors import WhError
from wheelhouse.digest import sha256_of
from wheelhouse.lock import WH_JSON, Lock, LockedFile
from wheelhouse.lock.output import BadOutput, check_output as check_out
from wheelhouse.lock.writer import (
    PATCHES,
    SIMPLE,
    WHEELS,
    environment_marker,
    requires_python_for,
    write_index_files,
)
from wheelhouse.manifest import StackManifest
from wheelhouse.recordfile import RECORD_CHECKED
from wheelhouse.redact import redact_config, redact_settings
from wheelhouse.resources import capture_script
from wheelhouse.target import TargetProfile
from .staged import StagedFile

__all__ = [
    "WHEELS",
    "SIMPLE",
    "PATCHES",
    "StageError",
    "BadOutput",
    "StagedFile",
    "environment_marker",
    "requires_python_for",
    "check_out",
    "to_locked",
    "write_stage_tree",
]


class StageError(WhError):
    code = "stage"


# --- what goes into it ---------------------------------------------------------------------------

def write_stage_tree(
    new: Path,
    manifest: StackManifest | None,
    target: TargetProfile,
    files: Sequence[StagedFile],
    boot_files: Sequence[StagedFile],
    wh_wheel,
    inputs: dict[str, Any],
    kept: Mapping[str, Any] | None = None,
    image=None,
    record_checked: Sequence[str] = (),
) -> None:
    """Write everything but the wheels into ``new``: bootstrap lock, patches, then (last, through the
    one wheelhouse writer) pylock.toml, simple/ and wh.json with the list of paths wh wrote.

    ``inputs``: what was staged from (requirements, constraints, indexes, find-links,
    release provenance), recorded in wh.json. ``wh_wheel`` None: no bootstrap/.
    ``kept``: a built engine carried over from the previous wheelhouse: ``record`` (its
    wh.json["engine"]) and ``paths`` (its wheel, log and exported files, already in ``new``).
    ``image``: the stage's ``ImageDelta`` (None: the profile lists no distributions): wh.json's
    ``assumed_present`` (what the box must still provide, exactly) and ``image`` (the profile's
    identity, --full or not, what the stack changes of the image).
    ``record_checked``: the sha256 of the wheels whose RECORD was checked against their files
    (wheelhouse.lock.records): ``wh install`` copies the RECORD rows of those alone unchecked.
    """
    from .bootstrap import BOOTSTRAP_DIR, write_bootstrap  # (only when a wheelhouse is written)

    owned = [WH_JSON, "pylock.toml", SIMPLE, WHEELS, "capture_target.py"]
    # A delta the image provides whole stages no wheel: wheels/ is there all the same (verify, pack, install read it)
    (new / WHEELS).mkdir(exist_ok=True)
    if wh_wheel is not None:
        write_bootstrap(
            new / BOOTSTRAP_DIR,
            [to_locked(f, f.filename) for f in boot_files],
            requires_python=requires_python_for(target),
            environments=[environment_marker(target)],
            extras=wh_wheel.extras,
        )
        owned.append(BOOTSTRAP_DIR)
    rewrites = _rewrites_json(inputs)
    lock = Lock(
        files=tuple(to_locked(f, f"{WHEELS}/{f.filename}") for f in files),
        environments=(environment_marker(target),),
        requires_python=requires_python_for(target),
        created_by=f"wh {__version__}",
        # [tool.wh]: the lock says what it deliberately leaves out or changes (PEP 751 leaves tool.* to tools)
        tool={k: rewrites[k] for k in ("overrides", "excludes") if rewrites[k]},
    )
    shutil.copyfile(capture_script(), new / "capture_target.py")
    patch_paths = _copy_patches(manifest.patches if manifest else (), new / PATCHES)
    owned += [p for p in patch_paths]
    if manifest and manifest.path:
        # Carried and shared like wh.json: an index token, a user:password@ or an HF_TOKEN in it stays home.
        (new / "manifest.toml").write_text(redact_config(Path(manifest.path).read_text(encoding="utf-8")),
                                           encoding="utf-8")
        owned.append("manifest.toml")
    meta = _provenance(
        manifest, target, inputs["requirements"], inputs["constraints"], inputs["indexes"], inputs["find_links"],
        inputs["release_manifests"], patch_paths, files, wh_wheel, boot_files,
    )
    meta["inputs"].update(rewrites)
    if inputs.get("source"):  # staged from a pylock.toml or a pyproject.toml, not a manifest
        meta["inputs"]["source"] = dict(inputs["source"])
    # The contract with `wh install`: every one of these, at this version, or it refuses.
    meta["assumed_present"] = image.assumed_json() if image else []
    meta["image"] = image.to_json() if image else None
    meta[RECORD_CHECKED] = sorted(set(record_checked))
    if kept:
        meta["engine"] = dict(kept["record"])
        owned += list(kept["paths"])
    meta["owned"] = sorted(set(owned))
    write_index_files(new, lock, meta)


def _rewrites_json(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """wh.json's and the lock's record of the overrides and exclusions, and what each one changed."""
    return {
        "overrides": list(inputs.get("overrides") or ()),
        "excludes": [dataclasses.asdict(e) for e in inputs.get("excludes") or ()],
        "rewritten": [r.to_json() for r in inputs.get("rewritten") or ()],
    }


def to_locked(f: StagedFile, path: str) -> LockedFile:
    """The lock entry of a staged file; ``path`` relative to the lock's folder."""
    tool: dict[str, Any] = dict(f.tool)
    if f.parents:
        tool["parents"] = list(f.parents)
    if f.extras:
        tool["extras"] = list(f.extras)
    if f.release_key:
        tool["release"] = f.release_key
    # PEP 751: `index` is the URL of an index; uv refuses anything else ("relative URL without a
    # base"). Find-links folders, direct wheels and wh's own build stay as provenance in tool.wh.
    index = f.origin if (f.origin or "").startswith(("http://", "https://", "file://")) else None
    if f.origin and index is None:
        tool["origin"] = f.origin
    return LockedFile(
        name=f.name, version=f.version, filename=f.filename, path=path, sha256=f.sha256 or "",
        size=f.size, requires_python=f.requires_python, index=index, tool=tool,
    )


def _copy_patches(specs: Sequence[Path], dest: Path) -> list[str]:
    """Copy each patch spec and every file it names (relative to the spec) under ``dest``.

    The spec format belongs to wheelhouse.patch; here any string value that names
    an existing file beside the spec is a payload and travels with it, so the
    box needs nothing but the wheelhouse. Returns paths relative to the wheelhouse.
    """
    if not specs:
        return []
    written: list[str] = []
    for spec in specs:
        spec = Path(spec)
        data = load_toml(spec, what="patch spec", error=StageError,
                         hint="fix [[patch]] spec in the stack manifest (it is looked up beside the manifest, then under engine_src/)")
        target_dir = dest / spec.stem
        target_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(spec, target_dir / spec.name)
        written.append(f"{PATCHES}/{spec.stem}/{spec.name}")
        for value in _strings(data):
            rel = Path(value)
            if rel.is_absolute() or ".." in rel.parts or not value or "\n" in value:
                continue
            src = spec.parent / rel
            if src.is_file() and src.resolve() != spec.resolve():
                dst = target_dir / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
                written.append(f"{PATCHES}/{spec.stem}/{rel.as_posix()}")
    return written


def _strings(data: Any):
    if isinstance(data, str):
        yield data
    elif isinstance(data, dict):
        for v in data.values():
            yield from _strings(v)
    elif isinstance(data, (list, tuple)):
        for v in data:
            yield from _strings(v)


def _provenance(manifest, target, reqs, cons, indexes, links, release_prov, patch_paths, files, wh_wheel, boot_files) -> dict:
    """wh.json: what was staged from what, for whom, by which wh, and what the box must do with it."""
    from .bootstrap import bootstrap_command, pip_wheel_of

    serve = None
    if manifest and manifest.serve:
        # An API key or an HF_TOKEN written into the manifest's command or env stays home (wheelhouse.redact):
        # `wh serve` fills "{api_key}" from $WH_API_KEY, and the engine reads its token from the environment.
        serve = redact_settings({k: (list(v) if isinstance(v, tuple) else (dict(v) if isinstance(v, dict) else v))
                                 for k, v in dataclasses.asdict(manifest.serve).items()})
    return {
        "tool": {"name": "wh", "version": __version__, "python": sys.version.split()[0]},
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "name": manifest.name if manifest else "stack",
        "target": target.to_json(),
        "inputs": {
            "manifest": {"path": str(manifest.path), "sha256": sha256_of(manifest.path)} if manifest and manifest.path else None,
            "requirements": list(reqs),
            "constraints": list(cons),
            "indexes": [i for i in indexes if i not in links],
            "find_links": [str(link) for link in links if not str(link).endswith("release-links.html")],
            "release_manifests": release_prov,
            "toolchains": [dataclasses.asdict(t) for t in (manifest.toolchains if manifest else ())],
        },
        "count": len(files),
        "total_size": sum(f.size or 0 for f in files),
        "engine": {"recipe": str(manifest.engine_recipe)} if manifest and manifest.engine_recipe else None,
        "drops": [dataclasses.asdict(d) for d in (manifest.drops if manifest else ())],
        "patches": patch_paths,
        "doctor": dataclasses.asdict(manifest.doctor) if manifest else {},
        "serve": serve,
        "bootstrap": {
            "command": bootstrap_command(extras=wh_wheel.extras, pip_wheel=pip_wheel_of(boot_files)),
            "extras": list(wh_wheel.extras),
            "wh_wheel": wh_wheel.path.name,
            "origin": wh_wheel.origin,
            "count": len(boot_files),
        } if wh_wheel else None,
    }
