"""wh drop --restore: honours --wheelhouse; dropped.json agrees with what is installed (issue 11.16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broken_packages import install_wheel, make_venv, site_packages
from index_fixtures import pyindex  # noqa: F401  (fixture)
from nvidia_fixtures import make_wheelhouse
from wheelhouse.doctor.drop import DropPlan, RestoreResult, drop_distributions, read_dropped, restore_dropped
from wheelmaker import make_wheel


def wh(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")} | {"NO_COLOR": "1", "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True, env=env)


def _find(py: Path, module: str) -> bool:
    out = subprocess.run([str(py), "-c", f"import importlib.util as u; print(u.find_spec({module!r}) is not None)"],
                         capture_output=True, text=True, cwd="/", check=True)
    return out.stdout.strip() == "True"


@pytest.fixture
def dropped(tmp_path):
    """A pip-less venv whose `victim` was dropped; the wheelhouse it came from is recorded."""
    wheel = make_wheel(tmp_path / "w", "victim", "1.0", modules={"victim/__init__.py": "raise ImportError('broken')\n"})
    house = make_wheelhouse(tmp_path / "house", [wheel])
    py = make_venv(tmp_path / "venv")
    install_wheel(py, wheel)
    [rec] = drop_distributions(str(py), [DropPlan("victim", "1.0", ("victim",), "import failed", "ImportError", None)],
                               wheelhouse=house)
    assert rec.confirmed and not _find(py, "victim")
    return py, house, wheel


def test_restore_honours_wheelhouse_when_the_recorded_one_moved(dropped, tmp_path):
    """Before: --wheelhouse was ignored; the recorded (moved) wheelhouse was 'no longer there'."""
    py, house, _ = dropped
    moved = tmp_path / "moved-house"
    house.rename(moved)
    r = wh("drop", "--python", py, "--restore", "victim", "--wheelhouse", moved, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["restored"] == "victim" and out["wheelhouse"] == str(moved)
    assert f"restored victim 1.0 from {moved}" in r.stderr
    assert _find(py, "victim") and read_dropped(site_packages(py)) == []


def test_restore_names_the_version_it_installed(dropped, tmp_path):
    """Hostile round 9: the wheelhouse given holds victim 2.0 (its lock moved since the drop): 2.0 is installed, and
    the report said "restored victim 1.0"."""
    py, _, _ = dropped
    newer = make_wheel(tmp_path / "w2", "victim", "2.0", modules={"victim/__init__.py": "X = 2\n"})
    other = make_wheelhouse(tmp_path / "other-house", [newer])
    r = wh("drop", "--python", py, "--restore", "victim", "--wheelhouse", other, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["version"] == "2.0" and f"restored victim 2.0 from {other}" in r.stderr
    assert [p.name for p in site_packages(py).glob("victim-*.dist-info")] == ["victim-2.0.dist-info"]


def test_restore_with_a_wheelhouse_that_lacks_it_is_refused_and_keeps_the_record(dropped, tmp_path):
    py, _, _ = dropped
    other = make_wheelhouse(tmp_path / "other", [make_wheel(tmp_path / "w2", "unrelated", "1.0")])
    r = wh("drop", "--python", py, "--restore", "victim", "--wheelhouse", other)
    assert r.returncode != 0 and "error: " in r.stderr and "hint: " in r.stderr and "Traceback" not in r.stderr
    assert [e["name"] for e in read_dropped(site_packages(py))] == ["victim"]


def test_a_manual_reinstall_is_reconciled(dropped):
    """Before: pip-installing the wheel by hand left victim listed as dropped forever."""
    py, _, wheel = dropped
    install_wheel(py, wheel)
    r = wh("drop", "--python", py, "--list", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [] and "victim is installed again" in r.stderr
    assert read_dropped(site_packages(py)) == []


def test_restore_of_a_manually_reinstalled_distribution_says_so(dropped):
    py, _, wheel = dropped
    install_wheel(py, wheel)
    result = restore_dropped(str(py), "victim")
    assert isinstance(result, RestoreResult) and result.already_installed and result.install is None
    assert read_dropped(site_packages(py)) == []
    with pytest.raises(Exception, match="victim was not dropped"):
        restore_dropped(str(py), "victim")


def test_an_install_from_an_archive_records_the_archive_and_restore_takes_it_from_there(tmp_path, pyindex):
    """Before: installed.json named the deleted temporary folder, so `wh drop --restore` could not find it."""
    from carry_fixtures import staged_wheelhouse
    from wheelhouse.install import read_install_state

    house = staged_wheelhouse(tmp_path, pyindex)
    archive = tmp_path / "carried" / "wh.tar"
    assert wh("pack", house, "-o", archive).returncode == 0
    venv = tmp_path / "v"
    r = wh("install", archive, "--venv", venv, "--no-patches", "--json")
    assert r.returncode == 0, r.stderr
    py = venv / "bin" / "python"
    state = read_install_state(site_packages(py))
    assert state["wheelhouses"] == [str(archive)] and state["packages"]["app"]["wheelhouse"] == str(archive)
    [rec] = drop_distributions(str(py), [DropPlan("app", "1.0", ("app",), "import failed", "ImportError", None)])
    assert rec.confirmed and not _find(py, "app")
    out = restore_dropped(str(py), "app")
    assert out.wheelhouse == str(archive) and _find(py, "app")
    leftovers = [p for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("wh-unpacked-*") if p.stat().st_mtime > archive.stat().st_mtime]
    assert leftovers == []  # the archive was unpacked for the restore, then removed


def test_restore_takes_an_archive_given_with_wheelhouse(tmp_path, pyindex):
    """Before: `--wheelhouse X.tar` was refused ("not a wheelhouse (no wh.json)") though --help names archives."""
    from carry_fixtures import staged_wheelhouse

    house = staged_wheelhouse(tmp_path, pyindex)
    archive = tmp_path / "carried" / "wh.tar"
    assert wh("pack", house, "-o", archive).returncode == 0
    venv = tmp_path / "v"
    assert wh("install", house, "--venv", venv, "--no-patches").returncode == 0
    py = venv / "bin" / "python"
    [rec] = drop_distributions(str(py), [DropPlan("lib", "2.0", ("lib",), "import failed", "ImportError", None)])
    site = site_packages(py)
    assert rec.confirmed and not list(site.glob("lib-*.dist-info"))  # (cwd / holds a folder named lib)
    r = wh("drop", "--python", py, "--restore", "lib", "--wheelhouse", archive)
    assert r.returncode == 0, r.stderr
    assert f"restored lib 2.0 from {archive}" in r.stderr and list(site.glob("lib-2.0.dist-info"))
    assert read_dropped(site_packages(py)) == []


def test_a_forced_drop_of_a_patched_distribution_is_a_drop_not_a_damaged_install(tmp_path, pyindex):
    """Before: the repair planner hashed RECORD rows without wh patch's record: app, whose __init__.py holds the
    stack's patch payload (stack:files ok), was "a damaged install: reinstalled instead", and the reinstall applied
    the same patch again: the forced drop never happened."""
    from carry_fixtures import staged_wheelhouse

    house = staged_wheelhouse(tmp_path, pyindex)
    venv = tmp_path / "v"
    assert wh("install", house, "--venv", venv).returncode == 0
    py = venv / "bin" / "python"
    manifest = tmp_path / "m.toml"
    manifest.write_text('[stack]\nname = "x"\nrequirements = []\n'
                        '[[drop]]\ndistribution = "app"\nmodule = "app"\nreason = "test"\nforce = true\n')
    r = wh("drop", "--python", py, "--manifest", manifest, "--include-forced", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [d["name"] for d in out["dropped"]] == ["app"], out
    assert not any("damaged" in k["reason"] for k in out["not_dropped"]) and not out.get("reinstall")
    assert not _find(py, "app")
