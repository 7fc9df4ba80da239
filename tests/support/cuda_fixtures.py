"""Shared objects carrying real CUDA device code, built with nvcc on the spot, and cuobjdump to check them.

``build_kernel_so(folder, name, *gencodes)`` compiles a tiny kernel into a
shared object with ``-gencode`` options such as ``arch=compute_90,code=sm_90``
(SASS) or ``arch=compute_80,code=compute_80`` (PTX only). ``-cudart none``
keeps the file small and free of a libcudart dependency: these files are
read, never loaded. ``cuobjdump()`` finds a cuobjdump (PATH, CUDA_HOME, the
nvidia-cuda-cuobjdump wheel in this interpreter's site-packages) or None.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

__all__ = ["nvcc", "cuobjdump", "build_kernel_so", "build_self_loading_so", "cuobjdump_images", "KERNEL_CU"]

KERNEL_CU = r"""
__global__ void wh_add(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }
extern "C" void wh_launch(float *x, int n) { wh_add<<<(n + 255) / 256, 256>>>(x, n); }
"""


_BUILT: dict[tuple, bytes] = {}  # (.cu name, source, gencodes, extra inputs) -> the library nvcc made, once per process


def _first_executable(candidates) -> str | None:
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME")
    return _first_executable([shutil.which("nvcc"), home and os.path.join(home, "bin", "nvcc"),
                              "/usr/local/cuda/bin/nvcc"])


def cuobjdump() -> str | None:
    home = os.environ.get("CUDA_HOME")
    site = sysconfig.get_paths()["platlib"]
    return _first_executable([shutil.which("cuobjdump"), home and os.path.join(home, "bin", "cuobjdump"),
                              "/usr/local/cuda/bin/cuobjdump",
                              *sorted(glob.glob(os.path.join(site, "nvidia", "*", "bin", "cuobjdump")))])


def build_kernel_so(folder: Path, name: str, *gencodes: str, source: str = KERNEL_CU,
                    extra: tuple[str, ...] = ()) -> Path:
    """nvcc-compile ``source`` into ``folder/name`` with one ``-gencode`` per entry of ``gencodes``."""
    exe = nvcc()
    if exe is None:
        raise RuntimeError("nvcc not found")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / (Path(name).stem + ".cu")
    src.write_text(source)
    out = folder / name
    # The same source, flags and extra inputs: one nvcc run serves them all (test_fatbin, doctor/ and stage/
    # test_kernels build the same sm_90 library; nvcc takes seconds a build).
    key = (src.name, source, gencodes, tuple(Path(e).read_bytes() if Path(e).is_file() else e for e in extra))
    if key in _BUILT:
        out.write_bytes(_BUILT[key])
        return out
    args = [exe, "-shared", "-Xcompiler", "-fPIC", "-cudart", "none", *extra]
    for g in gencodes:
        args += ["-gencode", g]
    proc = subprocess.run([*args, str(src), "-o", str(out)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    _BUILT[key] = out.read_bytes()
    return out


def build_self_loading_so(folder: Path, name: str, registered: str, embedded: str) -> Path:
    """A library like cuFFT: its .nv_fatbin holds ``registered`` (a -gencode), and a fatbin for ``embedded``
    sits in its data as a byte array, which such a library hands to the driver itself (cuModuleLoadData)."""
    exe = nvcc()
    if exe is None:
        raise RuntimeError("nvcc not found")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "blob_kernel.cu"
    src.write_text(KERNEL_CU)
    blob = folder / "blob.fatbin"
    subprocess.run([exe, "-fatbin", "-gencode", embedded, str(src), "-o", str(blob)], check=True, capture_output=True)
    data = ",".join(str(b) for b in blob.read_bytes())
    (folder / "blob.c").write_text("__attribute__((aligned(8), used)) const unsigned char wh_kernels[] = {"
                                   + data + "};\nconst unsigned char *wh_kernels_ptr(void) { return wh_kernels; }\n")
    return build_kernel_so(folder, name, registered, extra=(str(folder / "blob.c"),))


def cuobjdump_images(path: Path) -> tuple[set[str], set[str]]:
    """(SASS images, PTX images) as cuobjdump --list-elf / --list-ptx name them: {"sm_90a"}, {"sm_80"}."""
    exe = cuobjdump()
    assert exe is not None
    out = {}
    for flag in ("--list-elf", "--list-ptx"):
        proc = subprocess.run([exe, flag, str(path)], capture_output=True, text=True)
        # "ELF file    1: multi.1.sm_90a.cubin" / "PTX file    1: multi.1.sm_80.ptx"
        out[flag] = {line.rsplit(".", 2)[-2] for line in proc.stdout.splitlines() if ":" in line}
    return out["--list-elf"], out["--list-ptx"]
