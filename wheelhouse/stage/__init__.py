"""Stage: resolve a stack for the TARGET, fetch it verified, and write a self-bootstrapping wheelhouse.

``stage(inputs)`` (in ``pipeline``, whose docstring has the rules) is the whole of ``wh stage``
without the command line; ``inputs`` is one ``StageInputs`` value (``inputs``), made by
``merge_inputs(manifest, flags, out)``. What it returns is a ``StageResult``; the wheelhouse is
written by ``writer``, bootstrap/ by ``bootstrap``, the image delta is ``delta``, a stored
resolution ``stored``, the previous wheelhouse ``previous``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wheelhouse.lazyface import lazy_names

if TYPE_CHECKING:
    from .delta import ImageDelta
    from .inputs import StageFlags, StageInputs, merge_inputs
    from .pipeline import StageResult, stage
    from .writer import BadOutput, StagedFile, StageError, environment_marker, requires_python_for

# Each name is loaded from its module when first asked for (PEP 562): a stage answered from its stored resolution
# (wheelhouse.stage.stored) loads only the modules it uses; start-up is most of such a run.
_WHERE = {
    "ImageDelta": "delta", "StageFlags": "inputs", "StageInputs": "inputs", "merge_inputs": "inputs",
    "StageResult": "pipeline", "stage": "pipeline", "BadOutput": "writer", "StagedFile": "writer", "StageError":
    "writer", "environment_marker": "writer", "requires_python_for": "writer"
}


__getattr__ = lazy_names(__name__, _WHERE, globals())


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
