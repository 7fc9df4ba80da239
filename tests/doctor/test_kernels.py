"""wh doctor's GPU kernel coverage: nvcc-built .so files in wheels, installed in a venv, judged against fake GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _tags, install_wheel, make_venv
from cuda_fixtures import build_kernel_so, build_self_loading_so, nvcc
from wheelhouse.doctor import run_doctor
from wheelmaker import make_wheel

pytestmark = pytest.mark.skipif(nvcc() is None, reason="needs nvcc")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


def _fatbin_at(data: bytes) -> int:
    """The file offset of the first fatbin container (its magic) in an nvcc-built library."""
    return data.index((0xBA55ED50).to_bytes(4, "little"))


def with_ptx_isa(data: bytes, isa: tuple[int, int]) -> bytes:
    """A PTX-only library's bytes with its PTX entry claiming ISA ``isa`` (entry header: minor at byte 24, major 26),
    as a newer nvcc would write it."""
    out = bytearray(data)
    entry = _fatbin_at(data) + 16
    assert int.from_bytes(out[entry:entry + 2], "little") == 1  # a PTX entry
    out[entry + 24:entry + 28] = isa[1].to_bytes(2, "little") + isa[0].to_bytes(2, "little")
    return bytes(out)


def damaged(data: bytes, where: str) -> bytes:
    """``data`` with its fatbin container's magic zeroed, or its first entry's header size field zeroed."""
    out = bytearray(data)
    at = _fatbin_at(data) + (0 if where == "magic" else 16 + 4)
    out[at:at + 4] = bytes(4)
    return bytes(out)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("kernels-build")
    sm90 = build_kernel_so(build / "a", "sm90.so", "arch=compute_90,code=sm_90").read_bytes()
    ptx80 = build_kernel_so(build / "b", "ptx80.so", "arch=compute_80,code=compute_80").read_bytes()
    sm80 = build_kernel_so(build / "c", "sm80.so", "arch=compute_80,code=sm_80").read_bytes()
    sm100 = build_kernel_so(build / "d", "sm100.so", "arch=compute_100f,code=sm_100f").read_bytes()
    sm75 = build_kernel_so(build / "e", "sm75.so", "arch=compute_75,code=sm_75").read_bytes()
    cufftlike = build_self_loading_so(build / "f", "libfftlike.so", "arch=compute_75,code=sm_75",
                                      "arch=compute_80,code=compute_80").read_bytes()
    folder = build / "wheels"
    wheels = [
        make_wheel(folder, "hopperonly", "1.0", tags=_tags(), modules={"hopperonly/__init__.py": ""},
                   files={f"hopperonly/_kernels{SUFFIX}": sm90}),
        make_wheel(folder, "ptxonly", "1.0", tags=_tags(), modules={"ptxonly/__init__.py": ""},
                   files={"ptxonly/lib/libptxonly.so": ptx80}),
        # sgl_kernel's layout: the package loads sm100/common_ops only on sm_100 cards.
        make_wheel(folder, "variants", "1.0", tags=_tags(), modules={"variants/__init__.py": ""},
                   files={f"variants/common_ops{SUFFIX}": sm80, f"variants/sm100/common_ops{SUFFIX}": sm100}),
        make_wheel(folder, "blackwellonly", "1.0", tags=_tags(), modules={"blackwellonly/__init__.py": ""},
                   files={f"blackwellonly/sm100/common_ops{SUFFIX}": sm100}),
        make_wheel(folder, "cpuonly", "1.0", tags=_tags(), modules={"cpuonly/__init__.py": ""}),
        make_wheel(folder, "turingonly", "1.0", tags=_tags(), modules={"turingonly/__init__.py": ""},
                   files={"turingonly/lib/libturing.so": sm75}),
        make_wheel(folder, "fftlike", "1.0", tags=_tags(), modules={"fftlike/__init__.py": ""},
                   files={"fftlike/lib/libfftlike.so.12": cufftlike}),
        make_wheel(folder, "ampereonly", "1.0", tags=_tags(), modules={"ampereonly/__init__.py": ""},
                   files={"ampereonly/lib/libampere.so": sm80}),
        # PTX a newer CUDA's nvcc wrote (ISA 8.8: CUDA 12.9).
        make_wheel(folder, "newptx", "1.0", tags=_tags(), modules={"newptx/__init__.py": ""},
                   files={"newptx/lib/libnewptx.so": with_ptx_isa(ptx80, (8, 8))}),
        # Two unrelated modules that share a file name: no architecture variant of each other.
        make_wheel(folder, "fastops", "1.0", tags=_tags(), modules={"fastops/__init__.py": "",
                                                                    "fastops/contrib/__init__.py": ""},
                   files={"fastops/_C.abi3.so": sm80, "fastops/contrib/_C.abi3.so": sm90}),
        make_wheel(folder, "damagedfatbin", "1.0", tags=_tags(), modules={"damagedfatbin/__init__.py": ""},
                   files={"damagedfatbin/lib/libmagic.so": damaged(sm80, "magic"),
                          "damagedfatbin/lib/libentry.so": damaged(sm80, "entry")}),
        # nvidia-cufft's layout: cuFFTW (the FFTW interface) carries an sm_75-only fatbin beside libcufft.
        make_wheel(folder, "nvidia-cufft", "12.0.0.61", tags=_tags(),
                   files={"nvidia/cu13/lib/libcufftw.so.12": sm75, "nvidia/cu13/lib/libcufft.so.12": cufftlike}),
    ]
    py = make_venv(tmp_path_factory.mktemp("kernels-venv") / "venv")
    for w in wheels:
        install_wheel(py, w)
    return py


def gpus(tmp_path: Path, *ccs: str, cuda: str = "13.0") -> dict[str, str]:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"driver_version": "580.1", "cuda_version": cuda, "gpus": [
        {"index": i, "name": "NVIDIA L4" if cc == "8.9" else "NVIDIA H200", "compute_capability": cc,
         "memory_total_mib": 23034, "memory_used_mib": 0} for i, cc in enumerate(ccs)]}))
    return {**os.environ, "WH_DOCTOR_FAKE_GPUS": str(path)}


def test_a_library_built_for_another_architecture_fails_with_the_sm(venv, tmp_path):
    rep = run_doctor(str(venv), checks=["kernels"], environ=gpus(tmp_path, "8.9"))
    r = rep.get("kernels:hopperonly")
    assert r.verdict == "fail"
    assert f"hopperonly/_kernels{SUFFIX} has kernels for sm_90 only; this GPU is sm_89" in r.evidence
    assert "sm_89" in r.hint
    r = rep.get("kernels:blackwellonly")
    assert r.verdict == "fail"
    assert f"blackwellonly/sm100/common_ops{SUFFIX} has kernels for sm_100f only; this GPU is sm_89" in r.evidence


def test_the_same_library_passes_on_its_own_gpu(venv, tmp_path):
    rep = run_doctor(str(venv), checks=["kernels:hopperonly"], environ=gpus(tmp_path, "9.0"))
    r = rep.get("kernels:hopperonly")
    assert r.verdict == "ok" and "sm_90 -> sm_90: sm_90" in r.evidence


def test_ptx_is_jit_compiled_for_a_newer_gpu_if_the_driver_knows_its_isa(venv, tmp_path):
    r = run_doctor(str(venv), checks=["kernels:ptxonly"], environ=gpus(tmp_path, "8.9")).get("kernels:ptxonly")
    assert r.verdict == "ok" and "compute_80 (PTX, JIT)" in r.evidence
    old = run_doctor(str(venv), checks=["kernels:ptxonly"], environ=gpus(tmp_path, "8.9", cuda="12.4"))
    r = old.get("kernels:ptxonly")
    assert r.verdict == "fail" and "needs a CUDA 13.0 driver, this one supports CUDA 12.4" in r.evidence


def test_ptx_of_a_newer_cuda_release_than_the_driver_fails(venv, tmp_path):
    # The driver refuses PTX of a newer ISA than its own CUDA release's (CUDA_ERROR_UNSUPPORTED_PTX_VERSION).
    env = gpus(tmp_path, "9.0", cuda="12.4")
    r = run_doctor(str(venv), checks=["kernels:newptx"], environ=env).get("kernels:newptx")
    assert r.verdict == "fail", r.evidence
    assert ("newptx/lib/libnewptx.so has kernels for PTX compute_80 only; this GPU is sm_90 and its PTX (ISA 8.8, "
            "from CUDA 12.9) needs a CUDA 12.9 driver, this one supports CUDA 12.4") in r.evidence
    env = gpus(tmp_path, "9.0", cuda="12.9")
    r = run_doctor(str(venv), checks=["kernels:newptx"], environ=env).get("kernels:newptx")
    assert r.verdict == "ok" and "sm_90: compute_80 (PTX, JIT)" in r.evidence


def test_ptx_judged_without_a_known_driver_says_what_it_needs(venv, tmp_path):
    from wheelhouse.manifest import parse_manifest

    rep = run_doctor(str(venv), checks=["kernels:newptx"], environ=_no_gpu(tmp_path),
                     manifest=parse_manifest('[doctor]\nsm = "9.0"\n'))
    r = rep.get("kernels:newptx")
    assert r.verdict == "ok", r.evidence
    assert "sm_90: compute_80 (PTX, JIT; its ISA 8.8 needs a CUDA 12.9 driver, none known here to judge)" in r.evidence


def test_a_same_named_module_in_another_folder_is_no_architecture_variant(venv, tmp_path):
    r = run_doctor(str(venv), checks=["kernels:fastops"], environ=gpus(tmp_path, "9.0")).get("kernels:fastops")
    assert r.verdict == "fail", r.evidence
    assert "fastops/_C.abi3.so has kernels for sm_80 only; this GPU is sm_90" in r.evidence
    assert "variant" not in r.evidence


def test_a_fatbin_that_cannot_be_read_fails_naming_what_is_wrong(venv, tmp_path):
    rep = run_doctor(str(venv), checks=["kernels:damagedfatbin"], environ=gpus(tmp_path, "8.0"))
    r = rep.get("kernels:damagedfatbin")
    assert r.verdict == "fail", r.evidence
    assert "LTO-IR" not in r.evidence
    assert ("damagedfatbin/lib/libmagic.so: its CUDA device code cannot be read: .nv_fatbin: no fatbin container at "
            "byte 0 (magic 0x00000000, not 0xba55ed50)") in r.evidence
    assert ("damagedfatbin/lib/libentry.so: its CUDA device code cannot be read: .nv_fatbin: the entry at byte 16 of "
            "the container at byte 0 has header size 0") in r.evidence
    assert sorted(d["object"] for d in r.data["damaged"]) == ["damagedfatbin/lib/libentry.so",
                                                              "damagedfatbin/lib/libmagic.so"]


def test_an_architecture_variant_beside_one_that_runs_is_not_a_false_red(venv, tmp_path):
    r = run_doctor(str(venv), checks=["kernels:variants"], environ=gpus(tmp_path, "8.9")).get("kernels:variants")
    assert r.verdict == "ok", r.evidence
    assert f"(an architecture variant: variants/common_ops{SUFFIX} runs there)" in r.evidence
    assert r.data["variants"][0]["object"] == f"variants/sm100/common_ops{SUFFIX}"


def test_sass_for_an_older_major_fails_as_its_launch_would(venv, tmp_path):
    # SASS runs only on its own major: sm_80 SASS on an sm_90 card launches with cudaError 209 (no kernel image).
    r = run_doctor(str(venv), checks=["kernels:ampereonly"], environ=gpus(tmp_path, "9.0")).get("kernels:ampereonly")
    assert r.verdict == "fail", r.evidence
    assert "ampereonly/lib/libampere.so has kernels for sm_80 only; this GPU is sm_90" in r.evidence
    assert "sm_90" in r.hint
    r = run_doctor(str(venv), checks=["kernels:turingonly"], environ=gpus(tmp_path, "8.9")).get("kernels:turingonly")
    assert r.verdict == "fail"
    assert "turingonly/lib/libturing.so has kernels for sm_75 only; this GPU is sm_89" in r.evidence


def test_cufftw_sm75_only_kernels_are_ok_with_the_reason_from_data(venv, tmp_path):
    r = run_doctor(str(venv), checks=["kernels:nvidia-cufft"], environ=gpus(tmp_path, "9.0")).get("kernels:nvidia-cufft")
    assert r.verdict == "ok", r.evidence
    assert "nvidia/cu13/lib/libcufftw.so.12 has kernels for sm_75 only; this GPU is sm_90 -- harmless: cuFFTW" in r.evidence
    (entry,) = r.data["harmless"]
    assert entry["object"] == "nvidia/cu13/lib/libcufftw.so.12" and "cuFFTW" in entry["reason"]


def test_strict_passes_on_a_cufft_wheel(venv, tmp_path):
    # The README's CI example runs `wh doctor --strict`: stock torch CUDA wheels bring nvidia-cufft.
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(venv), "--check",
                           "kernels:nvidia-cufft", "--strict"], capture_output=True, text=True,
                          env=gpus(tmp_path, "9.0"), timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_device_code_a_library_loads_itself_counts(venv, tmp_path):
    # cuFFT's layout: .nv_fatbin has sm_75 only, PTX for every GPU sits in its data, handed to the driver by it.
    r = run_doctor(str(venv), checks=["kernels:fftlike"], environ=gpus(tmp_path, "8.9")).get("kernels:fftlike")
    assert r.verdict == "ok", r.evidence
    assert "PTX compute_80 (1 image(s) outside its fatbin section, loaded by the library itself)" in r.evidence
    assert "sm_89: compute_80 (PTX, JIT)" in r.evidence


def test_mixed_gpus_each_sm_is_judged(venv, tmp_path):
    r = run_doctor(str(venv), checks=["kernels:hopperonly"], environ=gpus(tmp_path, "9.0", "8.9")).get("kernels:hopperonly")
    assert r.verdict == "fail" and "GPU 1 is sm_89" in r.evidence


def test_no_gpu_is_skip_and_still_lists_the_architectures(venv, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "WH_DOCTOR_FAKE_GPUS"}
    env["PATH"] = str(tmp_path)  # no nvidia-smi
    rep = run_doctor(str(venv), checks=["kernels"], environ=env)
    r = rep.get("kernels:hopperonly")
    assert r.verdict == "skip" and "sm_90" in r.evidence
    assert not [x for x in rep.results if x.id == "kernels:cpuonly"]


def _no_gpu(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "WH_DOCTOR_FAKE_GPUS"}
    env["PATH"] = str(tmp_path)  # no nvidia-smi
    return env


def test_no_gpu_judges_against_the_manifests_sm_and_says_so(venv, tmp_path):
    from wheelhouse.manifest import parse_manifest

    manifest = parse_manifest('[doctor]\nsm = "9.0"\n')
    rep = run_doctor(str(venv), checks=["kernels"], environ=_no_gpu(tmp_path), manifest=manifest)
    r = rep.get("kernels:ampereonly")
    assert r.verdict == "fail", r.evidence
    assert "has kernels for sm_80 only; the manifest's GPU is sm_90" in r.evidence
    assert "no GPU here: judged against the manifest's [doctor] sm = 9.0" in r.evidence
    assert rep.get("kernels:hopperonly").verdict == "ok"
    assert r.data["judged_against"] == {"source": "manifest", "sms": ["sm_90"]}


def test_no_gpu_judges_against_the_wheelhouse_targets_gpus(venv, tmp_path):
    from nvidia_fixtures import make_wheelhouse
    from wheelhouse.target import host_target

    target = {**host_target().to_json(), "gpus": [{"index": 0, "name": "NVIDIA L4", "compute_capability": "8.9"}]}
    house = make_wheelhouse(tmp_path / "house", [], target=target)
    rep = run_doctor(str(venv), checks=["kernels"], environ=_no_gpu(tmp_path), wheelhouse=house)
    r = rep.get("kernels:hopperonly")
    assert r.verdict == "fail" and "the target's GPU is sm_89" in r.evidence
    assert "no GPU here: judged against the GPUs of the wheelhouse's target profile" in r.evidence
    assert rep.get("kernels:ptxonly").verdict == "ok"


def test_cli_exit_code(venv, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(venv), "--check", "kernels",
                           "--json"], capture_output=True, text=True, env=gpus(tmp_path, "8.9"), timeout=300)
    assert proc.returncode == 1, proc.stderr
    verdicts = {r["id"]: r["verdict"] for r in json.loads(proc.stdout)["results"]}
    assert verdicts == {"kernels:blackwellonly": "fail", "kernels:hopperonly": "fail", "kernels:ptxonly": "ok",
                        "kernels:variants": "ok", "kernels:turingonly": "fail", "kernels:fftlike": "ok",
                        "kernels:ampereonly": "ok", "kernels:nvidia-cufft": "ok", "kernels:newptx": "ok",
                        "kernels:fastops": "fail", "kernels:damagedfatbin": "fail"}


def test_the_harmless_data_file_refuses_an_entry_without_a_reason(tmp_path):
    from wheelhouse.doctor.checks.kernels import load_harmless

    bad = tmp_path / "kernels.toml"
    bad.write_text('[[harmless]]\ndistribution = "nvidia-cufft*"\nobjects = "*/libcufftw.so*"\nimages = ["sm_75"]\n')
    with pytest.raises(Exception) as info:
        load_harmless(bad)
    assert info.value.code == "kernels-data" and "reason" in str(info.value)
    bad.write_text('[[harmless]]\ndistribution = "x"\nobject = "y"\n')
    with pytest.raises(Exception) as info:
        load_harmless(bad)
    assert "'object' (did you mean 'objects'?)" in str(info.value)
    assert load_harmless()  # the bundled file reads
