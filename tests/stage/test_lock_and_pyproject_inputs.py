"""Inputs people already have (issue 32, finding 2): a PEP 751 pylock.toml staged as locked, a pyproject.toml's
dependencies, extras and PEP 735 groups, and a uv.lock through `uv export --format pylock.toml`.

The locks are written by uv itself (the uv of this venv, hermetic: no config, no Python downloads) and, where a
pip >= 25.1 is at hand, by `pip lock`, against a real index on 127.0.0.1; then the real `wh stage`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from faults import wh_command
from uv_tool import run_uv
from wheelmaker import make_wheel

BOX = ["--python-version", "3.12", "--platform", "manylinux_2_35_x86_64"]


def wh(*args, **kw):
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300"}, **kw)


def uv(*args, cwd=None):
    r = run_uv(*map(str, args), cwd=cwd, timeout=300)  # hermetic: -p, --no-config, no downloads, loopback only
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture
def index(pyindex, tmp_path):
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["lib>=1", "winonly; sys_platform == 'win32'"])
    make_wheel(d, "lib", "1.0")
    make_wheel(d, "lib", "2.0")
    make_wheel(d, "winonly", "1.0")
    make_wheel(d, "cuda-extra", "1.0")
    make_wheel(d, "pytest-ish", "8.0")
    make_wheel(d, "lint-ish", "1.0")
    make_wheel(d, "native", "1.0", tags="cp312-cp312-win_amd64")
    return pyindex(d)


def _uv_pylock(tmp_path: Path, index, *reqs: str) -> Path:
    src = tmp_path / "requirements.in"
    src.write_text("".join(f"{r}\n" for r in reqs))
    lock = tmp_path / "pylock.toml"
    uv("pip", "compile", src, "--universal", "--format", "pylock.toml", "-o", lock, "--index-url", index.url,
       "-p", sys.executable, cwd=tmp_path)
    return lock


def test_a_pylock_written_by_uv_stages_exactly_the_packages_for_the_target(index, tmp_path):
    lock = _uv_pylock(tmp_path, index, "app", "lib<2")
    assert "winonly" in lock.read_text()  # uv's universal lock has it, under its win32 marker
    out = tmp_path / "house"
    pages = index.page_requests()
    r = wh("stage", lock, *BOX, "-o", out, "--no-bootstrap", "--index-url", index.url, "--cache-dir", tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (out / "wheels").iterdir()) == ["app-1.0-py3-none-any.whl", "lib-1.0-py3-none-any.whl"]
    meta = json.loads((out / "wh.json").read_text())
    assert meta["inputs"]["source"]["kind"] == "pylock" and meta["inputs"]["requirements"] == ["app==1.0", "lib==1.0"]
    assert index.page_requests() == pages  # nothing resolved: no index page read
    assert wh("verify", out).returncode == 0


def test_a_pylock_without_a_wheel_for_the_target_is_refused_naming_the_package(index, tmp_path):
    lock = _uv_pylock(tmp_path, index, "app", "native")
    r = wh("stage", lock, *BOX, "--dry-run", "--no-bootstrap", "--cache-dir", tmp_path / "c")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "native" in r.stderr and "wheel" in r.stderr


def test_a_pylock_is_not_added_to(index, tmp_path):
    lock = _uv_pylock(tmp_path, index, "app")
    r = wh("stage", lock, "lib==2.0", *BOX, "--dry-run", "--no-bootstrap")
    assert r.returncode == 2 and "staged exactly as locked" in r.stderr


def test_uv_lock_via_uv_export_to_pylock(index, tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text('[project]\nname = "proj"\nversion = "0.1"\nrequires-python = ">=3.10"\n'
                                         'dependencies = ["app"]\n')
    uv("lock", "--default-index", index.url, "-p", sys.executable, cwd=proj)
    r = wh("stage", proj / "uv.lock", *BOX, "--dry-run", "--no-bootstrap")
    assert r.returncode == 2 and "uv export --format pylock.toml" in r.stderr  # the documented path, named
    uv("export", "--format", "pylock.toml", "--no-emit-project", "-o", "pylock.toml", "--frozen", cwd=proj)
    r = wh("stage", proj / "pylock.toml", *BOX, "--dry-run", "--json", "--no-bootstrap", "--cache-dir", tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert {(p["name"], p["version"]) for p in json.loads(r.stdout)["packages"]} == {("app", "1.0"), ("lib", "2.0")}


def _pip_with_lock() -> list[str] | None:
    """A pip that has `pip lock` (>= 25.1): $WH_TEST_PIP (a wheel file or a pip command), else none."""
    given = os.environ.get("WH_TEST_PIP")
    if given and given.endswith(".whl"):
        return [sys.executable, f"{given}/pip"]
    if given:
        return given.split()
    return None


def test_a_pylock_written_by_pip_lock(index, tmp_path):
    pip = _pip_with_lock()
    if pip is None:
        pytest.skip("no pip >= 25.1 given (WH_TEST_PIP=/path/to/pip-25.1+.whl)")
    lock = tmp_path / "pylock.toml"
    r = subprocess.run([*pip, "--isolated", "lock", "app", "--index-url", index.url, "-o", str(lock)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = wh("stage", lock, "--dry-run", "--json", "--no-bootstrap", "--cache-dir", tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert {p["name"] for p in json.loads(r.stdout)["packages"]} == {"app", "lib"}


PYPROJECT = """
[project]
name = "Serve-Stack"
version = "0.1"
dependencies = ["app"]

[project.optional-dependencies]
cuda = ["cuda-extra"]
all = ["serve-stack[cuda]"]

[dependency-groups]
test = ["pytest-ish"]
dev = [{include-group = "test"}, "lint-ish"]

[tool.uv]
constraint-dependencies = ["lib<2"]
"""


def test_pyproject_dependencies_extras_and_groups(index, tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    args = ["stage", tmp_path / "pyproject.toml", *BOX, "--dry-run", "--json", "--no-bootstrap", "--index-url",
            index.url, "--cache-dir", tmp_path / "c"]
    r = wh(*args)
    assert r.returncode == 0, r.stderr
    assert {(p["name"], p["version"]) for p in json.loads(r.stdout)["packages"]} == {("app", "1.0"), ("lib", "1.0")}
    r = wh(*args, "--extra", "all", "--group", "dev")  # all -> serve-stack[cuda]; dev includes test
    assert r.returncode == 0, r.stderr
    assert {p["name"] for p in json.loads(r.stdout)["packages"]} == {"app", "lib", "cuda-extra", "pytest-ish",
                                                                     "lint-ish"}
    r = wh(*args, "--group", "docs")
    assert r.returncode == 2 and "no dependency group 'docs'" in r.stderr and "dev, test" in r.stderr


def test_pyproject_staged_records_its_source(index, tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    out = tmp_path / "house"
    r = wh("stage", tmp_path / "pyproject.toml", *BOX, "-o", out, "--group", "test", "--no-bootstrap",
           "--index-url", index.url, "--cache-dir", tmp_path / "c")
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "wh.json").read_text())
    assert meta["name"] == "serve-stack"
    assert meta["inputs"]["source"]["kind"] == "pyproject" and meta["inputs"]["source"]["groups"] == ["test"]
    assert not (out / "manifest.toml").exists()


def test_a_cycle_of_include_group_and_dynamic_dependencies_are_refused(tmp_path):
    from wheelhouse.manifest import ManifestError
    from wheelhouse.manifest.pyproject import parse_pyproject

    cyc = tomllib.loads('[project]\nname="p"\n[dependency-groups]\na=[{include-group="b"}]\nb=[{include-group="a"}]\n')
    with pytest.raises(ManifestError, match="includes itself: a -> b -> a"):
        parse_pyproject(cyc, groups=["a"])
    with pytest.raises(ManifestError, match="dynamic") as exc:
        parse_pyproject({"project": {"name": "p", "dynamic": ["dependencies"]}})
    assert "uv export --format pylock.toml" in exc.value.hint


def test_extra_without_a_pyproject_or_lock_is_refused(index, tmp_path):
    r = wh("stage", "app", "--extra", "cuda", *BOX, "--dry-run", "--no-bootstrap")
    assert r.returncode == 2 and "pyproject.toml or a pylock.toml" in r.stderr
