"""`wh build --dry-run` and tag-pinned recipes, through the real `wh` entry point, with no network.

The bundled FreeToken and vLLM recipes point at GitHub: their dry run must plan without a mirror
(and create none). A local git fixture shaped like the vLLM fork (CMake FetchContent, a pyproject
with build requirements, a release tag) shows what the plan reads once the mirror is cached, and
that a tag-only recipe builds the tag's commit and records it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "support" / "packages"))

import toy_engine  # noqa: E402

from wheelhouse.engine.plan import fetch_content_sources  # noqa: E402
from wheelhouse.engine.recipe import RecipeError, load_recipe, parse_recipe  # noqa: E402
from wheelhouse.engine.source import ensure_mirror  # noqa: E402
from wheelhouse.lock import read_wh_json  # noqa: E402

TAG = "v41-pp5-1m-pinmem-20260916"
CMAKE = """\
cmake_minimum_required(VERSION 3.26)
include(FetchContent)
# FetchContent_Declare(commented GIT_REPOSITORY https://example.invalid/no.git)
FetchContent_Declare(
  cutlass
  GIT_REPOSITORY https://github.com/nvidia/cutlass.git
  GIT_TAG v4.2.1
)
include(cmake/external_projects/flashmla.cmake)
"""
FLASHMLA = """\
FetchContent_Declare(flashmla URL https://example.invalid/flashmla.tar.gz)
FetchContent_Declare(vllm-flash-attn SOURCE_DIR ${VLLM_FLASH_ATTN_SRC_DIR})
"""


def wh(*args, env=None):
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})})


@pytest.fixture(scope="module")
def fork(tmp_path_factory):
    """A repository shaped like the vLLM fork: CMake files with FetchContent, a pyproject, a tag."""
    repo = tmp_path_factory.mktemp("fork") / "repo"
    info = toy_engine.make_repo(repo)
    (repo / "CMakeLists.txt").write_text(CMAKE)
    (repo / "cmake" / "external_projects").mkdir(parents=True)
    (repo / "cmake" / "external_projects" / "flashmla.cmake").write_text(FLASHMLA)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "cmake"], check=True)
    subprocess.run([*git, "tag", TAG], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    return {**info, "tagged": sha}


def _vllm_recipe_for(tmp_path: Path, repo: str, **replace) -> Path:
    """The bundled vLLM recipe with its repo pointed at a local fixture (and lines replaced)."""
    text = load_recipe("vllm-dsv41-pp5").path.read_text()
    text = text.replace('repo = "https://github.com/344303947/dsv41-flash-pp5-170hx"', f"repo = {json.dumps(repo)}")
    for old, new in replace.items():
        text = text.replace(old, new)
    path = tmp_path / "vllm-local.toml"
    path.write_text(text)
    return path


# --- the recipes ---------------------------------------------------------------------------
def test_vllm_recipe_names_the_tag_invents_no_commit_and_carries_the_build_settings():
    r = load_recipe("vllm-dsv41-pp5")
    assert r.repo == "https://github.com/344303947/dsv41-flash-pp5-170hx"
    assert r.tag == TAG and r.refs_to_fetch() == (f"refs/tags/{TAG}",)
    # The commit is the tag's HEAD as the fork's CHANGELOG names it (2b652f14dd), in full; what could not
    # be read is said, not invented, and the build checks the tag against it.
    assert r.commit == "2b652f14dd4a3d2794b31431d40b591e7f2ad189"
    assert "The tag itself could not be read" in r.path.read_text()
    assert r.build.no_build_isolation
    env = r.build.env
    assert env["VLLM_TARGET_DEVICE"] == "cuda" and env["TORCH_CUDA_ARCH_LIST"] == "8.0" and env["NVCC_THREADS"] == "1"
    assert env["MAX_JOBS"].isdigit() and env["SETUPTOOLS_SCM_PRETEND_VERSION"] == "0.13.1.dev6"
    names = {q.split("=")[0].split(">")[0] for q in r.build.requires}
    assert {"cmake", "ninja", "setuptools-scm", "torch"} <= names
    assert "cmake>=3.26" in r.build.requires and any(q.startswith("torch==") for q in r.build.requires)


@pytest.mark.parametrize("engine, said", [
    ({"name": "e", "repo": "/r"}, "needs commit (a full 40-hex sha) or a tag"),
    ({"name": "e", "repo": "/r", "tag": ""}, "tag must be a tag name"),
    ({"name": "e", "repo": "/r", "tag": "v1", "build": {"requires": "cmake"}}, "requires must be a list"),
    ({"name": "e", "repo": "/r", "tag": "v1", "build": {"requires": ["cmake >= = 3"]}}, "is not a requirement"),
])
def test_recipe_tag_and_requires_mistakes_are_named(engine, said):
    with pytest.raises(RecipeError, match=re.escape(said)):
        parse_recipe({"engine": engine})


def test_fetch_content_is_read_from_cmake_text_not_comments():
    found = fetch_content_sources({"CMakeLists.txt": CMAKE.encode(), "cmake/f.cmake": FLASHMLA.encode()})
    assert [(f["name"], f["kind"]) for f in found] == [("cutlass", "GIT_REPOSITORY"), ("flashmla", "URL"),
                                                       ("vllm-flash-attn", "local")]


# --- dry run, no mirror, no network ------------------------------------------------------------
@pytest.mark.parametrize("recipe", ["freetoken-pr70", "vllm-dsv41-pp5"])
def test_dry_run_of_a_bundled_recipe_plans_without_network_and_writes_nothing(tmp_path, recipe):
    out, cache = tmp_path / "out", tmp_path / "cache"
    # A proxy that refuses everything: any attempt to reach the forge would fail the run.
    proc = wh("build", recipe, "--dry-run", "--json", "-o", out, "--cache-dir", cache, "--python", sys.executable,
              env={"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "GIT_TERMINAL_PROMPT": "0"})
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert not out.exists() and not cache.exists()  # no mirror cloned, no wheelhouse started
    assert "dry run: nothing is fetched, linked or written" in proc.stderr
    assert plan["mirror"]["cached"] is False and "no cached mirror: needs the network" in proc.stderr
    assert plan["interpreter"]["executable"] and plan["wheelhouse"]["path"] == str(out)
    assert "wh.json" in plan["wheelhouse"]["writes"] and plan["wheelhouse"]["exists"] is False
    if recipe == "freetoken-pr70":
        assert plan["commit"] == "c066b38e1c9981c8c8adb0efb328049fe87aa8c0" and plan["commit_pinned"] is True
        assert plan["fetch"] == ["pull/70/head", "pull/243/head"]
        assert plan["backports"][0]["ref"] == "pull/243/head" and plan["backports"][0]["sha256"] is None
        assert "(sha256 not pinned)" in proc.stderr
    else:
        assert plan["commit"] == "2b652f14dd4a3d2794b31431d40b591e7f2ad189" and plan["tag"] == TAG
        assert plan["fetch"] == [f"refs/tags/{TAG}"]
        assert plan["env"]["TORCH_CUDA_ARCH_LIST"] == "8.0" and "VLLM_TARGET_DEVICE=cuda" in proc.stderr
        assert any(x.startswith("torch==") for x in plan["lacks"])  # wh's own venv has no torch
        assert plan["network"]["during_build"] is None and "during the build: unknown" in proc.stderr


def test_dry_run_env_override_is_planned(tmp_path):
    proc = wh("build", "vllm-dsv41-pp5", "--dry-run", "--json", "-o", tmp_path / "o", "--cache-dir", tmp_path / "c",
              "--env", "TORCH_CUDA_ARCH_LIST=9.0a", "--env", "VLLM_USE_PRECOMPILED=1")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["env"]["TORCH_CUDA_ARCH_LIST"] == "9.0a"
    assert plan["network"]["during_build"] is True and "VLLM_USE_PRECOMPILED is set" in proc.stderr
    # Without --json the plan is the data asked for: on stdout, for `> plan.txt`.
    text = wh("build", "vllm-dsv41-pp5", "--dry-run", "-q", "-o", tmp_path / "o", "--cache-dir", tmp_path / "c")
    assert text.returncode == 0 and "TORCH_CUDA_ARCH_LIST=8.0" in text.stdout and text.stderr == ""
    bad = wh("build", "vllm-dsv41-pp5", "--dry-run", "-o", tmp_path / "o", "--env", "NOEQUALS")
    assert bad.returncode == 2 and "is not NAME=VALUE" in bad.stderr


# --- dry run with the mirror cached: the tree's CMake files and pyproject are read -------------------
def test_dry_run_reads_the_cached_tree_fetch_content_tag_commit_and_build_requires(tmp_path, fork):
    cache = tmp_path / "cache"
    # A tag-only copy (the commit line dropped): the plan reads the tag's commit from the cached mirror.
    recipe = _vllm_recipe_for(tmp_path, fork["repo"], **{'commit = "2b652f14dd4a3d2794b31431d40b591e7f2ad189"': ""})
    ensure_mirror(load_recipe(recipe), cache)  # a mirror from an earlier (networked) run, local here
    before = sorted(p.relative_to(cache) for p in cache.rglob("*"))
    proc = wh("build", recipe, "--dry-run", "--json", "-o", tmp_path / "out", "--cache-dir", cache,
              "--python", sys.executable)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["commit"] == fork["tagged"] and plan["commit_pinned"] is False
    assert plan["mirror"]["refs"] == {f"refs/tags/{TAG}": fork["tagged"]}
    net = plan["network"]
    assert net["during_build"] is True and net["checked"] == "the tree's CMake files"
    assert [f["name"] for f in net["fetch_content"]] == ["cutlass", "flashmla"]  # not the commented one, not SOURCE_DIR
    assert "FetchContent cutlass: https://github.com/nvidia/cutlass.git (CMakeLists.txt)" in proc.stderr
    assert "setuptools>=61" in plan["build_requires"]  # the tree's own [build-system] requires, added
    assert sorted(p.relative_to(cache) for p in cache.rglob("*")) == before and not (tmp_path / "out").exists()


def test_dry_run_with_fetch_content_disconnected_says_no_network(tmp_path, fork):
    cache = tmp_path / "cache"
    recipe = _vllm_recipe_for(tmp_path, fork["repo"], **{'commit = "2b652f14dd4a3d2794b31431d40b591e7f2ad189"': ""})
    ensure_mirror(load_recipe(recipe), cache)
    proc = wh("build", recipe, "--dry-run", "--json", "-o", tmp_path / "out", "--cache-dir", cache,
              "--env", "FETCHCONTENT_FULLY_DISCONNECTED=ON")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["network"]["during_build"] is False and "during the build: no" in proc.stderr


# --- a tag-only recipe builds the tag's commit and records it; a moved tag is refused ---------------
def _toy_tag_recipe(tmp_path: Path, repo: str, commit: str | None = None) -> Path:
    text = toy_engine.recipe_text(repo, "X")
    text = text.replace('commit = "X"', f'tag = "{TAG}"' + (f'\ncommit = "{commit}"' if commit else ""))
    path = tmp_path / "tagged.toml"
    path.write_text(text)
    return path


def test_tag_only_recipe_builds_the_tags_commit_and_records_it(tmp_path, fork):
    py = toy_engine.make_build_venv(tmp_path / "venv")
    # The fixture's pyproject wants only setuptools (there via the venv's .pth); the toy setup.py ignores CMake.
    (tmp_path / "out").mkdir()
    recipe = _toy_tag_recipe(tmp_path, fork["repo"])
    proc = wh("build", recipe, "-o", tmp_path / "out", "--python", py, "--cache-dir", tmp_path / "cache", "--json")
    assert proc.returncode == 0, proc.stderr
    assert f'tag {TAG} is commit {fork["tagged"]}; pin it in the recipe: commit = "{fork["tagged"]}"' in proc.stderr
    eng = read_wh_json(tmp_path / "out")["engine"]
    assert eng["commit"] == fork["tagged"] and eng["fetched_refs"][f"refs/tags/{TAG}"] == fork["tagged"]
    assert eng["tag"] == TAG


def test_recipe_whose_tag_moved_off_its_commit_is_refused(tmp_path, fork):
    recipe = _toy_tag_recipe(tmp_path, fork["repo"], commit=fork["base"])
    proc = wh("build", recipe, "-o", tmp_path / "out", "--python", sys.executable, "--cache-dir", tmp_path / "cache")
    assert proc.returncode == 1
    assert f"tag {TAG} points at {fork['tagged']}, the recipe pins {fork['base']}" in proc.stderr
    assert not (tmp_path / "out" / "wh.json").exists()
