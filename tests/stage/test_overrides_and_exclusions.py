"""Overrides and exclusions (issue 32, finding 1): a stack leaves out a dependency its engine never imports
(FreeToken 0.1.2 -> flashlib==0.3.0 -> nvidia-cutlass-dsl -> a 92 MB libs wheel), or replaces a requirement
wherever it appears (uv's override-dependencies). Real `wh stage`, `wh install` and `wh doctor` processes
against a real index on 127.0.0.1 and a real venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from faults import wh_command
from wheelmaker import make_wheel


def wh(*args, **kw):
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300"}, **kw)


@pytest.fixture
def index(pyindex, tmp_path):
    d = tmp_path / "pub"
    make_wheel(d, "engine", "0.1.2", requires=["flashlib==0.3.0", "lib<2"],
               modules={"engine/__init__.py": "import flashlib\n"})
    make_wheel(d, "flashlib", "0.3.0", requires=["cutlass-dsl"], modules={"flashlib/__init__.py": "X = 1\n"})
    make_wheel(d, "cutlass-dsl", "4.0", requires=["cutlass-dsl-libs"])
    make_wheel(d, "cutlass-dsl-libs", "4.0", modules={"cutlass_libs/__init__.py": "BIG = 1\n"})
    make_wheel(d, "lib", "1.0")
    make_wheel(d, "lib", "2.0")
    return pyindex(d)


def _manifest(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "stack.toml"
    p.write_text(body)
    return p


EXCLUDING = """
[stack]
name = "ft"
requirements = ["engine==0.1.2"]

[[exclude]]
distribution = "cutlass-dsl"
reason = "never imported on the engine's path"
"""


def test_an_excluded_dependency_is_not_staged_and_install_and_doctor_accept_it(index, tmp_path):
    out, venv = tmp_path / "house", tmp_path / "venv"
    r = wh("stage", _manifest(tmp_path, EXCLUDING), "-o", out, "--index-url", index.url, "--no-bootstrap",
           "--cache-dir", tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    wheels = sorted(p.name.split("-")[0] for p in (out / "wheels").iterdir())
    assert wheels == ["engine", "flashlib", "lib"]  # neither cutlass-dsl nor what only it pulled in
    assert "excluded cutlass-dsl (required by flashlib==0.3.0): never imported on the engine's path" in r.stderr
    meta = json.loads((out / "wh.json").read_text())
    assert meta["inputs"]["excludes"] == [{"distribution": "cutlass-dsl", "reason": "never imported on the engine's path"}]
    assert meta["inputs"]["rewritten"][0]["replaced"] == [{"parent": "flashlib==0.3.0", "requirement": "cutlass-dsl"}]
    lock = tomllib.loads((out / "pylock.toml").read_text())
    assert lock["tool"]["wh"]["excludes"] == meta["inputs"]["excludes"]

    r = wh("install", out, "--venv", venv)
    assert r.returncode == 0, r.stderr  # flashlib's requirement on cutlass-dsl is not "missing"
    r = wh("doctor", "--python", venv / "bin" / "python", "--check", "deps", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    results = {c["id"]: c for c in json.loads(r.stdout)["results"]}
    assert results["deps:requirements"]["verdict"] == "ok"
    assert results["deps:excluded"]["verdict"] == "ok"
    assert ("flashlib requires cutlass-dsl: excluded by the manifest (never imported on the engine's path)"
            in results["deps:excluded"]["evidence"])
    assert "deps:flashlib" not in results


def test_without_the_exclusion_the_whole_chain_is_staged(index, tmp_path):
    r = wh("stage", "engine==0.1.2", "--dry-run", "--index-url", index.url, "--no-bootstrap",
           "--cache-dir", tmp_path / "cache", "--json")
    assert r.returncode == 0, r.stderr
    assert {p["name"] for p in json.loads(r.stdout)["packages"]} == {"engine", "flashlib", "cutlass-dsl",
                                                                    "cutlass-dsl-libs", "lib"}


def test_exclude_flag_and_override_file_on_the_command_line(index, tmp_path):
    overrides = tmp_path / "overrides.txt"
    overrides.write_text("lib==2.0\n")
    r = wh("stage", "engine==0.1.2", "--dry-run", "--index-url", index.url, "--no-bootstrap",
           "--cache-dir", tmp_path / "cache", "--json", "--exclude", "cutlass-dsl", "--override", overrides)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {p["name"]: p["version"] for p in data["packages"]} == {"engine": "0.1.2", "flashlib": "0.3.0",
                                                                   "lib": "2.0"}  # engine asked lib<2
    assert "override lib==2.0 replaced lib<2 (required by engine==0.1.2)" in r.stderr
    assert "excluded cutlass-dsl (required by flashlib==0.3.0): given with --exclude" in r.stderr


def test_exported_pins_say_what_the_stack_excludes(index, tmp_path):
    m = _manifest(tmp_path, EXCLUDING)
    args = ["stage", m, "--dry-run", "--index-url", index.url, "--no-bootstrap", "--cache-dir", tmp_path / "cache"]
    r = wh(*args, "--format", "requirements")
    assert r.returncode == 0, r.stderr
    assert "# excluded by the stack (not listed): cutlass-dsl (never imported on the engine's path)" in r.stdout
    assert "cutlass-dsl==" not in r.stdout
    r = wh(*args, "--format", "pylock")
    assert r.returncode == 0, r.stderr
    assert tomllib.loads(r.stdout)["tool"]["wh"]["excludes"] == [{"distribution": "cutlass-dsl",
                                                                 "reason": "never imported on the engine's path"}]


def test_an_override_replaces_a_requirement_of_the_stack_itself_and_install_judges_by_it(index, tmp_path):
    out, venv = tmp_path / "house", tmp_path / "venv"
    m = _manifest(tmp_path, EXCLUDING.replace('requirements = ["engine==0.1.2"]',
                                              'requirements = ["engine==0.1.2", "lib==1.0"]\n'
                                              'overrides = ["lib==2.0"]'))
    r = wh("stage", m, "-o", out, "--index-url", index.url, "--no-bootstrap", "--cache-dir", tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    assert "lib-2.0-py3-none-any.whl" in os.listdir(out / "wheels")
    assert json.loads((out / "wh.json").read_text())["inputs"]["overrides"] == ["lib==2.0"]
    assert tomllib.loads((out / "pylock.toml").read_text())["tool"]["wh"]["overrides"] == ["lib==2.0"]
    r = wh("install", out, "--venv", venv)
    assert r.returncode == 0, r.stderr  # engine's lib<2 is judged by the override, as the resolver did
    r = wh("doctor", "--python", venv / "bin" / "python", "--check", "deps", "--json")
    assert r.returncode == 0, r.stdout + r.stderr


def test_an_override_whose_marker_the_target_fails_removes_the_requirement(index, tmp_path):
    overrides = tmp_path / "overrides.txt"
    overrides.write_text("cutlass-dsl; sys_platform == 'never'\n")
    r = wh("stage", "engine==0.1.2", "--dry-run", "--index-url", index.url, "--no-bootstrap",
           "--cache-dir", tmp_path / "cache", "--json", "--override", overrides)
    assert r.returncode == 0, r.stderr
    assert {p["name"] for p in json.loads(r.stdout)["packages"]} == {"engine", "flashlib", "lib"}


def test_an_override_adds_nothing_to_the_closure(index, tmp_path):
    overrides = tmp_path / "overrides.txt"
    overrides.write_text("unrelated==9\n")
    r = wh("stage", "lib==1.0", "--dry-run", "--index-url", index.url, "--no-bootstrap",
           "--cache-dir", tmp_path / "cache", "--json", "--override", overrides)
    assert r.returncode == 0, r.stderr
    assert [p["name"] for p in json.loads(r.stdout)["packages"]] == ["lib"]


@pytest.mark.parametrize("bad", ["cutlass-dsl==4.0", "cutlass-dsl; sys_platform == 'linux'", "not a name"])
def test_an_exclusion_names_a_project_only(index, tmp_path, bad):
    m = _manifest(tmp_path, EXCLUDING.replace('distribution = "cutlass-dsl"', f'distribution = "{bad}"'))
    r = wh("stage", m, "--dry-run", "--index-url", index.url, "--no-bootstrap", "--cache-dir", tmp_path / "cache")
    assert r.returncode == 2 and "is not a project name" in r.stderr and "Traceback" not in r.stderr
    r = wh("stage", "lib", "--exclude", bad, "--dry-run", "--index-url", index.url, "--no-bootstrap")
    assert r.returncode == 2 and "--exclude" in r.stderr and "is not a project name" in r.stderr


def test_the_bundled_freetoken_manifest_excludes_nvidia_cutlass_dsl_with_its_reason():
    from wheelhouse.manifest import load_manifest

    m = load_manifest("freetoken-dsv4-kaggle-4xl4", read_files=False)
    (e,) = [e for e in m.excludes if e.distribution == "nvidia-cutlass-dsl"]
    assert "flashlib" in e.reason and "never imported" in e.reason


@pytest.mark.registry
def test_the_real_freetoken_for_the_h200_image_stages_flashlib_without_nvidia_cutlass_dsl(tmp_path):
    from wheelhouse.manifest import load_manifest
    from wheelhouse.resources import manifests_dir

    # The bundled manifest's exclusion, with the released runtime from the index in place of its nightly release
    # manifest (whose host not every stager reaches): as tests/stage/test_delta.py stages FreeToken.
    (e,) = load_manifest("freetoken-dsv4-kaggle-4xl4", read_files=False).excludes
    m = _manifest(tmp_path, f'[stack]\nrequirements = ["freetoken==0.1.2"]\n[[exclude]]\n'
                            f'distribution = "{e.distribution}"\nreason = "{e.reason}"\n')
    r = wh("stage", m, "--target", manifests_dir() / "targets" / "h200-offline.json", "--dry-run", "--json",
           "--cache-dir", tmp_path / "c")
    assert r.returncode == 0, r.stderr
    names = {p["name"] for p in json.loads(r.stdout)["packages"]}
    assert "flashlib" in names and not names & {"nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-cu12"}
    assert "excluded nvidia-cutlass-dsl (required by flashlib==0.3.0)" in r.stderr


def test_an_exclusion_holds_for_the_doctor_from_an_archive_and_with_another_manifest(index, tmp_path):
    """The install record keeps the wheelhouse's exclusions: a doctor run from a `wh pack` archive install, given
    the serve manifest (which names no exclusion, as `wh serve`'s preflight passes it), still finds the excluded
    requirement excluded, not missing (seen on the H200 box: the preflight refused FreeToken over flashlib)."""
    out, venv = tmp_path / "house", tmp_path / "venv"
    r = wh("stage", _manifest(tmp_path, EXCLUDING), "-o", out, "--index-url", index.url, "--no-bootstrap",
           "--cache-dir", tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    archive = tmp_path / "house.tar"
    assert wh("pack", out, "-o", archive).returncode == 0
    import shutil
    shutil.rmtree(out)  # only the archive is left: the doctor must read the facts from the install record
    r = wh("install", archive, "--venv", venv)
    assert r.returncode == 0, r.stderr
    serve = tmp_path / "serve.toml"
    serve.write_text('[stack]\nname = "serve"\n\n[serve]\ncommand = ["engine-serve"]\n')
    r = wh("doctor", "--python", venv / "bin" / "python", "--manifest", serve, "--check", "deps", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    results = {c["id"]: c for c in json.loads(r.stdout)["results"]}
    assert results["deps:excluded"]["verdict"] == "ok"
    assert "deps:flashlib" not in results
