"""Split sites under attack: a venv whose ``lib64`` is a link to ``lib`` (platlib is purelib under another
name, Fedora/RHEL/SUSE). wh now calls both by purelib's name; a path under the other name must still be
recognised as the site folder (or wh's state folder) it is.

- a RECORD naming the site folder itself by its ``lib64`` name: an upgrade must not move the whole
  site-packages aside and delete it (``inside_scheme`` compared names: ``lib64/...`` was not a root any more);
- a RECORD naming a file in ``.wh/`` by its ``lib64`` name: wh's state folder is never touched;
- an interrupted install whose journal an older wh wrote under the ``lib64`` name is rolled back;
- ``lib64`` a link to a different folder: still two folders, files land in the linked one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nvidia_fixtures import make_wheelhouse
from split_sites import PY, split_venv
from wheelmaker import make_wheel



def wh(*args, timeout=180, env=None):
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _site(venv: Path, lib: str = "lib") -> Path:
    return venv / lib / PY / "site-packages"


def _py(venv: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([venv / "bin" / "python", "-c", code], capture_output=True, text=True)


@pytest.fixture(params=["relative", "absolute"])
def linked(request, tmp_path) -> Path:
    """``lib64`` -> ``lib`` (what venv makes), or -> the absolute path of ``lib``."""
    return split_venv(tmp_path, "lib" if request.param == "relative" else tmp_path / "venv" / "lib")


def _install_then_upgrade_with_record_line(venv: Path, tmp_path: Path, line: str) -> subprocess.CompletedProcess:
    keep = make_wheel(tmp_path / "w0", "keeper", "1.0", modules={"keeper/__init__.py": "K = 'kept'\n"})
    old = make_wheel(tmp_path / "w1", "evil", "1.0", modules={"evil/__init__.py": "V = 1\n"})
    new = make_wheel(tmp_path / "w2", "evil", "2.0", modules={"evil/__init__.py": "V = 2\n"})
    r = wh("install", make_wheelhouse(tmp_path / "h1", [keep, old]), "--venv", venv)
    assert r.returncode == 0, r.stderr
    record = _site(venv) / "evil-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + line + ",,\n")  # (what a hostile or broken wheel's RECORD says)
    return wh("install", make_wheelhouse(tmp_path / "h2", [new]), "--venv", venv, "--json")


def test_a_record_naming_site_packages_by_its_lib64_name_does_not_remove_it(linked, tmp_path):
    r = _install_then_upgrade_with_record_line(linked, tmp_path, f"../../../lib64/{PY}/site-packages")
    assert r.returncode == 0, r.stderr[-2000:]
    assert (_site(linked) / "keeper" / "__init__.py").is_file(), "the whole site-packages went with evil 1.0"
    out = _py(linked, "import keeper, evil; print(keeper.K, evil.V)")
    assert out.stdout.split() == ["kept", "2"], out.stderr


def test_a_record_naming_whs_state_folder_by_its_lib64_name_leaves_it_alone(linked, tmp_path):
    sentinel = _site(linked) / ".wh" / "keep-me"
    sentinel.parent.mkdir(exist_ok=True)
    sentinel.write_text("wh's\n")
    r = _install_then_upgrade_with_record_line(linked, tmp_path, f"../../../lib64/{PY}/site-packages/.wh/keep-me")
    assert r.returncode == 0, r.stderr[-2000:]
    assert sentinel.is_file(), "a file in wh's state folder was removed through the lib64 name"
    assert (_site(linked) / ".wh" / "installed.json").is_file()


def test_lib64_linked_to_another_folder_stays_a_folder_of_its_own(tmp_path):
    other = tmp_path / "elsewhere"
    (other / PY / "site-packages").mkdir(parents=True)
    venv = split_venv(tmp_path, other)
    tags = "py3-none-" + ("manylinux_2_17_x86_64" if sys.platform == "linux" else "any")
    plat = make_wheel(tmp_path / "w", "platonly", "1.0", tags=tags, modules={"platonly/__init__.py": "V = 1\n"})
    pure = make_wheel(tmp_path / "w", "pureonly", "1.0", modules={"pureonly/__init__.py": "V = 1\n"})
    r = wh("install", make_wheelhouse(tmp_path / "h", [plat, pure]), "--venv", venv, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert (other / PY / "site-packages" / "platonly" / "__init__.py").is_file()
    assert (_site(venv) / "pureonly" / "__init__.py").is_file()
    assert not (_site(venv) / "platonly").exists()
    again = wh("install", make_wheelhouse(tmp_path / "h", [plat, pure]), "--venv", venv, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["installed"] == [], again.stdout


def _kill_mid_upgrade(venv: Path, tmp_path: Path) -> tuple[Path, Path]:
    """alpha 1.0 installed, the upgrade to 2.0 killed once the old files are backed up; the journal rewritten
    as an older wh wrote it on this layout (every path under the lib64 name). Returns (journal, upgrade's house)."""
    import os

    a1 = make_wheel(tmp_path / "w1", "alpha", "1.0", modules={"alpha/__init__.py": "V = 1\n", "alpha/old.py": ""})
    a2 = make_wheel(tmp_path / "w2", "alpha", "2.0", modules={"alpha/__init__.py": "V = 2\n"})
    assert wh("install", make_wheelhouse(tmp_path / "h1", [a1]), "--venv", venv).returncode == 0
    h2 = make_wheelhouse(tmp_path / "h2", [a2])
    killed = wh("install", h2, "--venv", venv, env={**os.environ, "WH_FAULT": "install.backed-up:kill"})
    assert killed.returncode == -9, killed.stderr
    journal = _site(venv) / ".wh" / "journal.json"
    text = journal.read_text()
    assert f"/lib/{PY}/" in text
    journal.write_text(text.replace(f"/lib/{PY}/", f"/lib64/{PY}/"))
    assert not (_site(venv) / "alpha" / "__init__.py").exists()  # (backed up: the import is broken now)
    return journal, h2


def test_an_upgrade_an_older_wh_left_unfinished_under_the_lib64_name_is_rolled_back_then_done(linked, tmp_path):
    journal, h2 = _kill_mid_upgrade(linked, tmp_path)
    r = wh("install", h2, "--venv", linked, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert not journal.exists()
    out = _py(linked, "import alpha, importlib.metadata as m; print(alpha.V, m.version('alpha'))")
    assert out.stdout.split() == ["2", "2.0"], out.stderr
    assert not (_site(linked) / "alpha" / "old.py").exists() and not (_site(linked) / "alpha-1.0.dist-info").exists()


def test_the_doctor_names_an_unfinished_install_once_not_once_per_name_of_its_folder(linked, tmp_path):
    journal, _ = _kill_mid_upgrade(linked, tmp_path)
    doc = wh("doctor", "--python", linked / "bin" / "python", "--json")
    report = json.loads(doc.stdout)
    check = next(c for c in report["results"] if c["id"] == "install:transaction")
    assert check["verdict"] == "fail", check
    assert len(check["data"]["unfinished"]) == 1, check["data"]  # one journal, one unfinished install


def test_the_doctor_lists_a_folder_reached_by_two_names_once(linked):
    """The NVIDIA lib folder inside site-packages, reached through lib/ and lib64/: the links checks name each
    missing link once (``lib64`` on ``sys.path`` too: the site folder was scanned under both names)."""
    lib = _site(linked) / "nvidia" / "cublas" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcublas.so.12").write_bytes(b"\x7fELF not really\n")
    doc = wh("doctor", "--python", linked / "bin" / "python", "--json")
    report = json.loads(doc.stdout)
    check = next(c for c in report["results"] if c["id"] == "links:lib64")
    assert check["verdict"] == "ok", check  # nothing here searches lib64: named, not failed (issue 28.11)
    assert check["evidence"].count("nvidia/cublas/lib64 missing") == 1, check["evidence"]
