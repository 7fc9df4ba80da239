"""GPU facts: one nvidia-smi query, one value type, whether seen now or recorded in a profile."""

import os

import pytest

from wheelhouse.target import Gpu, target_from_json
from wheelhouse.target import capture as capture_target
from wheelhouse.target.gpu import GpuProcess, query_gpu_facts, query_gpus, visible_gpus

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


def _smi(tmp_path, monkeypatch, script: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\n" + script)
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("WH_DOCTOR_FAKE_GPUS", raising=False)


def test_a_failing_nvidia_smi_is_an_error_in_its_own_words_not_an_exception(tmp_path, monkeypatch):
    _smi(tmp_path, monkeypatch, "echo 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    facts = query_gpu_facts()
    assert facts.gpus == () and facts.error == "nvidia-smi failed (exit 9): NVIDIA-SMI has failed"
    assert capture_target.capture(include_gpus=True)["gpus"] == []
    # the state after a driver upgrade without a reboot
    _smi(tmp_path, monkeypatch, 'echo "Failed to initialize NVML: Driver/library version mismatch"\n'
                                'echo "NVML library version: 580.95"\nexit 18\n')
    assert query_gpu_facts().error == ("nvidia-smi failed (exit 18): Failed to initialize NVML: Driver/library "
                                       "version mismatch; NVML library version: 580.95")


def test_an_nvidia_smi_that_finds_no_device_is_no_gpu_not_an_error(tmp_path, monkeypatch):
    _smi(tmp_path, monkeypatch, 'echo "No devices were found"\nexit 6\n')
    facts = query_gpu_facts()
    assert facts.gpus == () and facts.error is None and facts.source == "nvidia-smi"


def test_cuda_visible_devices_leaves_the_cards_cuda_would():
    cards = [Gpu(i, "NVIDIA H200", "9.0") for i in range(4)]

    def left(visible):
        return [g.index for g in visible_gpus(cards, visible)]

    assert left(None) == [0, 1, 2, 3]  # unset: every card
    assert left("") == [] and left("-1") == [] and left("none") == []  # the usual ways to hide every card
    assert left("1, 3") == [1, 3]
    assert left("0,-1,2") == [0] and left("1,7,2") == [1]  # CUDA stops at the first entry that is no card's
    # UUIDs and MIG names are not filtered (nvidia-smi's index is what wh compares)
    assert left("GPU-8e3b1f2a-6c1d-4b7e-9f00-1a2b3c4d5e6f") == [0, 1, 2, 3]
    assert left("MIG-GPU-8e3b1f2a/1/0") == [0, 1, 2, 3]


def test_memory_in_use_is_what_the_processes_hold_where_nvidia_smi_says_na():
    assert Gpu(0, "NVIDIA H200", memory_used_mib=0, processes=(GpuProcess(1, 6144),)).memory_in_use_mib == 0
    assert Gpu(0, "NVIDIA H200", processes=(GpuProcess(1, 6144), GpuProcess(2, 520))).memory_in_use_mib == 6664
    assert Gpu(0, "NVIDIA H200").memory_in_use_mib is None  # unknown, never 0
    assert Gpu(0, "NVIDIA H200", processes=(GpuProcess(1, None),)).memory_in_use_mib is None


def test_a_profile_gpu_without_index_takes_its_position():
    data = capture_target.capture(include_gpus=False)
    data["gpus"] = [{"name": "NVIDIA L4", "compute_capability": "8.9"}, {"name": "NVIDIA L4", "compute_capability": "8.9"}]
    assert [g.index for g in target_from_json(data).gpus] == [0, 1]


def test_no_nvidia_smi_is_no_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("WH_DOCTOR_FAKE_GPUS", raising=False)
    assert query_gpus() == [] and query_gpu_facts().source == "none"
