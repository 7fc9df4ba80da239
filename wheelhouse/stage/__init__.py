"""Stage: resolve a stack for the TARGET, fetch it verified, and write a self-bootstrapping wheelhouse.

``stage(inputs)`` (in ``pipeline``, whose docstring has the rules) is the whole of ``wh stage``
without the command line; ``inputs`` is one ``StageInputs`` value (``inputs``), made by
``merge_inputs(manifest, flags, out)``. What it returns is a ``StageResult``; the wheelhouse is
written by ``writer``, bootstrap/ by ``bootstrap``, the image delta is ``delta``, a stored
resolution ``stored``, the previous wheelhouse ``previous``.
"""

from __future__ import annotations

from .delta import ImageDelta
from .inputs import StageFlags, StageInputs, merge_inputs
from .pipeline import StageResult, stage
from .writer import BadOutput, StagedFile, StageError, environment_marker, requires_python_for

__all__ = [
    "StageError",
    "BadOutput",
    "StagedFile",
    "StageResult",
    "ImageDelta",
    "StageFlags",
    "StageInputs",
    "merge_inputs",
    "stage",
    "environment_marker",
    "requires_python_for",
]
