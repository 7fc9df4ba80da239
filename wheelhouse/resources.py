"""Where wh's bundled data lives: doctor probes and rules, manifests, engine recipes.

In a source checkout these are the top-level folders ``doctor/``, ``manifests/``
and ``engine_src/``; in an installed wh they are packaged as
``wheelhouse._doctor`` and friends (see pyproject.toml).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["data_dir", "doctor_dir", "manifests_dir", "engine_src_dir", "capture_script"]

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE.parent


def data_dir(name: str) -> Path:
    """The bundled folder ``name`` (one of doctor, manifests, engine_src)."""
    packaged = _PACKAGE / f"_{name}"
    if packaged.is_dir():
        return packaged
    return _CHECKOUT / name


def doctor_dir() -> Path:
    return data_dir("doctor")


def manifests_dir() -> Path:
    return data_dir("manifests")


def engine_src_dir() -> Path:
    return data_dir("engine_src")


def capture_script() -> Path:
    """The stdlib-only target capture script copied into every wheelhouse."""
    return _PACKAGE / "target" / "capture.py"
