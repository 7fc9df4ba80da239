"""deps: every installed distribution's Requires-Dist is met by what the interpreter imports (issue 10.3).

Real wheels unpacked into real venvs; the verdicts come from the doctor run against them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


from broken_packages import install_wheel, make_venv, site_packages
from schema_check import validate
from wheelmaker import make_wheel
from wheelhouse.doctor import run_doctor


def _venv(tmp_path: Path, wheels) -> Path:
    py = make_venv(tmp_path / "venv")
    for w in wheels:
        install_wheel(py, w)
    return py


def test_an_engine_installed_without_pyzmq_fails_naming_it_and_who_requires_it(tmp_path):
    w = tmp_path / "w"
    py = _venv(tmp_path, [
        make_wheel(w, "freetokenish", "0.1", requires=["pyzmq>=25", "helper>=1.0", "winonly; sys_platform == 'win32'"]),
        make_wheel(w, "helper", "1.2"),
    ])
    report = run_doctor(str(py), checks=["deps"])
    r = report.get("deps:freetokenish")
    assert r.verdict == "fail"
    assert "freetokenish 0.1 requires pyzmq>=25: not installed" in r.evidence
    assert "winonly" not in r.evidence  # its marker is false on this interpreter
    assert r.data["unmet"] == [{"requirement": "pyzmq>=25", "why": "not installed"}]
    assert r.hint and "wh install" in r.hint
    assert report.get("deps:helper") is None  # nothing unmet: no line of its own
    assert report.exit_code() == 1


def test_a_wrong_version_and_an_installed_extra_are_judged(tmp_path):
    w = tmp_path / "w"
    py = _venv(tmp_path, [
        make_wheel(w, "app", "1.0", requires=["lib[fast]>=1", "other>=4"]),
        make_wheel(w, "lib", "1.5", extras={"fast": ["speedup"], "slow": ["slowdep"]}),
        make_wheel(w, "other", "3.0", requires=["lib<3"]),
    ])
    report = run_doctor(str(py), checks=["deps"])
    app = report.get("deps:app")
    assert app.verdict == "fail" and app.evidence.splitlines() == [
        "app 1.0 requires other>=4: 3.0 installed",
        "app is part of the stack (wh installed nothing here: the distributions in this interpreter's own site folders)"]
    lib = report.get("deps:lib")  # lib[fast] was asked for by app: its fast extra's requirement counts
    assert lib.verdict == "fail" and "speedup" in lib.evidence and "slowdep" not in lib.evidence
    assert report.get("deps:other") is None


def test_an_extra_the_manifest_asks_for_is_judged(tmp_path):
    """The manifest asks for lib[fast]: its fast extra's requirement is part of the stack, whoever else asks."""
    from wheelhouse.manifest import load_manifest

    py = _venv(tmp_path, [make_wheel(tmp_path / "w", "lib", "1.5", extras={"fast": ["speedup"], "slow": ["slowdep"]})])
    manifest = tmp_path / "stack.toml"
    manifest.write_text('[stack]\nname = "x"\nrequirements = ["lib[fast]"]\n')
    lib = run_doctor(str(py), checks=["deps"], manifest=load_manifest(manifest)).get("deps:lib")
    assert lib is not None and lib.verdict == "fail" and "speedup" in lib.evidence and "slowdep" not in lib.evidence
    assert run_doctor(str(py), checks=["deps"]).get("deps:lib") is None  # without it, nothing asks for fast
    manifest.write_text('[stack]\nname = "x"\nrequirements = ["lib[fast]; platform_machine == \'no-such-cpu\'"]\n')
    assert run_doctor(str(py), checks=["deps"], manifest=load_manifest(manifest)).get("deps:lib") is None  # not here


def test_every_requirement_met_is_one_ok_line(tmp_path):
    w = tmp_path / "w"
    py = _venv(tmp_path, [make_wheel(w, "app", "1.0", requires=["lib>=1"]), make_wheel(w, "lib", "1.0")])
    report = run_doctor(str(py), checks=["deps"])
    assert [(r.id, r.verdict) for r in report.results] == [("deps:requirements", "ok")]
    assert "2 distributions" in report.results[0].evidence


def test_requirements_met_by_a_parent_site_folder_count(tmp_path):
    # What the interpreter imports through a .pth (a parent venv) meets requirements too.
    w = tmp_path / "w"
    py = _venv(tmp_path, [make_wheel(w, "app", "1.0", requires=["lib>=2"])])
    parent = tmp_path / "parent-site"
    install_wheel_into(make_wheel(w, "lib", "2.0"), parent)
    (site_packages(py) / "parent.pth").write_text(f"{parent}\n")
    assert run_doctor(str(py), checks=["deps"]).get("deps:requirements").verdict == "ok"


def install_wheel_into(wheel: Path, folder: Path) -> None:
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(folder)


def test_cli_reports_missing_dependency_in_json(tmp_path):
    w = tmp_path / "w"
    py = _venv(tmp_path, [make_wheel(w, "eng", "0.1", requires=["apache-tvm-ffi"])])
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "deps",
                           "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert validate(report, json.loads((Path(__file__).parents[1] / "support" / "doctor_schema.json").read_text())) == []
    (r,) = report["results"]
    assert r["id"] == "deps:eng" and "apache-tvm-ffi" in r["evidence"]


def _wh_installed(tmp_path: Path, wheel: Path) -> Path:
    """A venv that `wh install` made from a wheelhouse holding ``wheel`` (its requirements left out)."""
    from faults import wh_command
    from nvidia_fixtures import make_wheelhouse

    house = make_wheelhouse(tmp_path / "house", [wheel])
    venv = tmp_path / "venv"
    done = subprocess.run(wh_command(["install", str(house), "--venv", str(venv), "--python", sys.executable,
                                      "--allow-missing"]), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return venv / "bin" / "python"


def test_what_is_not_part_of_the_installed_stack_is_a_warning(tmp_path):
    # A base image (Kaggle's) carries hundreds of packages whose own metadata conflicts; they are not the
    # stack's. Once wh has installed into this environment, unmet requirements of what wh installed fail,
    # and those of what was there before are warnings (still listed).
    w = tmp_path / "w"
    py = _wh_installed(tmp_path, make_wheel(w, "eng", "0.1", requires=["pyzmq>=25"]))
    install_wheel(py, make_wheel(w, "preexisting", "1.0", requires=["gone-from-the-image"]))
    report = run_doctor(str(py), checks=["deps"])
    assert report.get("deps:eng").verdict == "fail" and "pyzmq>=25: not installed" in report.get("deps:eng").evidence
    pre = report.get("deps:preexisting")
    assert pre.verdict == "warn" and "gone-from-the-image" in pre.evidence and "not part of the stack" in pre.evidence


def test_what_the_installed_stack_requires_fails_whoever_installed_it(tmp_path):
    # The engine wh installed needs `helper`, which was in the image before: helper's unmet requirement breaks
    # the engine all the same, so it fails (who installed a distribution never changes a verdict).
    w = tmp_path / "w"
    py = _wh_installed(tmp_path, make_wheel(w, "eng", "0.1", requires=["helper"]))
    install_wheel(py, make_wheel(w, "helper", "1.0", requires=["gone-from-the-image"]))
    r = run_doctor(str(py), checks=["deps"]).get("deps:helper")
    assert r.verdict == "fail", r.evidence
    assert "required by the stack: eng 0.1 -> helper" in r.evidence


def _with_base_system(tmp_path: Path, venv_wheels, base_wheels) -> Path:
    """A venv (the stack) over a base site folder the interpreter also imports (Debian's dist-packages, reached
    like a --system-site-packages venv sees it): nothing wh installed, a plain environment."""
    w = tmp_path / "w"
    py = _venv(tmp_path, [make_wheel(w, *a, **k) for a, k in venv_wheels])
    base = tmp_path / "dist-packages"
    for a, k in base_wheels:
        install_wheel_into(make_wheel(w, *a, **k), base)
    (site_packages(py) / "base-system.pth").write_text(f"{base}\n")
    return py


def test_a_base_system_distribution_nothing_in_the_stack_requires_is_a_warn(tmp_path):
    # Debian's python3-gi (PyGObject) without pycairo: not the stack's, and nothing in the stack needs it.
    py = _with_base_system(tmp_path, [(("app", "1.0"), {"requires": ["lib>=1"]}), (("lib", "1.0"), {})],
                           [(("PyGObject", "3.42.2"), {"requires": ["pycairo>=1.16.0"]})])
    report = run_doctor(str(py), checks=["deps"])
    r = report.get("deps:pygobject")
    assert r.verdict == "warn", r.evidence
    assert "PyGObject 3.42.2 requires pycairo>=1.16.0: not installed" in r.evidence
    assert "not part of the stack" in r.evidence and "nothing in the stack requires it" in r.evidence
    assert r.data["part_of_stack"] is False
    assert report.exit_code() == 0


def test_a_base_system_distribution_the_stack_requires_fails(tmp_path):
    py = _with_base_system(tmp_path, [(("app", "1.0"), {"requires": ["pygobject"]})],
                           [(("PyGObject", "3.42.2"), {"requires": ["pycairo>=1.16.0"]})])
    r = run_doctor(str(py), checks=["deps"]).get("deps:pygobject")
    assert r.verdict == "fail", r.evidence
    assert "required by the stack: app 1.0 -> PyGObject" in r.evidence


def test_a_base_system_requirement_does_not_block_the_serve_preflight(tmp_path):
    from wheelhouse.serve.preflight import run_preflight

    py = _with_base_system(tmp_path, [(("app", "1.0"), {})],
                           [(("PyGObject", "3.42.2"), {"requires": ["pycairo>=1.16.0"]})])
    run_preflight(gpus=[], expected_gpus=None, max_used_mib=None,
                  doctor=lambda: run_doctor(str(py), checks=["deps"]).failed)  # raises PreflightFailed if blocked


def test_wh_serve_launches_past_a_base_system_requirement(tmp_path):
    # The preflight runs the whole doctor on the engine's interpreter; the base system's unmet requirement
    # is said as a warning and the engine starts (no --no-preflight needed).
    import socket

    py = _with_base_system(tmp_path, [(("app", "1.0"), {})],
                           [(("PyGObject", "3.42.2"), {"requires": ["pycairo>=1.16.0"]})])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fake = Path(__file__).parents[1] / "support" / "fake_engine.py"
    env = {k: v for k, v in os.environ.items() if k not in ("WH_DOCTOR_FAKE_GPUS", "CUDA_VISIBLE_DEVICES", "WH_SERVE_URL")}
    env.update({"WH_STATE_DIR": str(tmp_path / "state"), "NO_COLOR": "1"})

    def wh(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "wheelhouse", *args], capture_output=True, text=True, env=env,
                              timeout=300)

    r = wh("serve", "--detach", "--json", "--interval", "0.1", "--log", str(tmp_path / "serve.log"), "--",
           str(py), str(fake), "--port", str(port))
    try:
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["detached"] is True
    finally:
        wh("stop", "--grace", "5")


def test_a_requirement_reached_only_through_an_extra_the_wheelhouse_asks_for_is_the_stacks(tmp_path):
    """The wheelhouse asked for app[gpu], whose gpu extra requires helper, installed by other means and lacking its
    own requirement: `import app.gpu` dies, yet helper was "not part of the stack and nothing in the stack requires
    it" (a warning, exit 0): the chain from the stack's roots never took the extras the wheelhouse asked for."""
    from nvidia_fixtures import make_wheelhouse
    from wheelhouse.install import InstallOptions, install_wheelhouses

    w = tmp_path / "w"
    app = make_wheel(w, "app", "1.0", extras={"gpu": ["helper"]},
                     modules={"app/__init__.py": "X = 1\n", "app/gpu.py": "import helper\n"})
    house = make_wheelhouse(tmp_path / "house", [app], extra_meta={"inputs": {"requirements": ["app[gpu]"]}})
    install_wheelhouses([house], InstallOptions(venv=tmp_path / "venv", allow_missing=True))
    py = tmp_path / "venv" / "bin" / "python"
    install_wheel(py, make_wheel(w, "helper", "1.0", requires=["missinglib"],
                                 modules={"helper/__init__.py": "import missinglib\n"}))
    assert subprocess.run([str(py), "-c", "import app.gpu"], capture_output=True).returncode != 0
    report = run_doctor(str(py), checks=["deps"])
    r = report.get("deps:helper")
    assert r.verdict == "fail" and "helper is required by the stack: app 1.0 -> helper" in r.evidence, r
    assert report.exit_code() == 1
