"""GPU facts: one nvidia-smi query, one value type, whether seen now or recorded in a profile."""

import os

import pytest

from wheelhouse.target import Gpu, target_from_json
from wheelhouse.target import capture as capture_target
from wheelhouse.target.gpu import query_gpu_facts, query_gpus

FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=*) printf '0, NVIDIA L4, 8.9, 23034, 1, 580.159.04\\n1, NVIDIA H200, 9.0, 143771, [N/A], 580.159.04\\n' ;;
  topo) printf '\\tGPU0\\tGPU1\\tCPU Affinity\\nGPU0\\t X \\tNV18\\t0-45\\nGPU1\\tNV18\\t X \\t0-45\\n' ;;
  *) printf '| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |\\n' ;;
esac
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("WH_DOCTOR_FAKE_GPUS", raising=False)
    return bin_dir / "nvidia-smi"


def test_a_captured_profile_and_a_live_query_give_the_same_gpus(fake_smi):
    live = query_gpus()
    assert live == [Gpu(0, "NVIDIA L4", "8.9", 23034, 1), Gpu(1, "NVIDIA H200", "9.0", 143771, None)]
    profile = target_from_json(capture_target.capture(include_gpus=True))
    assert list(profile.gpus) == live
    assert profile.driver_version == "580.159.04" and profile.cuda_version == "13.0"
    assert [g.sm for g in live] == ["sm_89", "sm_90"] and live[0].memory_free_mib == 23033


def test_live_facts_add_the_interconnect(fake_smi):
    facts = query_gpu_facts()
    assert facts.topology == "nvlink" and facts.cuda_version == "13.0" and facts.error is None


def test_a_failing_nvidia_smi_is_an_error_not_an_exception(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("WH_DOCTOR_FAKE_GPUS", raising=False)
    facts = query_gpu_facts()
    assert facts.gpus == () and "no driver loaded" in facts.error
    assert capture_target.capture(include_gpus=True)["gpus"] == []


def test_a_profile_gpu_without_index_takes_its_position():
    data = capture_target.capture(include_gpus=False)
    data["gpus"] = [{"name": "NVIDIA L4", "compute_capability": "8.9"}, {"name": "NVIDIA L4", "compute_capability": "8.9"}]
    assert [g.index for g in target_from_json(data).gpus] == [0, 1]


def test_no_nvidia_smi_is_no_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("WH_DOCTOR_FAKE_GPUS", raising=False)
    assert query_gpus() == [] and query_gpu_facts().source == "none"
