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


def _needer(site: Path, tmp_path: Path, *, needed: str | None = None, runpath: str | None = None) -> Distribution:
    """A distribution laid out in ``site`` whose gcc-built ``needer/_ext.so`` names ``needed`` in DT_NEEDED
    (linked against a stand-in of that name) and/or carries ``runpath``."""
    from nvidia_fixtures import build_cudart

    pkg = site / "needer"
    pkg.mkdir(parents=True, exist_ok=True)
    src = tmp_path / "needer.c"
    src.write_text("int needer(void) { return 1; }\n")
    args = ["gcc", "-shared", "-fPIC", str(src), "-o", str(pkg / "_ext.so")]
    if needed:
        build_cudart(tmp_path / "link", soname=needed)
        args += [f"-L{tmp_path / 'link'}", "-Wl,--no-as-needed", f"-l:{needed}"]
    if runpath:
        args += [f"-Wl,-rpath,{runpath}", "-Wl,--enable-new-dtags"]
    subprocess.run(args, check=True, capture_output=True)
    info = site / "needer-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "RECORD").write_text("needer/_ext.so,,\nneeder-1.0.dist-info/RECORD,,\n")
    return Distribution("needer", "1.0", str(site), str(info), ("needer",), 1, ("needer",))


def _with(ctx, *dists: Distribution, manifest=None):
    return dataclasses.replace(ctx, distributions={**ctx.distributions, **{d.key: d for d in dists}},
                               manifest=manifest if manifest is not None else ctx.manifest)


def test_missing_unversioned_sonames_that_nothing_needs_are_ok_with_a_note(tmp_path):
    # Stock torch CUDA wheels ship only libcudart.so.13; torch.compile through Triton ran on the H200 with that.
    lib = _nvidia_lib(tmp_path / "site", "libcudart.so.13", "libcudart.so.13.0.96")
    r = _results(_ctx(tmp_path / "site", builds=True))
    plain = r["links:sonames"]
    assert plain.verdict == "ok", plain.evidence
    assert f"{lib} lacks libcudart.so -> libcudart.so.13" in plain.evidence
    assert "nothing in the stack needs them" in plain.evidence
    assert plain.fix == "wh links --fix" and plain.data["missing"][0]["target"] == "libcudart.so.13"
    assert plain.data["needed_by"] == []
    assert r["links:lib64"].verdict == "ok" and str(lib.parent / "lib64") in r["links:lib64"].evidence


def test_a_so_whose_dt_needed_names_the_unversioned_soname_fails_naming_it(tmp_path):
    site = tmp_path / "site"
    lib = _nvidia_lib(site, "libcudart.so.13")
    ctx = _with(_ctx(site), _needer(site, tmp_path, needed="libcudart.so"))
    r = _results(ctx)["links:sonames"]
    assert r.verdict == "fail", r.evidence
    assert f"{lib} lacks libcudart.so -> libcudart.so.13" in r.evidence
    assert "needer's needer/_ext.so needs libcudart.so (DT_NEEDED)" in r.evidence
    os.symlink("libcudart.so.13", lib / "libcudart.so")
    assert _results(ctx)["links:sonames"].verdict == "ok"


def test_a_runpath_naming_the_lib64_path_fails_lib64(tmp_path):
    site = tmp_path / "site"
    lib = _nvidia_lib(site, "libcudart.so.13")
    ctx = _with(_ctx(site), _needer(site, tmp_path, runpath="$ORIGIN/../nvidia/cu13/lib64"))
    r = _results(ctx)
    assert r["links:lib64"].verdict == "fail", r["links:lib64"].evidence
    assert "needer's needer/_ext.so searches $ORIGIN/../nvidia/cu13/lib64 (RUNPATH)" in r["links:lib64"].evidence
    assert r["links:sonames"].verdict == "ok"  # its RUNPATH names a folder, not the unversioned name
    os.symlink("lib", lib.parent / "lib64")
    assert _results(ctx)["links:lib64"].verdict == "ok"


def test_a_manifest_or_engine_build_that_asks_for_the_links_makes_them_fail(tmp_path):
    from wheelhouse.doctor import manifest_from_wh_json
    from wheelhouse.manifest import parse_manifest

    lib = _nvidia_lib(tmp_path / "site", "libcudart.so.13")
    ctx = _ctx(tmp_path / "site")
    said = _with(ctx, manifest=parse_manifest('[doctor]\nlinks = ["sonames", "lib64"]\n'))
    r = _results(said)
    assert (r["links:sonames"].verdict, r["links:lib64"].verdict) == ("fail", "fail")
    assert "[doctor] links" in r["links:sonames"].evidence
    # wh.json of a wheelhouse with an engine built by `wh build` from a recipe with link-sonames = true.
    built = manifest_from_wh_json({"engine": {"recipe": "freetoken-pr70.toml", "build": {"link_sonames": True}}})
    r = _results(_with(ctx, manifest=built))
    assert r["links:sonames"].verdict == "fail"
    assert "the engine freetoken-pr70.toml was built with link-sonames" in r["links:sonames"].evidence
    os.symlink("libcudart.so.13", lib / "libcudart.so")
    os.symlink("lib", lib.parent / "lib64")
    r = _results(_with(ctx, manifest=built))
    assert (r["links:sonames"].verdict, r["links:lib64"].verdict) == ("ok", "ok")


def test_a_distribution_whose_runtime_build_links_cudart_is_named_by_data(tmp_path):
    # flashinfer's JIT links its kernels with -L$CUDA_HOME/lib64 -lcudart.
    _nvidia_lib(tmp_path / "site", "libcudart.so.13")
    ctx = _ctx(tmp_path / "site")
    jit = Distribution("flashinfer-python", "0.5.0", str(tmp_path / "site"), None, ("flashinfer",), 0, ())
    r = _results(_with(ctx, jit))
    assert r["links:sonames"].verdict == "fail" and "flashinfer-python 0.5.0: " in r["links:sonames"].evidence
    assert r["links:lib64"].verdict == "fail"


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
