"""Stack manifests (TOML): what to stage for a deployment and how to prove it on the box.

The values are in ``model``; parsing is pure and in ``parse`` (``parse_manifest(data_or_text, path)``
reads no file; its docstring shows the format, every key); reading is in ``load``
(``load_manifest(path)`` reads the manifest, then the requirements files it names,
``read_requirement_files``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wheelhouse.lazyface import lazy_names

if TYPE_CHECKING:
    from .flag_rules import FlagRule
    from .load import load_manifest, read_requirement_files
    from .model import (DOCTOR_LINKS, MANIFEST_KEYS, DoctorExpectations, DropRule, Exclusion, ManifestError,
                        ReleaseManifest, ServeSpec, StackManifest, ToolchainGroup)
    from .parse import exclusion, parse_manifest, resolve_data_path

# Each name is loaded from its module when first asked for (PEP 562): a stage of requirements alone, and one
# answered from its stored resolution (wheelhouse.stage.stored), loads no TOML reader nor manifest model.
_WHERE = {
    "FlagRule": "flag_rules", "load_manifest": "load", "read_requirement_files": "load",
    **dict.fromkeys(("DOCTOR_LINKS", "MANIFEST_KEYS", "DoctorExpectations", "DropRule", "Exclusion", "ManifestError",
                     "ReleaseManifest", "ServeSpec", "StackManifest", "ToolchainGroup"), "model"),
    "exclusion": "parse", "parse_manifest": "parse", "resolve_data_path": "parse",
}


__getattr__ = lazy_names(__name__, _WHERE, globals())


__all__ = [
    "ManifestError",
    "ToolchainGroup",
    "ReleaseManifest",
    "DropRule",
    "Exclusion",
    "exclusion",
    "DoctorExpectations",
    "DOCTOR_LINKS",
    "ServeSpec",
    "FlagRule",
    "StackManifest",
    "MANIFEST_KEYS",
    "parse_manifest",
    "read_requirement_files",
    "load_manifest",
    "resolve_data_path",
]
