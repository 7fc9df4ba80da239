"""tests/device/multigpu.sh rehearsed on this CPU machine: what it does without a GPU box.

It has not run on several real GPUs yet (the multi-GPU device kinds were not lent); here it runs as written with
a stand-in nvidia-smi on PATH (tests/support/fake_smi.py) and this checkout's wh in place of the one it bootstraps:
fewer than two cards is a SKIP (exit 0), on four cards the doctor and fleet parts pass, and the tp part's launch,
environment and stop checks pass with a stand-in `ft` (tests/support/fake_engine.py); the build, the preflight's
torch process and the per-rank GPU memory need the box.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import make_venv
from fake_smi import Card, h200s, write_fake_smi

SCRIPT = Path(__file__).with_name("multigpu.sh")


def run(tmp_path: Path, cards, parts: str = "doctor fleet", timeout: int = 600, **extra: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    if cards is not None:
        write_fake_smi(bin_dir, cards)
    bin_dir.mkdir(exist_ok=True)
    work = tmp_path / "work"
    whv = work / "whv" / "bin"
    whv.mkdir(parents=True, exist_ok=True)  # "already bootstrapped": this checkout's wh
    (whv / "wh").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m wheelhouse "$@"\n')
    (whv / "wh").chmod(0o755)
    py = tmp_path / "venv" / "bin" / "python"
    if not py.exists():
        make_venv(tmp_path / "venv")
    path = [str(bin_dir)] + [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "nvidia-smi").exists()]
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "WH_DOCTOR_FAKE_GPUS")}
    env.update(PATH=os.pathsep.join(path), PY=str(py), OUT=str(tmp_path / "out"), WORK=str(work), PARTS=parts,
               COLUMNS="250", **extra)
    return subprocess.run(["bash", str(SCRIPT), str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=tmp_path)


@pytest.mark.parametrize("cards", [None, [Card()]], ids=["no-nvidia-smi", "one-card"])
def test_fewer_than_two_gpus_is_a_skip(tmp_path, cards):
    r = run(tmp_path, cards)
    assert r.returncode == 0 and r.stdout.startswith("SKIP: needs >= 2 GPUs"), r.stdout + r.stderr
    assert not (tmp_path / "out").exists()  # nothing started


def test_four_cards_doctor_and_fleet_parts_pass(tmp_path):
    r = run(tmp_path, h200s(4))
    out = r.stdout
    assert r.returncode == 0, out + r.stderr[-3000:]
    for line in ("PASS D1 doctor sees 4 GPUs, one driver (580.159.04) and sm 9.0 on every card",
                 "PASS D2 interconnect reported: NVLink between cards",
                 "PASS D3 [doctor] gpus = 4 ok; gpus = 5 fails: 4 GPU(s), manifest expects 5",
                 "PASS F1 the GPU count is the only difference: GPU count: 4 on all-gpus; 2 on gpus-0,1"):
        assert line in out, out
    assert "FAIL" not in out and out.rstrip().endswith("RESULT: OK")
    assert (tmp_path / "out" / "topo.txt").read_text().startswith("\tGPU0\tGPU1\tGPU2\tGPU3")
    assert (tmp_path / "work" / "serve-tp.toml").read_text().count('--tensor-parallel-size", "4"') == 1


def test_a_card_of_another_sm_fails_the_doctor_part(tmp_path):
    r = run(tmp_path, [*h200s(3), Card("NVIDIA L4", "8.9", 23034, 0)], parts="doctor")
    assert r.returncode == 1
    assert "FAIL D1 doctor cards: fail :: 4 GPU(s)" in r.stdout and "the cards disagree" in r.stdout


STAND_IN_FT = """#!/bin/sh
# ft serve ... --port P ...: the stand-in engine on that port (a leader and one rank, as TP workers are)
port=
while [ $# -gt 0 ]; do [ "$1" = --port ] && port=$2; shift; done
exec "{python}" "{fake}" --port "$port"
"""


def test_the_tp_part_with_a_stand_in_engine(tmp_path):
    """What the tp part checks of the launch, the engine's environment and the stop, with the stand-in engine:
    only the per-rank memory (T2) needs real ranks on real cards."""
    serve = tmp_path / "work" / "serve"
    make_venv(serve)
    fake = Path(__file__).parents[1] / "support" / "fake_engine.py"
    (serve / "bin" / "ft").write_text(STAND_IN_FT.format(python=sys.executable, fake=fake))
    (serve / "bin" / "ft").chmod(0o755)
    r = run(tmp_path, h200s(4), parts="tp", REHEARSAL="1")
    out = r.stdout
    assert "PASS T1 launched with GPU 3 free; ready on /health, smoke streamed tokens" in out, out + r.stderr[-3000:]
    assert "PASS T3 NVLink multicast off and wh env's nvcc first on PATH in the engine and all its processes (2: " in out, out
    assert "PASS T4 wh stop: no rank process left, no GPU memory in use (MiB after: 0 0 0 0 )" in out, out
    assert "FAIL T2 per-rank memory 0 0 0 0  MiB" in out  # the stand-in holds no GPU memory
    assert r.returncode == 1
    toml = (tmp_path / "work" / "serve-tp.toml").read_text()
    assert 'NCCL_NVLS_ENABLE = "0"' in toml and '"--gpu", "0,1,2,3"' in toml
