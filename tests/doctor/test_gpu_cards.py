"""Several cards, through the real `wh doctor` and a stand-in nvidia-smi on PATH: the count the manifest expects,
whether the cards agree, the interconnect, the cards CUDA_VISIBLE_DEVICES leaves (the engine's: the manifest's
[serve] env over the caller's), what `wh doctor compare` says of two runs on one box that differ only in the cards
they see, and evidence that is missing: an nvidia-smi that cannot use the driver, memory in use it reports as
[N/A], a torch that sees no card nvidia-smi lists."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import install_dist, make_venv
from fake_smi import Card, GpuApp, h200s, write_fake_smi


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    return make_venv(tmp_path_factory.mktemp("cards") / "venv")


def doctor(tmp_path: Path, venv: Path, *args: str, env: dict | None = None, check: str = "gpu") -> dict:
    full = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "WH_DOCTOR_FAKE_GPUS")}
    full.update({"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "250", **(env or {})})
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(venv), "--check", check,
                           "--json", *args], capture_output=True, text=True, env=full, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def result(report: dict, cid: str) -> dict:
    return next(r for r in report["results"] if r["id"] == cid)


def test_four_cards_the_manifest_count_and_the_interconnect(tmp_path, venv):
    write_fake_smi(tmp_path / "bin", h200s(4))
    for n, verdict in ((4, "ok"), (5, "fail")):
        (tmp_path / f"m{n}.toml").write_text(f'[doctor]\ngpus = {n}\nsm = "9.0"\n')
        report = doctor(tmp_path, venv, "--manifest", str(tmp_path / f"m{n}.toml"))
        assert result(report, "gpu:expected")["verdict"] == verdict
    assert "4 GPU(s), manifest expects 5" in result(report, "gpu:expected")["evidence"]
    devices = result(report, "gpu:devices")
    assert devices["verdict"] == "ok" and devices["evidence"].startswith("4 GPU(s), driver 580.159.04")
    assert "every card sm 9.0" in devices["evidence"]
    inter = result(report, "gpu:interconnect")
    assert inter["evidence"] == "NVLink between cards" and inter["data"]["topology"] == "nvlink"
    assert inter["data"]["matrix"].splitlines()[1].split()[:5] == ["GPU0", "X", "NV18", "NV18", "NV18"]  # topo -m kept


def test_a_card_of_another_sm_is_a_fail_naming_it(tmp_path, venv):
    write_fake_smi(tmp_path / "bin", [*h200s(3), Card("NVIDIA L4", "8.9", 23034, 0)], link="PHB")
    report = doctor(tmp_path, venv)  # no manifest: the cards must agree among themselves
    devices = result(report, "gpu:devices")
    assert devices["verdict"] == "fail", devices
    assert "the cards disagree: GPU 0, 1, 2 sm 9.0; GPU 3 sm 8.9" in devices["evidence"]
    assert "CUDA_VISIBLE_DEVICES" in devices["hint"]
    # the engine limited to the agreeing cards is fine
    report = doctor(tmp_path, venv, env={"CUDA_VISIBLE_DEVICES": "0,1,2"})
    assert result(report, "gpu:devices")["verdict"] == "ok"


def test_cuda_visible_devices_limits_the_cards_the_doctor_judges(tmp_path, venv):
    write_fake_smi(tmp_path / "bin", h200s(4))
    (tmp_path / "m.toml").write_text("[doctor]\ngpus = 2\n")
    report = doctor(tmp_path, venv, "--manifest", str(tmp_path / "m.toml"), env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert result(report, "gpu:expected")["verdict"] == "ok"
    assert "2 GPU(s)" in result(report, "gpu:devices")["evidence"]
    assert "(CUDA_VISIBLE_DEVICES=0,1: 2 of 4 cards)" in result(report, "gpu:devices")["evidence"]
    gpu = report["facts"]["gpu"]
    assert [g["index"] for g in gpu["gpus"]] == [0, 1] and gpu["gpus_total"] == 4


def test_compare_of_all_cards_and_two_of_them_shows_only_the_count(tmp_path, venv):
    write_fake_smi(tmp_path / "bin", h200s(4))
    reports = []
    for node, visible in (("all-gpus", None), ("gpus-0-1", "0,1")):
        env = {"WH_NODE_NAME": node, **({"CUDA_VISIBLE_DEVICES": visible} if visible else {})}
        path = tmp_path / f"{node}.json"
        path.write_text(json.dumps(doctor(tmp_path, venv, env=env, check="")))
        reports.append(str(path))
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "compare", "--json", *reports],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = [d["line"] for d in json.loads(proc.stdout)["differences"]]
    assert lines == ["GPU count: 4 on all-gpus; 2 on gpus-0-1"], lines


def test_a_busy_card_names_the_processes_holding_it(tmp_path, venv):
    cards = h200s(4)
    cards[2] = Card(used_mib=6144)
    write_fake_smi(tmp_path / "bin", cards, apps=[GpuApp(4182, 2, 6144, "/opt/torch/.venv/bin/python3")])
    memory = result(doctor(tmp_path, venv), "gpu:memory")
    assert memory["verdict"] == "warn"
    assert memory["evidence"] == ("GPU 2 has 6144 MiB in use (> 1024 MiB): another job is on it "
                                  "(pid 4182 /opt/torch/.venv/bin/python3 6144 MiB)")


def test_cuda_visible_devices_hiding_every_card_leaves_none(tmp_path, venv):
    write_fake_smi(tmp_path / "bin", h200s(4))
    (tmp_path / "m.toml").write_text("[doctor]\ngpus = 4\n")
    for hidden in ("", "-1"):  # CUDA hides every device for either
        report = doctor(tmp_path, venv, "--manifest", str(tmp_path / "m.toml"), env={"CUDA_VISIBLE_DEVICES": hidden})
        expected = result(report, "gpu:expected")
        assert expected["verdict"] == "fail", expected
        assert expected["evidence"] == f"manifest expects 4 GPU(s); found none (CUDA_VISIBLE_DEVICES={hidden!r} hides all 4 cards)"
        assert report["facts"]["gpu"]["gpus"] == []
    # CUDA stops at the first entry that is no card's index
    report = doctor(tmp_path, venv, "--manifest", str(tmp_path / "m.toml"), env={"CUDA_VISIBLE_DEVICES": "0,-1,2"})
    assert result(report, "gpu:expected")["evidence"] == "1 GPU(s), manifest expects 4"


def test_the_engines_cuda_visible_devices_from_the_manifest_picks_the_cards_judged(tmp_path, venv):
    write_fake_smi(tmp_path / "bin", [*h200s(3), Card("NVIDIA L4", "8.9", 23034, 0)], link="PHB")
    manifest = tmp_path / "m.toml"
    serve = '[serve]\ncommand = ["python"]\n[serve.env]\nCUDA_VISIBLE_DEVICES = "{}"\n'
    manifest.write_text("[doctor]\ngpus = 2\n" + serve.format("0,1"))
    report = doctor(tmp_path, venv, "--manifest", str(manifest), env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert result(report, "gpu:expected")["verdict"] == "ok"
    assert "(CUDA_VISIBLE_DEVICES=0,1: 2 of 4 cards)" in result(report, "gpu:devices")["evidence"]
    # wh's own shell leaves the three H200s; the engine is given all four, the L4 too
    manifest.write_text(serve.format("0,1,2,3"))
    report = doctor(tmp_path, venv, "--manifest", str(manifest), env={"CUDA_VISIBLE_DEVICES": "0,1,2"})
    devices = result(report, "gpu:devices")
    assert devices["verdict"] == "fail" and "GPU 3 sm 8.9" in devices["evidence"], devices
    # the installed wheelhouse's recorded [serve] env counts as the manifest's does
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / "wh.json").write_text(json.dumps({
        "schema": "wh-wheelhouse/1", "doctor": {"gpus": 2},
        "serve": {"command": ["python"], "env": {"CUDA_VISIBLE_DEVICES": "1,2"}}}))
    report = doctor(tmp_path, venv, "--wheelhouse", str(tmp_path / "wh"))
    assert result(report, "gpu:expected")["verdict"] == "ok"
    assert [g["index"] for g in report["facts"]["gpu"]["gpus"]] == [1, 2]


FAKE_TORCH = """import os
__version__ = "2.9.0+cu128"
from . import version, cuda
"""
# A torch that sees the cards CUDA_VISIBLE_DEVICES leaves it (FAKE_TORCH_CARDS of them when it is unset).
FAKE_TORCH_CUDA = """import os
def device_count():
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return int(os.environ.get("FAKE_TORCH_CARDS", "4")) if visible is None else len([p for p in visible.split(",") if p])
def is_available():
    return device_count() > 0
def get_device_capability(i):
    return (9, 0)
def get_device_name(i):
    return "NVIDIA H200"
def get_arch_list():
    return ["sm_90"]
"""


@pytest.fixture
def torch_venv(tmp_path) -> Path:
    py = make_venv(tmp_path / "torch-venv")
    install_dist(py, tmp_path / "w", "torch", {"torch/__init__.py": FAKE_TORCH, "torch/version.py": "cuda = '12.8'\n",
                                               "torch/cuda.py": FAKE_TORCH_CUDA}, {})
    install_dist(py, tmp_path / "w", "triton", {"triton/__init__.py": "__version__ = '3.5.0'\nfrom . import language\n"
                                                "def jit(f):\n    return f\n",
                                                "triton/language.py": "constexpr = int\n"}, {})
    return py


def test_torch_is_asked_in_the_engines_environment(tmp_path, torch_venv):
    write_fake_smi(tmp_path / "bin", h200s(4))
    (tmp_path / "m.toml").write_text('[serve]\ncommand = ["python"]\n[serve.env]\nCUDA_VISIBLE_DEVICES = "0,1"\n')
    report = doctor(tmp_path, torch_venv, "--manifest", str(tmp_path / "m.toml"))
    driver = result(report, "gpu:driver-cuda")
    assert driver["verdict"] == "ok" and driver["evidence"].endswith("torch sees 2 device(s)"), driver


def test_a_jit_probe_whose_torch_sees_no_card_nvidia_smi_lists_fails(tmp_path, torch_venv):
    write_fake_smi(tmp_path / "bin", h200s(1))
    triton = result(doctor(tmp_path, torch_venv, env={"FAKE_TORCH_CARDS": "0"}, check="jit"), "jit:triton")
    assert triton["verdict"] == "fail", triton
    assert triton["evidence"] == "torch sees no CUDA device though nvidia-smi lists 1"
    assert "drop" not in triton["data"]  # dropping the library fixes nothing here
    # the engine is given no card: nothing to run it on
    triton = result(doctor(tmp_path, torch_venv, env={"CUDA_VISIBLE_DEVICES": "-1"}, check="jit"), "jit:triton")
    assert triton["verdict"] == "skip", triton


NVML_MISMATCH = """#!/bin/sh
echo "Failed to initialize NVML: Driver/library version mismatch"
echo "NVML library version: 580.95"
exit 18
"""


def test_an_nvidia_smi_that_cannot_use_the_driver_fails_gpu_devices(tmp_path, venv):
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text(NVML_MISMATCH)
    smi.chmod(0o755)
    report = doctor(tmp_path, venv)
    devices = result(report, "gpu:devices")
    assert devices["verdict"] == "fail", devices
    assert devices["evidence"] == ("nvidia-smi failed (exit 18): Failed to initialize NVML: Driver/library version "
                                   "mismatch; NVML library version: 580.95")
    assert "reboot" in devices["hint"]
    # one that finds no card, or none at all: no GPU, every gpu check skips
    smi.write_text('#!/bin/sh\necho "No devices were found"\nexit 6\n')
    report = doctor(tmp_path, venv)
    assert {r["verdict"] for r in report["results"]} == {"skip"}
    assert result(report, "gpu:devices")["evidence"] == "no GPU: nvidia-smi lists no GPU"
    smi.unlink()
    report = doctor(tmp_path, venv, env={"PATH": str(tmp_path / "bin")})  # no nvidia-smi on PATH
    assert {r["verdict"] for r in report["results"]} == {"skip"}
    assert result(report, "gpu:devices")["evidence"] == "no GPU: nvidia-smi not found"


def test_memory_in_use_nvidia_smi_reports_as_na_is_not_zero(tmp_path, venv):
    write_fake_smi(tmp_path / "bin", [Card(used_mib="[N/A]")], apps=[GpuApp(4182, 0, 61440)])
    memory = result(doctor(tmp_path, venv), "gpu:memory")
    assert memory["verdict"] == "warn", memory
    assert memory["evidence"] == ("GPU 0 has 61440 MiB in use (> 1024 MiB; memory.used is [N/A]: what its processes "
                                  "hold): another job is on it (pid 4182 python3 61440 MiB)")
    write_fake_smi(tmp_path / "bin", [Card(used_mib="[N/A]")])  # and no process listed: unknown
    memory = result(doctor(tmp_path, venv), "gpu:memory")
    assert memory["verdict"] == "warn", memory
    assert memory["evidence"] == ("GPU 0: memory in use unknown (nvidia-smi says [N/A] and lists no process with its "
                                  "memory)")
