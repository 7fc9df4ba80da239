"""stage: resolve for the target, fetch verified, write the wheelhouse; and `wh stage` on the command line.

Everything runs against a real index on 127.0.0.1 (tests/index_fixtures.py) with
real wheels (tests/wheelmaker.py); installs use real pip in real venvs.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from click.testing import CliRunner

from index_fixtures import pyindex  # noqa: F401  (fixture)
from uv_tool import run_uv, uv_binary
from wheelmaker import make_wheel, sha256_file
from wheelhouse.cli import cli
from wheelhouse.errors import UsageError
from wheelhouse.fetch import HashMismatch, cached_path
from wheelhouse.lock import read_pylock, read_wh_json
from wheelhouse.manifest import load_manifest
from wheelhouse.manifest.requirements_file import HashNotAllowed
from wheelhouse.stage import BadOutput, StageFlags, merge_inputs, stage
from wheelhouse.target import host_target, target_from_flags

PAD = 400_000
HOST = f"cp{sys.version_info.major}{sys.version_info.minor}"


def _lib(tag_py: str) -> str:
    return f"{tag_py}-{tag_py}-manylinux_2_17_x86_64"


@pytest.fixture
def wheels(tmp_path):
    """app -> lib (compiled, one wheel per python) + old (only below 3.12)."""
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["lib>=1", 'old; python_version < "3.12"'], modules={"app/__init__.py": "import lib\n"})
    make_wheel(d, "lib", "1.0", modules={"lib/__init__.py": "V = 1\n"})
    for py in sorted({"cp311", "cp312", HOST}):
        make_wheel(d, "lib", "2.0", tags=_lib(py), modules={"lib/__init__.py": "V = 2\n"}, pad_bytes=PAD)
    make_wheel(d, "old", "1.0", modules={"old/__init__.py": ""})
    return d


@pytest.fixture
def t312():
    return target_from_flags("3.12", ["manylinux_2_35_x86_64"])


def _run_stage(manifest, reqs, target, out, *, index_urls=None, find_links=(), constraints=(), **run):
    """stage() as `wh stage` calls it: the manifest and these "flags" merged by merge_inputs."""
    flags = StageFlags(requirements=tuple(reqs), constraints=tuple(constraints),
                       index_url=index_urls[0] if index_urls else None,
                       extra_index_urls=tuple(index_urls[1:]) if index_urls else (), find_links=tuple(find_links),
                       target=target)
    return stage(merge_inputs(manifest, flags, out, **run))


def _stage(idx, reqs, target, out, cache, **kw):
    kw.setdefault("bootstrap", False)
    return _run_stage(None, reqs, target, out, index_urls=[idx.url], cache_dir=cache, **kw)


def _tamper(idx, filename: str) -> None:
    """Flip one byte in the middle of the body: the zip still opens, the sha256 no longer matches."""
    data = bytearray(idx.files[filename])
    data[len(data) // 2] ^= 0xFF
    idx.tamper(filename, bytes(data))


def _wheel_names(out: Path) -> set[str]:
    return {p.name for p in (out / "wheels").iterdir()}


def test_stage_for_cp312_target_from_another_host(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels)
    out = tmp_path / "wh"
    res = _stage(idx, ["app"], t312, out, tmp_path / "cache")
    assert _wheel_names(out) == {"app-1.0-py3-none-any.whl", f"lib-2.0-{_lib('cp312')}.whl"}  # no `old`: 3.12
    lock = read_pylock(out)
    assert {f.name for f in lock.files} == {"app", "lib"}
    for f in lock.files:
        assert sha256_file(out / f.path) == f.sha256 and (out / f.path).stat().st_size == f.size
    assert lock.environments == ('python_version == "3.12" and implementation_name == "cpython" '
                                 'and sys_platform == "linux" and platform_machine == "x86_64"',)
    assert lock.requires_python == "==3.12.*"
    assert lock.by_name()["lib"].tool["parents"] == ["app==1.0"]
    page = (out / "simple" / "lib" / "index.html").read_text()
    assert f'href="../../wheels/lib-2.0-{_lib("cp312")}.whl#sha256={lock.by_name()["lib"].sha256}"' in page
    meta = read_wh_json(out)
    assert meta["target"]["python_version"] == "3.12" and meta["inputs"]["requirements"] == ["app"]
    assert meta["inputs"]["indexes"] == [idx.url] and meta["tool"]["name"] == "wh"
    assert (out / "capture_target.py").is_file()
    assert res.total_size == sum(f.size for f in lock.files)
    assert not [p for p in tmp_path.iterdir() if ".wh-new-" in p.name or ".wh-old-" in p.name]


def test_host_wheelhouse_installs_offline_with_pip(pyindex, wheels, tmp_path):
    idx = pyindex(wheels)
    out = tmp_path / "wh"
    _stage(idx, ["app"], host_target(), out, tmp_path / "cache")
    assert f"lib-2.0-{_lib(HOST)}.whl" in _wheel_names(out)
    # --no-index with the wheels folder, or the static simple/ index as the only index (file://, no network).
    for how in (["--no-index", "--find-links", str(out / "wheels")], ["--index-url", (out / "simple").as_uri()]):
        env_dir = tmp_path / f"venv-{how[0][2:]}"
        venv.create(env_dir, with_pip=False)
        py = env_dir / "bin" / "python"
        subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", *how, "app"],
                       check=True, capture_output=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        got = subprocess.run([str(py), "-c", "import app, lib; print(lib.V)"], capture_output=True, text=True, check=True)
        assert got.stdout.strip() == "2"


def test_tampered_wheel_is_refused_and_not_kept(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels)
    bad = f"lib-2.0-{_lib('cp312')}.whl"
    _tamper(idx, bad)
    out, cache = tmp_path / "wh", tmp_path / "cache"
    with pytest.raises(HashMismatch) as err:
        _stage(idx, ["app"], t312, out, cache)
    assert bad in err.value.message
    assert not out.exists()
    assert not cached_path(cache, idx.sha256(bad)).exists()
    assert not any((cache / "partial").iterdir())
    assert not [p for p in tmp_path.iterdir() if ".wh-" in p.name]


def test_failure_leaves_the_previous_wheelhouse_intact(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels)
    out, cache = tmp_path / "wh", tmp_path / "cache"
    _stage(idx, ["lib==1.0"], t312, out, cache)
    before = {p.name: p.read_bytes() for p in (out / "wheels").iterdir()}
    lock_before = (out / "pylock.toml").read_text()
    _tamper(idx, f"lib-2.0-{_lib('cp312')}.whl")
    with pytest.raises(HashMismatch):
        _stage(idx, ["app"], t312, out, cache)
    assert {p.name: p.read_bytes() for p in (out / "wheels").iterdir()} == before
    assert (out / "pylock.toml").read_text() == lock_before


def test_killed_download_resumes_from_where_it_stopped(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels, serve_metadata=True)
    big = f"lib-2.0-{_lib('cp312')}.whl"
    size = len(idx.files[big])
    idx.drop_after(big, 250_000)
    out = tmp_path / "wh"
    _stage(idx, ["app"], t312, out, tmp_path / "cache")
    assert sha256_file(out / "wheels" / big) == idx.sha256(big)
    assert idx.requests_for(big) >= 2
    # The second request asked only for the missing bytes (a Range request), not the whole file again.
    assert idx.bytes_served(big) - 250_000 < size
    assert idx.bytes_served(big) == size


def test_second_stage_with_the_same_cache_downloads_nothing(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels)
    cache = tmp_path / "cache"
    _stage(idx, ["app"], t312, tmp_path / "one", cache)
    served = {f: idx.bytes_served(f) for f in idx.files}
    res = _stage(idx, ["app"], t312, tmp_path / "two", cache)
    assert {f: idx.bytes_served(f) for f in idx.files} == served  # 0 more wheel (or metadata) bytes
    assert res.reused == 2 and _wheel_names(tmp_path / "two") == _wheel_names(tmp_path / "one")


def test_restage_is_incremental_and_removes_stale_wheels(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels, serve_metadata=True)  # so only wheel bodies count in bytes_served
    out = tmp_path / "wh"
    _stage(idx, ["app"], t312, out, tmp_path / "cache1")
    served = {f: idx.bytes_served(f) for f in idx.files}
    # A fresh cache: the wheels still pinned come from the previous wheelhouse, verified, not the network.
    res = _stage(idx, ["lib==2.0"], t312, out, tmp_path / "cache2")
    assert _wheel_names(out) == {f"lib-2.0-{_lib('cp312')}.whl"}
    assert res.removed == ("app-1.0-py3-none-any.whl",)
    assert idx.bytes_served(f"lib-2.0-{_lib('cp312')}.whl") == served[f"lib-2.0-{_lib('cp312')}.whl"]
    assert [f.name for f in read_pylock(out).files] == ["lib"]
    assert not (out / "simple" / "app").exists()


def test_dry_run_downloads_no_wheel_bodies_and_writes_nothing(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels, serve_metadata=True)
    out = tmp_path / "wh"
    res = _stage(idx, ["app"], t312, out, tmp_path / "cache", dry_run=True)
    assert [(f.name, f.version) for f in res.files] == [("app", "1.0"), ("lib", "2.0")]
    assert all(idx.bytes_served(f) == 0 for f in idx.files)
    assert not out.exists()


def test_cli_dry_run_json_shape(pyindex, wheels, tmp_path):
    idx = pyindex(wheels, serve_metadata=True)
    r = CliRunner().invoke(cli, [
        "stage", "app", "--dry-run", "--json", "--index-url", idx.url, "--cache-dir", str(tmp_path / "c"),
        "--python-version", "3.12", "--platform", "manylinux_2_35_x86_64", "--no-bootstrap",
    ], obj=None)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["dry_run"] is True and data["count"] == 2
    lib = next(p for p in data["packages"] if p["name"] == "lib")
    assert lib["version"] == "2.0" and lib["filename"] == f"lib-2.0-{_lib('cp312')}.whl"
    assert lib["size"] == len(idx.files[lib["filename"]]) and lib["sha256"] == idx.sha256(lib["filename"])
    assert data["total_size"] == sum(p["size"] for p in data["packages"])
    assert all(idx.bytes_served(f) == 0 for f in idx.files)


# --- release manifests ----------------------------------------------------------------------------

def _release(tmp_path, wheel: Path, sha: str | None = None) -> Path:
    manifest = tmp_path / "engine-linux_x86_64.json"
    manifest.write_text(json.dumps({
        "runtime": {"name": wheel.name, "url": wheel.as_uri(), "sha256": sha or sha256_file(wheel)},
        "version": "nightly",
    }))
    stack = tmp_path / "stack.toml"
    stack.write_text(f'[stack]\nrequirements = []\n\n[[manifest]]\nurl = "{manifest.as_uri()}"\nkeys = ["runtime"]\n')
    return stack


def test_release_manifest_artifacts_are_verified_and_their_deps_resolved(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels)
    rt = make_wheel(tmp_path / "release", "engine-rt", "0.3", requires=["lib>=2"])
    m = load_manifest(_release(tmp_path, rt))
    out = tmp_path / "wh"
    _run_stage(m, [], t312, out, index_urls=[idx.url], cache_dir=tmp_path / "cache", bootstrap=False)
    assert _wheel_names(out) == {rt.name, f"lib-2.0-{_lib('cp312')}.whl"}
    locked = read_pylock(out).by_name()["engine-rt"]
    assert locked.sha256 == sha256_file(rt) and locked.tool["release"] == "runtime"
    prov = read_wh_json(out)["inputs"]["release_manifests"][0]
    assert prov["artifacts"]["runtime"]["name"] == rt.name


def test_release_artifact_with_a_bad_sha_is_refused(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels)
    rt = make_wheel(tmp_path / "release", "engine-rt", "0.3", requires=["lib>=2"])
    m = load_manifest(_release(tmp_path, rt, sha="f" * 64))
    out, cache = tmp_path / "wh", tmp_path / "cache"
    with pytest.raises(HashMismatch):
        _run_stage(m, [], t312, out, index_urls=[idx.url], cache_dir=cache, bootstrap=False)
    assert not out.exists() and not cached_path(cache, "f" * 64).exists()
    assert not any((cache / "sha256").rglob("*")) or sha256_file(rt) not in {p.name for p in (cache / "sha256").rglob("*")}


# --- manifest extras travel in the wheelhouse ---------------------------------------------------

def test_drops_patches_and_doctor_expectations_are_recorded(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels)
    (tmp_path / "payload").mkdir()
    (tmp_path / "payload" / "fp8.py").write_text("patched = True\n")
    (tmp_path / "fix.toml").write_text('file = "pkg/fp8.py"\nreplacement = "payload/fp8.py"\n')
    stack = tmp_path / "stack.toml"
    stack.write_text(
        '[stack]\nrequirements = ["lib==1.0"]\n'
        '[[drop]]\ndistribution = "flashinfer-python"\nmodule = "flashinfer"\nforce = true\nreason = "JIT"\n'
        '[[patch]]\nspec = "fix.toml"\n'
        '[doctor]\ngpus = 4\nsm = "8.9"\n'
    )
    out = tmp_path / "wh"
    _run_stage(load_manifest(stack), [], t312, out, index_urls=[idx.url], cache_dir=tmp_path / "cache", bootstrap=False)
    meta = read_wh_json(out)
    assert meta["drops"] == [{"distribution": "flashinfer-python", "module": "flashinfer", "reason": "JIT", "force": True}]
    assert meta["doctor"]["gpus"] == 4 and meta["doctor"]["sm"] == "8.9"
    assert sorted(meta["patches"]) == ["patches/fix/fix.toml", "patches/fix/payload/fp8.py"]
    assert (out / "patches" / "fix" / "payload" / "fp8.py").read_text() == "patched = True\n"
    assert meta["inputs"]["manifest"]["sha256"] == hashlib.sha256(stack.read_bytes()).hexdigest()


# --- bad inputs: one line, a hint, nothing written ------------------------------------------------

def _run(args, tmp_path, env=None):
    proc = subprocess.run([sys.executable, "-c", "import sys; from wheelhouse.cli import main; main(sys.argv[1:])", *args],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env)
    return proc


def test_missing_manifest_is_a_usage_error(tmp_path):
    p = _run(["stage", "nope.toml", "-o", "out"], tmp_path)
    assert p.returncode == 2
    assert "nope.toml does not exist" in p.stderr and "hint:" in p.stderr
    assert p.stdout == "" and not (tmp_path / "out").exists()


def test_unknown_requirement_names_it(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels)
    p = _run(["stage", "no-such-project==1.0", "-o", "out", "--index-url", idx.url, "--cache-dir", "c",
              "--python-version", "3.12", "--platform", "manylinux_2_35_x86_64", "--no-bootstrap"], tmp_path)
    assert p.returncode != 0
    assert "no-such-project" in p.stderr and "hint:" in p.stderr
    assert not (tmp_path / "out").exists() and not [x for x in tmp_path.iterdir() if ".wh-" in x.name]


def test_bad_output_paths_are_refused_before_any_work(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(BadOutput, match="is a file"):
        _stage(idx, ["app"], t312, a_file, tmp_path / "cache")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("keep me")
    with pytest.raises(BadOutput, match="not a wheelhouse"):
        _stage(idx, ["app"], t312, busy, tmp_path / "cache")
    assert (busy / "mine.txt").read_text() == "keep me" and len(list(busy.iterdir())) == 1
    assert all(idx.bytes_served(f) == 0 for f in idx.files)
    p = _run(["stage", "app", "-o", "file", "--index-url", idx.url, "--no-bootstrap"], tmp_path)
    assert p.returncode == 2 and "is a file" in p.stderr and "hint:" in p.stderr


def test_invalid_requirement_is_a_usage_error(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels)
    with pytest.raises(UsageError):
        _stage(idx, ["app==="], t312, tmp_path / "wh", tmp_path / "cache")
    assert not (tmp_path / "wh").exists()


# --- the manifest's target and toolchain groups reach the resolver --------------------------------

def test_manifest_target_applies_when_no_flag_is_given(pyindex, wheels, tmp_path):
    idx = pyindex(wheels, serve_metadata=True)
    stack = tmp_path / "stack.toml"
    stack.write_text('[stack]\nrequirements = ["app"]\n[target]\npython-version = "3.12"\nplatforms = ["manylinux_2_35_x86_64"]\n')
    r = CliRunner().invoke(cli, ["stage", str(stack), "--dry-run", "--json", "--index-url", idx.url,
                                 "--cache-dir", str(tmp_path / "c"), "--no-bootstrap"])
    assert r.exit_code == 0, r.output
    files = {p["name"]: p["filename"] for p in json.loads(r.stdout)["packages"]}
    assert files["lib"] == f"lib-2.0-{_lib('cp312')}.whl" and "old" not in files
    # A flag wins over the manifest: a 3.11 target brings `old` back (python_version < "3.12").
    r = CliRunner().invoke(cli, ["stage", str(stack), "--dry-run", "--json", "--index-url", idx.url,
                                 "--cache-dir", str(tmp_path / "c"), "--no-bootstrap",
                                 "--python-version", "3.11", "--platform", "manylinux_2_35_x86_64"])
    assert r.exit_code == 0, r.output
    assert "old" in {p["name"] for p in json.loads(r.stdout)["packages"]}


def test_manifest_toolchain_group_refuses_skew_and_allows_the_exception(pyindex, tmp_path, t312):
    from wheelhouse.resolve import ToolchainSkew

    pub = tmp_path / "nv"
    for name, versions in {"nvcc": ["13.0.1", "13.4.59"], "nvvm": ["13.0.1"], "cccl": ["13.0.85"]}.items():
        for v in versions:
            make_wheel(pub, f"nvidia-{name}", v)
    idx = pyindex(pub, serve_metadata=True)
    group = '[[toolchain]]\nname = "cuda"\npackages = ["nvidia-nvcc", "nvidia-nvvm", "nvidia-cccl"]\nexact = true\n'
    skewed = tmp_path / "skew.toml"
    skewed.write_text('[stack]\nrequirements = ["nvidia-nvcc==13.4.59", "nvidia-nvvm==13.0.1"]\n' + group)
    with pytest.raises(ToolchainSkew):
        _run_stage(load_manifest(skewed), [], t312, tmp_path / "a", index_urls=[idx.url], cache_dir=tmp_path / "c", bootstrap=False)
    assert not (tmp_path / "a").exists()
    ok = tmp_path / "ok.toml"
    ok.write_text('[stack]\nrequirements = ["nvidia-nvcc==13.0.1", "nvidia-nvvm", "nvidia-cccl==13.0.85"]\n'
                  + group.replace("exact = true\n", 'exact = true\nexceptions = ["nvidia-cccl"]\n'))
    res = _run_stage(load_manifest(ok), [], t312, tmp_path / "b", index_urls=[idx.url], cache_dir=tmp_path / "c",
                bootstrap=False, dry_run=True)
    assert {f.name: f.version for f in res.files} == {"nvidia-nvcc": "13.0.1", "nvidia-nvvm": "13.0.1", "nvidia-cccl": "13.0.85"}


def test_pylock_installs_with_uv_when_wheels_come_from_find_links_and_an_index(pyindex, wheels, tmp_path):
    """PEP 751 `index` must be an index URL: a find-links folder there makes uv refuse the whole lock."""
    if uv_binary() is None:
        pytest.skip("uv is not installed in the test venv (the [test] extra installs it)")
    idx = pyindex(wheels)
    local = tmp_path / "local"
    make_wheel(local, "extra-local", "1.0", modules={"extra_local.py": "Z = 3\n"})
    out = tmp_path / "wh"
    _run_stage(None, ["app", "extra-local"], host_target(), out, index_urls=[idx.url], find_links=[str(local)],
          cache_dir=tmp_path / "cache", bootstrap=False)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    py = env_dir / "bin" / "python"
    r = run_uv("pip", "install", "--offline", "--no-cache", "-r", str(out / "pylock.toml"), python=py, cwd=out)
    assert r.returncode == 0, r.stderr
    got = subprocess.run([str(py), "-c", "import app, lib, extra_local; print(lib.V, extra_local.Z)"],
                         capture_output=True, text=True, check=True)
    assert got.stdout.split() == ["2", "3"]


def test_bootstrap_deps_missing_from_the_index_say_so(pyindex, wheels, tmp_path):
    # The index has the stack but not wh's own dependencies (click, rich, ...): writing a wheelhouse (a dry run
    # never resolves bootstrap/: tests/cli/test_stage_output.py) says so, and writes nothing.
    idx = pyindex(wheels, serve_metadata=True)
    args = ["stage", "app", "-o", "out", "--index-url", idx.url, "--cache-dir", "c",
            "--python-version", "3.12", "--platform", "manylinux_2_35_x86_64"]
    p = _run(args, tmp_path)
    assert p.returncode == 1, p.stderr
    assert not (tmp_path / "out" / "wh.json").exists()
    assert f"could not resolve wh's own dependencies for bootstrap/ from {idx.url}: " in p.stderr
    assert "the stack itself resolved (2 packages)" in p.stderr
    assert "hint: pass --no-bootstrap, or add --find-links with wh's dependencies for the target" in p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    ok = _run([*args, "--no-bootstrap"], tmp_path)  # what the hint says works
    assert ok.returncode == 0, ok.stderr
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "out" / "wheels").iterdir()) == ["app", "lib"]


def test_bootstrap_failure_after_the_stack_downloaded_leaves_no_wheelhouse_and_keeps_the_downloads(
        pyindex, wheels, tmp_path):
    # The stack downloads while bootstrap/ is still being resolved: when that fails, nothing is named `out`,
    # nothing is left in TMPDIR, and the downloads are in the cache, so the hint's re-run fetches nothing.
    idx = pyindex(wheels, serve_metadata=True)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    args = ["stage", "app", "-o", "out", "--index-url", idx.url, "--cache-dir", "c",
            "--python-version", "3.12", "--platform", "manylinux_2_35_x86_64"]
    p = _run(args, tmp_path, env={**os.environ, "TMPDIR": str(tmp)})
    assert p.returncode == 1, p.stderr
    assert "could not resolve wh's own dependencies for bootstrap/" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "out").exists() and list(tmp.iterdir()) == []
    staged = ["app-1.0-py3-none-any.whl", f"lib-2.0-{_lib('cp312')}.whl"]
    assert [idx.requests_for(f) for f in staged] == [1, 1]
    ok = _run([*args, "--no-bootstrap"], tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert _wheel_names(tmp_path / "out") == set(staged)
    assert [idx.requests_for(f) for f in staged] == [1, 1]  # from the cache, not downloaded again


# --- requirements files with --hash (pip-compile / uv pip compile --generate-hashes) -----------------

def _hashed_requirements(path: Path, idx, lib_hashes=None) -> Path:
    """A requirements file written the way `pip-compile --generate-hashes` writes one."""
    libs = [f for f in idx.files if f.startswith("lib-2.0-")]
    lib_lines = " \\\n".join(f"    --hash=sha256:{h}" for h in (lib_hashes or [idx.sha256(f) for f in libs]))
    path.write_text(
        "#\n# This file is autogenerated by pip-compile\n#\n"
        f"app==1.0 \\\n    --hash=sha256:{idx.sha256('app-1.0-py3-none-any.whl')}\n    # via -r requirements.in\n"
        f"lib==2.0 \\\n{lib_lines}\n    # via app\n"
        # uv's universal output: the same project under exclusive markers, each with its own hashes.
        f'lib==1.0 ; python_version < "3.12" \\\n    --hash=sha256:{"0" * 64}\n'
    )
    return path


def test_hashed_requirements_file_stages(pyindex, wheels, tmp_path):
    idx = pyindex(wheels)
    req = _hashed_requirements(tmp_path / "requirements.txt", idx)
    p = _run(["stage", "-r", req, "-o", "out", "--index-url", idx.url, "--cache-dir", "c",
              "--python-version", "3.12", "--platform", "manylinux_2_35_x86_64", "--no-bootstrap"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert _wheel_names(tmp_path / "out") == {"app-1.0-py3-none-any.whl", f"lib-2.0-{_lib('cp312')}.whl"}


@pytest.mark.parametrize("source", ["index", "find-links"])  # find-links publish no sha256: checked once downloaded
def test_wrong_hash_is_refused_and_nothing_is_written(pyindex, wheels, tmp_path, source):
    idx = pyindex(wheels, serve_metadata=True)  # so only wheel bodies count in bytes_served
    lib = f"lib-2.0-{_lib('cp312')}.whl"
    idx.delays[f"/files/{lib}.metadata"] = 1.0  # (the resolver waits there, after its walk ahead has seen lib)
    req = _hashed_requirements(tmp_path / "requirements.txt", idx, lib_hashes=["ab" * 32, "cd" * 32])
    where = ["--index-url", idx.url] if source == "index" else ["--find-links", str(wheels), "--index-url", (tmp_path / "none").as_uri()]
    p = _run(["stage", "-r", req, "-o", "out", *where, "--cache-dir", "c",
              "--python-version", "3.12", "--platform", "manylinux_2_35_x86_64", "--no-bootstrap"], tmp_path,
             env=dict(os.environ))
    assert p.returncode == 1, p.stderr
    assert (f"error: lib: {lib} has sha256:{idx.sha256(lib)}, not a hash -r {req} line 7 allows "
            f"(sha256:{'ab' * 32}, sha256:{'cd' * 32})") in p.stderr
    assert "hint: " in p.stderr and "app-1.0" not in p.stderr.split("error:")[1]  # app's hash matched
    assert not (tmp_path / "out").exists() and not [x for x in tmp_path.iterdir() if ".wh-" in x.name]
    if source == "index":  # refused before any wheel was downloaded
        assert all(idx.bytes_served(f) == 0 for f in idx.files)


def test_manifest_requirements_file_hashes_are_enforced(pyindex, wheels, t312, tmp_path):
    idx = pyindex(wheels)
    _hashed_requirements(tmp_path / "requirements.txt", idx, lib_hashes=["ab" * 32])
    (tmp_path / "stack.toml").write_text('[stack]\nrequirements-files = ["requirements.txt"]\n')
    m = load_manifest(tmp_path / "stack.toml")
    assert m.requirements == ("app==1.0", "lib==2.0", 'lib==1.0 ; python_version < "3.12"')
    with pytest.raises(HashNotAllowed) as exc:
        _run_stage(m, [], t312, tmp_path / "out", index_urls=[idx.url], cache_dir=tmp_path / "c", bootstrap=False, dry_run=True)
    assert [(d.name, d.allowed, d.where) for d in exc.value.bad] == [
        ("lib", ("ab" * 32,), f"{tmp_path / 'requirements.txt'} line 7")]
    _hashed_requirements(tmp_path / "requirements.txt", idx)
    res = _run_stage(load_manifest(tmp_path / "stack.toml"), [], t312, tmp_path / "out", index_urls=[idx.url],
                cache_dir=tmp_path / "c", bootstrap=False)
    assert {f.name for f in res.files} == {"app", "lib"}
