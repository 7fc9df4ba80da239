"""A delta wheelhouse leaves out what the image ships; `wh install` checks the image still ships it.

The "image" is a real venv made on the spot with real wheels unpacked into it (``torchy``
2.11.0+cu130 stands for the image's torch); the delta wheelhouse holds only ``app``, which
needs that exact torchy, and its wh.json says ``assumed_present``. Installs run the real CLI
in a subprocess, or ``install_wheelhouses``; refusals must leave nothing behind.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wheelhouse.lock import LockError

from broken_packages import install_wheel, make_venv, site_packages
from nvidia_fixtures import make_wheelhouse, tree_listing
from wheelmaker import make_wheel

from wheelhouse.install import InstallOptions, install_wheelhouses
from wheelhouse.install.assumed import AssumedNotProvided, BadAssumedList

TORCH = "2.11.0+cu130"


def wh(*args):
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          timeout=180)


def _dist(folder: Path, name: str, version: str) -> Path:
    return make_wheel(folder / f"{name}-{version}", name, version,
                      modules={f"{name}/__init__.py": f"VERSION = {version!r}\n"})


def _remove(python: Path, name: str) -> None:
    site = site_packages(python)
    shutil.rmtree(site / name)
    for info in site.glob(f"{name}-*.dist-info"):
        shutil.rmtree(info)


@pytest.fixture
def image(tmp_path) -> Path:
    """The box's image: a venv holding torchy 2.11.0+cu130 and numpyish 2.0; returns its python."""
    py = make_venv(tmp_path / "image")
    install_wheel(py, _dist(tmp_path / "w", "torchy", TORCH))
    install_wheel(py, _dist(tmp_path / "w", "numpyish", "2.0"))
    return py


def _delta(tmp_path: Path, assumed=None, name: str = "delta") -> Path:
    app = make_wheel(tmp_path / "wapp", "app", "1.0", requires=[f"torchy=={TORCH}", "numpyish>=2"],
                     modules={"app/__init__.py": "import torchy, numpyish\nTORCH = torchy.VERSION\n"})
    if assumed is None:
        assumed = [{"name": "torchy", "version": TORCH}, {"name": "numpyish", "version": "2.0"}]
    return make_wheelhouse(tmp_path / name, [app], extra_meta={"assumed_present": assumed})


def test_a_delta_installs_into_a_venv_of_the_image_and_uses_the_images_torch(image, tmp_path):
    venv = tmp_path / "venv"
    r = wh("install", _delta(tmp_path), "--python", image, "--venv", venv, "--system-site-packages", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert [d["name"] for d in report["installed"]] == ["app"]
    assert "the image provides all 2 distribution(s)" in " ".join(report["notes"])
    out = subprocess.run([venv / "bin" / "python", "-c", "import app, torchy; print(app.TORCH, torchy.__file__)"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == TORCH
    assert out[1].startswith(str(site_packages(image)))  # the image's own copy, not a second one


def test_the_image_changed_refused_naming_each_difference_and_no_venv_made(image, tmp_path):
    _remove(image, "torchy")
    install_wheel(image, _dist(tmp_path / "w2", "torchy", "2.10.0"))
    _remove(image, "numpyish")
    venv = tmp_path / "venv"
    r = wh("install", _delta(tmp_path), "--python", image, "--venv", venv, "--system-site-packages")
    assert r.returncode == 2, r.stderr
    assert f"torchy: wheelhouse assumed {TORCH}, the box has 2.10.0" in r.stderr
    assert "numpyish: wheelhouse assumed 2.0, missing on the box" in r.stderr
    assert "nothing was installed" in r.stderr
    assert f"a new venv of {image} with --system-site-packages" in r.stderr  # which view was asked
    assert "hint:" in r.stderr and "capture_target.py" in r.stderr and "wh stage --full" in r.stderr
    assert not venv.exists()


def test_a_local_version_label_is_a_different_build(image, tmp_path):
    _remove(image, "torchy")
    install_wheel(image, _dist(tmp_path / "w2", "torchy", "2.11.0+cu128"))
    with pytest.raises(AssumedNotProvided) as err:
        install_wheelhouses([_delta(tmp_path)], InstallOptions(python=str(image)))
    assert f"torchy: wheelhouse assumed {TORCH}, the box has 2.11.0+cu128" in err.value.message
    assert "numpyish" not in err.value.message  # only the differences are named


def test_a_plain_new_venv_sees_nothing_of_the_image_and_is_refused(image, tmp_path):
    venv = tmp_path / "venv"
    r = wh("install", _delta(tmp_path), "--python", image, "--venv", venv)
    assert r.returncode == 2, r.stderr
    assert "without --system-site-packages sees nothing of the image" in r.stderr
    assert "assumes 2 distribution(s) from the box's image (numpyish, torchy)" in r.stderr
    assert "--system-site-packages" in r.stderr.split("hint:")[1]
    assert not venv.exists()


def test_what_an_existing_venv_sees_counts_its_own_copy_shadows_the_image(image, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([image, "-m", "venv", "--without-pip", "--system-site-packages", venv], check=True)
    (site_packages(venv / "bin" / "python") / "parent.pth").write_text(f"{site_packages(image)}\n")
    install_wheel(venv / "bin" / "python", _dist(tmp_path / "w3", "torchy", "2.9.0"))  # shadows the image's
    before = tree_listing(venv)
    with pytest.raises(AssumedNotProvided) as err:
        install_wheelhouses([_delta(tmp_path)], InstallOptions(venv=venv))
    assert f"torchy: wheelhouse assumed {TORCH}, the box has 2.9.0" in err.value.message
    assert tree_listing(venv) == before
    _remove(venv / "bin" / "python", "torchy")  # now the image's copy shows through
    report = install_wheelhouses([_delta(tmp_path)], InstallOptions(venv=venv))
    assert [d.name for d in report.installed] == ["app"]


def test_a_new_venv_made_from_the_base_sees_only_the_base(image, tmp_path):
    """The image venv's packages reach a new venv only when it is made from the image's python."""
    with pytest.raises(AssumedNotProvided) as err:
        install_wheelhouses([_delta(tmp_path)], InstallOptions(python=sys.executable, venv=tmp_path / "venv",
                                                               system_site_packages=True))
    assert "torchy: wheelhouse assumed" in err.value.message and "missing on the box" in err.value.message
    assert not (tmp_path / "venv").exists()


def test_installing_into_the_image_interpreter_itself(image, tmp_path):
    report = install_wheelhouses([_delta(tmp_path)], InstallOptions(python=str(image)))
    assert [d.name for d in report.installed] == ["app"]


def test_a_full_wheelhouse_is_not_checked(tmp_path):
    full = make_wheelhouse(tmp_path / "full", [make_wheel(tmp_path / "w", "lib", "1.0")])
    report = install_wheelhouses([full], InstallOptions(venv=tmp_path / "venv"))
    assert not any("assumed" in n for n in report.notes)


def test_equal_versions_compare_as_versions(image, tmp_path):
    delta = _delta(tmp_path, assumed=[{"name": "TorchY", "version": "2.11.0.0+cu130"},
                                      {"name": "numpyish", "version": "2.0.0"}])
    report = install_wheelhouses([delta], InstallOptions(python=str(image)))
    assert [d.name for d in report.installed] == ["app"]


@pytest.mark.parametrize("assumed", [{"torchy": TORCH}, [{"name": "torchy"}], ["torchy==2.11.0"]])
def test_a_damaged_assumed_list_is_refused(image, tmp_path, assumed):
    r = wh("install", _delta(tmp_path, assumed=assumed), "--python", image)
    assert r.returncode == 2, r.stderr
    assert "assumed_present" in r.stderr and "wh.json" in r.stderr
    # Refused as a damaged list, or (a list of the wrong type) already as a wh.json field of the wrong type.
    with pytest.raises((BadAssumedList, LockError), match="assumed_present"):
        install_wheelhouses([_delta(tmp_path, assumed=assumed, name="again")], InstallOptions(python=str(image)))


def test_a_new_venv_of_a_venv_sees_the_parent_and_the_base_system(image, tmp_path):
    """Made from the image venv's python with --system-site-packages, the new venv sees the image venv's
    folders (wh's .pth) AND the base interpreter's site-packages, which the image venv itself does not: the
    check asks what the new venv will see, not what the image's python sees."""
    from wheelhouse.target.installed import installed_distributions

    base = getattr(sys, "_base_executable", None) or sys.executable
    sites = json.loads(subprocess.run([base, "-c", "import json, site; print(json.dumps(site.getsitepackages()))"],
                                      capture_output=True, text=True, check=True).stdout)
    system = [d for d in installed_distributions(base).values() if d.location in sites]  # not the user site
    if not system:
        pytest.skip("the base interpreter has no distributions of its own")
    from_base = {"name": system[0].key, "version": system[0].version}
    assert system[0].key not in installed_distributions(str(image))  # the image venv alone does not see it
    delta = _delta(tmp_path, assumed=[{"name": "torchy", "version": TORCH}, from_base])
    report = install_wheelhouses([delta], InstallOptions(python=str(image), venv=tmp_path / "venv",
                                                         system_site_packages=True))
    assert [d.name for d in report.installed] == ["app"]


def test_with_two_deltas_each_difference_names_its_wheelhouse(image, tmp_path):
    good = _delta(tmp_path, name="good")
    stale = _delta(tmp_path, assumed=[{"name": "torchy", "version": "2.12.0"}], name="stale")
    with pytest.raises(AssumedNotProvided) as err:
        install_wheelhouses([good, stale], InstallOptions(python=str(image)))
    assert err.value.message.count("torchy: wheelhouse assumed") == 1
    assert f"torchy: wheelhouse assumed 2.12.0, the box has {TORCH} [{stale}]" in err.value.detail
    assert "2 wheelhouses" in err.value.message


def test_staged_as_a_delta_against_a_captured_image_then_installed_over_it(pyindex, image, tmp_path):
    """Both sides of the contract: the profile captured by the image's python, `wh stage --target` on a
    loopback index, `wh install` into a venv of the image; then the image moves on and the same wheelhouse
    is refused."""
    from wheelhouse.resources import capture_script

    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0", requires=["torchy>=2", "numpyish"],
               modules={"app/__init__.py": "import torchy\nTORCH = torchy.VERSION\n"})
    for name, version in (("torchy", TORCH), ("torchy", "2.12.0"), ("numpyish", "2.0"), ("numpyish", "2.1")):
        shutil.copy(_dist(tmp_path / "pubsrc", name, version), pub)  # newer ones too: the image's are kept
    idx = pyindex(pub, serve_metadata=True)
    profile = tmp_path / "image.json"
    subprocess.run([image, capture_script(), "-o", profile, "--no-gpus"], check=True, capture_output=True)
    house = tmp_path / "house"
    r = wh("stage", "app", "--target", profile, "-i", idx.url, "-o", house, "--no-bootstrap",
           "--cache-dir", tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    meta = json.loads((house / "wh.json").read_text())
    assert sorted((a["name"], a["version"]) for a in meta["assumed_present"]) == [("numpyish", "2.0"),
                                                                                  ("torchy", TORCH)]
    assert [p.name.split("-")[0] for p in (house / "wheels").iterdir()] == ["app"]
    venv = tmp_path / "venv"
    r = wh("install", house, "--python", image, "--venv", venv, "--system-site-packages")
    assert r.returncode == 0, r.stderr
    got = subprocess.run([venv / "bin" / "python", "-c", "import app; print(app.TORCH)"], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert got == TORCH
    _remove(image, "torchy")  # the image moves on
    install_wheel(image, _dist(tmp_path / "w9", "torchy", "2.12.0"))
    r = wh("install", house, "--python", image, "--venv", tmp_path / "venv2", "--system-site-packages")
    assert r.returncode == 2
    assert f"torchy: wheelhouse assumed {TORCH}, the box has 2.12.0" in r.stderr
    assert not (tmp_path / "venv2").exists()
