"""Target profiles: the interpreter and machine a wheelhouse is for.

A profile is data. It comes from the box (``wh target capture``), from flags
(``--python-version 3.12 --platform manylinux_2_35_x86_64``), from a file (ours
or a pex complete-platform JSON), or, when nothing is given, from the running
interpreter. Nothing here evaluates anything against the host unless asked for
the host's profile.
"""

from __future__ import annotations

from .flags import target_from_flags
from .gpu import Gpu
from .profile import MARKER_KEYS, TargetProfile, glibc_version, host_target, load_target, target_from_json

__all__ = ["Gpu", "TargetProfile", "target_from_flags", "target_from_json", "load_target", "host_target",
           "MARKER_KEYS", "glibc_version"]
