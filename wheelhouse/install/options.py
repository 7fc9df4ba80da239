"""What one ``wh install`` run is asked to do: its options, declared once, as one value.

``InstallOptions`` is built once (by ``wh install``'s command line, or by a caller such as ``wh drop
--restore``) and handed, whole, through every step of ``run`` and ``dry_run``; a step that settles an
option (the interpreter to make a venv with, the number of workers) hands on a ``replace``d copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["InstallOptions"]


@dataclass(frozen=True)
class InstallOptions:
    """The target (one of ``venv`` and ``python`` is required: wh's own environment is only installed into
    when ``python`` names it) and how to install into it.

    ``precompiled``: with ``compile``, write the .pyc files the wheelhouse carries (``wh stage --bytecode``)
    where they fit, instead of compiling those modules again. ``reinstall``: install these names again (and
    only these, with ``only``), or with True every chosen one, even where the same version is there.
    """

    venv: Path | None = None  # created if missing
    python: str | None = None  # the interpreter to install into, or to make the venv with
    system_site_packages: bool = False
    only: frozenset[str] | None = None  # install only these names
    installer: Literal["wh", "pip"] = "wh"
    compile: bool = False
    precompiled: bool = True
    jobs: int | None = None  # None: usable cores + 1 (``wheel.default_jobs``)
    links: bool = True  # soname links and libcuda stubs, afterwards
    patches: bool = True  # the wheelhouse's patches, afterwards
    allow_missing: bool = False  # install even when a requirement of the result would be unmet
    link_cache: Path | None = None  # the extraction cache's folder; None: no cache
    reinstall: bool | frozenset[str] = False

    def __post_init__(self) -> None:
        # Sets given as lists or sets stay hashable and unchangeable, as the rest of the value is.
        if self.only is not None and not isinstance(self.only, frozenset):
            object.__setattr__(self, "only", frozenset(self.only))
        if not isinstance(self.reinstall, (bool, frozenset)):
            object.__setattr__(self, "reinstall", frozenset(self.reinstall))
