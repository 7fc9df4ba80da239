"""wh stage's kernel scan: a wheel with nvcc-built device code for sm_90, staged for a target whose GPU is sm_89."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_fixtures import build_kernel_so, build_self_loading_so, nvcc
from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_wheel, sha256_file
from wheelhouse.progress import RecordingReporter
from wheelhouse.stage.kernels import MissingKernels, check_kernels
from wheelhouse.target import Gpu, host_target

pytestmark = pytest.mark.skipif(nvcc() is None, reason="needs nvcc")

TAGS = f"cp{sys.version_info[0]}{sys.version_info[1]}-cp{sys.version_info[0]}{sys.version_info[1]}-manylinux_2_17_x86_64"


@pytest.fixture(scope="module")
def kernel_wheels(tmp_path_factory) -> dict[str, Path]:
    build = tmp_path_factory.mktemp("stage-kernels")
    sm90 = build_kernel_so(build / "a", "sm90.so", "arch=compute_90,code=sm_90").read_bytes()
    sm80 = build_kernel_so(build / "b", "sm80.so", "arch=compute_80,code=sm_80").read_bytes()
    fft = build_self_loading_so(build / "c", "libfftlike.so.12", "arch=compute_75,code=sm_75",
                                "arch=compute_80,code=compute_80").read_bytes()
    pub = build / "pub"
    return {
        "fftlike": make_wheel(pub, "fftlike", "1.0", tags=TAGS, modules={"fftlike/__init__.py": ""},
                              files={"fftlike/lib/libfftlike.so.12": fft}),
        "hopper": make_wheel(pub, "hopperkern", "1.0", tags=TAGS, modules={"hopperkern/__init__.py": ""},
                             files={"hopperkern/_ops.so": sm90, "hopperkern/libs/libhelper.so.1": sm80}),
        "ampere": make_wheel(pub, "amperekern", "1.0", tags=TAGS, modules={"amperekern/__init__.py": ""},
                             files={"amperekern/_ops.so": sm80}),
        "variants": make_wheel(pub, "variantkern", "1.0", tags=TAGS, modules={"variantkern/__init__.py": ""},
                               files={"variantkern/common_ops.so": sm80, "variantkern/sm90/common_ops.so": sm90}),
    }


def target_with(*ccs: str):
    gpus = tuple(Gpu(index=i, name="NVIDIA L4", compute_capability=cc) for i, cc in enumerate(ccs))
    return dataclasses.replace(host_target(), gpus=gpus, cuda_version="13.0")


def items(*wheels: Path):
    return [(w, sha256_file(w)) for w in wheels]


def test_device_code_for_another_gpu_is_refused_naming_wheel_so_and_sms(kernel_wheels, tmp_path):
    with pytest.raises(MissingKernels) as info:
        check_kernels(items(*kernel_wheels.values()), target_with("8.9"), tmp_path)
    err = info.value
    assert err.code == "missing-kernels" and err.exit_code == 1
    assert "hopperkern-1.0-" in err.message and "hopperkern/_ops.so has kernels for sm_90 only; the target GPU is sm_89" \
        in err.message
    assert "--allow-missing-kernels" in err.hint
    # sm_80 SASS runs on sm_89; the sm90/ variant sits beside a common_ops.so that runs: neither is a gap.
    assert [g.gap.path for g in err.gaps] == ["hopperkern/_ops.so"]
    assert not list(tmp_path.iterdir())  # extracted members are gone


def test_allow_only_warns(kernel_wheels, tmp_path):
    rep = RecordingReporter()
    gaps = check_kernels(items(kernel_wheels["hopper"]), target_with("8.9"), tmp_path, allow=True, reporter=rep)
    assert [g.gap.path for g in gaps] == ["hopperkern/_ops.so"]
    assert any(e[0] == "note" and e[1].startswith("warning:") and "sm_89" in e[1] for e in rep.events)


def test_code_that_runs_on_the_targets_gpu_or_no_gpu_passes(kernel_wheels, tmp_path):
    ampere, variants = kernel_wheels["ampere"], kernel_wheels["variants"]
    assert check_kernels(items(ampere, variants), target_with("8.6"), tmp_path) == []  # sm_80 SASS runs on sm_86
    assert check_kernels(items(variants), target_with("9.0"), tmp_path) == []  # its sm90/ variant runs there
    assert check_kernels(items(*kernel_wheels.values()), target_with(), tmp_path) == []


def test_device_code_a_library_loads_itself_counts(kernel_wheels, tmp_path):
    # cuFFT's layout: sm_75 in .nv_fatbin, PTX for newer GPUs in its data; with a cache, a restage for
    # another GPU reads the wheel again rather than trusting a shallow cached scan.
    cache = tmp_path / "cache"
    assert check_kernels(items(kernel_wheels["fftlike"]), target_with("7.5"), tmp_path, cache=cache) == []
    assert check_kernels(items(kernel_wheels["fftlike"]), target_with("8.9"), tmp_path, cache=cache) == []


def test_sass_for_older_gpus_only_is_staged_with_a_warning(kernel_wheels, tmp_path):
    # The doctor's rule: a library may keep kernels for older GPUs alone (cuFFTW's sm_75-only fatbin).
    rep = RecordingReporter()
    gaps = check_kernels(items(kernel_wheels["ampere"]), target_with("9.0"), tmp_path, reporter=rep)
    assert [(g.gap.path, g.gap.older_only) for g in gaps] == [("amperekern/_ops.so", True)]
    assert any(e[0] == "note" and "amperekern/_ops.so has kernels for sm_80 only; the target GPU is sm_90" in e[1]
               and "older GPUs only" in e[1] for e in rep.events)


def test_results_are_cached_by_sha256(kernel_wheels, tmp_path):
    cache = tmp_path / "cache"
    wheel = tmp_path / kernel_wheels["hopper"].name
    wheel.write_bytes(kernel_wheels["hopper"].read_bytes())
    sha = sha256_file(wheel)
    with pytest.raises(MissingKernels):
        check_kernels([(wheel, sha)], target_with("8.9"), tmp_path, cache=cache)
    assert (cache / f"{sha}.json").is_file()
    wheel.write_bytes(b"not a zip any more")  # a second scan reads the cache, never the wheel
    with pytest.raises(MissingKernels):
        check_kernels([(wheel, sha)], target_with("8.9"), tmp_path, cache=cache)


# --- wh stage, end to end: a real index on 127.0.0.1, a target profile with an sm_89 GPU ------------------

def _target_file(tmp_path: Path, cc: str) -> Path:
    data = host_target().to_json()
    data.update(gpus=[{"index": 0, "name": "NVIDIA L4", "compute_capability": cc}], cuda_version="13.0")
    path = tmp_path / f"target-{cc}.json"
    path.write_text(json.dumps(data))
    return path


def _wh_stage(idx, tmp_path: Path, out: Path, cc: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wheelhouse", "stage", "hopperkern", "-o", str(out), "--target",
                           str(_target_file(tmp_path, cc)), "--index-url", idx.url, "--cache-dir",
                           str(tmp_path / "cache"), "--no-bootstrap", *extra],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "400"})


def test_wh_stage_refuses_a_wheel_without_kernels_for_the_targets_gpu(pyindex, kernel_wheels, tmp_path):
    idx = pyindex(kernel_wheels["hopper"].parent)
    out = tmp_path / "wheelhouse"
    proc = _wh_stage(idx, tmp_path, out, "8.9")
    assert proc.returncode == 1, proc.stderr
    first = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert first and kernel_wheels["hopper"].name in first[0]
    assert "hopperkern/_ops.so has kernels for sm_90 only; the target GPU is sm_89" in first[0]
    assert "hint:" in proc.stderr and "--allow-missing-kernels" in proc.stderr
    assert not out.exists()  # refused before the wheelhouse was named


def test_wh_stage_with_the_flag_stages_and_warns(pyindex, kernel_wheels, tmp_path):
    idx = pyindex(kernel_wheels["hopper"].parent)
    out = tmp_path / "wheelhouse"
    proc = _wh_stage(idx, tmp_path, out, "8.9", "--allow-missing-kernels", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "warning: " in proc.stderr and "has kernels for sm_90 only; the target GPU is sm_89" in proc.stderr
    assert (out / "wheels" / kernel_wheels["hopper"].name).is_file()
    notes = json.loads(proc.stdout)["notes"]
    assert any("hopperkern/_ops.so has kernels for sm_90 only" in n for n in notes)
    # The same wheel for its own GPU stages; only its sm_80 helper library is mentioned (older GPUs only).
    again = _wh_stage(idx, tmp_path, tmp_path / "wh90", "9.0")
    assert again.returncode == 0, again.stderr
    assert "hopperkern/_ops.so has kernels" not in again.stderr
    assert "hopperkern/libs/libhelper.so.1 has kernels for sm_80 only; the target GPU is sm_90 (older GPUs only" \
        in again.stderr
