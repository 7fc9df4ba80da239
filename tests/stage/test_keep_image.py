"""--keep-image NAME (and the manifest's [stack] keep-image): the target image's version of a distribution is a
hard constraint, so the stack picks the releases that accept it and stages only the delta. Real wheels on a
real index on 127.0.0.1; `wh stage` through its command line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess

import pytest
from faults import wh_command
from wheelmaker import make_wheel
from wheelhouse.target import target_from_flags
from wheelhouse.target.profile import ProvidedDist


@pytest.fixture
def index(pyindex, tmp_path):
    """enginey 3.0 needs torchy>=2.12, enginey 2.9 needs torchy==2.11; torchy 2.11 and 2.12 (with a dependency)."""
    d = tmp_path / "pub"
    make_wheel(d, "enginey", "3.0", requires=["torchy>=2.12"])
    make_wheel(d, "enginey", "2.9", requires=["torchy==2.11"])
    make_wheel(d, "enginey", "2.0", requires=["torchy>=2.13"])
    make_wheel(d, "torchy", "2.11", tags="cp312-cp312-manylinux_2_17_x86_64", pad_bytes=50_000)
    make_wheel(d, "torchy", "2.12", tags="cp312-cp312-manylinux_2_17_x86_64", requires=["cudalib"], pad_bytes=50_000)
    make_wheel(d, "cudalib", "1.0")
    return pyindex(d, serve_metadata=True)


@pytest.fixture
def profile(tmp_path):
    """A captured box whose image provides torchy 2.11."""
    base = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
    box = dataclasses.replace(base, source="captured", provided=(ProvidedDist("torchy", "2.11", "venv", "/opt/venv"),
                                                                  ProvidedDist("other", "1.0", "venv", "/opt/venv")))
    path = tmp_path / "box.json"
    path.write_text(json.dumps(box.to_json()))
    return path


def _dry(index, profile, tmp_path, *args):
    """``wh stage ARGS --target PROFILE --dry-run --json`` through the entry point a user runs."""
    cmd = ["stage", *args, "--target", str(profile), "--index-url", index.url, "--cache-dir", str(tmp_path / "c"),
           "--dry-run", "--json"]
    return subprocess.run(wh_command(cmd), capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300"})


def test_without_it_the_newest_engine_upgrades_the_images_torch(index, profile, tmp_path):
    r = _dry(index, profile, tmp_path, "enginey")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {p["name"]: p["version"] for p in data["packages"]} == {"enginey": "3.0", "torchy": "2.12", "cudalib": "1.0"}
    assert data["keep_image"] == []


def test_keep_image_picks_the_newest_engine_that_accepts_the_images_version(index, profile, tmp_path):
    r = _dry(index, profile, tmp_path, "enginey", "--keep-image", "torchy")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {p["name"]: p["version"] for p in data["packages"]} == {"enginey": "2.9"}  # only the delta is staged
    assert data["provided"] == [{"name": "torchy", "version": "2.11", "provided": True}]
    assert data["keep_image"] == [{"name": "torchy", "version": "2.11", "constraint": "torchy==2.11"}]


def test_the_manifest_key_does_the_same(index, profile, tmp_path):
    manifest = tmp_path / "stack.toml"
    manifest.write_text('[stack]\nrequirements = ["enginey"]\nkeep-image = ["Torchy"]\n')
    r = _dry(index, profile, tmp_path, str(manifest))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {p["name"]: p["version"] for p in data["packages"]} == {"enginey": "2.9"}
    assert data["keep_image"] == [{"name": "torchy", "version": "2.11", "constraint": "torchy==2.11"}]


def test_a_name_the_image_does_not_provide_is_one_line_naming_it_and_the_profile(index, profile, tmp_path):
    r = _dry(index, profile, tmp_path, "enginey", "--keep-image", "nosuch")
    assert r.returncode == 2
    error = [line for line in r.stderr.splitlines() if line.startswith("error")]
    assert len(error) == 1 and "nosuch" in error[0] and str(profile) in error[0], r.stderr
    assert json.loads(r.stdout)["error"]["code"]


def test_no_answer_names_the_kept_pin_as_the_reason(index, profile, tmp_path):
    r = _dry(index, profile, tmp_path, "enginey>=3", "--keep-image", "torchy")
    assert r.returncode == 1, r.stderr
    assert "torchy==2.11 (kept from the image)" in r.stderr, r.stderr


# --- the real stack (opt-in: the package registry) -----------------------------------------------------------
@pytest.mark.registry
def test_vllm_keeping_the_h200_images_torch_stages_a_fraction(tmp_path):
    """Without --keep-image the newest vllm upgrades the image's torch 2.11 (a 3.3 GB delta); with it, the
    newest vllm that accepts torch 2.11 is picked and torch and its CUDA libraries stay the image's."""
    from wheelhouse.resources import manifests_dir

    profile = manifests_dir() / "targets" / "h200-offline.json"
    args = ["stage", "vllm", "--target", str(profile), "--dry-run", "--json", "--cache-dir", str(tmp_path / "c")]
    kept = subprocess.run(wh_command([*args, "--keep-image", "torch"]), capture_output=True, text=True, timeout=600)
    free = subprocess.run(wh_command(args), capture_output=True, text=True, timeout=600)
    assert kept.returncode == 0 and free.returncode == 0, kept.stderr + free.stderr
    k, f = json.loads(kept.stdout), json.loads(free.stdout)
    assert {"name": "torch", "version": "2.11.0", "provided": True} in k["provided"]
    assert "torch" not in {p["name"] for p in k["packages"]}
    assert k["keep_image"] == [{"name": "torch", "version": "2.11.0", "constraint": "torch==2.11.0"}]
    assert k["total_size"] < f["total_size"] / 2, (k["total_size"], f["total_size"])
