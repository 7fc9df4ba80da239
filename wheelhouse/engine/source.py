"""The engine's source: a bare git mirror, a work tree at exactly the recipe's commit, and backports.

The git work (``ensure_mirror``, ``read_backports``, ``checkout_source``) runs the
git CLI in a subprocess and never guesses: any HEAD other than the recipe's
commit is an error, and a backport whose hash differs from the recipe's is
refused with both hashes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from wheelhouse.errors import WhError
from wheelhouse.progress import NullReporter, Reporter
from .recipe import EngineRecipe, RecipeError

__all__ = [
    "AppliedBackport",
    "SourceTree",
    "GitError",
    "CommitNotFound",
    "WrongCommit",
    "BackportMismatch",
    "mirror_path",
    "ensure_mirror",
    "pin_commit",
    "cached_refs",
    "tree_files",
    "read_backports",
    "checkout_source",
    "sha256_bytes",
]

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
    created = not (mirror / "HEAD").exists()
    # A local clone that is gone is a typo unless a mirror of it exists (then it is an offline re-run).
    if created and "://" not in url and not url.startswith("git@") and not Path(url).exists():
        raise RecipeError(f"{recipe.path or 'recipe'}: repo {url} does not exist",
                          hint="fix repo in the recipe: a URL, or a local clone (relative to the recipe's folder)")
    if created:
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
    # A recipe that names only a tag builds the commit the tag points at (pin_commit records it).
    want = recipe.commit or resolved.get(f"refs/tags/{recipe.tag}", "")
    if want and _resolve(mirror, want) is None and not fetch_error:
        # Some servers let a client ask for one commit directly (GitHub does).
        _git(["fetch", "--quiet", "origin", want], git_dir=mirror, check=False)
    if fetch_error:
        if missing or _resolve(mirror, want) is None:
            if created:  # an empty mirror is not a cache: the next run would start from it
                shutil.rmtree(mirror, ignore_errors=True)
            raise GitError(
                f"fetching {url} failed and the cached mirror lacks "
                + (", ".join(missing) if missing else f"commit {want}"),
                hint="run `wh build` where the repository is reachable once; later runs reuse the mirror",
                detail=fetch_error,
            )
        reporter.note(f"fetch from {url} failed; using the cached mirror at {mirror}")
    elif missing:
        raise GitError(f"{url} has no ref {', '.join(missing)}", hint="check the refs in the recipe's fetch and backport lists")
    if _resolve(mirror, want) is None:
        raise CommitNotFound(
            f"commit {want} is not in {url} (fetched: {', '.join(refs) or 'branches and tags only'})",
            hint="check the sha, or add the pull request ref that holds it to fetch = [...]",
        )
    return mirror, resolved


def pin_commit(recipe: EngineRecipe, refs: Mapping[str, str]) -> EngineRecipe:
    """The recipe at an exact commit: its own, or its tag's; a tag that moved off the pinned commit is refused."""
    import dataclasses

    if not recipe.tag:
        return recipe
    tagged = refs.get(f"refs/tags/{recipe.tag}")
    if tagged is None:  # pragma: no cover - ensure_mirror refuses a missing ref first
        raise GitError(f"tag {recipe.tag} is not in the mirror", hint="check the tag in the recipe")
    if recipe.commit and recipe.commit != tagged:
        raise WrongCommit(f"tag {recipe.tag} points at {tagged}, the recipe pins {recipe.commit}",
                          hint="the tag moved: check which commit you mean, then fix commit or tag in the recipe")
    return dataclasses.replace(recipe, commit=tagged)


def cached_refs(recipe: EngineRecipe, cache_dir: Path) -> tuple[Path | None, dict[str, str]]:
    """Read-only: the cached mirror (None when there is none) and what each recipe ref points at in it."""
    mirror = mirror_path(cache_dir, recipe)
    if not (mirror / "HEAD").exists():
        return None, {}
    out = {}
    for r in recipe.refs_to_fetch():
        sha = _resolve(mirror, _local_ref(r))
        if sha:
            out[r] = sha
    return mirror, out


def tree_files(mirror: Path, commit: str, suffixes: tuple[str, ...], names: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Read-only: the files at ``commit`` whose name ends with one of ``suffixes`` or is one of ``names``."""
    listing = _git(["ls-tree", "-r", "--name-only", commit], git_dir=mirror, check=False)
    if listing.returncode != 0:
        return {}
    out = {}
    for path in listing.stdout.decode(errors="replace").splitlines():
        base = path.rsplit("/", 1)[-1]
        if base in names or path.endswith(suffixes):
            blob = _blob(mirror, commit, path)
            if blob is not None:
                out[path] = blob
    return out


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
