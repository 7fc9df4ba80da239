"""`wh build`: an engine recipe's source -> a wheel -> the wheelhouse's lock, simple/ and wh.json.

The recipe is in ``recipe``, the source (mirror, checkout, backports) in ``source``, the whole build
in ``build`` (``build_engine``), recording it in the wheelhouse in ``record``. The recipe and source
names are re-exported here: ``wheelhouse.engine`` is where callers import them from.
"""

from __future__ import annotations

from .build import WheelhouseMismatch, build_engine, build_key
from .recipe import Backport, BuildSettings, EngineRecipe, RecipeError, load_recipe, parse_recipe
from .record import EngineBuild
from .requirements import EngineIncomplete
from .source import (AppliedBackport, BackportMismatch, CommitNotFound, GitError, SourceTree, WrongCommit,
                     checkout_source, ensure_mirror, mirror_path, read_backports, sha256_bytes)

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
