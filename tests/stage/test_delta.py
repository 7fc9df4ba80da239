"""A delta stage: what the target's image provides is not staged, and wh.json records exactly what was
assumed present. Real wheels on a real index on 127.0.0.1; `wh stage` through its command line."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from wheelmaker import make_wheel, sha256_file
from wheelhouse.cli import cli
from wheelhouse.lock import read_pylock, read_wh_json
from wheelhouse.stage import StageFlags, StageInputs, merge_inputs, stage
from wheelhouse.target import host_target, target_from_flags
from wheelhouse.target.profile import ProvidedDist

PAD = 300_000
TORCH = "torch-2.0-cp312-cp312-manylinux_2_17_x86_64.whl"


@pytest.fixture
def pub(tmp_path):
    """app -> torch>=1.5 and numpy; torch 1.0, 2.0 (big), 3.0 (-> nccl); numpy 1.0, 2.0."""
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["torch>=1.5", "numpy"])
    for v in ("1.0", "2.0"):
        make_wheel(d, "torch", v, tags="cp312-cp312-manylinux_2_17_x86_64", pad_bytes=PAD)
    make_wheel(d, "torch", "3.0", tags="cp312-cp312-manylinux_2_17_x86_64", requires=["nccl"], pad_bytes=PAD)
    make_wheel(d, "nccl", "1.0")
    make_wheel(d, "numpy", "1.0")
    make_wheel(d, "numpy", "2.0")
    return d


def _box(*pairs: tuple[str, str]):
    base = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
    return dataclasses.replace(base, source="captured",
                               provided=tuple(ProvidedDist(n, v, "system", "/usr/lib/python3/dist-packages") for n, v in pairs))


def _stage(idx, reqs, target, out, cache, *, constraints=(), **run):
    run.setdefault("bootstrap", False)
    flags = StageFlags(requirements=tuple(reqs), constraints=tuple(constraints), index_url=idx.url, target=target)
    return stage(merge_inputs(None, flags, out, cache_dir=cache, **run))


def _consistent(out: Path) -> dict[str, str]:
    """wheels/, pylock.toml, simple/ and wh.json agree; returns {name: version} of the lock."""
    lock = read_pylock(out)
    on_disk = {p.name for p in (out / "wheels").iterdir()}
    assert on_disk == {f.filename for f in lock.files}
    for f in lock.files:
        assert sha256_file(out / f.path) == f.sha256
    pages = {p.name for p in (out / "simple").iterdir() if p.is_dir()}
    assert pages == {f.name for f in lock.files}
    meta = read_wh_json(out)
    assumed = {a["name"] for a in meta["assumed_present"]}
    assert not assumed & {f.name for f in lock.files}  # assumed present and staged: never both
    assert meta["count"] == len(lock.files)
    return {f.name: f.version for f in lock.files}


def test_what_the_image_provides_is_not_downloaded_nor_locked(pyindex, pub, tmp_path, monkeypatch):
    idx = pyindex(pub, serve_metadata=True)
    target = _box(("torch", "2.0"), ("numpy", "2.0"), ("unrelated", "9.9"))
    out = tmp_path / "wh"
    res = _stage(idx, ["app"], target, out, tmp_path / "cache")
    assert _consistent(out) == {"app": "1.0"}  # torch 3.0 is newer; the image's 2.0 is kept
    assert idx.bytes_served(TORCH) == 0
    meta = read_wh_json(out)
    # the contract with `wh install`: exactly what the stack relies on, not all the image has
    assert meta["assumed_present"] == [{"name": "numpy", "version": "2.0"}, {"name": "torch", "version": "2.0"}]
    body = json.dumps(target.to_json(), sort_keys=True, separators=(",", ":")).encode()
    assert meta["image"]["profile"] == {"sha256": hashlib.sha256(body).hexdigest(), "source": "captured",
                                        "describe": target.describe(), "distributions": 3}
    assert meta["image"]["full"] is False and meta["image"]["changes"] == []
    assert res.image.summary(len(res.files)) == "staged 1 of 3 (2 provided by the image: numpy 2.0, torch 2.0)"


def test_an_image_version_too_old_is_upgraded_and_said(pyindex, pub, tmp_path):
    idx = pyindex(pub)
    out = tmp_path / "wh"
    r = CliRunner().invoke(cli, ["stage", "app", "--target", str(_profile_file(tmp_path, ("torch", "1.0"))), "-o", str(out),
                                 "--index-url", idx.url, "--cache-dir", str(tmp_path / "c"), "--no-bootstrap"])
    assert r.exit_code == 0, r.output
    assert _consistent(out) == {"app": "1.0", "torch": "3.0", "nccl": "1.0", "numpy": "2.0"}
    assert "changes the image's torch 1.0 (image) -> 3.0 (upgrade)" in r.stderr
    assert "staged 4 of 4 (the image provides none of it)" in r.stderr
    assert read_wh_json(out)["assumed_present"] == []
    assert read_wh_json(out)["image"]["changes"] == [{"name": "torch", "image": "1.0", "staged": "3.0",
                                                       "direction": "upgrade"}]


def test_an_image_version_a_constraint_excludes_is_downgraded_and_said(pyindex, pub, tmp_path):
    idx = pyindex(pub)
    res = _stage(idx, ["app"], _box(("torch", "3.0"), ("numpy", "2.0")), tmp_path / "wh", tmp_path / "cache",
                 constraints=["torch<3"])
    assert _consistent(tmp_path / "wh") == {"app": "1.0", "torch": "2.0"}
    assert [c.describe() for c in res.image.changes] == ["torch 3.0 (image) -> 2.0 (downgrade)"]
    assert res.image.assumed == (("numpy", "2.0"),)


def test_full_stages_the_whole_closure_and_assumes_nothing(pyindex, pub, tmp_path):
    idx = pyindex(pub)
    out = tmp_path / "wh"
    res = _stage(idx, ["app"], _box(("torch", "2.0"), ("numpy", "2.0")), out, tmp_path / "cache", full=True)
    # as without an image: the newest torch (3.0), not the image's
    assert _consistent(out) == {"app": "1.0", "torch": "3.0", "nccl": "1.0", "numpy": "2.0"}
    meta = read_wh_json(out)
    assert meta["assumed_present"] == [] and meta["image"]["full"] is True
    # what the full closure puts over the image is still said
    assert meta["image"]["changes"] == [{"name": "torch", "image": "2.0", "staged": "3.0", "direction": "upgrade"}]
    assert res.image.summary(len(res.files)) == "staged 4 of 4 (--full: nothing assumed of the image)"
    assert res.image.lines() == ["--full: 1 staged at another version than the image's: torch 2.0 (image) -> 3.0 (upgrade)"]


def test_without_an_image_wh_json_assumes_nothing(pyindex, pub, tmp_path):
    idx = pyindex(pub)
    _stage(idx, ["app"], target_from_flags("3.12", ["manylinux_2_35_x86_64"]), tmp_path / "wh", tmp_path / "cache")
    meta = read_wh_json(tmp_path / "wh")
    assert meta["assumed_present"] == [] and meta["image"] is None


def test_restage_delta_to_full_and_back_leaves_a_consistent_wheelhouse(pyindex, pub, tmp_path):
    idx = pyindex(pub, serve_metadata=True)
    out, cache = tmp_path / "wh", tmp_path / "cache"
    box = _box(("torch", "3.0"), ("nccl", "1.0"))
    first = _stage(idx, ["app"], box, out, cache)
    (out / "NOTES.md").write_text("mine\n")
    assert _consistent(out) == {"app": "1.0", "numpy": "2.0"}
    full = _stage(idx, ["app"], box, out, cache, full=True)
    assert _consistent(out) == {"app": "1.0", "torch": "3.0", "nccl": "1.0", "numpy": "2.0"}
    assert read_wh_json(out)["assumed_present"] == [] and full.removed == ()
    assert full.reused == len(first.files)  # app and numpy were not downloaded again
    back = _stage(idx, ["app"], box, out, cache)
    assert _consistent(out) == {"app": "1.0", "numpy": "2.0"}
    assert back.removed == ("nccl-1.0-py3-none-any.whl", "torch-3.0-cp312-cp312-manylinux_2_17_x86_64.whl")
    assert read_wh_json(out)["assumed_present"] == [{"name": "nccl", "version": "1.0"}, {"name": "torch", "version": "3.0"}]
    assert (out / "NOTES.md").read_text() == "mine\n"
    assert idx.requests_for("torch-3.0-cp312-cp312-manylinux_2_17_x86_64.whl") == 1  # fetched once, for --full


def test_an_image_version_the_index_does_not_have_is_assumed_and_said(pyindex, pub, tmp_path):
    idx = pyindex(pub)
    out = tmp_path / "wh"
    r = CliRunner().invoke(cli, ["stage", "app", "--target", str(_profile_file(tmp_path, ("torch", "2.5+cu130"))),
                                 "-o", str(out), "--index-url", idx.url, "--cache-dir", str(tmp_path / "c"),
                                 "--no-bootstrap"])
    assert r.exit_code == 0, r.output
    assert _consistent(out) == {"app": "1.0", "numpy": "2.0"}
    assert read_wh_json(out)["assumed_present"] == [{"name": "torch", "version": "2.5+cu130"}]
    assert "torch==2.5+cu130 (image): no index has its metadata; assumed to need nothing more" in r.stderr
    assert "staged 2 of 3 (1 provided by the image: torch 2.5+cu130)" in r.stderr


def test_dry_run_marks_the_provided_pins(pyindex, pub, tmp_path):
    idx = pyindex(pub, serve_metadata=True)
    prof = _profile_file(tmp_path, ("torch", "2.0"), ("numpy", "1.0"))
    args = ["stage", "app", "--target", str(prof), "--dry-run", "--index-url", idx.url, "--cache-dir",
            str(tmp_path / "c"), "--no-bootstrap"]
    r = CliRunner().invoke(cli, [*args, "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [p["name"] for p in data["packages"]] == ["app"] and data["count"] == 1 and data["closure_count"] == 3
    assert data["provided"] == [{"name": "numpy", "version": "1.0", "provided": True},
                                {"name": "torch", "version": "2.0", "provided": True}]
    assert data["image"]["kept"] == 2 and data["changes"] == []
    text = CliRunner().invoke(cli, [*args, "--format", "table"])
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()  # the pins, one a line, the image's among them and marked
    assert lines[0].startswith("app==1.0  app-1.0-py3-none-any.whl  ")
    assert lines[1:] == ["numpy==1.0  (provided by the image)", "torch==2.0  (provided by the image)"]
    pins = CliRunner().invoke(cli, args)  # off a terminal: a requirements file, the image's as comments
    assert pins.stdout.splitlines() == ["app==1.0", "# numpy==1.0  (provided by the image)",
                                        "# torch==2.0  (provided by the image)"]
    assert "would stage 1 of 3 (2 provided by the image: numpy 1.0, torch 2.0)" in text.stderr
    assert all(idx.bytes_served(f) == 0 for f in idx.files)
    exported = CliRunner().invoke(cli, [*args, "--format", "requirements"])
    assert "# provided by the image (not listed): torch==2.0" in exported.stdout
    assert "\ntorch==" not in exported.stdout and "app==1.0 \\" in exported.stdout


def test_a_hashed_requirement_is_staged_even_when_the_image_has_it(pyindex, pub, tmp_path):
    idx = pyindex(pub)
    reqs = tmp_path / "reqs.txt"
    reqs.write_text(f"app\nnumpy==2.0 --hash=sha256:{idx.sha256('numpy-2.0-py3-none-any.whl')}\n")
    out = tmp_path / "wh"
    r = CliRunner().invoke(cli, ["stage", "-r", str(reqs), "--target", str(_profile_file(tmp_path, ("numpy", "2.0"), ("torch", "2.0"))),
                                 "-o", str(out), "--index-url", idx.url, "--cache-dir", str(tmp_path / "c"),
                                 "--no-bootstrap"])
    assert r.exit_code == 0, r.output
    assert _consistent(out) == {"app": "1.0", "numpy": "2.0"}  # its sha256 is checked on a file wh has
    meta = read_wh_json(out)
    assert meta["assumed_present"] == [{"name": "torch", "version": "2.0"}]
    assert meta["image"]["never_offered"] == ["numpy"]


def test_a_release_manifest_wheel_is_staged_even_when_the_image_has_its_version(pyindex, pub, tmp_path):
    from wheelhouse.manifest import load_manifest

    idx = pyindex(pub)
    rt = make_wheel(tmp_path / "release", "engine-rt", "0.3", requires=["numpy"])
    release = tmp_path / "engine-linux_x86_64.json"
    release.write_text(json.dumps({"runtime": {"name": rt.name, "url": rt.as_uri(), "sha256": sha256_file(rt)}}))
    stack = tmp_path / "stack.toml"
    stack.write_text(f'[stack]\nrequirements = []\n\n[[manifest]]\nurl = "{release.as_uri()}"\nkeys = ["runtime"]\n')
    flags = StageFlags(index_url=idx.url, target=_box(("engine-rt", "0.3"), ("numpy", "1.0")))
    res = stage(merge_inputs(load_manifest(stack), flags, tmp_path / "wh", cache_dir=tmp_path / "cache", bootstrap=False))
    # the release's own build is what the manifest names (its sha256 checked); its numpy may be the image's
    assert _consistent(tmp_path / "wh") == {"engine-rt": "0.3"}
    assert res.image.assumed == (("numpy", "1.0"),) and res.image.never_offered == ("engine-rt",)


def test_bootstrap_stays_complete_when_the_image_has_whs_dependencies(pyindex, repacked_deps, tmp_path):
    """bootstrap/ installs wh into a venv of its own on the box, which sees none of the image: complete."""
    import importlib.metadata as md

    make_wheel(tmp_path / "stack", "app", "1.0", requires=["click"])
    idx = pyindex(repacked_deps, tmp_path / "stack")
    click_version = md.version("click")
    box = dataclasses.replace(host_target(), source="captured",
                              provided=(ProvidedDist("click", click_version, "system"), ProvidedDist("rich", md.version("rich"), "system")))
    out = tmp_path / "wh"
    res = stage(StageInputs(box, out, requirements=("app",), index_urls=(idx.url,), cache_dir=tmp_path / "cache",
                            bootstrap=True))
    boot = {f.name for f in read_pylock(out / "bootstrap").files}
    assert {"wh", "click", "rich", "packaging", "resolvelib"} <= boot
    assert _consistent(out) == {"app": "1.0"}  # the stack's click is the image's
    assert read_wh_json(out)["assumed_present"] == [{"name": "click", "version": click_version}]
    assert res.image.assumed == (("click", click_version),)


def _profile_file(tmp_path: Path, *pairs: tuple[str, str]) -> Path:
    """A profile JSON as `wh target capture` writes it, with a "distributions" list."""
    data = _box(*pairs).to_json()
    path = tmp_path / f"box-{len(list(tmp_path.glob('box-*.json')))}.json"
    path.write_text(json.dumps(data))
    return path


# --- measured on the real stack (opt-in: the package registry) --------------------------------------------

# The FreeToken stack of manifests/freetoken-dsv4-kaggle-4xl4.toml with the released runtime from the index in
# place of the engine's nightly release manifest (its host is not reachable from every stager).
FREETOKEN = ["freetoken==0.1.2", "nvidia-cuda-nvcc==13.4.59", "nvidia-cuda-crt==13.4.59", "nvidia-nvvm==13.4.59",
             "nvidia-cuda-cccl==13.0.85"]


@pytest.mark.registry
def test_freetoken_against_the_h200_image_stages_a_fraction(tmp_path):
    from wheelhouse.resources import manifests_dir

    profile = manifests_dir() / "targets" / "h200-offline.json"
    args = ["stage", *FREETOKEN, "--target", str(profile), "--dry-run", "--json", "--cache-dir", str(tmp_path / "c")]
    delta = CliRunner().invoke(cli, args)
    full = CliRunner().invoke(cli, [*args, "--full"])
    assert delta.exit_code == 0 and full.exit_code == 0, delta.output + full.output
    d, f = json.loads(delta.stdout), json.loads(full.stdout)
    assert d["closure_count"] == f["count"] and f["provided"] == []
    kept = {p["name"]: p["version"] for p in d["provided"]}
    assert kept["torch"] == "2.11.0" and kept["triton"] == "3.6.0"  # the image's own, not downloaded
    assert {p["name"] for p in d["packages"]}.isdisjoint(kept)
    # freetoken needs numpy<2.5; the image has 2.5.2: said, and staged
    assert {"name": "numpy", "image": "2.5.2", "staged": d["changes"][0]["staged"], "direction": "downgrade"} in d["changes"]
    assert d["total_size"] < f["total_size"] / 5


def test_a_delta_installs_on_its_image_and_is_refused_once_the_image_changed(pyindex, tmp_path):
    """Stage against a profile captured from a real "image" interpreter, install with wh on it: the image's
    copy is the one imported; after the image moves on, the same wheelhouse is refused before any write."""
    import os
    import subprocess
    import sys
    import venv

    from wheelhouse.resources import capture_script

    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0", requires=["lib>=1", "small"], modules={"app/__init__.py": "import lib, small\nV = lib.V\n"})
    make_wheel(pub, "lib", "1.0", modules={"lib/__init__.py": "V = 1\n"})
    make_wheel(pub, "lib", "2.0", modules={"lib/__init__.py": "V = 2\n"})
    make_wheel(pub, "small", "1.0", modules={"small/__init__.py": ""})
    idx = pyindex(pub)
    image = tmp_path / "image"
    venv.create(image, with_pip=False)
    py = image / "bin" / "python"
    pip_env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}

    def pip_install(spec: str) -> None:
        subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-index", "-f", str(pub), spec],
                       check=True, capture_output=True, env=pip_env)

    def wh(*args: str):
        return subprocess.run([sys.executable, "-c", "import sys; from wheelhouse.cli import main; main(sys.argv[1:])", *args],
                              capture_output=True, text=True, timeout=300)

    pip_install("lib==1.0")
    profile = tmp_path / "image.json"
    subprocess.run([str(py), str(capture_script()), "-o", str(profile), "--no-gpus"], check=True, capture_output=True)
    out = tmp_path / "wh"
    staged = wh("stage", "app", "--target", str(profile), "-o", str(out), "--index-url", idx.url,
                "--cache-dir", str(tmp_path / "c"), "--no-bootstrap")
    assert staged.returncode == 0, staged.stderr
    assert _consistent(out) == {"app": "1.0", "small": "1.0"}
    assert read_wh_json(out)["assumed_present"] == [{"name": "lib", "version": "1.0"}]

    done = wh("install", str(out), "--venv", str(tmp_path / "serve"), "--system-site-packages", "--python", str(py))
    assert done.returncode == 0, done.stderr
    got = subprocess.run([str(tmp_path / "serve" / "bin" / "python"), "-c", "import app; print(app.V)"],
                         capture_output=True, text=True, check=True)
    assert got.stdout.strip() == "1"  # the image's lib, not a staged one

    pip_install("lib==2.0")  # the image moved on
    refused = wh("install", str(out), "--venv", str(tmp_path / "serve2"), "--system-site-packages", "--python", str(py))
    assert refused.returncode != 0 and "lib" in refused.stderr
    assert not list((tmp_path / "serve2").rglob("app/__init__.py"))  # nothing of the stack was written


# --- a delta the image provides whole (issue 32, finding 9) -------------------------------------------------

def _wh(*args, **kw):
    import os
    import subprocess

    from faults import wh_command

    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300"}, **kw)


def test_a_delta_the_image_provides_whole_is_a_valid_wheelhouse_that_installs_nothing(pyindex, tmp_path):
    from broken_packages import install_wheel, make_venv
    from wheelhouse.target.interpreter import inspect_interpreter

    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["lib"], modules={"app/__init__.py": "import lib\n"})
    make_wheel(d, "lib", "1.0", modules={"lib/__init__.py": "V = 1\n"})
    idx = pyindex(d)
    image = make_venv(tmp_path / "image")  # the box's image already has the whole stack
    for w in sorted(d.iterdir()):
        install_wheel(image, w)
    box = dataclasses.replace(inspect_interpreter(str(image)).target, source="captured",
                              provided=(ProvidedDist("app", "1.0", "venv", str(tmp_path)),
                                        ProvidedDist("lib", "1.0", "venv", str(tmp_path))))
    prof = tmp_path / "box.json"
    prof.write_text(json.dumps(box.to_json()))
    out = tmp_path / "house"
    r = _wh("stage", "app", "--target", prof, "-o", out, "--index-url", idx.url, "--cache-dir", tmp_path / "c",
            "--no-bootstrap")
    assert r.returncode == 0, r.stderr
    assert read_pylock(out).files == () and list((out / "wheels").iterdir()) == []
    assert read_wh_json(out)["assumed_present"] == [{"name": "app", "version": "1.0"}, {"name": "lib", "version": "1.0"}]
    r = _wh("verify", out)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _wh("pack", out, "-o", tmp_path / "house.tar")
    assert r.returncode == 0, r.stderr
    r = _wh("verify", tmp_path / "house.tar")
    assert r.returncode == 0, r.stdout + r.stderr
    r = _wh("install", out, "--python", image, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["installed"] == []
    bare = make_venv(tmp_path / "bare")  # an image without them: the assumptions are checked, and refused
    r = _wh("install", out, "--python", bare)
    assert r.returncode != 0 and "app" in r.stderr
