"""Building through the PEP 517 backend: streamed output, the compiler's own error lines, build deps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "support" / "packages"))

import toy_engine  # noqa: E402

from wheelhouse.engine.pep517 import (
    BuildDepsMissing,
    BuildFailed,
    build_wheel,
    extract_compiler_errors,
    missing_build_requirements,
)
from wheelhouse.errors import UsageError
from wheelhouse.target import target_from_flags


@pytest.fixture(scope="module")
def toy_repo(tmp_path_factory):
    return toy_engine.make_repo(tmp_path_factory.mktemp("toy") / "repo")


def _tree(tmp_path: Path, repo: dict, commit: str) -> Path:
    tree = tmp_path / "tree"
    subprocess.run(["git", "clone", "--quiet", repo["repo"], str(tree)], check=True)
    subprocess.run(["git", "-c", "advice.detachedHead=false", "checkout", "--quiet", commit], cwd=tree, check=True)
    return tree


def test_extract_compiler_errors_keeps_error_lines_with_context():
    lines = ["running build_ext", "gcc -c a.c", "a.c:3:5: error: expected ';' before 'int'", "    3 | int x", "",
             "noise"] * 1 + ["ok line"] * 50 + ["/usr/bin/ld: cannot find -lcudart: No such file or directory",
                                                 "collect2: error: ld returned 1 exit status", "Traceback (most recent call last):"]
    out = extract_compiler_errors(lines)
    assert "a.c:3:5: error: expected ';' before 'int'" in out
    assert "/usr/bin/ld: cannot find -lcudart: No such file or directory" in out
    assert "..." in out  # gaps are marked, not glued together
    assert len(out) < 20


def test_extract_falls_back_to_the_tail():
    lines = [f"line {i}" for i in range(100)] + ["ModuleNotFoundError: No module named 'torch'"]
    out = extract_compiler_errors(lines)
    assert out[-1] == "ModuleNotFoundError: No module named 'torch'" and len(out) == 15


def test_c_syntax_error_shows_the_compilers_line_and_the_log(tmp_path, toy_repo):
    py = toy_engine.make_build_venv(tmp_path / "venv")
    tree = _tree(tmp_path, toy_repo, toy_repo["broken"])
    seen: list[str] = []
    log = tmp_path / "logs" / "build.log"
    with pytest.raises(BuildFailed) as info:
        build_wheel(tree, tmp_path / "dist", python=str(py), env=dict(os.environ), log_path=log, sink=seen.append, label="toy")
    err = info.value
    compiler_line = next(line for line in seen if "error: expected" in line)
    assert "_cuda.c" in compiler_line  # gcc's own words, with file and line
    assert compiler_line in err.error_lines and compiler_line in err.detail
    assert str(log) in err.detail and compiler_line in log.read_text()
    assert err.message.startswith("building toy failed")
    assert not list((tmp_path / "dist").glob("*.whl"))


def test_cli_prints_compiler_error_and_log_path(tmp_path, toy_repo):
    py = toy_engine.make_build_venv(tmp_path / "venv")
    recipe = tmp_path / "r.toml"
    recipe.write_text(toy_engine.recipe_text(toy_repo["repo"], toy_repo["broken"]))
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "build", str(recipe), "-o", str(tmp_path / "wh"),
                           "--python", str(py), "--cache-dir", str(tmp_path / "cache")],
                          capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})
    assert proc.returncode == 1
    tail = proc.stderr[proc.stderr.index("error: building toyengine failed"):]  # the rendered error, after the stream
    assert "error: expected" in tail and "_cuda.c" in tail
    assert "full log: " in tail and "hint:" in tail
    assert "failed building wheel" not in proc.stderr.lower()


def test_build_runs_the_backend_hook_not_pip(tmp_path, toy_repo):
    py = toy_engine.make_build_venv(tmp_path / "venv")
    from wheelhouse.env.links import apply_links, plan_links

    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    apply_links(plan_links([site]), site / ".wh" / "links.json")
    tree = _tree(tmp_path, toy_repo, toy_repo["base"])
    log = tmp_path / "build.log"
    result = build_wheel(tree, tmp_path / "dist", python=str(py), env=dict(os.environ), log_path=log)
    assert result.wheel.exists() and result.backend == "setuptools.build_meta"
    commands = [line for line in log.read_text().splitlines() if line.startswith("$ ")]
    assert all(c.startswith(f"$ {py} ") and " pip " not in c for c in commands)
    assert any("_in_process.py build_wheel" in c for c in commands)


def test_missing_build_backend_is_named(tmp_path, toy_repo):
    py = toy_engine.make_build_venv(tmp_path / "venv", with_setuptools=False)
    tree = _tree(tmp_path, toy_repo, toy_repo["base"])
    with pytest.raises(BuildDepsMissing) as info:
        build_wheel(tree, tmp_path / "dist", python=str(py), env=dict(os.environ), log_path=tmp_path / "b.log")
    assert "setuptools>=61" in info.value.message and "installed: none" in info.value.message
    assert "pip install" in info.value.hint


def test_missing_build_requirements_checks_versions():
    installed = {"setuptools": "60.0", "torch": "2.11.0+cu130"}
    assert missing_build_requirements(["setuptools>=61", "torch>=2.11,<2.12", "wheel"], installed) == [
        "setuptools>=61 (installed: 60.0)", "wheel (installed: none)"]


def test_marker_excluded_build_requirements_are_not_demanded():
    """Markers are judged for the build interpreter's profile (a 3.12 Linux box), not for wh's host."""
    target = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
    reqs = ["tomli; python_version < '3.11'", "triton; platform_system == 'Linux'"]
    assert missing_build_requirements(reqs, {}, target) == ["triton; platform_system == 'Linux' (installed: none)"]


def _in_tree_backend(root: Path, body: str, backend: str = "toy_backend") -> Path:
    """A project whose PEP 517 backend is a module inside it (backend-path), so no build deps are needed."""
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        f'[build-system]\nrequires = []\nbuild-backend = "{backend}"\nbackend-path = ["."]\n')
    (root / "toy_backend.py").write_text(body)
    return root


FAILING_BACKEND = '''
import sys
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    print("gcc -c kernel.c", flush=True)
    print("kernel.c:7:3: error: 'cudaStream_t' undeclared", file=sys.stderr, flush=True)
    raise SystemExit(1)
'''

WORKING_BACKEND = '''
import zipfile
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    print("building toy", flush=True)
    name = "toy-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel_directory + "/" + name, "w") as zf:
        zf.writestr("toy.py", "X = 1\\n")
    return name
'''


def test_the_frontend_streams_the_backends_lines_and_keeps_the_compilers_error(tmp_path):
    project = _in_tree_backend(tmp_path / "p", FAILING_BACKEND)
    seen: list[str] = []
    with pytest.raises(BuildFailed) as info:
        build_wheel(project, tmp_path / "dist", python=sys.executable, env=dict(os.environ),
                    log_path=tmp_path / "b.log", sink=seen.append)
    assert seen[:2] == ["gcc -c kernel.c", "kernel.c:7:3: error: 'cudaStream_t' undeclared"]  # live, in order
    assert "kernel.c:7:3: error: 'cudaStream_t' undeclared" in info.value.error_lines
    assert "the backend toy_backend exited 1" in info.value.message
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").iterdir())


def test_the_frontend_returns_the_backends_wheel(tmp_path):
    project = _in_tree_backend(tmp_path / "p", WORKING_BACKEND)
    result = build_wheel(project, tmp_path / "dist", python=sys.executable, env=dict(os.environ), log_path=tmp_path / "b.log")
    assert result.wheel == tmp_path / "dist" / "toy-1.0-py3-none-any.whl" and result.backend == "toy_backend"
    assert "building toy" in (tmp_path / "b.log").read_text()


def test_a_backend_that_cannot_be_imported_is_named(tmp_path):
    project = _in_tree_backend(tmp_path / "p", WORKING_BACKEND, backend="no_such_backend")
    with pytest.raises(BuildDepsMissing, match="cannot import the build backend no_such_backend"):
        build_wheel(project, tmp_path / "dist", python=sys.executable, env=dict(os.environ), log_path=tmp_path / "b.log")


def test_a_folder_that_is_no_project_is_a_usage_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="neither pyproject.toml nor setup.py"):
        build_wheel(tmp_path / "empty", tmp_path / "dist", python=sys.executable, env=dict(os.environ),
                    log_path=tmp_path / "b.log")
    assert not (tmp_path / "dist").exists()
