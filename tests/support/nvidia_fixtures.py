"""Wheelhouses and NVIDIA-layout wheels for the install/links/env tests.

``make_wheelhouse(dir, wheels, target=...)`` writes the layout `wh stage` writes (wheels/,
pylock.toml, wh.json with the target, and, as the stage does, the sha256 of each wheel whose RECORD
passes the stage's check in ``record_checked``) around existing wheel files. ``nvidia_runtime_wheel``
makes a wheel laid out like NVIDIA's cu13 wheels whose ``nvidia/cu13/lib/libcudart.so.13``
is a real ELF shared object built with gcc (``-Wl,-soname,libcudart.so.13``), and only that
versioned name -- exactly what makes ``-lcudart`` fail until ``wh links --fix``.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Mapping, Sequence

import pytest

from wheelmaker import make_wheel

from wheelhouse.errors import WhError
from wheelhouse.lock import Lock, LockedFile, write_pylock, write_wh_json
from wheelhouse.recordfile import RECORD_CHECKED
from wheelhouse.lock.records import check_record
from wheelhouse.target import host_target

__all__ = ["make_wheelhouse", "set_modes", "build_cudart", "nvidia_runtime_wheel", "nvcc_wheel", "tree_listing",
           "need_gcc"]

need_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _record_passes(wheel: Path) -> bool:
    try:
        check_record(wheel)
    except WhError:
        return False
    return True


def _name_version(wheel: Path) -> tuple[str, str]:
    from packaging.utils import parse_wheel_filename

    name, version, _, _ = parse_wheel_filename(wheel.name)
    return str(name), str(version)


def make_wheelhouse(
    directory: Path,
    wheels: Sequence[Path],
    *,
    target: Mapping | None = None,
    patches: Sequence[str] = (),
    extra_meta: Mapping | None = None,
    record_checked: bool = True,
) -> Path:
    """Copy ``wheels`` into ``directory/wheels`` and write pylock.toml + wh.json (target: the host's).

    ``record_checked``: list in wh.json the wheels whose RECORD the stage's own check passes (a crafted
    wheel that lies is left out, as a stage would refuse it); False: none (a wheelhouse staged before it)."""
    directory = Path(directory)
    (directory / "wheels").mkdir(parents=True, exist_ok=True)
    files = []
    for w in wheels:
        dest = directory / "wheels" / Path(w).name
        if Path(w).resolve() != dest.resolve():
            shutil.copy2(w, dest)
        name, version = _name_version(dest)
        files.append(LockedFile(name=name, version=version, filename=dest.name, path=f"wheels/{dest.name}",
                                sha256=_sha256(dest), size=dest.stat().st_size))
    write_pylock(directory, Lock(files=tuple(files)))
    meta = {"target": dict(target) if target is not None else host_target().to_json(), "patches": list(patches)}
    if record_checked:
        meta[RECORD_CHECKED] = sorted(f.sha256 for f in files if _record_passes(directory / f.path))
    meta.update(extra_meta or {})
    write_wh_json(directory, meta)
    return directory


def set_modes(wheel: Path, modes: Mapping[str, int]) -> Path:
    """Rewrite ``wheel`` so the named archive paths carry unix permission bits (RECORD is unchanged)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            new = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            new.compress_type = zipfile.ZIP_DEFLATED
            new.external_attr = ((modes.get(info.filename, 0o644) | 0o100000) << 16)
            dst.writestr(new, data)
    wheel.write_bytes(buf.getvalue())
    return wheel


def build_cudart(workdir: Path, soname: str = "libcudart.so.13") -> bytes:
    """A real shared object with ``soname`` exporting ``cudaRuntimeGetVersion``."""
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / "cudart.c"
    src.write_text("int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }\n")
    out = workdir / soname
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(out), str(src)], check=True)
    return out.read_bytes()


def nvidia_runtime_wheel(directory: Path, workdir: Path, version: str = "13.0.96") -> Path:
    """``nvidia-cuda-runtime`` laid out like the cu13 wheels: nvidia/cu13/lib/libcudart.so.13 only,
    plus the toolkit's stub ``lib/stubs/libcuda.so``."""
    lib = build_cudart(workdir)
    stub = build_cudart(workdir / "stub", soname="libcuda.so.1")
    return make_wheel(
        directory, "nvidia-cuda-runtime", version, tags="py3-none-manylinux_2_17_x86_64",
        files={
            "nvidia/cu13/lib/libcudart.so.13": lib,
            "nvidia/cu13/lib/stubs/libcuda.so": stub,
            "nvidia/cu13/include/cuda_runtime_api.h": "int cudaRuntimeGetVersion(int *v);\n",
        },
    )


def nvcc_wheel(directory: Path, version: str = "13.0.88") -> Path:
    """``nvidia-cuda-nvcc`` with an executable ``nvidia/cu13/bin/nvcc`` that prints its version."""
    w = make_wheel(
        directory, "nvidia-cuda-nvcc", version, tags="py3-none-manylinux_2_17_x86_64",
        files={"nvidia/cu13/bin/nvcc": f"#!/bin/sh\necho 'Cuda compilation tools, release {version}'\n"},
    )
    return set_modes(w, {"nvidia/cu13/bin/nvcc": 0o755})


def tree_listing(root: Path) -> list[tuple]:
    """Every entry under ``root`` with its kind, symlink target or content hash: equal listings = same tree."""
    out = []
    for p in sorted(Path(root).rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out.append((rel, "link", str(p.readlink())))
        elif p.is_dir():
            out.append((rel, "dir", None))
        else:
            out.append((rel, "file", hashlib.sha256(p.read_bytes()).hexdigest()))
    return out
