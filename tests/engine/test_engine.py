"""`wh build`: recipes, the git mirror and checkout, backports, and the whole build into a wheelhouse.

The toy engine (tests/packages/toy_engine.py) is a real git repository whose setup.py
links a C extension with -lcudart against a venv's nvidia/cu13/lib, which holds only a
gcc-built libcudart.so.13 -- the NVIDIA wheel layout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "support" / "packages"))

import toy_engine  # noqa: E402

from wheelhouse.engine.source import BackportMismatch, checkout_source, ensure_mirror, read_backports  # noqa: E402
from wheelhouse.engine.recipe import RecipeError, load_recipe, parse_recipe  # noqa: E402
from wheelhouse.lock import read_pylock, read_wh_json  # noqa: E402
from wheelhouse.progress import RecordingReporter  # noqa: E402


@pytest.fixture(scope="session")
def toy_repo(tmp_path_factory):
    return toy_engine.make_repo(tmp_path_factory.mktemp("toy") / "repo")


def wh(*args, cwd=None, env=None):
    """Run the real CLI in a subprocess, as a user would."""
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})})


def write_recipe(tmp_path, repo, commit, **kw) -> Path:
    path = tmp_path / "recipe.toml"
    path.write_text(toy_engine.recipe_text(repo["repo"], commit, **kw))
    return path


# --- recipes -------------------------------------------------------------------------------
def test_recipe_needs_a_full_commit_sha():
    with pytest.raises(RecipeError, match="not a full 40-hex sha"):
        parse_recipe({"engine": {"name": "e", "repo": "/r", "commit": "c066b38"}})


def test_recipe_unknown_key_is_named():
    data = {"engine": {"name": "e", "repo": "/r", "commit": "a" * 40, "build": {"no-isolation": True}}}
    with pytest.raises(RecipeError, match="no-isolation"):
        parse_recipe(data)


def test_bad_recipe_is_exit_2_with_hint(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[engine]\nname = "e"\nrepo = "/r"\ncommit = "abc"\n')
    proc = wh("build", bad, "-o", tmp_path / "out", "--cache-dir", tmp_path / "cache")
    assert proc.returncode == 2
    assert "not a full 40-hex sha" in proc.stderr and "hint:" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_bundled_freetoken_recipe_is_pr70_with_pr243_backport():
    r = load_recipe("freetoken-pr70")
    assert r.commit == "c066b38e1c9981c8c8adb0efb328049fe87aa8c0"
    assert {"pull/70/head", "pull/243/head"} <= set(r.refs_to_fetch())
    (b,) = r.backports
    assert b.path == "python/freetoken/kernel/triton/fp8_pertensor_linear.py" and b.ref == "pull/243/head"
    assert b.export == "patches/freetoken-fp8-rowwise/fp8_pertensor_linear.py"  # beside the staged spec
    assert r.build.no_build_isolation and r.build.link_sonames


# --- git: mirror, commit, backports ----------------------------------------------------------
def test_wrong_commit_refused_and_nothing_written(tmp_path, toy_repo):
    recipe = write_recipe(tmp_path, toy_repo, "0123456789abcdef0123456789abcdef01234567", fetch=["pull/7/head"])
    proc = wh("build", recipe, "-o", tmp_path / "out", "--cache-dir", tmp_path / "cache", "--python", sys.executable)
    assert proc.returncode == 1, proc.stderr
    assert "commit 0123456789abcdef0123456789abcdef01234567 is not in" in proc.stderr
    assert "hint:" in proc.stderr
    assert not (tmp_path / "out" / "wh.json").exists()


def test_unknown_ref_refused(tmp_path, toy_repo):
    recipe = write_recipe(tmp_path, toy_repo, toy_repo["base"], fetch=["pull/999/head"])
    proc = wh("build", recipe, "-o", tmp_path / "out", "--cache-dir", tmp_path / "cache", "--python", sys.executable)
    assert proc.returncode == 1
    assert "pull/999/head" in proc.stderr


def test_backport_applied_and_tree_state_recorded(tmp_path, toy_repo):
    recipe = parse_recipe(json.loads(json.dumps({"engine": {
        "name": "toy", "repo": toy_repo["repo"], "commit": toy_repo["base"], "fetch": ["pull/7/head"],
        "backport": [{"path": "toyengine/kernel.py", "ref": "pull/7/head"}]}})))
    reporter = RecordingReporter()
    mirror, refs = ensure_mirror(recipe, tmp_path / "cache", reporter)
    assert refs == {"pull/7/head": toy_repo["pr"]}
    backports = read_backports(recipe, mirror, refs)
    tree = checkout_source(recipe, mirror, refs, backports, tmp_path / "tree")
    assert tree.commit == toy_repo["base"]
    pr_content = subprocess.run(["git", "show", f"{toy_repo['pr']}:toyengine/kernel.py"], cwd=toy_repo["repo"],
                                capture_output=True, check=True).stdout
    assert (tree.path / "toyengine/kernel.py").read_bytes() == pr_content == toy_engine.KERNEL_V2.encode()
    assert tree.status == (" M toyengine/kernel.py",)
    (b,) = tree.backports
    assert b.ref_commit == toy_repo["pr"]
    import hashlib

    assert b.sha256 == hashlib.sha256(pr_content).hexdigest()
    assert b.before_sha256 == hashlib.sha256(toy_engine.KERNEL_V1.encode()).hexdigest()


def test_backport_hash_mismatch_refused_with_both_hashes(tmp_path, toy_repo):
    import hashlib

    actual = hashlib.sha256(toy_engine.KERNEL_V2.encode()).hexdigest()
    recipe = write_recipe(tmp_path, toy_repo, toy_repo["base"], fetch=["pull/7/head"],
                          backports=[("toyengine/kernel.py", "pull/7/head", "ab" * 32, None)])
    proc = wh("build", recipe, "-o", tmp_path / "out", "--cache-dir", tmp_path / "cache", "--python", sys.executable)
    assert proc.returncode == 1
    assert "ab" * 32 in proc.stderr and actual in proc.stderr
    assert not (tmp_path / "out" / "wh.json").exists()
    with pytest.raises(BackportMismatch):
        r = load_recipe(recipe)
        mirror, refs = ensure_mirror(r, tmp_path / "cache")
        read_backports(r, mirror, refs)


# --- the whole build ---------------------------------------------------------------------------
def test_build_needs_soname_links_then_installs_imports_and_is_reused(tmp_path, toy_repo):
    py = toy_engine.make_build_venv(tmp_path / "venv")
    out, cache = tmp_path / "wheelhouse", tmp_path / "cache"
    backport = [("toyengine/kernel.py", "pull/7/head", None, "patches/toy-fix/kernel.py")]

    # 1. Without the unversioned soname the linker fails, and wh shows the linker's own line.
    recipe = write_recipe(tmp_path, toy_repo, toy_repo["base"], fetch=["pull/7/head"], backports=backport, link_sonames=False)
    proc = wh("build", recipe, "-o", out, "--python", py, "--cache-dir", cache)
    assert proc.returncode == 1
    assert "cannot find -lcudart" in proc.stderr
    log = out / "logs" / f"build-toyengine-{toy_repo['base'][:12]}.log"
    assert f"full log: {log}" in proc.stderr and "cannot find -lcudart" in log.read_text()
    assert not (out / "wh.json").exists() and not (out / "wheels").exists()

    # 2. With link-sonames the same build succeeds.
    recipe = write_recipe(tmp_path, toy_repo, toy_repo["base"], fetch=["pull/7/head"], backports=backport)
    proc = wh("build", recipe, "-o", out, "--python", py, "--cache-dir", cache, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["reused"] is False
    lib = Path(result["links"][0])
    assert lib.name == "libcudart.so" and os.readlink(lib) == "libcudart.so.13"
    assert "gcc" in proc.stderr  # the compiler's output streamed to the terminal
    wheel = Path(result["wheel"])
    assert wheel.parent == out / "wheels" and wheel.name.startswith("toyengine-0.1.0-cp3")

    # The wheelhouse records it: pylock entry with the hash, wh.json provenance, exported backport.
    (locked,) = read_pylock(out).files
    assert locked.name == "toyengine" and locked.sha256 == result["sha256"] and locked.path == f"wheels/{wheel.name}"
    assert dict(locked.tool) == {"source": "build", "recipe": "recipe.toml", "commit": toy_repo["base"]}
    data = read_wh_json(out)
    eng = data["engine"]
    assert eng["commit"] == toy_repo["base"] and eng["fetched_refs"] == {"pull/7/head": toy_repo["pr"]}
    assert eng["backports"][0]["ref_commit"] == toy_repo["pr"] and eng["tree_status"] == [" M toyengine/kernel.py"]
    assert eng["tool"]["name"] == "wh" and eng["log"] == f"logs/{log.name}"
    assert data["target"]["abi"].startswith("cp3")  # a minimal wheelhouse: target = the build interpreter
    assert (out / "patches" / "toy-fix" / "kernel.py").read_text() == toy_engine.KERNEL_V2
    assert eng["artifacts"][0]["sha256"] == eng["backports"][0]["sha256"]

    # 3. The wheel installs with no index into a fresh venv, imports, and calls into libcudart.
    target = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install",
                          "--no-index", "--no-deps", "--disable-pip-version-check", str(wheel)], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr
    run = subprocess.run([str(target / "bin" / "python"), "-c",
                          "import toyengine._cuda as c, toyengine.kernel as k; print(c.runtime_version(), k.rowwise_ok())"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["13000", "False"]  # the backported kernel.py is what got built

    # 4. Nothing changed: the wheel is reused, byte for byte, without building.
    mtime = wheel.stat().st_mtime_ns
    proc = wh("build", recipe, "-o", out, "--python", py, "--cache-dir", cache, "--json")
    assert proc.returncode == 0, proc.stderr
    again = json.loads(proc.stdout)
    assert again["reused"] is True and again["sha256"] == result["sha256"]
    assert "gcc" not in proc.stderr and wheel.stat().st_mtime_ns == mtime

    # 5. Offline re-run (repository unreachable): the cached mirror serves, and says so.
    moved = Path(toy_repo["repo"] + ".away")
    os.rename(toy_repo["repo"], moved)
    try:
        proc = wh("build", recipe, "-o", out, "--python", py, "--cache-dir", cache, "--json")
    finally:
        os.rename(moved, toy_repo["repo"])
    assert proc.returncode == 0, proc.stderr
    assert "using the cached mirror" in proc.stderr and json.loads(proc.stdout)["reused"] is True


def test_build_into_non_wheelhouse_folder_refused(tmp_path, toy_repo):
    out = tmp_path / "notawheelhouse"
    out.mkdir()
    (out / "something.txt").write_text("mine")
    recipe = write_recipe(tmp_path, toy_repo, toy_repo["base"])
    proc = wh("build", recipe, "-o", out, "--python", sys.executable, "--cache-dir", tmp_path / "cache")
    assert proc.returncode == 2
    assert "has no wh.json" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["something.txt"]


def _spec_without_hashes(out: Path) -> Path:
    spec = out / "patches" / "toy-fix" / "toy-fix.toml"  # where `wh stage` puts a spec
    spec.write_text('[patch]\nname = "toy-fix"\ndistribution = "toyengine"\nfile = "toyengine/kernel.py"\n'
                    'payload = "kernel.py"\n\n[patch.verify]\ncall = "toyengine.kernel:rowwise_ok"\nexpect = false\n')
    return spec


def test_built_wheelhouse_drives_wh_patch(tmp_path, toy_repo, wheel_factory):
    """The backport `wh build` exported is a patch payload whose hashes come from wh.json."""
    py = toy_engine.make_build_venv(tmp_path / "venv")
    out = tmp_path / "wheelhouse"
    recipe = write_recipe(tmp_path, toy_repo, toy_repo["base"], fetch=["pull/7/head"],
                          backports=[("toyengine/kernel.py", "pull/7/head", None, "patches/toy-fix/kernel.py")])
    assert wh("build", recipe, "-o", out, "--python", py, "--cache-dir", tmp_path / "cache").returncode == 0
    spec = _spec_without_hashes(out)

    def venv_with(wheel):
        target = tmp_path / f"t-{wheel.stem}"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
        subprocess.run([sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install", "-q",
                        "--no-index", "--no-deps", "--disable-pip-version-check", str(wheel)], check=True)
        return target / "bin" / "python"

    # The built wheel already carries the backport: apply is a no-op that says so.
    built = venv_with(next((out / "wheels").glob("*.whl")))
    proc = wh("patch", "apply", spec, "--python", built, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == "already-patched"

    # A toyengine built elsewhere from the PR's base (the "released" wheel) gets patched.
    released = wheel_factory("toyengine", "0.1.0", modules={"toyengine/__init__.py": "", "toyengine/kernel.py": toy_engine.KERNEL_V1})
    other = venv_with(released)
    proc = wh("patch", "apply", spec, "--python", other, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["state"] == "applied" and data["verification"]["value"] is False
    installed = next((other.parent.parent / "lib").glob("python3*/site-packages")) / "toyengine" / "kernel.py"
    assert installed.read_text() == toy_engine.KERNEL_V2


# --- the engine in a staged wheelhouse: one writer, kept on re-stage, its requirements staged ----------
from index_fixtures import pyindex  # noqa: E402,F401  (fixture)
from wheelmaker import make_wheel  # noqa: E402


def _stage(out, index, cache, *reqs, manifest=None):
    args = ["stage", *([manifest] if manifest else []), *reqs, "-o", out, "--index-url", index.url,
            "--cache-dir", cache, "--no-bootstrap"]
    return wh(*args, env={"COLUMNS": "300"})


def _tree(folder: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def _pip_from_simple(tmp_path, out, *reqs):
    """pip, given only file://WH/simple as its index, installs ``reqs`` into a fresh venv."""
    target = tmp_path / f"pipvenv-{len(list(tmp_path.glob('pipvenv-*')))}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install",
                           "--index-url", (out / "simple").as_uri(), "--disable-pip-version-check", *reqs],
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def toy_with_requirement(tmp_path_factory, toy_repo):
    """The toy engine at a commit whose wheel requires toydep>=1.0 (and, on Windows only, winonly)."""
    repo = tmp_path_factory.mktemp("toyreq") / "repo"
    subprocess.run(["git", "clone", "--quiet", toy_repo["repo"], str(repo)], check=True)
    setup = repo / "setup.py"
    setup.write_text(setup.read_text().replace(
        'packages=["toyengine"],',
        'packages=["toyengine"],\n    install_requires=["toydep>=1.0", \'winonly; sys_platform == "win32"\'],'))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "--quiet", "-am", "require toydep"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    return {"repo": str(repo), "commit": sha}


@pytest.fixture(scope="module")
def build_py(tmp_path_factory):
    return toy_engine.make_build_venv(tmp_path_factory.mktemp("bvenv") / "venv")


def test_stage_build_restage_keeps_the_engine_and_pip_sees_it_in_simple(tmp_path, toy_repo, pyindex, build_py):
    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0")
    index = pyindex(pub)
    out, cache = tmp_path / "wh", tmp_path / "cache"
    assert _stage(out, index, cache, "app==1.0").returncode == 0
    (out / "NOTES.md").write_text("mine\n")
    recipe = write_recipe(tmp_path, toy_repo, toy_repo["base"])
    proc = wh("build", recipe, "-o", out, "--python", build_py, "--cache-dir", cache, "--json")
    assert proc.returncode == 0, proc.stderr
    wheel = Path(json.loads(proc.stdout)["wheel"])
    # The one writer: pylock, simple/ and wh.json agree; pip finds the engine through simple/.
    assert {f.name for f in read_pylock(out).files} == {"app", "toyengine"}
    assert wheel.name in (out / "simple" / "toyengine" / "index.html").read_text()
    pip = _pip_from_simple(tmp_path, out, "toyengine", "app")
    assert pip.returncode == 0, pip.stderr

    proc = _stage(out, index, cache, "app==1.0")
    assert proc.returncode == 0, proc.stderr
    assert "no longer pinned" not in proc.stderr and f"kept the engine {wheel.name}" in proc.stderr
    data = read_wh_json(out)
    assert data["engine"]["commit"] == toy_repo["base"] and data["engine"]["wheel"] == f"wheels/{wheel.name}"
    (locked,) = [f for f in read_pylock(out).files if f.name == "toyengine"]
    assert dict(locked.tool)["source"] == "build" and locked.sha256 == data["engine"]["sha256"]
    assert wheel.is_file() and (out / data["engine"]["log"]).is_file() and (out / "NOTES.md").read_text() == "mine\n"
    assert wheel.name in (out / "simple" / "toyengine" / "index.html").read_text()


def test_restage_with_another_engine_commit_in_the_manifest_leaves_the_old_one_out(tmp_path, toy_repo, pyindex,
                                                                                    build_py):
    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0")
    index = pyindex(pub)
    out, cache = tmp_path / "wh", tmp_path / "cache"
    recipe = write_recipe(tmp_path, toy_repo, toy_repo["base"])
    stack = tmp_path / "stack.toml"
    stack.write_text(f'[stack]\nname = "s"\nrequirements = ["app==1.0"]\n[engine]\nrecipe = "{recipe}"\n')
    assert _stage(out, index, cache, manifest=stack).returncode == 0
    assert wh("build", recipe, "-o", out, "--python", build_py, "--cache-dir", cache).returncode == 0
    assert _stage(out, index, cache, manifest=stack).returncode == 0  # same commit: kept
    assert "toyengine" in {f.name for f in read_pylock(out).files}

    (tmp_path / "recipe.toml").write_text(toy_engine.recipe_text(toy_repo["repo"], toy_repo["pr"], fetch=["pull/7/head"]))
    proc = _stage(out, index, cache, manifest=stack)
    assert proc.returncode == 0, proc.stderr
    assert "leaving out the engine toyengine-0.1.0" in proc.stderr and toy_repo["pr"][:12] in proc.stderr
    assert "toyengine" not in {f.name for f in read_pylock(out).files}
    assert not list((out / "wheels").glob("toyengine-*")) and "commit" not in (read_wh_json(out)["engine"] or {})


def test_build_stages_the_engines_requirements_from_the_recorded_index(tmp_path, toy_with_requirement, pyindex,
                                                                       build_py):
    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0")
    make_wheel(pub, "toydep", "1.2", modules={"toydep/__init__.py": "V = 12\n"})
    index = pyindex(pub)
    out, cache = tmp_path / "wh", tmp_path / "cache"
    assert _stage(out, index, cache, "app==1.0").returncode == 0
    recipe = write_recipe(tmp_path, toy_with_requirement, toy_with_requirement["commit"])
    proc = wh("build", recipe, "-o", out, "--python", build_py, "--cache-dir", cache, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["added"] == ["toydep==1.2"] and result["missing"] == []
    lock = {f.name: f for f in read_pylock(out).files}
    assert set(lock) == {"app", "toyengine", "toydep"} and (out / lock["toydep"].path).is_file()
    # Offline, pip installs the engine WITH its requirement from the wheelhouse alone.
    pip = _pip_from_simple(tmp_path, out, "toyengine")
    assert pip.returncode == 0, pip.stderr
    assert "toydep" in pip.stdout
    # Re-staging resolves the kept engine's requirements with the stack: toydep stays.
    proc = _stage(out, index, cache, "app==1.0")
    assert proc.returncode == 0, proc.stderr
    assert {f.name for f in read_pylock(out).files} == {"app", "toyengine", "toydep"}


def test_build_lists_missing_requirements_and_changes_nothing_unless_allowed(tmp_path, toy_with_requirement,
                                                                            pyindex, build_py):
    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0")  # no toydep anywhere
    index = pyindex(pub)
    out, cache = tmp_path / "wh", tmp_path / "cache"
    assert _stage(out, index, cache, "app==1.0").returncode == 0
    before = _tree(out)
    recipe = write_recipe(tmp_path, toy_with_requirement, toy_with_requirement["commit"])
    proc = wh("build", recipe, "-o", out, "--python", build_py, "--cache-dir", cache, env={"COLUMNS": "300"})
    assert proc.returncode == 1, proc.stderr
    assert "needs 1 requirement(s) the wheelhouse does not have: toydep>=1.0" in proc.stderr
    assert "winonly" not in proc.stderr.split("error:")[1].split("hint:")[0]  # a win32-only requirement is not missing here
    assert "--allow-incomplete" in proc.stderr
    # Exactly what the build added was removed (wheel, lock, simple/, wh.json); its log stays, as after
    # a compiler error, for the user to read.
    assert {k: v for k, v in _tree(out).items() if not k.startswith("logs")} == before

    # A new folder has no recorded index: offline, the same list.
    fresh = tmp_path / "fresh"
    proc = wh("build", recipe, "-o", fresh, "--python", build_py, "--cache-dir", cache, env={"COLUMNS": "300"})
    assert proc.returncode == 1 and "toydep>=1.0" in proc.stderr
    assert not (fresh / "wh.json").exists() and not list(fresh.glob("wheels/*"))
    # ... and the same command told to accept it builds into that folder (only wh's log was left there).
    proc = wh("build", recipe, "-o", fresh, "--python", build_py, "--cache-dir", cache, "--allow-incomplete")
    assert proc.returncode == 0, proc.stderr
    assert read_wh_json(fresh)["engine"]["incomplete"] == ["toydep>=1.0"]

    proc = wh("build", recipe, "-o", out, "--python", build_py, "--cache-dir", cache, "--allow-incomplete", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["missing"] == ["toydep>=1.0"]
    assert read_wh_json(out)["engine"]["incomplete"] == ["toydep>=1.0"]
    proc = _stage(out, index, cache, "app==1.0")  # the incomplete engine is kept, not re-resolved
    assert proc.returncode == 0, proc.stderr
    assert {f.name for f in read_pylock(out).files} == {"app", "toyengine"}


def test_build_killed_while_recording_is_undone_by_the_next_run(tmp_path, toy_with_requirement, pyindex, build_py):
    """kill -9 after pylock.toml and simple/ name the engine but before wh.json does: the next wh run
    (here a re-stage) puts the wheelhouse back exactly as it was before the build."""
    from faults import run_with_fault

    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0")
    make_wheel(pub, "toydep", "1.2")
    index = pyindex(pub)
    out, cache = tmp_path / "wh", tmp_path / "cache"
    assert _stage(out, index, cache, "app==1.0").returncode == 0
    before = _tree(out)
    recipe = write_recipe(tmp_path, toy_with_requirement, toy_with_requirement["commit"])
    proc = run_with_fault(["build", recipe, "-o", out, "--python", build_py, "--cache-dir", cache],
                          "lock.index.simple-written")
    assert proc.returncode == -9, proc.stderr
    # Half-recorded, the hazard: the lock names the engine, wh.json does not.
    assert "toyengine" in (out / "pylock.toml").read_text() and read_wh_json(out)["engine"] is None

    proc = _stage(out, index, cache, "no-such-project")  # recovers first, then fails and writes nothing
    assert proc.returncode == 1 and "no-such-project" in proc.stderr
    assert "undid an interrupted change" in proc.stderr
    assert {k: v for k, v in _tree(out).items() if not k.startswith("logs")} == before


def test_build_after_bytecode_keeps_the_packs_and_a_rerun_compiles_only_the_engine(tmp_path, toy_repo, pyindex,
                                                                                    build_py):
    """`wh bytecode` then `wh build` into the same wheelhouse: the stack's packs stay recorded and checked
    (`wh verify` passes), the engine has none (the box compiles it), and `wh bytecode` again takes the stack's
    packs as they are and compiles the engine's modules alone."""
    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0", modules={"app/__init__.py": "A = 1\n", "app/more.py": "B = 2\n"})
    index = pyindex(pub)
    out, cache = tmp_path / "wh", tmp_path / "cache"
    assert _stage(out, index, cache, "app==1.0").returncode == 0
    first = wh("bytecode", out, "--python", sys.executable, "--json")
    assert first.returncode == 0, first.stderr
    packs = read_wh_json(out)["bytecode"]["packs"]
    assert set(packs) == {"app-1.0-py3-none-any.whl"}
    recipe = write_recipe(tmp_path, toy_repo, toy_repo["base"])
    proc = wh("build", recipe, "-o", out, "--python", build_py, "--cache-dir", cache, "--json")
    assert proc.returncode == 0, proc.stderr
    engine = Path(json.loads(proc.stdout)["wheel"]).name
    assert read_wh_json(out)["bytecode"]["packs"] == packs  # kept, unchanged, and still checked:
    verify = wh("verify", out)
    assert verify.returncode == 0, verify.stderr + verify.stdout
    again = wh("bytecode", out, "--python", sys.executable, "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    after = read_wh_json(out)["bytecode"]["packs"]
    assert after["app-1.0-py3-none-any.whl"] == packs["app-1.0-py3-none-any.whl"]
    assert engine in after and report["reused"] == 1, report
