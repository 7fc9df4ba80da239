"""bootstrap: wh's own wheel (from the checkout, cached by content) and repacked installed dists."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from wheelhouse.stage.bootstrap import (
    BOOTSTRAP_TXT,
    BootstrapError,
    bootstrap_command,
    pip_wheel_of,
    repack_installed,
    self_wheel,
    write_bootstrap,
)
from wheelhouse.lock.bootstrap import wheel_requirements
from wheelhouse.install import closure
from wheelhouse.lock import LockedFile, read_pylock
from wheelhouse.stage.pipeline import _bootstrap_requirements
from wheelhouse.target import target_from_flags


def _record_ok(wheel: Path) -> list[str]:
    """Check every RECORD line against the archive; return the archive's names."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        for line in zf.read(record).decode().splitlines():
            path, digest, size = line.rsplit(",", 2)
            if path == record:
                continue
            data = zf.read(path)
            algo, _, b64 = digest.partition("=")
            assert algo == "sha256"
            assert base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode() == b64, path
            assert int(size) == len(data), path
    return names


def test_self_wheel_from_checkout_has_the_cli_and_is_cached(tmp_path):
    first = self_wheel(tmp_path / "cache")
    assert first.origin == "checkout"
    names = _record_ok(first.path)
    assert "wheelhouse/cli/__init__.py" in names and "wheelhouse/stage/__init__.py" in names
    assert "wheelhouse/target/capture.py" in names
    with zipfile.ZipFile(first.path) as zf:
        ep = zf.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "wh = wheelhouse.cli:main" in ep
    mtime = first.path.stat().st_mtime_ns
    again = self_wheel(tmp_path / "cache")
    assert again.path == first.path and again.path.stat().st_mtime_ns == mtime  # cache hit, no rebuild
    # The checkout is not littered with build output.
    root = Path(__file__).resolve().parents[2]
    assert not (root / "build").exists() or not any((root / "build").glob("lib*/wheelhouse/stage/__init__.py"))


def test_self_wheel_carries_every_subpackage_of_the_checkout(built_self_wheel):
    """A subpackage missing from pyproject's package list would be missing on the box."""
    root = Path(__file__).resolve().parents[2]
    wanted = {p.parent.relative_to(root).as_posix() + "/__init__.py" for p in (root / "wheelhouse").rglob("__init__.py")
              if "__pycache__" not in p.parts}
    with zipfile.ZipFile(built_self_wheel) as zf:
        names = set(zf.namelist())
    assert wanted <= names, sorted(wanted - names)


def test_repack_installed_makes_a_valid_wheel_without_bytecode(tmp_path):
    wheel = repack_installed("click", tmp_path)
    assert wheel.name.startswith("click-") and wheel.name.endswith("-py3-none-any.whl")
    names = _record_ok(wheel)
    assert "click/__init__.py" in names
    assert not [n for n in names if n.endswith(".pyc") or n.endswith("/INSTALLER") or n.endswith("/direct_url.json")]
    # Same files, same bytes: the repack is reproducible, so it can be cached by content.
    again = repack_installed("click", tmp_path / "again")
    assert again.read_bytes() == wheel.read_bytes()


def test_repack_of_something_not_installed_is_a_clear_error(tmp_path):
    with pytest.raises(BootstrapError) as err:
        repack_installed("surely-not-installed-here", tmp_path)
    assert "not installed" in err.value.message and err.value.hint


def test_editable_install_is_not_repacked(tmp_path):
    # The dev venv installs wh editable (or sees the checkout's egg-info): no files to repack.
    with pytest.raises(BootstrapError, match="editable|RECORD"):
        repack_installed("wh", tmp_path)


def test_wh_dependencies_are_judged_for_the_target(built_self_wheel):
    wheel = built_self_wheel
    reqs = {str(r).split(">")[0].split("=")[0] for r in wheel_requirements(wheel)}
    assert {"click", "packaging", "resolvelib", "rich"} <= reqs
    py310 = _bootstrap_requirements(wheel, target_from_flags("3.10", ["manylinux_2_35_x86_64"]))
    py312 = _bootstrap_requirements(wheel, target_from_flags("3.12", ["manylinux_2_35_x86_64"]))
    assert "tomli" in {Requirement(r).name for r in py310}  # tomli; python_version < "3.11"
    assert "tomli" not in {Requirement(r).name for r in py312}
    assert "tomli-w" in {canonicalize_name(Requirement(r).name) for r in py312}  # writes pylock.toml, everywhere
    assert not any(r.startswith("pytest") for r in py312)  # the test extra stays out
    with pytest.raises(BootstrapError, match="3.9"):
        _bootstrap_requirements(wheel, target_from_flags("3.9", ["manylinux_2_35_x86_64"]))


def test_write_bootstrap_lock_and_instructions(tmp_path):
    f = LockedFile(name="wh", version="0.1.0", filename="wh-0.1.0-py3-none-any.whl", path="wh-0.1.0-py3-none-any.whl",
                   sha256="a" * 64, size=10)
    write_bootstrap(tmp_path, [f], requires_python="==3.12.*", environments=['python_version == "3.12"'])
    lock = read_pylock(tmp_path)
    assert [x.filename for x in lock.files] == [f.filename] and lock.requires_python == "==3.12.*"
    text = (tmp_path / BOOTSTRAP_TXT).read_text()
    assert bootstrap_command() in text and "--no-index" in text
    assert "externally-managed" in text  # why the venv comes first
    assert "python3 -m pip install --no-index --find-links bootstrap/ wh" in text  # into the current env, when allowed


# --- end to end: a fresh venv installs wh from bootstrap/ with no index ---------------------------

def test_fresh_venv_installs_wh_offline_from_bootstrap(pyindex, repacked_deps, tmp_path):
    import subprocess

    from broken_packages import make_venv
    from wheelmaker import make_wheel
    from wheelhouse.stage import StageInputs, stage
    from wheelhouse.target import host_target

    make_wheel(repacked_deps.parent / "stack", "app", "1.0")
    idx = pyindex(repacked_deps, repacked_deps.parent / "stack", serve_metadata=True)
    out = tmp_path / "wh"
    res = stage(StageInputs(host_target(), out, requirements=("app",), index_urls=(idx.url,), cache_dir=tmp_path / "cache",
                            bootstrap=True))
    boot = out / "bootstrap"
    names = {p.name.split("-")[0].lower() for p in boot.glob("*.whl")}
    assert {"wh", "click", "rich", "packaging", "resolvelib", "tomli_w", "urllib3"} <= names
    assert "app" not in names  # the stack's lock and the bootstrap are kept apart
    lock = read_pylock(boot)
    assert {f.name for f in lock.files} >= {"wh", "click"} and all(len(f.sha256) == 64 for f in lock.files)
    assert res.bootstrap_command == bootstrap_command(pip_wheel=pip_wheel_of(res.bootstrap))  # run by the pip it carries

    # The box's Python: this machine's Debian system Python where it is one (PEP 668: EXTERNALLY-MANAGED,
    # pip refuses to install into it), else a fresh venv with pip as the stand-in.
    box_python = _externally_managed_python()
    if box_python is None:
        make_venv(tmp_path / "box-venv", with_pip=True)  # ensurepip's own pip: offline by construction
        box_python = str(tmp_path / "box-venv" / "bin" / "python3")
    else:  # the old line fails there: the stand-in is faithful
        old = subprocess.run([box_python, "-m", "pip", "install", "--no-index", "--find-links", str(boot), "wh"],
                             capture_output=True, text=True, cwd=out, env=_box_env(tmp_path, box_python))
        assert old.returncode != 0 and "externally-managed-environment" in old.stderr
    # The printed line itself, by a shell, with python3 being the box's Python.
    subprocess.run(["sh", "-c", res.bootstrap_command], check=True, capture_output=True, cwd=out,
                   env=_box_env(tmp_path, box_python))
    got = subprocess.run([str(tmp_path / "home" / "wh-venv" / "bin" / "wh"), "--version"], capture_output=True, text=True,
                         check=True)
    assert "0.1.0" in got.stdout


def _box_env(tmp_path, box_python: str) -> dict[str, str]:
    """A box's shell: HOME of its own, python3 on PATH is ``box_python``, pip reaches no index."""
    import os

    bin_dir = tmp_path / "box-bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "python3").exists():
        os.symlink(box_python, bin_dir / "python3")
    (tmp_path / "home").mkdir(exist_ok=True)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INDEX": "1"}


def _externally_managed_python() -> str | None:
    """/usr/bin/python3 when it is a PEP 668 system Python with pip, of the version the bootstrap was resolved for."""
    import subprocess
    import sys

    probe = ("import sys, sysconfig, os, pip; print(sys.version_info[:2] == tuple(map(int, sys.argv[1].split('.'))) "
             "and os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))")
    try:
        proc = subprocess.run(["/usr/bin/python3", "-c", probe, f"{sys.version_info[0]}.{sys.version_info[1]}"],
                              capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    return "/usr/bin/python3" if proc.stdout.strip() == "True" else None


def test_a_failing_self_build_shows_the_backends_own_error(tmp_path):
    """wh's own wheel goes through the same PEP 517 frontend as `wh build`: the backend's error is kept."""
    from wheelhouse.stage.bootstrap import build_from_checkout

    root = tmp_path / "checkout"
    (root / "wheelhouse").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "wh"\n[build-system]\nrequires = []\n'
                                         'build-backend = "broken_backend"\nbackend-path = ["wheelhouse"]\n')
    (root / "wheelhouse" / "broken_backend.py").write_text(
        "import sys\ndef build_wheel(d, c=None, m=None):\n"
        "    print('setup.cfg:3: error: invalid package_data glob', file=sys.stderr)\n    raise SystemExit(1)\n")
    with pytest.raises(BootstrapError) as err:
        build_from_checkout(root, tmp_path / "cache")
    assert "building wh's own wheel" in err.value.message
    assert "setup.cfg:3: error: invalid package_data glob" in err.value.detail
    assert not list((tmp_path / "cache").rglob("*.whl"))


# --- the fast extra: where the target has its wheels, the box unpacks with ISA-L ------------------------

def test_bootstrap_carries_the_fast_extra_and_the_box_unpacks_with_it(pyindex, repacked_deps, tmp_path):
    import json
    import subprocess

    from broken_packages import make_venv
    from wheelmaker import make_wheel
    from wheelhouse.carry.verify import verify_wheelhouse
    from wheelhouse.lock import write_pylock
    from wheelhouse.stage import StageInputs, stage
    from wheelhouse.target import host_target

    fast = tmp_path / "fast"
    for name in ("zlib-ng", "isal"):  # this venv's installs (the test extra), repacked: real compiled wheels
        repack_installed(name, fast)
    stack = tmp_path / "stack"
    make_wheel(stack, "app", "1.0")
    idx = pyindex(repacked_deps, fast, stack, serve_metadata=True)
    out = tmp_path / "wh"
    res = stage(StageInputs(host_target(), out, requirements=("app",), index_urls=(idx.url,),
                            cache_dir=tmp_path / "cache", bootstrap=True))
    boot = out / "bootstrap"
    names = {p.name.split("-")[0].lower() for p in boot.glob("*.whl")}
    assert {"wh", "zlib_ng", "isal", "click"} <= names
    assert res.bootstrap_command == bootstrap_command(extras=("fast",), pip_wheel=pip_wheel_of(res.bootstrap)) and "'wh[fast]'" in res.bootstrap_command
    meta = json.loads((out / "wh.json").read_text())
    assert meta["bootstrap"]["extras"] == ["fast"] and meta["bootstrap"]["command"] == res.bootstrap_command
    assert "'wh[fast]'" in (boot / BOOTSTRAP_TXT).read_text()
    assert verify_wheelhouse(out, closure=closure).ok

    # The printed line, by a shell, on a "box" whose pip reaches no index: wh then inflates with the extra's
    # ISA-L (zlib-ng gives the CRC-32), not the standard zlib.
    make_venv(tmp_path / "box-venv", with_pip=True)
    env = _box_env(tmp_path, str(tmp_path / "box-venv" / "bin" / "python3"))
    subprocess.run(["sh", "-c", res.bootstrap_command], check=True, capture_output=True, cwd=out, env=env)
    got = subprocess.run([str(tmp_path / "home" / "wh-venv" / "bin" / "python"), "-c",
                          "from wheelhouse.inflate import choose; print(choose().name)"],
                         capture_output=True, text=True, check=True, env={**env, "WH_INFLATE": ""})
    assert got.stdout.strip() == "isal"

    # A bootstrap/ that lost the extra's wheel (and its lock entry) fails `wh verify`: pip would fail on the box.
    lock = read_pylock(boot)
    gone = next(f for f in lock.files if f.name == "zlib-ng")
    (boot / gone.path).unlink()
    write_pylock(boot, dataclasses.replace(lock, files=tuple(f for f in lock.files if f is not gone)))
    meta["bootstrap"]["count"] -= 1
    (out / "wh.json").write_text(json.dumps(meta))
    report = verify_wheelhouse(out, hashes=False, closure=closure)  # install's rule, as wh verify passes it
    assert not report.ok
    assert any("asks for wh[fast], which needs zlib-ng" in p and "none is there" in p for p in report.problems), \
        report.problems


def test_bootstrap_without_the_fast_wheels_keeps_the_plain_command(pyindex, repacked_deps, tmp_path):
    from wheelmaker import make_wheel
    from wheelhouse.stage import StageInputs, stage
    from wheelhouse.target import host_target

    stack = tmp_path / "stack"
    make_wheel(stack, "app", "1.0")
    idx = pyindex(repacked_deps, stack, serve_metadata=True)  # no zlib-ng, no isal on this index
    notes = []

    class Notes:
        def __getattr__(self, name):
            return lambda *a, **k: None

        def note(self, text):
            notes.append(text)

    res = stage(StageInputs(host_target(), tmp_path / "wh", requirements=("app",), index_urls=(idx.url,),
                            cache_dir=tmp_path / "cache", bootstrap=True), reporter=Notes())
    assert res.bootstrap_command == bootstrap_command(pip_wheel=pip_wheel_of(res.bootstrap)) and "[fast]" not in res.bootstrap_command
    assert any("bootstrap/ without wh[fast]" in n for n in notes), notes
    assert not list((tmp_path / "wh" / "bootstrap").glob("zlib_ng-*"))
