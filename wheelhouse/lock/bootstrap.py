"""What wh's own wheel in ``bootstrap/`` asks for: its Requires-Dist lines.

Here, below stage, engine and carry, because all three read them: stage resolves them for the target,
``wh build`` keeps the engine's build from breaking them, and ``wh verify`` checks that ``bootstrap/``
meets them (and every extra the bootstrap command names).
"""

from __future__ import annotations

import zipfile
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import Requirement

from wheelhouse.errors import WhError

__all__ = ["BootstrapError", "wheel_requirements"]


class BootstrapError(WhError):
    code = "bootstrap"


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The Requires-Dist lines of a wheel's METADATA (markers not evaluated here)."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if not names:
            raise BootstrapError(f"{wheel.name} has no METADATA", hint="rebuild the wheel")
        meta = HeaderParser().parsestr(zf.read(names[0]).decode("utf-8"))
    return [Requirement(r) for r in meta.get_all("Requires-Dist") or ()]
