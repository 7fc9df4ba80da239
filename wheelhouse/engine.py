"""Engine recipes: the engine's source at an exact commit, plus file-level backports.

A recipe (TOML under ``engine_src/``) names a git repository, a full commit sha,
extra refs to fetch (a pull request's ``pull/70/head``), files to take as they
are at another ref (a backport), and how to build the tree::

    [engine]
    name = "freetoken"
    repo = "https://github.com/FlashML-org/FreeToken"   # or a local path / file:// URL
    commit = "c066b38e1c9981c8c8adb0efb328049fe87aa8c0"  # full 40-hex sha, required
    fetch = ["pull/70/head"]

    [[engine.backport]]
    path = "python/freetoken/kernel/triton/fp8_pertensor_linear.py"
    ref = "pull/243/head"          # fetched like the refs above
    sha256 = "..."                 # optional: the file's expected hash at that ref
    export = "patches/fp8_pertensor_linear.py"   # optional: also written into the wheelhouse

    [engine.build]
    subdirectory = "."
    no-build-isolation = true      # build with the target interpreter's installed build deps
    env = { FREETOKEN_KERNEL_CACHE_ARCHES = "8.9" }
    link-sonames = true

Parsing is pure (``parse_recipe``); the git work (``ensure_mirror``,
``checkout_source``) runs the git CLI in a subprocess and never guesses: any
HEAD other than the recipe's commit is an error, and a backport whose hash
differs from the recipe's is refused with both hashes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import UsageError, WhError
from .progress import NullReporter, Reporter
from .resources import engine_src_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "Backport",
    "BuildSettings",
    "EngineRecipe",
    "AppliedBackport",
    "SourceTree",
    "RecipeError",
    "GitError",
    "CommitNotFound",
    "WrongCommit",
    "BackportMismatch",
    "parse_recipe",
    "load_recipe",
    "mirror_path",
    "ensure_mirror",
    "read_backports",
    "checkout_source",
    "sha256_bytes",
    "EngineBuild",
    "WheelhouseMismatch",
    "build_key",
    "build_engine",
]

_SHA = re.compile(r"^[0-9a-f]{40}$")
_ENGINE_KEYS = {"name", "repo", "commit", "fetch", "backport", "build"}
_BACKPORT_KEYS = {"path", "ref", "sha256", "export"}
_BUILD_KEYS = {"subdirectory", "no-build-isolation", "env", "link-sonames"}


class RecipeError(UsageError):
    code = "bad-recipe"


class GitError(WhError):
    code = "git-failed"


class CommitNotFound(WhError):
    code = "commit-not-found"


class WrongCommit(WhError):
    code = "wrong-commit"


class BackportMismatch(WhError):
    code = "backport-mismatch"

    def __init__(self, path: str, ref: str, expected: str, actual: str):
        super().__init__(
            f"backport {path} at {ref} has sha256 {actual}, the recipe expects {expected}",
            hint="the ref moved or the recipe is wrong: check the file at that ref, then fix sha256 in the recipe",
        )
        self.path, self.ref, self.expected, self.actual = path, ref, expected, actual


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


@dataclass(frozen=True)
class EngineRecipe:
    name: str
    repo: str
    commit: str
    fetch: tuple[str, ...] = ()
    backports: tuple[Backport, ...] = ()
    build: BuildSettings = BuildSettings()
    path: Path | None = None  # where the recipe was read from

    def refs_to_fetch(self) -> tuple[str, ...]:
        """The extra refs plus every backport's ref, in order, without repeats."""
        out: list[str] = []
        for ref in (*self.fetch, *(b.ref for b in self.backports)):
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


@dataclass(frozen=True)
class AppliedBackport:
    path: str
    ref: str
    ref_commit: str  # what ref pointed at when the file was taken
    sha256: str  # of the file as taken
    before_sha256: str | None  # of the file at the recipe's commit (None: it did not exist)
    export: str | None = None
    content: bytes = field(default=b"", repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "ref": self.ref,
            "ref_commit": self.ref_commit,
            "sha256": self.sha256,
            "before_sha256": self.before_sha256,
            **({"export": self.export} if self.export else {}),
        }


@dataclass(frozen=True)
class SourceTree:
    """A checked-out work tree and what it holds."""

    path: Path
    commit: str
    refs: Mapping[str, str]  # fetched ref -> commit
    backports: tuple[AppliedBackport, ...]
    status: tuple[str, ...]  # `git status --porcelain` after the backports


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- parsing (pure) -----------------------------------------------------------------------
def _unknown(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise RecipeError(f"{where} has unknown keys: {', '.join(extra)}", hint=f"allowed: {', '.join(sorted(allowed))}")


def parse_recipe(data: Mapping[str, Any], path: Path | None = None) -> EngineRecipe:
    """An EngineRecipe from parsed TOML; every mistake is a RecipeError naming the key."""
    where = f"{path}: " if path else ""
    engine = data.get("engine")
    if not isinstance(engine, Mapping):
        raise RecipeError(f"{where}no [engine] table", hint="see `wh build --help` for the recipe format")
    _unknown(engine, _ENGINE_KEYS, f"{where}[engine]")
    for key in ("name", "repo", "commit"):
        if not isinstance(engine.get(key), str) or not engine[key]:
            raise RecipeError(f"{where}[engine] needs {key} (a string)", hint="see docs/build.md for the recipe format")
    commit = engine["commit"].strip().lower()
    if not _SHA.match(commit):
        raise RecipeError(
            f"{where}[engine] commit {engine['commit']!r} is not a full 40-hex sha",
            hint="pin the exact commit: `git rev-parse <ref>` gives the full sha",
        )
    fetch = engine.get("fetch", [])
    if isinstance(fetch, str) or not all(isinstance(r, str) and r for r in fetch):
        raise RecipeError(f"{where}[engine] fetch must be a list of refs", hint='e.g. fetch = ["pull/70/head"]')
    backports = []
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
    _unknown(build, _BUILD_KEYS, f"{where}[engine.build]")
    env = build.get("env", {}) or {}
    if not isinstance(env, Mapping):
        raise RecipeError(f"{where}[engine.build] env must be a table", hint='env = { NAME = "value" }')
    settings = BuildSettings(
        subdirectory=str(build.get("subdirectory", ".")),
        no_build_isolation=bool(build.get("no-build-isolation", True)),
        env={str(k): str(v) for k, v in env.items()},
        link_sonames=bool(build.get("link-sonames", True)),
    )
    return EngineRecipe(
        name=engine["name"],
        repo=engine["repo"],
        commit=commit,
        fetch=tuple(fetch),
        backports=tuple(backports),
        build=settings,
        path=path,
    )


def load_recipe(ref: str | Path) -> EngineRecipe:
    """Read a recipe file, or a bundled one by name (``freetoken-pr70``)."""
    p = Path(ref)
    if not p.exists():
        bundled = engine_src_dir() / (p.name if p.suffix == ".toml" else f"{p.name}.toml")
        if bundled.exists() and len(p.parts) == 1:
            p = bundled
        else:
            known = sorted(x.stem for x in engine_src_dir().glob("*.toml"))
            raise RecipeError(f"recipe {ref} does not exist", hint=f"give a path, or a bundled recipe: {', '.join(known)}")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"cannot read recipe {p}: {exc}", hint="check the path") from exc
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"recipe {p} is not valid TOML: {exc}", hint="fix the TOML syntax") from exc
    return parse_recipe(data, p.resolve())


# --- git (subprocess at the edge) ----------------------------------------------------------
def _git(args: list[str], *, git_dir: Path | None = None, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["git"] + ([f"--git-dir={git_dir}"] if git_dir else []) + args
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True)
    except FileNotFoundError as exc:
        raise GitError("git is not installed", hint="install git (it fetches and checks out the engine source)") from exc
    if check and proc.returncode != 0:
        raise GitError(
            f"`{' '.join(cmd[1:])}` failed (exit {proc.returncode})",
            hint="check the repository URL and refs in the recipe",
            detail=proc.stderr.decode(errors="replace").strip(),
        )
    return proc


def mirror_path(cache_dir: Path, recipe: EngineRecipe) -> Path:
    """Where the bare mirror of the recipe's repository lives in the cache."""
    digest = hashlib.sha256(recipe.repo_url().encode()).hexdigest()[:12]
    return Path(cache_dir) / "mirrors" / f"{recipe.name}-{digest}.git"


def _local_ref(ref: str) -> str:
    """Where a fetched ref is kept in the mirror (outside refs/heads, so nothing clobbers it)."""
    return "refs/wh/" + (ref[len("refs/"):] if ref.startswith("refs/") else ref)


def _resolve(mirror: Path, rev: str) -> str | None:
    proc = _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], git_dir=mirror, check=False)
    return proc.stdout.decode().strip() if proc.returncode == 0 else None


def ensure_mirror(recipe: EngineRecipe, cache_dir: Path, reporter: Reporter | None = None) -> tuple[Path, dict[str, str]]:
    """Clone or update the bare mirror, fetch the recipe's refs; return it and ref -> commit.

    When fetching fails (offline re-run) but the mirror already holds the commit
    and every ref, the cached copy is used and a note says so.
    """
    reporter = reporter or NullReporter()
    mirror = mirror_path(cache_dir, recipe)
    url = recipe.repo_url()
    if not (mirror / "HEAD").exists():
        mirror.parent.mkdir(parents=True, exist_ok=True)
        tmp = mirror.with_name(mirror.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        _git(["init", "--quiet", "--bare", str(tmp)])
        _git(["remote", "add", "origin", url], git_dir=tmp)
        os.replace(tmp, mirror)
    else:
        _git(["remote", "set-url", "origin", url], git_dir=mirror)
    refs = recipe.refs_to_fetch()
    specs = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"] + [f"+{r}:{_local_ref(r)}" for r in refs]
    reporter.start(f"fetch {recipe.name}")
    proc = _git(["fetch", "--quiet", "origin", *specs], git_dir=mirror, check=False)
    reporter.finish(f"fetch {recipe.name}")
    fetch_error = proc.stderr.decode(errors="replace").strip() if proc.returncode else ""
    resolved: dict[str, str] = {}
    missing = []
    for r in refs:
        sha = _resolve(mirror, _local_ref(r))
        if sha is None:
            missing.append(r)
        else:
            resolved[r] = sha
    if _resolve(mirror, recipe.commit) is None and not fetch_error:
        # Some servers let a client ask for one commit directly (GitHub does).
        _git(["fetch", "--quiet", "origin", recipe.commit], git_dir=mirror, check=False)
    if fetch_error:
        if missing or _resolve(mirror, recipe.commit) is None:
            raise GitError(
                f"fetching {url} failed and the cached mirror lacks "
                + (", ".join(missing) if missing else f"commit {recipe.commit}"),
                hint="run `wh build` where the repository is reachable once; later runs reuse the mirror",
                detail=fetch_error,
            )
        reporter.note(f"fetch from {url} failed; using the cached mirror at {mirror}")
    elif missing:
        raise GitError(f"{url} has no ref {', '.join(missing)}", hint="check the refs in the recipe's fetch and backport lists")
    if _resolve(mirror, recipe.commit) is None:
        raise CommitNotFound(
            f"commit {recipe.commit} is not in {url} (fetched: {', '.join(refs) or 'branches and tags only'})",
            hint="check the sha, or add the pull request ref that holds it to fetch = [...]",
        )
    return mirror, resolved


def _blob(mirror: Path, rev: str, path: str) -> bytes | None:
    proc = _git(["cat-file", "blob", f"{rev}:{path}"], git_dir=mirror, check=False)
    return proc.stdout if proc.returncode == 0 else None


def read_backports(recipe: EngineRecipe, mirror: Path, refs: Mapping[str, str]) -> tuple[AppliedBackport, ...]:
    """Each backport's file as it is at its ref, checked against the recipe's sha256."""
    out = []
    for b in recipe.backports:
        ref_commit = refs.get(b.ref) or _resolve(mirror, b.ref)
        if ref_commit is None:
            raise GitError(f"backport ref {b.ref} is not in the mirror", hint="add it to fetch = [...] in the recipe")
        content = _blob(mirror, ref_commit, b.path)
        if content is None:
            raise GitError(f"{b.path} does not exist at {b.ref} ({ref_commit[:12]})", hint="check the backport's path and ref")
        actual = sha256_bytes(content)
        if b.sha256 and actual != b.sha256:
            raise BackportMismatch(b.path, b.ref, b.sha256, actual)
        before = _blob(mirror, recipe.commit, b.path)
        out.append(
            AppliedBackport(
                path=b.path,
                ref=b.ref,
                ref_commit=ref_commit,
                sha256=actual,
                before_sha256=sha256_bytes(before) if before is not None else None,
                export=b.export,
                content=content,
            )
        )
    return tuple(out)


def checkout_source(
    recipe: EngineRecipe,
    mirror: Path,
    refs: Mapping[str, str],
    backports: tuple[AppliedBackport, ...],
    work_dir: Path,
) -> SourceTree:
    """A fresh work tree at exactly ``recipe.commit`` with the backports written in."""
    tree = Path(work_dir)
    shutil.rmtree(tree, ignore_errors=True)
    tree.parent.mkdir(parents=True, exist_ok=True)
    # A local clone hard-links the mirror's objects, so any commit in it can be checked out.
    _git(["clone", "--quiet", "--no-checkout", str(mirror), str(tree)])
    _git(["-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", recipe.commit], cwd=tree)
    head = _git(["rev-parse", "HEAD"], cwd=tree).stdout.decode().strip()
    if head != recipe.commit:
        raise WrongCommit(f"work tree {tree} is at {head}, not the recipe's {recipe.commit}", hint="remove it and re-run `wh build`")
    for b in backports:
        dest = tree / b.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(b.content)
        if sha256_bytes(dest.read_bytes()) != b.sha256:  # pragma: no cover - disk trouble
            raise BackportMismatch(b.path, b.ref, b.sha256, sha256_bytes(dest.read_bytes()))
    status = _git(["status", "--porcelain"], cwd=tree).stdout.decode().splitlines()
    return SourceTree(path=tree, commit=head, refs=dict(refs), backports=backports, status=tuple(status))


# --- the whole `wh build`: source -> wheel -> wheelhouse ----------------------------------
class WheelhouseMismatch(UsageError):
    code = "wheelhouse-mismatch"


@dataclass(frozen=True)
class EngineBuild:
    """What `wh build` produced and where it is recorded."""

    wheel: Path  # inside the wheelhouse
    sha256: str
    reused: bool
    log_path: Path | None
    record: Mapping[str, Any]  # what wh.json["engine"] now holds
    links: tuple[str, ...] = ()  # soname links created for this build


def build_key(recipe: EngineRecipe, backports: tuple[AppliedBackport, ...], env: Mapping[str, str], python: Mapping[str, str]) -> str:
    """Same key, same wheel: commit + backport hashes + build env + interpreter + build settings."""
    body = {
        "commit": recipe.commit,
        "backports": [(b.path, b.sha256) for b in backports],
        "env": dict(sorted(env.items())),
        "python": dict(sorted(python.items())),
        "subdirectory": recipe.build.subdirectory,
        "isolation": not recipe.build.no_build_isolation,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _open_wheelhouse(wheelhouse: Path, interp) -> dict[str, Any]:
    """wh.json of ``wheelhouse``; a new or empty folder gets a minimal one (target = ``interp``)."""
    from .lock import WH_JSON, read_wh_json

    if (wheelhouse / WH_JSON).exists():
        return read_wh_json(wheelhouse)
    if wheelhouse.exists() and any(p for p in wheelhouse.iterdir() if not p.name.startswith(".") and p.name != "logs"):
        raise WheelhouseMismatch(
            f"{wheelhouse} is not empty and has no wh.json",
            hint="pass a wheelhouse made by `wh stage`, or a new/empty folder to -o",
        )
    from .capture_target import SCHEMA

    target = {
        "schema": SCHEMA,
        "source": "captured",
        "implementation": interp.implementation,
        "python_version": interp.python_version,
        "abi": interp.abi,
        "machine": interp.markers.get("platform_machine", ""),
        "platforms": [],
        "libc": {"name": interp.libc[0], "version": interp.libc[1]} if interp.libc else None,
        "marker_environment": dict(interp.markers),
        "compatible_tags": list(interp.tags),
        "gpus": [],
    }
    return {"target": target, "created_by": f"wh build {__import__('wheelhouse').__version__}"}


def _check_target(data: Mapping[str, Any], wheel_name: str, wheelhouse: Path) -> None:
    tgt = data.get("target")
    if not tgt:
        return
    from .target import target_from_json

    profile = target_from_json(tgt)
    if profile.wheel_rank(wheel_name) is None:
        raise WheelhouseMismatch(
            f"{wheel_name} cannot be installed on {wheelhouse}'s target ({profile.describe()})",
            hint="build with the target's interpreter: `wh build RECIPE --python /path/to/target/python3`",
        )


def build_engine(
    recipe: EngineRecipe,
    wheelhouse: Path,
    *,
    python: str | None = None,
    cache_dir: Path,
    reporter: Reporter | None = None,
    sink=None,
    base_env: Mapping[str, str] | None = None,
) -> EngineBuild:
    """Fetch, check out, backport, build (or reuse), and record the engine wheel in ``wheelhouse``."""
    from . import __version__
    from .cudaenv import engine_environment
    from .interpreter import inspect_interpreter
    from .links import apply_links, plan_links, record_path
    from .lock import LockedFile, Lock, PYLOCK, read_pylock, write_pylock, write_wh_json
    from .pep517 import build_wheel
    from .atomic import write_atomic
    from packaging.utils import canonicalize_name, parse_wheel_filename

    reporter = reporter or NullReporter()
    wheelhouse = Path(wheelhouse).resolve()
    cache_dir = Path(cache_dir)
    interp = inspect_interpreter(python)
    data = _open_wheelhouse(wheelhouse, interp)

    mirror, refs = ensure_mirror(recipe, cache_dir, reporter)
    backports = read_backports(recipe, mirror, refs)

    # The toolchain and links come first: they are part of what the build sees.
    sites = [Path(s) for s in interp.site_dirs]
    made_links: list[str] = []
    if recipe.build.link_sonames:
        by_site: dict[Path, list] = {}
        for change in plan_links(sites):
            site = next((s for s in sites if Path(change.path).is_relative_to(s)), sites[0])
            by_site.setdefault(site, []).append(change)
        for site, changes in by_site.items():
            made_links += [c.path for c in apply_links(changes, record_path(site))]
        if made_links:
            reporter.note(f"created {len(made_links)} unversioned soname links (undo: `wh links --undo`)")
    env = dict(base_env if base_env is not None else os.environ)
    env.update(engine_environment(sites, env))
    env.update(recipe.build.env)
    keyed_env = {**recipe.build.env, "CUDA_HOME": env.get("CUDA_HOME", "")}
    key = build_key(recipe, backports, keyed_env, {"executable": interp.executable, "version": interp.version, "abi": interp.abi})

    cached_dir = cache_dir / "builds" / key[:24]
    cached = sorted(cached_dir.glob("*.whl")) if cached_dir.is_dir() else []
    log_rel = f"logs/build-{recipe.name}-{recipe.commit[:12]}.log"
    log_path = wheelhouse / log_rel
    tree_status: tuple[str, ...] = ()
    reused = bool(cached)
    if cached:
        built = cached[0]
        status_file = cached_dir / "tree-status.txt"
        tree_status = tuple(status_file.read_text().splitlines()) if status_file.exists() else ()
        reporter.note(f"reusing {built.name}: commit, backports, build env and interpreter are unchanged")
    else:
        work = cache_dir / "src" / f"{recipe.name}-{recipe.commit[:12]}"
        reporter.start(f"checkout {recipe.name} {recipe.commit[:12]}")
        tree = checkout_source(recipe, mirror, refs, backports, work)
        reporter.finish(f"checkout {recipe.name} {recipe.commit[:12]}")
        tree_status = tree.status
        src = tree.path / recipe.build.subdirectory
        if not src.is_dir():
            raise RecipeError(f"[engine.build] subdirectory {recipe.build.subdirectory!r} is not in the tree", hint="fix it in the recipe")
        partial = cached_dir.with_name(cached_dir.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        reporter.start(f"build {recipe.name}")
        try:
            result = build_wheel(
                src, partial, python=interp.executable, env=env,
                log_path=log_path, sink=sink, isolation=not recipe.build.no_build_isolation, label=recipe.name,
                marker_env=interp.markers,
            )
        finally:
            reporter.finish(f"build {recipe.name}")
        cached_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(cached_dir, ignore_errors=True)
        os.replace(result.wheel.parent, cached_dir)
        built = cached_dir / result.wheel.name
        (cached_dir / "tree-status.txt").write_text("\n".join(tree_status))

    _check_target(data, built.name, wheelhouse)
    name, version, _, _ = parse_wheel_filename(built.name)
    sha = _sha256_file(built)
    dest = wheelhouse / "wheels" / built.name
    created: list[Path] = []
    try:
        if not dest.exists() or _sha256_file(dest) != sha:
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.tmp")
            shutil.copyfile(built, tmp)
            os.replace(tmp, dest)
            created.append(dest)
        artifacts = []
        for b in backports:
            if b.export:
                target = wheelhouse / b.export
                if not target.exists():
                    created.append(target)
                write_atomic(target, b.content)
                artifacts.append({"path": b.export, "sha256": b.sha256, "before_sha256": b.before_sha256,
                                  "source": f"{b.ref}:{b.path}", "file": b.path})
        record = {
            "name": recipe.name,
            "recipe": recipe.path.name if recipe.path else recipe.name,
            "repo": recipe.repo,
            "commit": recipe.commit,
            "fetched_refs": dict(refs),
            "backports": [b.to_json() for b in backports],
            "tree_status": list(tree_status),
            "build": {
                "subdirectory": recipe.build.subdirectory,
                "no_build_isolation": recipe.build.no_build_isolation,
                "env": dict(recipe.build.env),
                "CUDA_HOME": env.get("CUDA_HOME"),
                "PATH_head": env.get("PATH", "").split(os.pathsep)[0],
                "link_sonames": recipe.build.link_sonames,
                "python": interp.executable,
                "python_version": interp.version,
            },
            "wheel": f"wheels/{built.name}",
            "sha256": sha,
            "key": key,
            "tool": {"name": "wh", "version": __version__},
            "log": log_rel if (wheelhouse / log_rel).exists() else None,
            "artifacts": artifacts,
        }
        norm = canonicalize_name(name)
        lock = read_pylock(wheelhouse) if (wheelhouse / PYLOCK).exists() else Lock(files=())
        old_lock = (wheelhouse / PYLOCK).read_bytes() if (wheelhouse / PYLOCK).exists() else None
        files = [f for f in lock.files if f.name != norm]
        files.append(LockedFile(
            name=norm, version=str(version), filename=built.name, path=f"wheels/{built.name}", sha256=sha,
            size=built.stat().st_size, tool={"source": "build", "recipe": record["recipe"], "commit": recipe.commit},
        ))
        write_pylock(wheelhouse, Lock(files=tuple(files), environments=lock.environments,
                                      requires_python=lock.requires_python, created_by=lock.created_by or "wh"))
        capture = wheelhouse / "capture_target.py"
        if not capture.exists():
            from .resources import capture_script

            write_atomic(capture, capture_script().read_bytes())
        write_wh_json(wheelhouse, {**data, "engine": record})
    except BaseException:
        if "old_lock" in locals():
            if old_lock is None:
                (wheelhouse / PYLOCK).unlink(missing_ok=True)
            else:
                write_atomic(wheelhouse / PYLOCK, old_lock)
        for p in created:
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        raise
    return EngineBuild(wheel=dest, sha256=sha, reused=reused, log_path=log_path if log_path.exists() else None,
                       record=record, links=tuple(made_links))
