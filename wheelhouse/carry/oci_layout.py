"""A wheelhouse as one OCI artifact (OCI image-spec 1.1: an image manifest with an ``artifactType``).

Every file wh wrote into the wheelhouse is one layer, named by its path
(``org.opencontainers.image.title``, relative, posix) and stored as a content-addressed blob:
a wheel, a ``simple/`` page or a bootstrap wheel that many wheelhouses share is stored once in
a registry and never uploaded twice. ``bootstrap/`` is carried file by file rather than as one
tar for the same reason (wh's own wheel and its dependencies are the same bytes in every
wheelhouse made by one wh for one target), and so that no archive is ever unpacked on pull.
The config is the OCI empty descriptor; the target summary is in the manifest's annotations.

Building and checking manifests is pure; ``wheelhouse_files`` and ``hash_file`` read the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Mapping, Sequence

from wheelhouse.errors import UsageError

__all__ = [
    "ARTIFACT_TYPE",
    "Blob",
    "Layer",
    "NotAWheelhouseArtifact",
    "EMPTY_CONFIG",
    "build_manifest",
    "parse_manifest",
    "media_type_for",
    "target_annotations",
    "hash_file",
    "wheelhouse_files",
    "TITLE",
]

ARTIFACT_TYPE = "application/vnd.wh.wheelhouse.v1"
TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"
MODE = "vnd.wh.mode"
_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
# OCI 1.1 "empty" descriptor: the config of an artifact that has none (image-spec manifest.md).
EMPTY_CONFIG = {"mediaType": "application/vnd.oci.empty.v1+json",
                "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
                "size": 2, "data": "e30="}
EMPTY_BYTES = b"{}"

_MEDIA = {
    "wheel": "application/vnd.wh.wheel.v1+zip",
    "lock": "application/vnd.wh.pylock.v1+toml",
    "meta": "application/vnd.wh.meta.v1+json",
    "bootstrap": "application/vnd.wh.bootstrap.v1",
    "file": "application/vnd.wh.file.v1",
}
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")


class NotAWheelhouseArtifact(UsageError):
    code = "not-a-wheelhouse-artifact"


@dataclass(frozen=True)
class Blob:
    """A file of the wheelhouse on this machine, hashed."""

    path: str  # relative, posix
    digest: str  # sha256:<hex>
    size: int
    executable: bool = False


@dataclass(frozen=True)
class Layer:
    """A layer of a pulled manifest, checked: a safe relative path, a sha256 digest, a size."""

    path: str
    digest: str
    size: int
    media_type: str
    executable: bool = False

    @property
    def sha256(self) -> str:
        return self.digest.split(":", 1)[1]


def media_type_for(path: str) -> str:
    """The layer media type of a wheelhouse file, by its role."""
    if path in ("pylock.toml", "bootstrap/pylock.toml"):
        return _MEDIA["lock"]
    if path == "wh.json":
        return _MEDIA["meta"]
    if path.startswith("bootstrap/"):
        return _MEDIA["bootstrap"]
    if path.startswith("wheels/") and path.endswith(".whl"):
        return _MEDIA["wheel"]
    return _MEDIA["file"]


def hash_file(root: Path, rel: str) -> Blob:
    """``rel`` under ``root`` hashed in one pass (the blob digest is the file's sha256)."""
    path = root / rel
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
            size += len(block)
        mode = stat.S_IMODE(os.fstat(fh.fileno()).st_mode)
    return Blob(rel, "sha256:" + h.hexdigest(), size, executable=bool(mode & 0o111))


def wheelhouse_files(root: Path, owned: Sequence[str]) -> list[str]:
    """The files wh wrote (``owned`` paths, files or folders), relative and sorted; dot-files (temp
    names of an interrupted write) are left out."""
    found: set[str] = set()
    real_root = root.resolve()

    def inside(p: Path) -> bool:  # as `wh pack`: a link may point only at a file of the wheelhouse itself
        if p.is_symlink() and real_root not in p.resolve().parents:
            raise UsageError(f"{p} is a symbolic link to {os.readlink(p)}, outside the wheelhouse; nothing was pushed",
                             hint="replace it with the file itself, then push again")
        return True

    for entry in owned:
        if PurePosixPath(entry).is_absolute() or ".." in PurePosixPath(entry).parts:
            continue  # wh.json owns only paths inside the wheelhouse: a hand edit's other path is not read
        top = root / entry
        if top.is_file() and inside(top):
            found.add(entry)
        elif top.is_dir() and not top.is_symlink():
            for p in top.rglob("*"):
                rel = p.relative_to(root).as_posix()
                if p.is_file() and not any(part.startswith(".") for part in PurePosixPath(rel).parts) and inside(p):
                    found.add(rel)
    return sorted(found)


def target_annotations(meta: Mapping[str, Any], wheels: int, size: int) -> dict[str, str]:
    """The target summary as manifest annotations (strings only, as the spec requires)."""
    notes: dict[str, str] = {}
    if isinstance(meta.get("created"), str):
        notes[CREATED] = meta["created"]
    if isinstance(meta.get("name"), str):
        notes["vnd.wh.name"] = meta["name"]
    notes["vnd.wh.wheels"] = str(wheels)
    notes["vnd.wh.size"] = str(size)
    target = meta.get("target")
    if isinstance(target, Mapping):
        from wheelhouse.target import target_from_json

        try:
            t = target_from_json(target, source=str(target.get("source") or "file"), where="wh.json target")
        except Exception:  # noqa: BLE001 - a summary is informative; wh verify judges the target
            t = None
        if t is not None:
            notes["vnd.wh.target"] = t.describe()
            notes["vnd.wh.target.python"] = t.python_full_version
            notes["vnd.wh.target.abi"] = t.abi
            notes["vnd.wh.target.machine"] = t.machine
            if t.platforms:
                notes["vnd.wh.target.platform"] = t.platforms[0]
            if t.libc:
                notes["vnd.wh.target.libc"] = f"{t.libc[0]} {t.libc[1]}"
            if t.gpus:
                notes["vnd.wh.target.gpus"] = ", ".join(f"{g.name} ({g.sm})" if g.sm else g.name for g in t.gpus)
            if t.driver_version:
                notes["vnd.wh.target.driver"] = t.driver_version
            if t.cuda_version:
                notes["vnd.wh.target.cuda"] = t.cuda_version
            if t.provided:
                notes["vnd.wh.target.provided"] = str(len(t.provided))
    return notes


def build_manifest(blobs: Iterable[Blob], annotations: Mapping[str, str]) -> bytes:
    """The manifest's bytes: canonical JSON (sorted keys, no spaces), so one wheelhouse is one digest."""
    layers = []
    for b in blobs:
        notes = {TITLE: b.path}
        if b.executable:
            notes[MODE] = "0755"
        layers.append({"mediaType": media_type_for(b.path), "digest": b.digest, "size": b.size, "annotations": notes})
    manifest = {
        "schemaVersion": 2,
        "mediaType": _MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": EMPTY_CONFIG,
        "layers": layers,
        "annotations": dict(annotations),
    }
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _safe_path(path: Any) -> str | None:
    """``path`` when it is a plain relative posix path inside the wheelhouse, else None."""
    if not isinstance(path, str) or not path or "\\" in path or "\x00" in path or path.startswith("/"):
        return None
    parts = path.split("/")
    if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return None
    return path


def parse_manifest(body: bytes, where: str) -> tuple[list[Layer], dict[str, str]]:
    """The layers and annotations of a wheelhouse artifact's manifest, every field checked.

    Refused: another kind of artifact, a layer without a safe relative path (``..``, absolute,
    hidden), two layers at one path or a file where another needs a folder, a bad digest or
    size, a manifest without wh.json and pylock.toml.
    """
    def bad(why: str) -> NotAWheelhouseArtifact:
        return NotAWheelhouseArtifact(f"{where}: {why}",
                                      hint="pull only what `wh push` published; inspect it with `oras manifest fetch`")

    try:
        data = json.loads(body)
    except ValueError:
        raise bad("the manifest is not JSON") from None
    if not isinstance(data, dict):
        raise bad("the manifest is not a JSON object")
    if data.get("artifactType") != ARTIFACT_TYPE:
        raise bad(f"not a wh wheelhouse (artifactType {data.get('artifactType')!r}, expected {ARTIFACT_TYPE!r})")
    if data.get("mediaType", _MANIFEST) != _MANIFEST:
        raise bad(f"manifest media type {data.get('mediaType')!r} is not an OCI image manifest")
    layers_in = data.get("layers")
    if not isinstance(layers_in, list):
        raise bad("the manifest has no layer list")
    layers: list[Layer] = []
    seen: set[str] = set()
    for i, raw in enumerate(layers_in):
        if not isinstance(raw, dict):
            raise bad(f"layer {i} is not an object")
        notes = raw.get("annotations") if isinstance(raw.get("annotations"), dict) else {}
        path = _safe_path(notes.get(TITLE))
        if path is None:
            raise bad(f"layer {i} has no safe relative path ({TITLE} {notes.get(TITLE)!r})")
        digest, size = raw.get("digest"), raw.get("size")
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise bad(f"{path}: digest {digest!r} is not sha256:<64 hex>")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise bad(f"{path}: size {size!r} is not a byte count")
        if path in seen:
            raise bad(f"two layers are named {path}")
        seen.add(path)
        layers.append(Layer(path, digest, size, str(raw.get("mediaType") or ""), notes.get(MODE) == "0755"))
    for path in seen:  # a file where another layer needs a folder
        parent = PurePosixPath(path).parent
        while str(parent) != ".":
            if str(parent) in seen:
                raise bad(f"{parent} is both a file and the folder of {path}")
            parent = parent.parent
    for needed in ("wh.json", "pylock.toml"):
        if needed not in seen:
            raise bad(f"the artifact has no {needed}")
    notes = data.get("annotations") if isinstance(data.get("annotations"), dict) else {}
    return layers, {str(k): str(v) for k, v in notes.items()}
