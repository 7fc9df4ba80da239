"""Engine recipes: which source to build, at an exact commit, plus file-level backports.

A recipe (TOML under ``engine_src/``) names a git repository, a full commit sha,
extra refs to fetch (a pull request's ``pull/70/head``), files to take as they
are at another ref (a backport), and how to build the tree::

    [engine]
    name = "freetoken"
    repo = "https://github.com/FlashML-org/FreeToken"   # or a local path / file:// URL
    commit = "c066b38e1c9981c8c8adb0efb328049fe87aa8c0"  # full 40-hex sha
    tag = "v1.0"                   # optional; without a commit, wh builds the commit the tag names
    fetch = ["pull/70/head"]

    [[engine.backport]]
    path = "python/freetoken/kernel/triton/fp8_pertensor_linear.py"
    ref = "pull/243/head"          # fetched like the refs above
    sha256 = "..."                 # optional: the file's expected hash at that ref
    export = "patches/fp8_pertensor_linear.py"   # optional: also written into the wheelhouse

    [engine.build]
    subdirectory = "."
    no-build-isolation = true      # build with the target interpreter's installed build deps
    env = { FREETOKEN_KERNEL_CACHE_ARCHES = "8.9" }   # `wh build --env NAME=VALUE` overrides one
    link-sonames = true
    requires = ["cmake>=3.26", "ninja"]   # build requirements wh stages into --python when it lacks them

A recipe needs a ``commit``, or a ``tag`` when the commit could not be read while writing it
(the tag is then resolved at fetch time and the commit recorded; with both, they must agree).


Parsing is pure (``parse_recipe``); ``load_recipe`` reads the file (or a bundled
recipe by name) and hands the TOML to it. Fetching and checking out the source
is ``wheelhouse.engine_source``; building it is ``wheelhouse.engine``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from wheelhouse.datafile import check_keys, find_bundled, load_toml, read_text
from wheelhouse.errors import UsageError
from wheelhouse.resources import engine_src_dir

__all__ = [
    "Backport",
    "BuildSettings",
    "EngineRecipe",
    "RecipeError",
    "parse_recipe",
    "load_recipe",
]

_SHA = re.compile(r"^[0-9a-f]{40}$")
_ENGINE_KEYS = {"name", "repo", "commit", "tag", "fetch", "backport", "build"}
_BACKPORT_KEYS = {"path", "ref", "sha256", "export"}
_BUILD_KEYS = {"subdirectory", "no-build-isolation", "env", "link-sonames", "requires"}


class RecipeError(UsageError):
    code = "bad-recipe"


@dataclass(frozen=True)
class Backport:
    """Take ``path`` as it is at ``ref`` instead of as it is at the recipe's commit."""

    path: str
    ref: str
    sha256: str | None = None
    export: str | None = None  # wheelhouse-relative path the file is also written to


@dataclass(frozen=True)
class BuildSettings:
    subdirectory: str = "."
    no_build_isolation: bool = True  # offline, an isolated env cannot get its build deps
    env: Mapping[str, str] = field(default_factory=dict)
    link_sonames: bool = True
    requires: tuple[str, ...] = ()  # staged into the build interpreter by `wh build` when it lacks them


@dataclass(frozen=True)
class EngineRecipe:
    name: str
    repo: str
    commit: str | None  # None: the tag's commit, resolved when the mirror is fetched
    fetch: tuple[str, ...] = ()
    backports: tuple[Backport, ...] = ()
    build: BuildSettings = BuildSettings()
    path: Path | None = None  # where the recipe was read from
    tag: str | None = None

    def refs_to_fetch(self) -> tuple[str, ...]:
        """The tag, the extra refs and every backport's ref, in order, without repeats."""
        out: list[str] = []
        tag = (f"refs/tags/{self.tag}",) if self.tag else ()
        for ref in (*tag, *self.fetch, *(b.ref for b in self.backports)):
            if ref not in out:
                out.append(ref)
        return tuple(out)

    def repo_url(self) -> str:
        """``repo`` with a relative local path made absolute (against the recipe's folder)."""
        if "://" in self.repo or self.repo.startswith("git@"):
            return self.repo
        p = Path(self.repo).expanduser()
        if not p.is_absolute() and self.path is not None:
            p = self.path.parent / p
        return str(p.resolve())


# --- parsing (pure) -----------------------------------------------------------------------
def _unknown(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    check_keys(table, allowed, where, error=RecipeError)


def parse_recipe(data: Mapping[str, Any], path: Path | None = None) -> EngineRecipe:
    """An EngineRecipe from parsed TOML; every mistake is a RecipeError naming the key."""
    where = f"{path}: " if path else ""
    check_keys(data, {"engine"}, f"{where}recipe", error=RecipeError, noun="section")
    engine = data.get("engine")
    if not isinstance(engine, Mapping):
        raise RecipeError(f"{where}no [engine] table", hint="see `wh build --help`, and docs/manifest.md#engine-recipes in wh's source repository for the recipe format")
    _unknown(engine, _ENGINE_KEYS, f"{where}[engine]")
    for key in ("name", "repo"):
        if not isinstance(engine.get(key), str) or not engine[key]:
            raise RecipeError(f"{where}[engine] needs {key} (a string)", hint="see `wh build --help`, and docs/manifest.md#engine-recipes in wh's source repository for the recipe format")
    tag = engine.get("tag")
    if tag is not None and (not isinstance(tag, str) or not tag or tag.startswith("-")):
        raise RecipeError(f"{where}[engine] tag must be a tag name", hint='tag = "v1.0"')
    if engine.get("commit") is None and tag is None:
        raise RecipeError(f"{where}[engine] needs commit (a full 40-hex sha) or a tag",
                          hint="pin the exact commit: `git rev-parse <ref>` gives the full sha")
    commit = str(engine["commit"]).strip().lower() if engine.get("commit") is not None else None
    if commit is not None and not _SHA.match(commit):
        raise RecipeError(
            f"{where}[engine] commit {engine['commit']!r} is not a full 40-hex sha",
            hint="pin the exact commit: `git rev-parse <ref>` gives the full sha",
        )
    fetch = engine.get("fetch", [])
    if not isinstance(fetch, list) or not all(isinstance(r, str) and r for r in fetch):
        raise RecipeError(f"{where}[engine] fetch must be a list of refs", hint='e.g. fetch = ["pull/70/head"]')
    backports = []
    if not isinstance(engine.get("backport", []), list):
        raise RecipeError(f"{where}[engine] backport must be an array of tables", hint="write each as [[engine.backport]]")
    for i, b in enumerate(engine.get("backport", []) or []):
        w = f"{where}[[engine.backport]] #{i + 1}"
        if not isinstance(b, Mapping):
            raise RecipeError(f"{w} is not a table", hint="use [[engine.backport]] with path and ref")
        _unknown(b, _BACKPORT_KEYS, w)
        if not b.get("path") or not b.get("ref"):
            raise RecipeError(f"{w} needs path and ref", hint='path = "pkg/file.py", ref = "pull/243/head"')
        sha = b.get("sha256")
        if sha is not None and not re.fullmatch(r"[0-9a-f]{64}", str(sha)):
            raise RecipeError(f"{w} sha256 {sha!r} is not 64 hex digits", hint="leave sha256 out, or use `sha256sum`")
        path_ = str(b["path"]).strip("/")
        if ".." in Path(path_).parts:
            raise RecipeError(f"{w} path {path_!r} leaves the tree", hint="use a path inside the repository")
        export = b.get("export")
        if export is not None and (Path(str(export)).is_absolute() or ".." in Path(str(export)).parts):
            raise RecipeError(f"{w} export {export!r} must be a path inside the wheelhouse", hint='e.g. "patches/file.py"')
        backports.append(Backport(path=path_, ref=str(b["ref"]), sha256=sha, export=export))
    build = engine.get("build", {}) or {}
    if not isinstance(build, Mapping):
        raise RecipeError(f"{where}[engine] build must be a table", hint="write [engine.build]")
    _unknown(build, _BUILD_KEYS, f"{where}[engine.build]")
    env = build.get("env", {}) or {}
    if not isinstance(env, Mapping) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                               for v in env.values()):
        raise RecipeError(f"{where}[engine.build] env must be a table of strings", hint='env = { NAME = "value" }')
    for key in ("no-build-isolation", "link-sonames"):
        if not isinstance(build.get(key, True), bool):  # "no" would read as true
            raise RecipeError(f"{where}[engine.build] {key} must be true or false, not {build[key]!r}",
                              hint=f"{key} = false")
    sub = build.get("subdirectory", ".")
    if not isinstance(sub, str) or Path(sub).is_absolute() or ".." in Path(sub).parts:
        raise RecipeError(f"{where}[engine.build] subdirectory {sub!r} must be a path inside the repository",
                          hint='subdirectory = "." (or the folder holding pyproject.toml)')
    requires = build.get("requires", [])
    if not isinstance(requires, list) or not all(isinstance(r, str) and r for r in requires):
        raise RecipeError(f"{where}[engine.build] requires must be a list of requirements", hint='requires = ["cmake>=3.26"]')
    from packaging.requirements import InvalidRequirement, Requirement

    for r in requires:
        try:
            Requirement(r)
        except InvalidRequirement as exc:
            raise RecipeError(f"{where}[engine.build] requires: {r!r} is not a requirement ({exc})",
                              hint='write it like "cmake>=3.26"') from exc
    settings = BuildSettings(
        subdirectory=str(build.get("subdirectory", ".")),
        no_build_isolation=bool(build.get("no-build-isolation", True)),
        env={str(k): str(v) for k, v in env.items()},
        link_sonames=bool(build.get("link-sonames", True)),
        requires=tuple(requires),
    )
    return EngineRecipe(
        name=engine["name"],
        repo=engine["repo"],
        commit=commit,
        fetch=tuple(fetch),
        backports=tuple(backports),
        build=settings,
        path=path,
        tag=tag,
    )


def _bundled_recipes() -> list[str]:
    # engine_src/ also holds patch specs: list only the recipes.
    return sorted(x.stem for x in engine_src_dir().glob("*.toml")
                  if "[engine]" in read_text(x, what="bundled recipe", error=RecipeError))


def load_recipe(ref: str | Path) -> EngineRecipe:
    """Read a recipe file, or a bundled one by name (``freetoken-pr70``)."""
    p = find_bundled(ref, engine_src_dir()) or Path(ref)
    if not p.exists() and not p.is_symlink():
        raise RecipeError(f"recipe {ref} does not exist",
                          hint=f"give a path, or a bundled recipe: {', '.join(_bundled_recipes())}")
    data = load_toml(p, what="recipe", error=RecipeError, hint="give the path of a recipe .toml file")
    return parse_recipe(data, p.resolve())
