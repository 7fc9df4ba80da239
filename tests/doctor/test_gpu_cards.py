"""Several cards, through the real `wh doctor` and a stand-in nvidia-smi on PATH: the count the manifest expects,
whether the cards agree, the interconnect, the cards CUDA_VISIBLE_DEVICES leaves, and what `wh doctor compare`
says of two runs on one box that differ only in the cards they see."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import make_venv
from fake_smi import Card, GpuApp, h200s, write_fake_smi


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    return make_venv(tmp_path_factory.mktemp("cards") / "venv")


def doctor(tmp_path: Path, venv: Path, *args: str, env: dict | None = None, check: str = "gpu") -> dict:
    full = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "WH_DOCTOR_FAKE_GPUS")}
    full.update(PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", COLUMNS="250", **(env or {}))
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
