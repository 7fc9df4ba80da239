"""bootstrap: BOOTSTRAP.txt's lines work with the pips boxes really have (issue 32.8).

Ubuntu 22.04's pip is 22.0.2 (no `--python`: that arrived in 22.3), Debian 12's is 23.0.1, and a
system Python may have no pip and no ensurepip at all. Each box is a real venv holding that real pip
(or none) standing in for the system Python; the lines are run by a shell as BOOTSTRAP.txt prints them,
offline, and the installed `wh` must run. The pips come from the local cache of pip wheels that
Pythons bundle (hermetic) or, opted in, from the package registry.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

import pytest

from wheelhouse.stage.bootstrap import BOOTSTRAP_TXT, WH_VENV

# Pip wheels already on disk (bundled with Pythons, or Debian's python3-pip-whl), by version.
_LOCAL_PIPS = ("/usr/share/python-wheels/pip-*-py3-none-any.whl",
               "/root/.pyenv/versions/*/lib/python3*/ensurepip/_bundled/pip-*-py3-none-any.whl",
               sys.base_prefix + "/lib/python3*/ensurepip/_bundled/pip-*-py3-none-any.whl")


def _local_pip(prefix: str) -> Path | None:
    for pattern in _LOCAL_PIPS:
        for found in sorted(glob.glob(pattern)):
            if Path(found).name.startswith(f"pip-{prefix}"):
                return Path(found)
    return None


@pytest.fixture(scope="module")
def staged(module_index, repacked_deps, tmp_path_factory) -> Path:
    from wheelmaker import make_wheel
    from wheelhouse.stage import StageInputs, stage
    from wheelhouse.target import host_target

    tmp = tmp_path_factory.mktemp("bootpips")
    make_wheel(tmp / "stack", "app", "1.0")
    idx = module_index(repacked_deps, tmp / "stack", serve_metadata=True)
    out = tmp / "wh"
    stage(StageInputs(host_target(), out, requirements=("app",), index_urls=(idx.url,), cache_dir=tmp / "cache",
                      bootstrap=True))
    return out


@pytest.fixture(scope="module")
def module_index():  # (module-scoped: one staged wheelhouse for every pip)
    from index_fixtures import _pyindex

    gen = _pyindex()
    yield next(gen)
    next(gen, None)


_PIP_SITES: dict[Path, Path] = {}  # pip wheel -> the site-packages a venv got from installing it (this process's)


def _site_of(venv_dir: Path) -> Path:
    return venv_dir / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def _venv_with_pip(venv_dir: Path, pip_wheel: Path) -> None:
    """A venv holding exactly what ``pip install <pip_wheel>`` (pip installing itself from its own wheel, offline)
    puts in site-packages. That install (~5 s: it byte-compiles pip) runs once per wheel in a venv of its own;
    each box copies its files with their times, so the byte code stays valid."""
    venv.create(venv_dir, with_pip=False)
    if pip_wheel not in _PIP_SITES:
        template = Path(tempfile.mkdtemp(prefix="pip-template-")) / "venv"
        venv.create(template, with_pip=False)
        subprocess.run([str(template / "bin" / "python3"), f"{pip_wheel}/pip", "install", "--no-index", "-q",
                        str(pip_wheel)], check=True, capture_output=True,
                       env={"PATH": "/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        _PIP_SITES[pip_wheel] = _site_of(template)
    shutil.copytree(_PIP_SITES[pip_wheel], _site_of(venv_dir), dirs_exist_ok=True, copy_function=shutil.copy2)


def _box(tmp: Path, pip_wheel: Path | None) -> dict[str, str]:
    """A box's shell: ``python3`` is a Python with exactly this pip (none: no pip, no ensurepip used),
    a HOME of its own, no index reachable."""
    py = tmp / "system" / "bin" / "python3"
    if pip_wheel is None:
        venv.create(tmp / "system", with_pip=False)
    else:
        _venv_with_pip(tmp / "system", pip_wheel)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    # A script, not a symlink: a venv's Python finds its pyvenv.cfg beside the path it was started by.
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec {py} "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    (tmp / "home").mkdir()
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp / "home"), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INDEX": "1"}


def _lines(staged: Path) -> list[str]:
    return [ln.strip() for ln in (staged / "bootstrap" / BOOTSTRAP_TXT).read_text().splitlines()
            if ln.startswith("    ")]


def _installs(staged: Path, env: dict, line: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", line], capture_output=True, text=True, cwd=staged, env=env, timeout=300)


def _wh_runs(env: dict) -> bool:
    wh = Path(env["HOME"]) / "wh-venv" / "bin" / "wh"
    return wh.exists() and "0.1.0" in subprocess.run([str(wh), "--version"], capture_output=True, text=True).stdout


def _check_box(staged: Path, tmp: Path, pip_wheel: Path | None, version: str | None) -> None:
    env = _box(tmp, pip_wheel)
    has_pip = subprocess.run(["python3", "-c", "import pip"], capture_output=True, env=env).returncode == 0
    assert has_pip == (pip_wheel is not None)
    if version:
        got = subprocess.run(["python3", "-m", "pip", "--version"], capture_output=True, text=True, env=env)
        assert got.stdout.startswith(f"pip {version}"), got.stdout + got.stderr
    first = _lines(staged)[0]  # the line BOOTSTRAP.txt gives first, and `wh stage` prints
    done = _installs(staged, env, first)
    assert done.returncode == 0, f"{first}\n{done.stderr}"
    assert _wh_runs(env)


def _check_venv_pip_line(staged: Path, tmp: Path, pip_wheel: Path, version: str) -> None:
    """"python3 -m venv ~/wh-venv && ~/wh-venv/bin/python -m pip install ...": the venv's pip is the one
    the distribution's ensurepip bundles (Ubuntu 22.04: 22.0.2). The venv is made with that pip, then
    the line's install step runs as printed."""
    env = _box(tmp, None)
    line = next(ln for ln in _lines(staged) if ln.startswith(f"python3 -m venv {WH_VENV} &&"))
    home_venv = Path(env["HOME"]) / "wh-venv"
    _venv_with_pip(home_venv, pip_wheel)
    pip_v = subprocess.run([str(home_venv / "bin" / "python"), "-m", "pip", "--version"], capture_output=True,
                           text=True, env=env)
    assert pip_v.stdout.startswith(f"pip {version}"), pip_v.stdout
    done = _installs(staged, env, line.split(" && ", 1)[1])
    assert done.returncode == 0, f"{line}\n{done.stderr}"
    assert _wh_runs(env)


def test_the_first_line_needs_no_pip_and_no_ensurepip(staged, tmp_path):
    _check_box(staged, tmp_path, None, None)
    printed = (staged / "wh.json").read_text()
    assert _lines(staged)[0] in printed  # wh.json's (and `wh stage`'s) command is that line


@pytest.mark.parametrize("version", ["22.0", "23.0.1"])
def test_bootstrap_lines_work_with_the_local_old_pips(staged, tmp_path, version):
    """The line an old pip runs: the venv line's install step. (The first line never runs the box's pip: it
    makes a venv ``--without-pip`` from the base Python and installs with bootstrap/'s own pip wheel, so a box
    with an old pip runs it exactly as the box without one does: test_the_first_line_needs_no_pip_and_no_ensurepip.
    The registry test below runs it beside Ubuntu's and Debian's real pips too.)"""
    wheel = _local_pip(version)
    if wheel is None:
        pytest.skip(f"no pip {version} wheel in the local cache of bundled pips")
    assert "/pip install" in _lines(staged)[0] and "python3 -m pip" not in _lines(staged)[0]
    _check_venv_pip_line(staged, tmp_path / "venv-pip", wheel, version)


@pytest.mark.registry
@pytest.mark.parametrize("version", ["22.0.2", "23.0.1"])  # Ubuntu 22.04's, Debian 12's
def test_bootstrap_lines_work_with_ubuntu_and_debian_pips_from_the_registry(staged, tmp_path, version):
    got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                          f"pip=={version}", "-d", str(tmp_path / "dl")], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    wheel = next((tmp_path / "dl").glob("pip-*.whl"))
    _check_box(staged, tmp_path / "system-pip", wheel, version)
    _check_venv_pip_line(staged, tmp_path / "venv-pip", wheel, version)
