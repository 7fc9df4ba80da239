"""Resolve requirements for a TARGET interpreter: resolvelib does the search, this package adapts.

``resolve(requirements, target, source) -> Resolution`` is in ``resolver`` (its docstring has the
rules, all judged for the target and never for the host); what it returns (``Pin``, ``Resolution``)
in ``result``. The parts: ``provider`` (the resolvelib adapter and the walk ahead), ``candidates``
(which wheels a target can install), ``toolchain`` (groups), ``image`` (what the image keeps and
what the stack changes of it) and ``explain`` (the errors, and why a resolution failed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wheelhouse.lazyface import lazy_names

if TYPE_CHECKING:
    from .explain import (InvalidRequirementError, NoCompatibleWheel, NoMatchingVersion, PackageNotFound,
                          ResolutionConflict, ResolveError, SearchLimit, ToolchainSkew)
    from .image import ImageChange
    from .overrides import Rewritten
    from .resolver import resolve
    from .result import Pin, PinNote, Resolution

# Each name is loaded from its module when first asked for (PEP 562): a stage answered from its stored
# resolution needs ``Pin`` and ``Resolution``, not the search (resolvelib, the provider) that ``resolve`` loads.
_WHERE = {"resolve": "resolver", "Pin": "result", "PinNote": "result", "Resolution": "result", "ImageChange": "image",
          "Rewritten": "overrides",
          **dict.fromkeys(("ResolveError", "InvalidRequirementError", "PackageNotFound", "NoCompatibleWheel",
                           "NoMatchingVersion", "ResolutionConflict", "SearchLimit", "ToolchainSkew"), "explain")}


__getattr__ = lazy_names(__name__, _WHERE, globals())


__all__ = [
    "Pin",
    "PinNote",
    "Resolution",
    "ImageChange",
    "Rewritten",
    "resolve",
    "ResolveError",
    "InvalidRequirementError",
    "PackageNotFound",
    "NoCompatibleWheel",
    "NoMatchingVersion",
    "ResolutionConflict",
    "SearchLimit",
    "ToolchainSkew",
]
