"""`wh serve` on a box of four cards (a stand-in nvidia-smi on PATH), through the real entry point, against
tests/support/fake_engine.py: a card another process holds is refused naming the card and that process (one whose
memory in use nvidia-smi cannot tell is refused too), the cards the engine's CUDA_VISIBLE_DEVICES leaves are the ones
counted (none where it hides them all), and the environment the engine and its rank run with carries NVLink
multicast off when the box's manifest says so (tests/device/multigpu.sh writes that manifest for the shared H200
hosts)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fake_smi import Card, GpuApp, h200s, write_fake_smi

FAKE = Path(__file__).parents[1] / "support" / "fake_engine.py"
PY = sys.executable
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items()
         if k not in ("WH_SERVE_URL", "WH_API_KEY", "CUDA_VISIBLE_DEVICES", "WH_DOCTOR_FAKE_GPUS", *NVLS_OFF)}
    e.update(WH_STATE_DIR=str(tmp_path / "state"), NO_COLOR="1", COLUMNS="250",
             PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return e


def wh(args, env, timeout=120):
    return subprocess.run([PY, "-m", "wheelhouse", *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout)


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(kv.split("=", 1) for kv in raw.decode("utf-8", "replace").split("\0") if "=" in kv)


@pytest.fixture
def hog():
    """A process standing in for another job's torch process on GPU 2."""
    proc = subprocess.Popen([PY, "-c", "import time; time.sleep(120)", "gpu-hog"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_held_card_is_refused_naming_the_card_and_the_process_then_it_launches(tmp_path, env, hog):
    cards = h200s(4)
    cards[2] = Card(used_mib=6144 + 520)
    write_fake_smi(tmp_path / "bin", cards, apps=[GpuApp(hog.pid, 2, 6144), GpuApp(hog.pid + 10**6, 2, 520, "other")])
    log, port = tmp_path / "serve.log", free_port()
    engine = ["--", PY, FAKE, "--port", port]
    r = wh(["serve", "--gpus", "4", "--log", log, *engine], env)
    assert r.returncode == 1, r.stderr
    assert (f"GPU 2 (NVIDIA H200) already has 6664 MiB in use (limit 4096 MiB): another job holds it (held by pid "
            f"{hog.pid} ({PY} -c import time; time.sleep(120) gpu-hog) with 6144 MiB, pid {hog.pid + 10**6} (other) "
            "with 520 MiB); stop it first") in r.stderr
    assert not log.exists()  # refused before launch
    write_fake_smi(tmp_path / "bin", h200s(4))  # the other job is gone
    # The full preflight, its doctor limited to the gpu checks: this CPU machine has no libcuda for the rest.
    (tmp_path / "m.toml").write_text('[doctor]\ngpus = 4\nsm = "9.0"\nchecks = ["gpu"]\n')
    r = wh(["serve", tmp_path / "m.toml", "--detach", "--json", "--interval", "0.2", "--log", log, *engine], env)
    assert r.returncode == 0, r.stderr
    assert "preflight: doctor found no failing check" in r.stderr
    assert wh(["stop"], env).returncode == 0


def test_the_engines_cuda_visible_devices_picks_the_cards_counted(tmp_path, env):
    cards = h200s(4)
    cards[3] = Card(used_mib=9000)
    write_fake_smi(tmp_path / "bin", cards)
    port = free_port()
    (tmp_path / "m.toml").write_text(f"""[serve]
command = ["{PY}", "{FAKE}", "--port", "{port}"]
url = "http://127.0.0.1:{port}"
[serve.env]
CUDA_VISIBLE_DEVICES = "0,1"
""")
    # wh's own CUDA_VISIBLE_DEVICES names other cards: the engine's (the manifest's) is the one that counts
    r = wh(["serve", tmp_path / "m.toml", "--gpus", "2", "--no-preflight", "--detach", "--log", tmp_path / "a.log"],
           {**env, "CUDA_VISIBLE_DEVICES": "2,3"})
    assert r.returncode == 0, r.stderr
    wh(["stop"], env)
    from wheelhouse.serve import preflight as pre
    from wheelhouse.target.gpu import query_gpus
    every = query_gpus(environ={k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"})
    assert pre.check_gpus(every, expected=2, max_used_mib=None, visible="0,1") == []
    assert "GPU 3" in pre.check_gpus(every, expected=2, max_used_mib=None, visible="2,3")[0]


def test_an_engine_cuda_visible_devices_hiding_every_card_is_refused(tmp_path, env):
    write_fake_smi(tmp_path / "bin", h200s(4))
    port = free_port()
    for hidden in ("-1", ""):  # CUDA hides every device for either
        (tmp_path / "m.toml").write_text(f"""[serve]
command = ["{PY}", "{FAKE}", "--port", "{port}"]
url = "http://127.0.0.1:{port}"
[serve.env]
CUDA_VISIBLE_DEVICES = "{hidden}"
""")
        r = wh(["serve", tmp_path / "m.toml", "--gpus", "4", "--log", tmp_path / "a.log"], env)
        assert r.returncode == 1, r.stderr
        assert f"expected exactly 4 GPU(s) (CUDA_VISIBLE_DEVICES={hidden!r}), found none" in r.stderr
        assert not (tmp_path / "a.log").exists()  # refused before launch


def test_a_card_whose_memory_in_use_is_na_is_judged_by_its_processes_or_refused(tmp_path, env, hog):
    log, engine = tmp_path / "serve.log", ["--", PY, FAKE, "--port", free_port()]
    write_fake_smi(tmp_path / "bin", [Card(used_mib="[N/A]")], apps=[GpuApp(hog.pid, 0, 61440)])
    r = wh(["serve", "--gpus", "1", "--max-used-mib", "4096", "--log", log, *engine], env)
    assert r.returncode == 1, r.stderr
    assert "GPU 0 (NVIDIA H200) already has 61440 MiB in use (limit 4096 MiB): another job holds it" in r.stderr
    write_fake_smi(tmp_path / "bin", [Card(used_mib="[N/A]")])  # and no process listed: the limit cannot be checked
    r = wh(["serve", "--gpus", "1", "--max-used-mib", "4096", "--log", log, *engine], env)
    assert r.returncode == 1, r.stderr
    assert ("GPU 0 (NVIDIA H200): nvidia-smi says memory.used [N/A] and lists no process with its memory: the 4096 "
            "MiB limit cannot be checked") in r.stderr
    assert not log.exists()  # refused before launch


def _serve_and_read_environ(tmp_path: Path, env: dict, manifest_env: str) -> tuple[dict, dict]:
    port = free_port()
    (tmp_path / "m.toml").write_text(f"""[doctor]
checks = ["gpu"]  # this CPU machine has no libcuda for the rest
[serve]
command = ["{PY}", "{FAKE}", "--port", "{port}"]
url = "http://127.0.0.1:{port}"
[serve.env]
{manifest_env}
""")
    log = tmp_path / "serve.log"
    r = wh(["serve", tmp_path / "m.toml", "--gpus", "4", "--detach", "--interval", "0.2", "--log", log], env)
    assert r.returncode == 0, r.stderr
    try:
        pids = {k: int(v) for k, v in re.findall(r"^(fake-engine|rank) pid (\d+)", log.read_text(), re.M)}
        return environ_of(pids["fake-engine"]), environ_of(pids["rank"])
    finally:
        assert wh(["stop"], env).returncode == 0


def test_nvlink_multicast_off_from_the_boxs_manifest_reaches_the_engine_and_its_rank(tmp_path, env):
    write_fake_smi(tmp_path / "bin", h200s(4))
    leader, rank = _serve_and_read_environ(tmp_path, env, "\n".join(f'{k} = "{v}"' for k, v in NVLS_OFF.items()))
    for e in (leader, rank):
        assert {k: e.get(k) for k in NVLS_OFF} == NVLS_OFF


def test_nvlink_multicast_variables_set_on_the_box_are_kept_beside_the_manifests_env(tmp_path, env):
    """The shared hosts set the three variables in their image: wh never drops or changes them, also when the
    manifest's [serve] env sets other variables; and wh sets nothing of its own (the engine's NCCL defaults
    stay the user's choice where no one set them)."""
    write_fake_smi(tmp_path / "bin", h200s(4))
    leader, rank = _serve_and_read_environ(tmp_path, {**env, **NVLS_OFF}, 'OMP_NUM_THREADS = "4"')
    for e in (leader, rank):
        assert {k: e.get(k) for k in NVLS_OFF} == NVLS_OFF and e["OMP_NUM_THREADS"] == "4"
    leader, _ = _serve_and_read_environ(tmp_path, env, 'OMP_NUM_THREADS = "4"')
    assert not set(NVLS_OFF) & set(leader)
