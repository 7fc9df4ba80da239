"""The install record (<site>/.wh/installed.json) accumulates: every `wh install` adds or updates its own
distributions and wheelhouses and keeps the others; each wheelhouse's doctor facts are copied in, so an
archive or oci:// install keeps its [doctor] expectations after the archive is gone (issue 28.2, 28.3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel

from wheelhouse.install.state import installed_sources, read_install_state, state_path

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def wh(*args, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")} | {"NO_COLOR": "1", "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def site(venv: Path) -> Path:
    return venv / "lib" / PY / "site-packages"


def _house(tmp_path: Path, folder: str, wheels: list[tuple[str, str]], **meta) -> Path:
    built = [make_wheel(tmp_path / f"w-{folder}", n, v, modules={f"{n}/__init__.py": f"V = {v!r}\n"}) for n, v in wheels]
    return make_wheelhouse(tmp_path / folder, built, extra_meta=meta or None)


def test_a_second_install_keeps_what_the_first_recorded(tmp_path):
    """Before: the second install's transaction moved installed.json aside, and only its own package was left."""
    h1 = _house(tmp_path, "h1", [("alpha", "1.0")])
    h2 = _house(tmp_path, "h2", [("beta", "2.0")])
    venv = tmp_path / "venv"
    assert wh("install", h1, "--venv", venv).returncode == 0
    r = wh("install", h2, "--venv", venv)
    assert r.returncode == 0, r.stderr
    state = read_install_state(site(venv))
    assert {k: p["version"] for k, p in state["packages"].items()} == {"alpha": "1.0", "beta": "2.0"}
    assert state["packages"]["alpha"]["wheelhouse"] == str(h1) and state["packages"]["beta"]["wheelhouse"] == str(h2)
    assert [w for w, _ in installed_sources(state)] == [str(h1), str(h2)]


def test_only_updates_its_own_entries(tmp_path):
    h1 = _house(tmp_path, "h1", [("alpha", "1.0"), ("gamma", "1.0")])
    h2 = _house(tmp_path, "h2", [("alpha", "2.0"), ("gamma", "2.0")])
    venv = tmp_path / "venv"
    assert wh("install", h1, "--venv", venv).returncode == 0
    r = wh("install", h2, "--venv", venv, "--only", "gamma")
    assert r.returncode == 0, r.stderr
    packages = read_install_state(site(venv))["packages"]
    assert (packages["alpha"]["version"], packages["alpha"]["wheelhouse"]) == ("1.0", str(h1))
    assert (packages["gamma"]["version"], packages["gamma"]["wheelhouse"]) == ("2.0", str(h2))


def test_an_old_record_is_read_and_extended(tmp_path):
    """A record written before `sources` existed is read as it is, and the next install keeps its entries."""
    h1 = _house(tmp_path, "h1", [("alpha", "1.0")])
    h2 = _house(tmp_path, "h2", [("beta", "2.0")])
    venv = tmp_path / "venv"
    assert wh("install", h1, "--venv", venv).returncode == 0
    path = state_path(site(venv))
    old = json.loads(path.read_text())
    old = {"wheelhouses": old["wheelhouses"], "installed_at": old["installed_at"],
           "packages": {k: {f: p[f] for f in ("version", "filename", "sha256", "wheelhouse", "path")}
                        for k, p in old["packages"].items()}}
    path.write_text(json.dumps(old))
    assert installed_sources(read_install_state(site(venv))) == [(str(h1), {})]
    assert wh("install", h2, "--venv", venv).returncode == 0
    state = read_install_state(site(venv))
    assert set(state["packages"]) == {"alpha", "beta"} and state["sources"][str(h2)]["target"]


def test_an_archive_install_keeps_its_doctor_expectations(tmp_path):
    """Before: installed.json named the .tar, the doctor could not read wh.json from it, and dropped the
    manifest's [doctor] expectations, [[toolchain]] groups and [[drop]] rules without a word."""
    house = _house(tmp_path, "house", [("alpha", "1.0")],
                   name="gpu-stack", doctor={"gpus": 8, "sm": "9.0"},
                   drops=[{"distribution": "alpha", "module": None, "reason": "test", "force": False}])
    archive = tmp_path / "carry" / "stack.tar"
    archive.parent.mkdir()
    r = wh("pack", house, "-o", archive)
    assert r.returncode == 0, r.stderr
    venv = tmp_path / "venv"
    r = wh("install", archive, "--venv", venv)
    assert r.returncode == 0, r.stderr
    state = read_install_state(site(venv))
    [(origin, facts)] = installed_sources(state)
    assert origin == str(archive) and facts["doctor"]["gpus"] == 8 and facts["drops"][0]["distribution"] == "alpha"
    for p in archive.parent.iterdir():  # the archive is gone: the record alone must carry the facts
        p.unlink()
    r = wh("doctor", "--python", venv / "bin" / "python", "--check", "gpu:expected", "--json")
    out = json.loads(r.stdout)
    [check] = [c for c in out["results"] if c["id"] == "gpu:expected"]
    assert check["verdict"] == "fail" and "expects 8" in check["evidence"], check


def test_doctor_takes_an_archive_as_its_wheelhouse(tmp_path):
    """Before: `--wheelhouse X.tar` was refused (a folder only)."""
    house = _house(tmp_path, "house", [("alpha", "1.0")], doctor={"gpus": 8})
    archive = tmp_path / "stack.tar"
    assert wh("pack", house, "-o", archive).returncode == 0
    venv = tmp_path / "venv"
    assert wh("install", house, "--venv", venv).returncode == 0
    r = wh("doctor", "--python", venv / "bin" / "python", "--wheelhouse", archive, "--check", "gpu:expected", "--json")
    assert "error" not in r.stderr.lower().split("hint")[0] or r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    [check] = [c for c in out["results"] if c["id"] == "gpu:expected"]
    assert check["verdict"] == "fail" and "expects 8" in check["evidence"], check


def test_an_oci_install_keeps_its_doctor_expectations(tmp_path):
    from registry import start_registry

    reg = start_registry(tmp_path / "registry")
    try:
        house = _house(tmp_path, "house", [("alpha", "1.0")], doctor={"gpus": 8})
        ref = reg.ref("ml/stack:v1")
        r = wh("push", house, ref)
        assert r.returncode == 0, r.stderr
        venv = tmp_path / "venv"
        r = wh("install", ref, "--venv", venv)
        assert r.returncode == 0, r.stderr
    finally:
        reg.stop()
    [(origin, facts)] = installed_sources(read_install_state(site(venv)))
    assert origin == ref and facts["doctor"]["gpus"] == 8
    r = wh("doctor", "--python", venv / "bin" / "python", "--check", "gpu:expected", "--json")  # registry gone
    [check] = [c for c in json.loads(r.stdout)["results"] if c["id"] == "gpu:expected"]
    assert check["verdict"] == "fail" and "expects 8" in check["evidence"], check
    r = wh("doctor", "--python", venv / "bin" / "python", "--wheelhouse", ref, "--check", "gpu:expected", "--json")
    [check] = [c for c in json.loads(r.stdout)["results"] if c["id"] == "gpu:expected"]
    assert check["verdict"] == "fail", (check, r.stderr)  # the reference is read from the record: nothing pulled
