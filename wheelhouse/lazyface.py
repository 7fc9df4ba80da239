"""A package face whose names load their module on first use (PEP 562): ``wh stage --offline`` answered from
its stored resolution imports no parser, client or resolver it does not call.

    _WHERE = {"PackageSource": "source", ...}       # name -> the module of the package that defines it
    __getattr__ = lazy_names(__name__, _WHERE, globals())
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, MutableMapping

__all__ = ["lazy_names"]


def lazy_names(package: str, where: Mapping[str, str], namespace: MutableMapping[str, Any]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``where[name]``'s module imported, the value kept in the
    package's ``namespace`` (the next lookup does not come here); any other name an AttributeError."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    return __getattr__
