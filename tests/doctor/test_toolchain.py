"""toolchain:versions judges exactly the groups the wheelhouse's manifest declares (issue 10.6).

nvidia-cuda-nvcc==13.4.59 pulls nvidia-cuda-runtime 13.5.x; the reference stack pins
nvcc/crt/nvvm only (cccl is the stated exception). The doctor used to put the runtime
into its exact group, so the bundled manifest staged a wheelhouse its own doctor failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faults import wh_command
from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_wheel
from wheelhouse.doctor import run_doctor
from wheelhouse.manifest import ToolchainGroup

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "manifests" / "freetoken-dsv4-kaggle-4xl4.toml"


def _bundled_group_toml() -> str:
    """The bundled FreeToken manifest's [[toolchain]] tables and its toolchain pins, verbatim."""
    from wheelhouse.manifest import load_manifest

    m = load_manifest(BUNDLED)
    pins = [r for r in m.requirements if r.startswith(("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm",
                                                      "nvidia-cuda-cccl"))]
    assert len(pins) == 4 and m.toolchains, "the bundled manifest pins its toolchain in a [[toolchain]] group"
    groups = "".join(f'[[toolchain]]\nname = "{g.name}"\npackages = {json.dumps(list(g.packages))}\n'
                      f'exact = {str(g.exact).lower()}\nexceptions = {json.dumps(list(g.exceptions))}\n'
                      for g in m.toolchains)
    return pins, groups


def _toolchain_index(folder: Path) -> None:
    """The CUDA 13.4 toolchain as published: nvcc pulls a newer runtime; cccl has no 13.4 build."""
    make_wheel(folder, "nvidia-cuda-nvcc", "13.4.59", requires=["nvidia-cuda-runtime>=13.4", "nvidia-cuda-crt==13.4.59",
                                                                 "nvidia-nvvm==13.4.59"])
    make_wheel(folder, "nvidia-cuda-crt", "13.4.59")
    make_wheel(folder, "nvidia-nvvm", "13.4.59")
    make_wheel(folder, "nvidia-cuda-runtime", "13.5.22")
    make_wheel(folder, "nvidia-cuda-cccl", "13.0.85")


def _run(args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_COLOR": "1"}, **kw)


def test_the_bundled_manifests_group_staged_installed_and_doctored_is_ok(pyindex, tmp_path):
    _toolchain_index(tmp_path / "idx")
    idx = pyindex(tmp_path / "idx")
    pins, groups = _bundled_group_toml()
    stack = tmp_path / "stack.toml"
    stack.write_text('[stack]\nname = "toolchain"\nrequirements = ' + json.dumps(pins) + "\n" + groups)
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    staged = _run(["stage", str(stack), "-o", str(tmp_path / "wh"), "--cache-dir", str(tmp_path / "cache"),
                   "-i", idx.url, "--python-version", py, "--platform", "linux_x86_64", "--no-bootstrap"])
    assert staged.returncode == 0, staged.stderr
    installed = _run(["install", str(tmp_path / "wh"), "--venv", str(tmp_path / "venv"), "--python", sys.executable,
                      "--no-links"])
    assert installed.returncode == 0, installed.stderr
    doc = _run(["doctor", "--python", str(tmp_path / "venv" / "bin" / "python"), "--check", "toolchain:versions",
                "--json"])
    (r,) = json.loads(doc.stdout)["results"]
    assert (r["id"], r["verdict"]) == ("toolchain:versions", "ok"), r["evidence"]
    assert r["data"]["groups"] == [{"name": "cuda", "exact": True, "installed": {
        "nvidia-cuda-nvcc": "13.4.59", "nvidia-cuda-crt": "13.4.59", "nvidia-nvvm": "13.4.59"}}]
    assert "nvidia-cuda-runtime" not in r["evidence"] and "nvidia-cuda-cccl" not in r["evidence"]
    assert doc.returncode == 0, doc.stderr


def _venv_with(tmp_path: Path, wheels) -> Path:
    from broken_packages import install_wheel, make_venv

    py = make_venv(tmp_path / "venv")
    for w in wheels:
        install_wheel(py, w)
    return py


def _toolchain(tmp_path: Path, nvcc: str, crt: str, runtime: str = "13.5.22") -> Path:
    w = tmp_path / "w"
    return _venv_with(tmp_path, [make_wheel(w, "nvidia-cuda-nvcc", nvcc), make_wheel(w, "nvidia-cuda-crt", crt),
                                 make_wheel(w, "nvidia-nvvm", nvcc), make_wheel(w, "nvidia-cuda-runtime", runtime)])


def test_without_a_declared_group_the_default_is_nvcc_crt_nvvm_at_one_release(tmp_path):
    ok = run_doctor(str(_toolchain(tmp_path / "a", "13.4.59", "13.4.59")), checks=["toolchain:versions"])
    r = ok.get("toolchain:versions")
    assert r.verdict == "ok" and "nvidia-cuda-runtime" not in r.evidence
    mixed = run_doctor(str(_toolchain(tmp_path / "b", "13.4.59", "13.0.88")), checks=["toolchain:versions"])
    r = mixed.get("toolchain:versions")
    assert r.verdict == "fail" and "nvidia-cuda-crt 13.0.88" in r.evidence and "group cuda" in r.evidence


def test_a_declared_group_is_judged_as_declared(tmp_path):
    from wheelhouse.manifest import StackManifest

    py = _toolchain(tmp_path, "13.4.59", "13.4.1")
    loose = StackManifest(path=None, name="s", toolchains=(ToolchainGroup("cuda", ("nvidia-cuda-*",), False,
                                                                          ("nvidia-cuda-runtime",)),))
    r = run_doctor(str(py), manifest=loose, checks=["toolchain:versions"]).get("toolchain:versions")
    assert r.verdict == "ok", r.evidence  # same major.minor is what this group asks for
    exact = StackManifest(path=None, name="s", toolchains=(ToolchainGroup("cuda", ("nvidia-cuda-*",), True,
                                                                          ("nvidia-cuda-runtime",)),))
    r = run_doctor(str(py), manifest=exact, checks=["toolchain:versions"]).get("toolchain:versions")
    assert r.verdict == "fail" and "nvidia-cuda-crt 13.4.1" in r.evidence and "nvidia-nvvm" not in r.evidence
    assert "[[toolchain]]" in r.hint


def _download_for(target_json: Path, requirements: list[str], into: Path) -> None:
    """The registry's wheels for the target, fetched by pip with this machine's own index configuration."""
    t = json.loads(target_json.read_text())
    me = t["marker_environment"]
    platforms = dict.fromkeys(tag.split("-")[-1] for tag in t["compatible_tags"] if tag.split("-")[-1] != "any")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--only-binary=:all:", "-d", str(into),
                           "--python-version", me["python_version"], *[a for p in platforms for a in ("--platform", p)],
                           *requirements], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.registry
def test_registry_bundled_freetoken_group_for_the_kaggle_profile_gives_toolchain_ok(tmp_path):
    """Stage the bundled manifest's toolchain (its pins and [[toolchain]] group, for the bundled Kaggle profile)
    from the registry's wheels (fetched by pip for that target), put what was staged into a venv, and run a
    fake-GPU doctor over it."""
    import zipfile

    from broken_packages import make_venv, site_packages
    from wheelhouse.lock import read_pylock

    pins, groups = _bundled_group_toml()
    stack = tmp_path / "stack.toml"
    target = REPO / "manifests" / "targets" / "kaggle-4xl4.json"
    stack.write_text('[stack]\nname = "toolchain"\nrequirements = ' + json.dumps(pins) + "\n" + groups)
    _download_for(target, pins, tmp_path / "dl")
    staged = _run(["stage", str(stack), "-o", str(tmp_path / "wh"), "--cache-dir", str(tmp_path / "cache"),
                   "--target", str(target), "--no-bootstrap", "-f", str(tmp_path / "dl")])
    assert staged.returncode == 0, staged.stderr
    files = {f.name: f.version for f in read_pylock(tmp_path / "wh").files}
    assert files["nvidia-cuda-nvcc"] == "13.4.59" and files["nvidia-cuda-cccl"] == "13.0.85"
    # The Kaggle box runs CPython 3.12; only the metadata matters to toolchain:versions, so the staged wheels'
    # .dist-info folders go into a venv of this interpreter.
    py = make_venv(tmp_path / "venv")
    for whl in (tmp_path / "wh" / "wheels").glob("*.whl"):
        with zipfile.ZipFile(whl) as zf:
            zf.extractall(site_packages(py), [n for n in zf.namelist() if ".dist-info/" in n.split("/", 1)[0] + "/"])
    (tmp_path / "gpus.json").write_text(json.dumps({"driver_version": "580.1", "cuda_version": "13.0", "gpus": [
        {"index": i, "name": "NVIDIA L4", "compute_capability": "8.9", "memory_total_mib": 23034,
         "memory_used_mib": 0} for i in range(4)]}))
    doc = subprocess.run(wh_command(["doctor", "--python", str(py), "--wheelhouse", str(tmp_path / "wh"),
                                     "--check", "toolchain:versions", "--check", "gpu:expected", "--json"]),
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "WH_DOCTOR_FAKE_GPUS": str(tmp_path / "gpus.json")})
    res = {r["id"]: r for r in json.loads(doc.stdout)["results"]}
    assert res["toolchain:versions"]["verdict"] == "ok", res["toolchain:versions"]["evidence"]


def test_an_installed_nvcc_wheel_whose_nvcc_cannot_run_fails(tmp_path):
    """Hostile round 9: the nvcc wheel installed, its nvcc without its exec bit (a copy that lost modes, a noexec
    mount): toolchain:versions said ok and the rest skipped as "no nvcc ... and no nvidia-cuda-nvcc wheel"."""
    from broken_packages import install_wheel, make_venv

    py = make_venv(tmp_path / "venv")
    nvcc = "#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n"
    install_wheel(py, make_wheel(tmp_path / "w", "nvidia-cuda-nvcc", "13.0.88", files={"nvidia/cu13/bin/nvcc": nvcc}))
    [shipped] = (tmp_path / "venv").rglob("nvidia/cu13/bin/nvcc")
    shipped.chmod(0o644)
    env = {**os.environ, "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}  # no nvcc of the host's on the engine's PATH

    def doctor(*args):
        return subprocess.run(wh_command(["doctor", "--python", str(py), "--json", *args]), capture_output=True,
                              text=True, timeout=600, env=env)

    proc = doctor("--check", "toolchain")
    results = {r["id"]: r for r in json.loads(proc.stdout)["results"]}
    assert proc.returncode == 1 and results["toolchain:nvcc"]["verdict"] == "fail", results
    assert f"{shipped} is not executable" in results["toolchain:nvcc"]["evidence"]
    shipped.chmod(0o755)
    proc = doctor("--check", "toolchain:nvcc")
    assert json.loads(proc.stdout)["results"][0]["verdict"] == "ok", proc.stdout
