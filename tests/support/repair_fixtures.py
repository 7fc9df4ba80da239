"""A wheelhouse whose install can be damaged the way a disk or a clean-up damages one, for repair tests.

    house = fastpack_house(tmp_path)        # fastpack 1.0 (a gcc-built _cmsgpack extension), app 1.0 (needs it)
    so = damaged_so(site)                   # the installed _cmsgpack .so, truncated to half: it no longer loads

``fastpack`` is shaped like msgpack: a package whose ``__init__`` imports its compiled ``_cmsgpack``.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

from broken_packages import _ext, _gcc, _tags
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel

__all__ = ["fastpack_house", "stack_house", "raiser_house", "so_path", "damage_so", "SUFFIX"]

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


def stack_house(tmp_path: Path, requested: tuple[str, ...] = ()) -> Path:
    """A wheelhouse shaped like a serving stack, each piece with a gcc-built extension (so the doctor imports it):

    - ``ownerlib`` ships ``ownerlib/lib/libwhgone.so.1`` (as nvidia-cublas ships libcublasLt.so.13);
      ``consumer`` links against it (as torch does), RPATH ``$ORIGIN/../ownerlib/lib``, and requires it;
    - ``needsreq`` imports the pure ``reqlib`` it requires (as scikit-learn imports threadpoolctl);
    - ``basepkg``'s extension needs a symbol nothing defines: it fails although every file matches its RECORD
      (as a wheel for another GPU); ``midpkg`` requires basepkg and imports it (as scipy imports numpy).

    ``requested``: the stack's requirements, recorded in wh.json's inputs (what `wh stage` writes).
    """
    build = tmp_path / "stack-build"
    build.mkdir(parents=True, exist_ok=True)
    src = build / "whgone.c"
    src.write_text("int whgone_value(void) { return 7; }\n")
    lib = build / "libwhgone.so.1"
    _gcc(["-shared", "-fPIC", "-Wl,-soname,libwhgone.so.1", str(src), "-o", str(lib)])
    (build / "libwhgone.so").symlink_to("libwhgone.so.1")
    linked = _ext(build, "_core", "WH_NEEDLIB", extra=[f"-L{build}", "-lwhgone", "-Wl,-rpath,$ORIGIN/../ownerlib/lib"])
    ok, undef = _ext(build, "_core"), _ext(build, "_core", "WH_UNDEF")
    w = tmp_path / "stack-wheels"

    def pkg(name, init, core, requires=(), files=None):
        return make_wheel(w, name, "1.0", tags=_tags(), requires=list(requires),
                          modules={f"{name}/__init__.py": init},
                          files={f"{name}/_core{SUFFIX}": core, **(files or {})})

    wheels = [
        pkg("ownerlib", "from ._core import answer\n", ok, files={"ownerlib/lib/libwhgone.so.1": lib.read_bytes()}),
        pkg("consumer", "from ._core import answer\n", linked, requires=["ownerlib"]),
        make_wheel(w, "reqlib", "1.0", modules={"reqlib/__init__.py": "VALUE = 1\n"}),
        pkg("needsreq", "import reqlib\nfrom ._core import answer\n", ok, requires=["reqlib"]),
        pkg("basepkg", "from ._core import answer\n", undef),
        pkg("midpkg", "import basepkg\nfrom ._core import answer\n", ok, requires=["basepkg"]),
    ]
    meta = {"inputs": {"requirements": list(requested)}} if requested else None
    return make_wheelhouse(tmp_path / "house", wheels, extra_meta=meta)


def raiser_house(tmp_path: Path, modules: int = 0) -> Path:
    """A wheelhouse of ``raiser`` 1.0: a gcc-built extension that loads, an ``__init__`` that raises (wh drop
    drops it), plus ``modules`` small modules (so a kill can land inside its uninstall)."""
    build = tmp_path / "raiser-build"
    build.mkdir(parents=True, exist_ok=True)
    mods = {"raiser/__init__.py": "from ._core import answer\nraise RuntimeError('raiser is broken on purpose')\n"}
    mods.update({f"raiser/sub/m{i}.py": f"X = {i}\n" for i in range(modules)})
    wheel = make_wheel(tmp_path / "raiser-wheels", "raiser", "1.0", tags=_tags(), modules=mods,
                       files={f"raiser/_core{SUFFIX}": _ext(build, "_core")})
    return make_wheelhouse(tmp_path / "raiser-house", [wheel])
