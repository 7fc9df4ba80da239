"""One install at a time per target, and never into wh's own environment by accident (issue 11.3, 12)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from faults import wh_command
from nvidia_fixtures import make_wheelhouse
from venv_check import installed_files, lock_problems
from wheelmaker import make_wheel

from wheelhouse.folderlock import FolderLock, is_locked

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def site(venv: Path) -> Path:
    return venv / "lib" / PY / "site-packages"


def _house(tmp_path: Path) -> Path:
    w = tmp_path / "w"
    return make_wheelhouse(tmp_path / "house", [
        make_wheel(w, "wh-lock-probe", "1.0", modules={f"wh_lock_probe/m{i}.py": "X = 1\n" * 200 for i in range(150)}),
        make_wheel(w, "wh-lock-other", "1.0", modules={"wh_lock_other.py": ""}),
    ])


def _own_env_has_probe() -> bool:
    import sysconfig
    return "wh-lock-probe" in installed_files(sys.executable, sysconfig.get_paths()["purelib"])


def test_install_without_a_target_refuses_and_names_the_flags(tmp_path):
    house = _house(tmp_path)
    r = subprocess.run(wh_command(["install", house]), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "error: no target" in r.stderr and "--venv" in r.stderr
    assert "hint: " in r.stderr and f"--python {sys.executable}" in r.stderr
    assert not _own_env_has_probe()


def test_two_concurrent_installs_into_one_new_venv_serialise(tmp_path):
    house = _house(tmp_path)
    venv = tmp_path / "venv"
    procs = [subprocess.Popen(wh_command(["install", house, "--venv", venv]), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    into = [line for _, err in outs for line in err.splitlines() if line.startswith("installed ")]
    assert all(str(venv / "bin" / "python") in line for line in into), into  # neither went into wh's own env
    assert sorted(line.split(",")[0] for line in into) == ["installed 0", "installed 2"]
    assert lock_problems(venv / "bin" / "python", site(venv), house) == []
    assert not _own_env_has_probe()


def test_a_second_run_waits_for_the_lock_with_a_message(tmp_path):
    house = _house(tmp_path)
    venv = tmp_path / "venv"
    held = FolderLock(venv, create=True).acquire()
    assert is_locked(venv)
    proc = subprocess.Popen(wh_command(["install", house, "--venv", venv]), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        assert proc.poll() is None  # still waiting
        assert not (venv / "bin").exists()
    finally:
        held.release()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert f"waiting for another wh run on {venv}" in " ".join(err.replace("\n/", "/").split())
    assert not is_locked(venv)
    assert lock_problems(venv / "bin" / "python", site(venv), house) == []


def test_the_lock_of_a_dead_holder_is_free(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               f"fd = os.open({str(folder)!r}, os.O_RDONLY)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
                               "print('held', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    assert is_locked(folder)
    holder.kill()
    holder.wait()
    holder.stdout.close()
    with FolderLock(folder) as lock:  # taken at once: the kernel dropped the dead holder's lock
        assert not lock.created and is_locked(folder)
    assert not is_locked(folder)


def test_an_interpreter_whose_site_folder_does_not_exist_yet_is_locked_above_it(tmp_path):
    """A system python's dist-packages may not exist before its first install: lock its nearest folder."""
    import shutil as _shutil

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    _shutil.rmtree(site(venv))
    house = _house(tmp_path)
    r = subprocess.run(wh_command(["install", house, "--python", venv / "bin" / "python"]), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert lock_problems(venv / "bin" / "python", site(venv), house) == []


def test_a_folder_that_is_not_a_venv_is_refused_and_left_alone(tmp_path):
    """--venv naming a user's folder with files (not a venv): refused, and not one of its files removed."""
    house = _house(tmp_path)
    mine = tmp_path / "project"
    (mine / "src").mkdir(parents=True)
    (mine / "notes.txt").write_text("keep\n")
    (mine / "src" / "main.py").write_text("print(1)\n")
    r = subprocess.run(wh_command(["install", house, "--venv", mine]), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "is not a venv" in r.stderr, r.stderr
    assert (mine / "notes.txt").read_text() == "keep\n" and (mine / "src" / "main.py").read_text() == "print(1)\n"
    # An empty folder given as --venv is made a venv; refused (here: nothing to install for it), it is left empty.
    empty = tmp_path / "empty"
    empty.mkdir()
    other = make_wheelhouse(tmp_path / "bad", [make_wheel(tmp_path / "wb", "needs", "1.0", requires=["absent"])])
    r = subprocess.run(wh_command(["install", other, "--venv", empty]), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and empty.is_dir() and not list(empty.iterdir())


def test_a_file_given_as_venv_is_a_clear_error(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    r = subprocess.run(wh_command(["install", _house(tmp_path), "--venv", f]), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2 and "is a file" in r.stderr and "hint:" in r.stderr, r.stderr  # click says it
    from wheelhouse.errors import UsageError
    from wheelhouse.install import InstallOptions, install_wheelhouses
    with pytest.raises(UsageError, match="is a file, not a folder"):  # and the library, for other callers
        install_wheelhouses([_house(tmp_path / "2")], InstallOptions(venv=f))
    assert f.read_text() == "x"


def test_a_venv_that_cannot_be_made_is_a_clear_error(tmp_path):
    (tmp_path / "afile").write_text("x")
    r = subprocess.run(wh_command(["install", _house(tmp_path), "--venv", tmp_path / "afile" / "venv"]),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "cannot make or open that folder" in r.stderr and "hint:" in r.stderr, r.stderr
