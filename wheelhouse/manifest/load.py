"""Reading a manifest: the TOML file (a path or a bundled name), then the requirements files it names."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from wheelhouse.datafile import find_bundled, load_toml, read_text
from wheelhouse.resources import manifests_dir
from .model import ManifestError, StackManifest
from .parse import parse_manifest
from .requirements_file import RequirementLine, RequirementsFileError, parse_requirements_text

__all__ = ["read_requirement_files", "load_manifest"]


def _read_lines(path: Path, where: str) -> tuple[RequirementLine, ...]:
    text = read_text(path, what=f"{where}: requirements file", error=ManifestError,
                     hint="fix the path (relative to the manifest)")
    try:
        return parse_requirements_text(text, str(path), option_hint="list requirements only (with --hash options if "
                                       "you like); indexes and find-links go in [stack] index-url, extra-index-urls, "
                                       "find-links, constraints in constraints-files")
    except RequirementsFileError as exc:
        raise ManifestError(exc.message, hint=exc.hint) from None


def read_requirement_files(manifest: StackManifest) -> StackManifest:
    """The manifest with the lines of its requirements-files and constraints-files added (read once)."""
    if manifest.files_read:
        return manifest
    where = f"{manifest.path}: " if manifest.path else ""
    reqs, cons, hashed = list(manifest.requirements), list(manifest.constraints), list(manifest.hashed_requirements)
    for f in manifest.requirement_files:
        lines = _read_lines(f, where + "stack.requirements-files")
        reqs += [line.text for line in lines]
        hashed += [line for line in lines if line.hashes]
    for f in manifest.constraint_files:
        lines = _read_lines(f, where + "stack.constraints-files")
        cons += [line.text for line in lines]
        hashed += [line for line in lines if line.hashes]
    return dataclasses.replace(manifest, requirements=tuple(reqs), constraints=tuple(cons),
                               hashed_requirements=tuple(hashed), files_read=True)


def load_manifest(path: str | Path, *, read_files: bool = True) -> StackManifest:
    """Read and parse a manifest file; a bundled name like ``demo`` finds ``manifests/demo.toml``.

    ``read_files``: also read the requirements files it names (staging needs them; the doctor and
    ``wh serve`` on the box do not, and the files may not have been carried there).
    """
    p = find_bundled(path, manifests_dir()) or Path(path)
    data = load_toml(p, what="manifest", error=ManifestError,
                     hint="give a path to a .toml stack manifest, or a bundled name such as `demo`")
    manifest = parse_manifest(data, p.resolve())
    return read_requirement_files(manifest) if read_files else manifest
