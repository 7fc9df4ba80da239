"""A recipe's build requirements are staged into the build interpreter by `wh build` itself.

The build venv is pip-less (tests/support/packages/toy_engine.py); the requirement is a real wheel on
the loopback index; the build's setup.py imports it, so the build only passes when wh staged it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "support" / "packages"))
sys.path.insert(0, str(Path(__file__).parents[1] / "support"))

import toy_engine  # noqa: E402
from index_fixtures import pyindex  # noqa: E402,F401  (fixture)
from wheelmaker import make_wheel  # noqa: E402


def wh(*args):
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})


@pytest.fixture(scope="module")
def needs_tool(tmp_path_factory):
    """The toy engine at a commit whose setup.py imports buildtool (as vLLM's imports setuptools_scm)."""
    base = toy_engine.make_repo(tmp_path_factory.mktemp("toy") / "repo")
    repo = Path(base["repo"])
    setup = repo / "setup.py"
    setup.write_text("import buildtool  # a build requirement, like setuptools_scm for vLLM\n"
                     "print('toyengine: buildtool', buildtool.V, flush=True)\n" + setup.read_text())
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "--quiet", "-am", "need buildtool"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    return {"repo": str(repo), "commit": sha}


def _recipe(tmp_path: Path, repo) -> Path:
    text = toy_engine.recipe_text(repo["repo"], repo["commit"]) + 'requires = ["buildtool>=1.0"]\n'
    path = tmp_path / "recipe.toml"
    path.write_text(text)
    return path


def _installed(py: Path, name: str) -> str | None:
    proc = subprocess.run([str(py), "-c", f"import importlib.metadata as m; print(m.version({name!r}))"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def test_missing_build_requirement_is_staged_into_the_build_interpreter_then_built(tmp_path, needs_tool, pyindex):
    pub = tmp_path / "pub"
    make_wheel(pub, "buildtool", "0.9", modules={"buildtool/__init__.py": "V = 9\n"})
    make_wheel(pub, "buildtool", "1.1", modules={"buildtool/__init__.py": "V = 11\n"})
    index = pyindex(pub)
    py = toy_engine.make_build_venv(tmp_path / "venv")
    assert _installed(py, "buildtool") is None
    dry = wh("build", _recipe(tmp_path, needs_tool), "--dry-run", "--json", "-o", tmp_path / "out",
             "--python", py, "--cache-dir", tmp_path / "cache")
    assert dry.returncode == 0 and json.loads(dry.stdout)["lacks"] == ["buildtool>=1.0 (installed: none)"]
    proc = wh("build", _recipe(tmp_path, needs_tool), "-o", tmp_path / "out", "--python", py,
              "--cache-dir", tmp_path / "cache", "-i", index.url, "--json")
    assert proc.returncode == 0, proc.stderr
    assert f"staging 1 build requirement(s) into {py}" in proc.stderr
    assert "staged into the build interpreter: buildtool==1.1" in proc.stderr
    assert "toyengine: buildtool 11" in proc.stderr  # the build imported what wh staged
    assert _installed(py, "buildtool") == "1.1"
    assert json.loads(proc.stdout)["wheel"].endswith(".whl")


def test_without_an_index_the_missing_build_requirement_is_named_and_nothing_is_written(tmp_path, needs_tool):
    py = toy_engine.make_build_venv(tmp_path / "venv")
    proc = wh("build", _recipe(tmp_path, needs_tool), "-o", tmp_path / "out", "--python", py,
              "--cache-dir", tmp_path / "cache")
    assert proc.returncode == 2, proc.stderr
    assert f"{py} lacks build requirements: buildtool>=1.0 (installed: none)" in proc.stderr
    assert "-i URL / -f DIR" in proc.stderr
    assert not (tmp_path / "out" / "wh.json").exists() and _installed(py, "buildtool") is None
