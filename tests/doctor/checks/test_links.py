"""links checks through ``run(ctx)`` with a real DoctorContext (the facts probe of this interpreter),
its site folders pointed at a laid-out NVIDIA tree and its loader path at gcc-built libcuda stand-ins:
what the loader really picks (stub, compat, driver) is probed in a subprocess, as on a GPU box."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wheelhouse.doctor import gather_context
from wheelhouse.doctor.checks import Distribution
from wheelhouse.doctor.checks.links import run
from wheelhouse.target.gpu import Gpu, GpuFacts

pytestmark = pytest.mark.skipif(sys.platform != "linux" or shutil.which("gcc") is None,
                                reason="the loader probe is Linux-only; the libcuda stand-ins are built with gcc")

FAKE_LIBCUDA = r"""
int cuDriverGetVersion(int *v) { *v = 13000; return RET; }
int cuInit(unsigned int flags) { (void)flags; return RET; }
#ifdef PAD
const char pad[PAD] = {1};  /* a real driver library is tens of MB; the stub tens of KB */
#endif
"""


def _libcuda(folder: Path, ret: int, pad: int = 0) -> Path:
    """A libcuda.so.1 stand-in whose cuInit/cuDriverGetVersion return ``ret`` (34: the stub's answer)."""
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "libcuda.c"
    src.write_text(FAKE_LIBCUDA)
    out = folder / "libcuda.so.1"
    args = ["gcc", "-shared", "-fPIC", f"-DRET={ret}", *([f"-DPAD={pad}"] if pad else []), str(src), "-o", str(out),
            "-Wl,-soname,libcuda.so.1"]
    subprocess.run(args, check=True, capture_output=True)
    src.unlink()
    return out


def _ctx(site: Path, *, ld_path: list[Path] = (), gpus: int = 0, builds: bool = False):
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if ld_path:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(map(str, ld_path))
    ctx = gather_context(sys.executable, checks=["links"], environ=env, timeout=30)
    dists = dict(ctx.distributions)
    if builds:  # triton compiles against the toolkit's unversioned names at run time
        dists["triton"] = Distribution("triton", "3.5.0", str(site), None, ("triton",), 0, ())
    else:
        dists = {k: d for k, d in dists.items() if k != "triton" and not k.startswith(("flashinfer", "nvidia-cuda-nvcc"))}
    gpu = GpuFacts(tuple(Gpu(i, "NVIDIA H200", "9.0") for i in range(gpus)), source="fake")
    return dataclasses.replace(ctx, site_dirs=(site,), distributions=dists, gpu=gpu, engine_env=env)


def _results(ctx):
    return {r.id: r for r in run(ctx)}


def _nvidia_lib(site: Path, *names: str) -> Path:
    lib = site / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    for n in names:
        (lib / n).write_bytes(b"\x7fELF" + b"\0" * 64)
    return lib


def test_no_nvidia_libraries_skips_the_folder_checks(tmp_path):
    (tmp_path / "site").mkdir()
    r = _results(_ctx(tmp_path / "site"))
    assert (r["links:sonames"].verdict, r["links:lib64"].verdict, r["links:stubs"].verdict) == ("skip", "skip", "ok")


def test_a_missing_unversioned_soname_is_a_warning_and_a_failure_where_something_builds(tmp_path):
    lib = _nvidia_lib(tmp_path / "site", "libcudart.so.13", "libcudart.so.13.0.96")
    plain = _results(_ctx(tmp_path / "site"))["links:sonames"]
    assert plain.verdict == "warn" and f"{lib} lacks libcudart.so -> libcudart.so.13" in plain.evidence
    assert plain.fix == "wh links --fix" and plain.data["missing"][0]["target"] == "libcudart.so.13"
    r = _results(_ctx(tmp_path / "site", builds=True))
    assert r["links:sonames"].verdict == "fail"
    assert r["links:lib64"].verdict == "warn" and str(lib.parent / "lib64") in r["links:lib64"].evidence
    os.symlink("libcudart.so.13", lib / "libcudart.so")
    os.symlink("lib", lib.parent / "lib64")
    r = _results(_ctx(tmp_path / "site", builds=True))
    assert (r["links:sonames"].verdict, r["links:lib64"].verdict) == ("ok", "ok")


def test_a_stub_libcuda_inside_the_environment_fails(tmp_path):
    lib = _nvidia_lib(tmp_path / "site", "libcudart.so.13")
    (lib / "libcuda.so").write_bytes(b"\x7fELF" + b"\0" * 1000)  # KBs: the toolkit's stub, not a driver
    r = _results(_ctx(tmp_path / "site"))["links:stubs"]
    assert r.verdict == "fail" and f"{lib / 'libcuda.so'}: libcuda.so is a stub" in r.evidence


def test_a_stub_loaded_through_a_stubs_folder_on_ld_library_path_fails_both_checks(tmp_path):
    stubs = _libcuda(tmp_path / "cuda" / "lib64" / "stubs", ret=34).parent
    (tmp_path / "site").mkdir()
    r = _results(_ctx(tmp_path / "site", ld_path=[stubs], gpus=1))
    assert r["links:libcuda"].verdict == "fail"
    assert r["links:libcuda"].evidence.startswith("a STUB libcuda is loaded ahead of the driver: dlopen(libcuda.so.1) -> "
                                                  f"{stubs / 'libcuda.so.1'}")
    assert r["links:ld-library-path"].verdict == "fail" and str(stubs) in r["links:ld-library-path"].evidence


def test_the_forward_compat_driver_is_named_and_only_a_failing_cuinit_warns(tmp_path):
    compat = _libcuda(tmp_path / "cuda" / "compat", ret=0).parent
    (tmp_path / "site").mkdir()
    r = _results(_ctx(tmp_path / "site", ld_path=[compat], gpus=1))["links:libcuda"]
    assert r.verdict == "info" and "forward-compat libcuda is loaded" in r.evidence
    broken = _libcuda(tmp_path / "other" / "compat", ret=803).parent  # 803: system driver mismatch
    r = _results(_ctx(tmp_path / "site", ld_path=[broken], gpus=1))["links:libcuda"]
    assert r.verdict == "warn" and "cuInit=803" in r.evidence and r.hint


def test_a_driver_whose_cuinit_fails_is_a_failure_only_where_gpus_are_expected(tmp_path):
    driver = _libcuda(tmp_path / "driver", ret=100, pad=3 << 20).parent  # 100: no CUDA-capable device
    (tmp_path / "site").mkdir()
    with_gpu = _results(_ctx(tmp_path / "site", ld_path=[driver], gpus=1))
    assert with_gpu["links:libcuda"].verdict == "fail" and "cuInit fails" in with_gpu["links:libcuda"].evidence
    assert with_gpu["links:ld-library-path"].verdict == "ok"
    no_gpu = _results(_ctx(tmp_path / "site", ld_path=[driver]))["links:libcuda"]
    assert no_gpu.verdict == "ok" and f"-> {driver / 'libcuda.so.1'}" in no_gpu.evidence
