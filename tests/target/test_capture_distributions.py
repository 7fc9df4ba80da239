"""What the image provides: the distributions a target interpreter imports, captured by that interpreter.

Real venvs made on the spot, real wheels unpacked into them (with their RECORD), the capture
script run by the venv's own python exactly as on the box (``python capture_target.py -o FILE``
from a wheelhouse folder). The layering is the one images have: a venv of the image's venv
(``wh install --system-site-packages`` writes a ``.pth`` to the parent's site folder), over the
base interpreter's own site-packages.
"""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import install_wheel, make_venv, site_packages
from wheelmaker import make_wheel
from wheelhouse.errors import TargetError
from wheelhouse.resources import capture_script
from wheelhouse.target import load_target, target_from_json
from wheelhouse.target.interpreter import create_venv, inspect_interpreter


def _wheel(tmp_path: Path, name: str, version: str) -> Path:
    mod = name.replace("-", "_")
    return make_wheel(tmp_path / "wheels" / f"{name}-{version}", name, version,
                      modules={f"{mod}/__init__.py": f"VERSION = {version!r}\n"})


def _capture(python: Path, tmp_path: Path, *args: str) -> dict:
    """Run the capture script as the box does: a copy inside a wheelhouse folder, by the target's python."""
    house = tmp_path / "house"
    house.mkdir(exist_ok=True)
    script = house / "capture_target.py"
    shutil.copy(capture_script(), script)
    # The script's own folder comes first on sys.path; what lies there is no part of the image.
    decoy = house / "decoy-9.9.dist-info"
    decoy.mkdir(exist_ok=True)
    (decoy / "METADATA").write_text("Metadata-Version: 2.1\nName: decoy\nVersion: 9.9\n")
    out = tmp_path / "profile.json"
    subprocess.run([str(python), str(script), "-o", str(out), "--no-gpus", *args], check=True,
                   capture_output=True, cwd=house)
    return json.loads(out.read_text())


def _base_python() -> str:
    return getattr(sys, "_base_executable", None) or sys.executable


def wh(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def _asked(python: Path | str, code: str) -> str:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, cwd="/").stdout.strip()


def _base_sites() -> list[str]:
    return json.loads(_asked(_base_python(), "import json, site; print(json.dumps(site.getsitepackages()))"))


@pytest.fixture(scope="module")
def base_dists(tmp_path_factory) -> list[dict]:
    """What the base interpreter (the venvs' system) provides, captured by itself."""
    tmp = tmp_path_factory.mktemp("base")
    return _capture(Path(_base_python()), tmp)["distributions"]


@pytest.fixture
def layered(tmp_path, base_dists):
    """image venv (--system-site-packages) -> app venv of it, each with real wheels installed.

    image: alpha 1.0, beta 1.0, and a copy of one base distribution (shadowing the base's);
    app:   alpha 2.0 (shadows the image's alpha 1.0), gamma 1.0.
    """
    image = tmp_path / "image"
    subprocess.run([_base_python(), "-m", "venv", "--without-pip", "--system-site-packages", str(image)],
                   check=True, capture_output=True)
    image_py = image / "bin" / "python"
    for name, version in (("alpha", "1.0"), ("beta", "1.0")):
        install_wheel(image_py, _wheel(tmp_path, name, version))
    shadowed = next((d for d in base_dists if d["path"] in _base_sites()), None)
    if shadowed:
        install_wheel(image_py, _wheel(tmp_path, shadowed["name"], "0.0.1"))
    app = create_venv(tmp_path / "app", python=image_py, system_site_packages=True)  # writes the parent .pth
    app_py = Path(app.executable)
    for name, version in (("alpha", "2.0"), ("gamma", "1.0")):
        install_wheel(app_py, _wheel(tmp_path, name, version))
    return {"image": image_py, "app": app_py, "shadowed": shadowed}


def test_a_venv_of_the_image_venv_lists_venv_then_parent_then_system_first_copy_wins(layered, tmp_path, base_dists):
    data = _capture(layered["app"], tmp_path)
    dists = data["distributions"]
    by_name = {d["name"]: d for d in dists}
    assert [d["name"] for d in dists].count("alpha") == 1
    assert by_name["alpha"]["version"] == "2.0"  # the app's copy; the image's 1.0 is shadowed, provided by nobody
    assert _asked(layered["app"], "import alpha; print(alpha.VERSION)") == "2.0"
    assert by_name["alpha"]["where"] == by_name["gamma"]["where"] == "venv"
    assert by_name["alpha"]["path"] == str(site_packages(layered["app"]))
    assert by_name["beta"] == {"name": "beta", "version": "1.0", "where": "parent",
                               "path": str(site_packages(layered["image"]))}
    assert "decoy" not in by_name  # the script's own folder is not the image
    # In sys.path order: every venv entry, then every parent entry, then the system's.
    wheres = [d["where"] for d in dists]
    assert wheres == sorted(wheres, key=["venv", "parent", "system"].index)
    shadowed = layered["shadowed"]
    if shadowed is None:
        pytest.skip("the base interpreter has no distributions of its own to show as 'system'")
    assert by_name[shadowed["name"]]["version"] == "0.0.1"  # the image venv's copy hides the base's
    assert by_name[shadowed["name"]]["where"] == "parent"
    system = [d for d in dists if d["where"] == "system"]
    assert system, "the base's site-packages is visible through --system-site-packages"
    # A venv sees the base's site folders, not its user site: compare on the folders both have.
    seen = set(json.loads(_asked(layered["app"], "import json, sys; print(json.dumps(sys.path))")))
    expected = [d for d in base_dists
                if d["name"] not in ("alpha", "beta", "gamma", shadowed["name"]) and d["path"] in seen]
    assert [(d["name"], d["version"], d["path"]) for d in system] == \
        [(d["name"], d["version"], d["path"]) for d in expected]


def test_what_capture_lists_is_what_importlib_metadata_answers_in_that_interpreter(layered, tmp_path):
    dists = _capture(layered["app"], tmp_path)["distributions"]
    asked = json.loads(_asked(layered["app"], "import importlib.metadata as m, json; print(json.dumps("
                                              "{n: m.version(n) for n in ['alpha', 'beta', 'gamma']}))"))
    assert {d["name"]: d["version"] for d in dists if d["name"] in asked} == asked


def test_a_plain_venv_provides_only_its_own(tmp_path):
    py = make_venv(tmp_path / "plain")
    install_wheel(py, _wheel(tmp_path, "Zeta_Pkg", "3.1"))  # Name: Zeta_Pkg -> canonical zeta-pkg
    dists = _capture(py, tmp_path)["distributions"]
    assert dists == [{"name": "zeta-pkg", "version": "3.1", "where": "venv", "path": str(site_packages(py))}]


def test_broken_and_stashed_metadata_is_skipped(tmp_path):
    py = make_venv(tmp_path / "v")
    site = site_packages(py)
    install_wheel(py, _wheel(tmp_path, "good", "1.0"))
    (site / "nameless-1.0.dist-info").mkdir()
    (site / "nameless-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nVersion: 1.0\n")
    (site / "versionless-1.0.dist-info").mkdir()
    (site / "versionless-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: versionless\n")
    (site / "empty-1.0.dist-info").mkdir()  # a copy an installer was killed writing
    (site / "~ood-0.1.dist-info").mkdir()  # pip's stash of the copy it is replacing
    (site / "~ood-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: good\nVersion: 0.1\n")
    (site / "legacy.egg-info").write_text("Metadata-Version: 1.0\nName: Legacy\nVersion: 0.5\n")
    (site / "spaced-1.0.dist-info").mkdir()  # not a distribution name: a profile holding it would not load
    (site / "spaced-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: two words\nVersion: 1\n")
    data = _capture(py, tmp_path)
    assert sorted((d["name"], d["version"]) for d in data["distributions"]) == [("good", "1.0"), ("legacy", "0.5")]
    assert target_from_json(data).provided  # what capture writes, a profile loads


def test_the_stdlib_only_scan_agrees_with_importlib_metadata(layered):
    """Python 3.7 has no importlib.metadata: the folder scan must give the same answer."""
    code = ("import importlib.util, json, sys; spec = importlib.util.spec_from_file_location('c', sys.argv[1]); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            "print(json.dumps([m.provided_distributions(True), m.provided_distributions(False)]))")
    out = subprocess.run([str(layered["app"]), "-I", "-c", code, str(capture_script())], capture_output=True,
                         text=True, check=True).stdout
    with_importlib, scanned = json.loads(out)
    assert len(with_importlib) > 3
    # Within one folder importlib.metadata keeps the file system's order, the scan sorts: compare per folder.
    key = lambda d: (d["path"], d["name"])  # noqa: E731
    assert sorted(scanned, key=key) == sorted(with_importlib, key=key)
    assert [d["path"] for d in scanned] == [d["path"] for d in with_importlib]


def _old_python() -> str | None:
    found = sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.7*/bin/python3.7"))) or \
        [p for p in [shutil.which("python3.7")] if p]
    return found[0] if found else None


@pytest.mark.skipif(_old_python() is None, reason="no CPython 3.7 on this machine")
def test_capture_runs_on_cpython_3_7(tmp_path):
    py = make_venv_with(_old_python(), tmp_path / "old")
    install_wheel(py, _wheel(tmp_path, "oldpkg", "1.2"))
    data = _capture(py, tmp_path)
    assert data["python_version"] == "3.7"
    assert data["distributions"] == [{"name": "oldpkg", "version": "1.2", "where": "venv",
                                      "path": str(site_packages(py))}]


def make_venv_with(python: str, path: Path) -> Path:
    subprocess.run([python, "-m", "venv", "--without-pip", str(path)], check=True, capture_output=True)
    return path / "bin" / "python"


def test_no_distributions_leaves_the_key_out(tmp_path):
    py = make_venv(tmp_path / "v")
    install_wheel(py, _wheel(tmp_path, "good", "1.0"))
    data = _capture(py, tmp_path, "--no-distributions")
    assert "distributions" not in data
    assert target_from_json(data).provided == ()


def test_the_profile_round_trips_through_json(layered, tmp_path):
    data = _capture(layered["app"], tmp_path)
    profile = target_from_json(data)
    assert [d.to_json() for d in profile.provided] == data["distributions"]
    again = tmp_path / "again.json"
    again.write_text(json.dumps(profile.to_json()))
    assert load_target(again) == profile
    assert load_target(again).provided == profile.provided


def test_the_install_probe_and_the_host_profile_carry_no_distributions(tmp_path):
    """wh's own environment is no image: a stage for the host is never a delta by accident."""
    from wheelhouse.target import host_target

    assert host_target().provided == ()
    py = make_venv(tmp_path / "v")
    install_wheel(py, _wheel(tmp_path, "good", "1.0"))
    assert inspect_interpreter(py).target.provided == ()


def test_wh_target_capture_and_show(tmp_path):
    out = tmp_path / "p.json"
    got = wh("target", "capture", "--no-gpus", "-o", out)
    assert got.returncode == 0, got.stderr
    data = json.loads(out.read_text())
    assert {d["name"] for d in data["distributions"]} >= {"click", "packaging"}  # wh's own dependencies
    assert f"({len(data['distributions'])} distributions)" in got.stderr
    shown = wh("target", "show", "--target", out)
    assert shown.returncode == 0, shown.stderr
    assert f"{len(data['distributions'])} distributions provided by the image" in shown.stdout
    as_json = wh("target", "show", "--target", out, "--json")
    assert json.loads(as_json.stdout)["distributions"] == data["distributions"]
    bare = wh("target", "capture", "--no-gpus", "--no-distributions")
    assert "distributions" not in json.loads(bare.stdout)
    (tmp_path / "none.json").write_text(bare.stdout)
    assert "no distributions recorded" in wh("target", "show", "--target", tmp_path / "none.json").stdout


_GOOD = {"name": "torch", "version": "2.10.0", "where": "system", "path": "/usr/lib/python3/dist-packages"}


@pytest.mark.parametrize("distributions, named", [
    ({"torch": "2.10.0"}, "distributions must be a list"),
    (["torch==2.10.0"], "distributions[0] must be an object"),
    ([{"version": "1.0"}], "distributions[0]: name must be a distribution name"),
    ([{"name": "torch vision", "version": "1.0"}], "name must be a distribution name, not 'torch vision'"),
    ([_GOOD, {"name": "numpy"}], "distribution numpy: version must be a non-empty string"),
    ([{**_GOOD, "version": 2.1}], "distribution torch: version must be a non-empty string, not 2.1"),
    ([{**_GOOD, "where": "image"}], "distribution torch: where must be one of venv, parent, system, not 'image'"),
    ([{**_GOOD, "path": 3}], "distribution torch: path must be a string or null"),
    ([_GOOD, {**_GOOD, "name": "Torch", "version": "2.11.0"}], "distribution Torch is listed twice"),
])
def test_a_hand_edited_distributions_list_is_refused_by_name(tmp_path, distributions, named):
    data = _capture(make_venv(tmp_path / "v"), tmp_path)
    data["distributions"] = distributions
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(TargetError) as err:
        load_target(bad)
    assert named in err.value.message
    assert str(bad) in err.value.message
    got = wh("target", "show", "--target", bad)
    assert got.returncode == 2
    assert named in got.stderr


def test_names_are_canonical_and_where_defaults_to_system(tmp_path):
    data = _capture(make_venv(tmp_path / "v"), tmp_path)
    data["distributions"] = [{"name": "Flash_Attn", "version": " 2.8.3 "}]
    provided = target_from_json(data).provided
    assert [(d.name, d.version, d.where, d.path) for d in provided] == [("flash-attn", "2.8.3", "system", None)]


BUNDLED = Path(__file__).resolve().parents[2] / "manifests" / "targets"


@pytest.mark.parametrize("profile", sorted(BUNDLED.glob("*.json")), ids=lambda p: p.name)
def test_every_bundled_profile_loads_and_round_trips(profile, tmp_path):
    loaded = load_target(profile)
    again = tmp_path / profile.name
    again.write_text(json.dumps(loaded.to_json()))
    assert load_target(again) == loaded
    names = [d.name for d in loaded.provided]
    assert len(names) == len(set(names))


def test_the_script_refuses_an_unknown_flag(tmp_path):
    r = subprocess.run([sys.executable, str(capture_script()), "--distributions-only"], capture_output=True, text=True)
    assert r.returncode == 2 and "usage: python capture_target.py" in r.stderr and r.stdout == ""


def test_wh_target_capture_python_captures_that_interpreter_not_wh_s_own(tmp_path):
    # issue 32 (4): run from ~/wh-venv as BOOTSTRAP.txt sets it up, capture must describe the image's python
    from faults import wh_command

    image = make_venv(tmp_path / "image")
    install_wheel(image, _wheel(tmp_path, "imagepkg", "3.1"))
    out = tmp_path / "box.json"
    r = subprocess.run(wh_command(["target", "capture", "--python", str(image), "--no-gpus", "-o", str(out)]),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    names = {d["name"] for d in data["distributions"]}
    assert "imagepkg" in names and "wh" not in names  # the image's, not wh's own venv's
    assert ("imagepkg", "3.1") in {(d.name, d.version) for d in load_target(out).provided}
    own = subprocess.run(wh_command(["target", "capture", "--no-gpus"]), capture_output=True, text=True, timeout=300)
    assert "wh" in {d["name"] for d in json.loads(own.stdout)["distributions"]}  # without --python: wh's own
    bad = subprocess.run(wh_command(["target", "capture", "--python", str(tmp_path / "nope")]),
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr
