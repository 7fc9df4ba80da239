"""wh's own wheel installer: many wheels, extracted in parallel, checked against their RECORD.

``install_wheels`` (in ``batch``, whose docstring has the rules) plans every wheel (``plan``: each
archive path checked), extracts all their files with one pool of threads (``extract``), each checked
as it is written, finishes each wheel (``launchers``, a RECORD of what was installed: ``record``),
all as one transaction (``install.transaction``); ``linkcache`` hardlinks a wheel installed before.

Only modules that cannot reach a network are imported here (no multiprocessing:
its connection module imports socket).
"""

from __future__ import annotations

from wheelhouse.install.installed import canonical_name, find_installed
from wheelhouse.install.uninstall import remove_distribution
from .batch import InstalledDist, NoSpace, default_jobs, install_wheels, plan_batch
from .record import RecordMismatch, UnpackError, UnsafeWheelPath

__all__ = [
    "UnpackError",
    "UnsafeWheelPath",
    "RecordMismatch",
    "InstalledDist",
    "NoSpace",
    "install_wheels",
    "plan_batch",
    "default_jobs",
    "find_installed",
    "remove_distribution",
    "canonical_name",
]
