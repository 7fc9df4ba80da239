"""`wh build --dry-run`: what a build would do, read without doing any of it.

No fetch, no link, no lock, no write: the plan reads the recipe, the cached mirror when
there is one (never the network), the build interpreter and the wheelhouse. It says which
commit and refs would be fetched, the backports, what the build interpreter lacks, the
environment the backend would see, and whether the build itself reaches the network:
CMake ``FetchContent`` declarations in the tree's CMake files (vLLM fetches CUTLASS,
flash-attention and more during its configure step), ``VLLM_USE_PRECOMPILED`` (downloads
prebuilt binaries), or build isolation (pip installs the build requirements).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

from .recipe import EngineRecipe
from .source import cached_refs, tree_files

__all__ = ["plan_build", "fetch_content_sources"]

# FetchContent_Declare(name GIT_REPOSITORY url ...) / (name URL url ...): a download at configure time.
_DECLARE = re.compile(r"FetchContent_Declare\s*\(\s*([A-Za-z0-9_.+-]+)(.*?)\)", re.S | re.I)
_WHERE = re.compile(r"\b(GIT_REPOSITORY|URL)\s+(\S+)", re.I)
_SOURCE_DIR = re.compile(r"\bSOURCE_DIR\s+(\S+)", re.I)
_TRUE = {"1", "true", "yes", "on"}


def fetch_content_sources(files: Mapping[str, bytes]) -> list[dict[str, str]]:
    """Each ``FetchContent_Declare`` in CMake text: name, what it downloads, and the file that declares it."""
    out = []
    for path, body in sorted(files.items()):
        text = re.sub(r"#[^\n]*", "", body.decode("utf-8", errors="replace"))  # comments declare nothing
        for m in _DECLARE.finditer(text):
            where = _WHERE.search(m.group(2))
            local = _SOURCE_DIR.search(m.group(2))
            out.append({"name": m.group(1), "file": path,
                        "from": where.group(2) if where else ("SOURCE_DIR " + local.group(1) if local else "?"),
                        "kind": where.group(1).upper() if where else "local"})
    return out


def _network(recipe: EngineRecipe, env: Mapping[str, str], files: Mapping[str, bytes] | None) -> dict[str, Any]:
    reasons: list[str] = []
    fetched: list[dict[str, str]] = []
    if str(env.get("VLLM_USE_PRECOMPILED", "")).lower() in _TRUE:
        reasons.append("VLLM_USE_PRECOMPILED is set: setup.py downloads prebuilt binaries instead of compiling")
    if not recipe.build.no_build_isolation:
        reasons.append("build isolation: pip installs the build requirements into a throwaway venv")
    if files is not None:
        fetched = [f for f in fetch_content_sources(files) if f["kind"] != "local"]
        if fetched and str(env.get("FETCHCONTENT_FULLY_DISCONNECTED", "")).lower() not in _TRUE:
            reasons.append(f"CMake FetchContent downloads {len(fetched)} source(s) at configure time: "
                           + ", ".join(f["name"] for f in fetched))
    if files is None and not reasons:
        needs: bool | None = None  # the CMake files are not cached: cannot tell
    else:
        needs = bool(reasons)
    return {"during_build": needs, "reasons": reasons, "fetch_content": fetched,
            "checked": "the tree's CMake files" if files is not None else "nothing (the mirror is not cached)"}


def plan_build(recipe: EngineRecipe, wheelhouse: Path, *, python: str | None, cache_dir: Path,
               env_overrides: Mapping[str, str] | None = None, index_urls=None, find_links=None,
               base_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The build plan as data (``wh build --dry-run --json`` prints it); reads, never writes."""
    from wheelhouse.env.cuda import engine_environment
    from wheelhouse.env.links import plan_links
    from wheelhouse.target.interpreter import inspect_interpreter

    from .build_deps import build_system_requires, installed_versions, missing_build_tools

    interp = inspect_interpreter(python)
    mirror, refs = cached_refs(recipe, Path(cache_dir))
    tag_ref = f"refs/tags/{recipe.tag}" if recipe.tag else None
    commit = recipe.commit or (refs.get(tag_ref) if tag_ref else None)
    files = None
    pyproject_requires: tuple[str, ...] = ()
    if mirror is not None and commit:
        files = tree_files(mirror, commit, (".cmake",), ("CMakeLists.txt",))
        sub = recipe.build.subdirectory.strip("/")
        proj = tree_files(mirror, commit, (), ("pyproject.toml",)).get(
            "pyproject.toml" if sub in ("", ".") else f"{sub}/pyproject.toml")
        pyproject_requires = build_system_requires(proj)
    sites = [Path(s) for s in interp.visible_site_dirs]
    env = dict(base_env if base_env is not None else os.environ)
    cuda = engine_environment(sites, env)
    build_env = {**recipe.build.env, **(env_overrides or {})}
    tools = tuple(dict.fromkeys((*recipe.build.requires, *pyproject_requires)))
    have = installed_versions(interp.executable)
    links = [c.path for c in plan_links(sites)] if recipe.build.link_sonames else []
    wh_json = Path(wheelhouse) / "wh.json"
    short = (commit or "TAG")[:12]
    return {
        "recipe": str(recipe.path) if recipe.path else recipe.name,
        "name": recipe.name,
        "repo": recipe.repo_url(),
        "commit": commit,
        "commit_pinned": recipe.commit is not None,
        "tag": recipe.tag,
        "fetch": list(recipe.refs_to_fetch()),
        "mirror": {"path": str(mirror) if mirror else None, "cached": mirror is not None, "refs": refs},
        "backports": [{"path": b.path, "ref": b.ref, "sha256": b.sha256, "export": b.export,
                       "ref_commit": refs.get(b.ref)} for b in recipe.backports],
        "interpreter": {"executable": interp.executable, "version": interp.version, "abi": interp.target.abi},
        "build_requires": list(tools),
        "build_requires_read_from": ["recipe"] + (["pyproject.toml at the commit"] if files is not None else []),
        "lacks": missing_build_tools(tools, interp, have),
        "isolation": not recipe.build.no_build_isolation,
        "env": build_env,
        "cuda": {k: cuda[k] for k in sorted(cuda) if k in ("CUDA_HOME", "PATH", "LIBRARY_PATH")},
        "links": links,
        "network": _network(recipe, {**env, **build_env}, files),
        "wheelhouse": {"path": str(wheelhouse), "exists": Path(wheelhouse).is_dir(), "has_wh_json": wh_json.is_file(),
                       "writes": ["wheels/<engine wheel>", "pylock.toml", "simple/", "wh.json",
                                  f"logs/build-{recipe.name}-{short}.log",
                                  *(b.export for b in recipe.backports if b.export)]},
    }
