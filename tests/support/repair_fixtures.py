"""A wheelhouse whose install can be damaged the way a disk or a clean-up damages one, for repair tests.

    house = fastpack_house(tmp_path)        # fastpack 1.0 (a gcc-built _cmsgpack extension), app 1.0 (needs it)
    so = damaged_so(site)                   # the installed _cmsgpack .so, truncated to half: it no longer loads

``fastpack`` is shaped like msgpack: a package whose ``__init__`` imports its compiled ``_cmsgpack``.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

from broken_packages import _ext, _tags
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel

__all__ = ["fastpack_house", "so_path", "damage_so", "SUFFIX"]

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


def fastpack_house(tmp_path: Path, *more_wheels: Path) -> Path:
    """A wheelhouse (this interpreter's target) of fastpack 1.0 and app 1.0 (requires fastpack)."""
    build = tmp_path / "fastpack-build"
    build.mkdir(parents=True, exist_ok=True)
    w = tmp_path / "fastpack-wheels"
    wheels = [
        make_wheel(w, "fastpack", "1.0", tags=_tags(), modules={"fastpack/__init__.py": "from ._cmsgpack import answer\n"},
                   files={f"fastpack/_cmsgpack{SUFFIX}": _ext(build, "_cmsgpack")}),
        make_wheel(w, "app", "1.0", requires=["fastpack"], modules={"app/__init__.py": "import fastpack\n"}),
        *more_wheels,
    ]
    return make_wheelhouse(tmp_path / "house", wheels)


def so_path(site: Path) -> Path:
    return Path(site) / "fastpack" / f"_cmsgpack{SUFFIX}"


def damage_so(site: Path) -> bytes:
    """Truncate the installed ``_cmsgpack`` to half its size; returns its bytes as installed."""
    so = so_path(site)
    whole = so.read_bytes()
    so.write_bytes(whole[: len(whole) // 2])
    return whole
