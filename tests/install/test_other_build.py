"""Another build of the locked version is not the locked wheel.

Before: `wh install` skipped a distribution whose version was already installed (pip had put another build of
`foo 1.0` there, with other code) as "already there", recorded it as installed from the locked wheel's file and
sha256, and the doctor stayed green: its files match their own RECORD. And a `pip install` of another build over
what wh installed was never seen by either. The install record keeps a digest of the build's files
(``recordfile.build_digest``: the same wheel installed by any installer gives the same one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from broken_packages import make_venv
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel


def wh(*args, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")} | {"NO_COLOR": "1", "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def pip_install(py: Path, wheel: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-index", "--no-deps",
                    "--force-reinstall", str(wheel)], check=True, capture_output=True)


def code(py: Path) -> str:
    return subprocess.run([str(py), "-c", "import foo; print(foo.X)"], capture_output=True, text=True,
                          check=True, cwd="/").stdout.strip()


def _setup(tmp_path):
    locked = make_wheel(tmp_path / "w", "foo", "1.0", modules={"foo/__init__.py": "X = 'locked'\n"})
    other = make_wheel(tmp_path / "other", "foo", "1.0", modules={"foo/__init__.py": "X = 'another build'\n"})
    house = make_wheelhouse(tmp_path / "house", [locked], extra_meta={"inputs": {"requirements": ["foo"]}})
    return house, locked, other, make_venv(tmp_path / "venv")


def test_another_build_already_there_is_replaced_by_the_locked_one(tmp_path):
    house, _, other, py = _setup(tmp_path)
    pip_install(py, other)
    r = wh("install", house, "--python", py)
    assert r.returncode == 0, r.stderr
    assert code(py) == "locked"
    assert "another build's than the locked wheel's" in r.stderr and "installed 1" in r.stderr


def test_the_same_wheel_already_there_is_skipped(tmp_path):
    house, locked, _, py = _setup(tmp_path)
    pip_install(py, locked)
    r = wh("install", house, "--python", py)
    assert r.returncode == 0, r.stderr
    assert "installed 0, already there 1" in r.stderr


def test_another_build_installed_over_wh_s_is_a_fail_and_the_next_install_mends_it(tmp_path):
    house, locked, other, py = _setup(tmp_path)
    assert wh("install", house, "--python", py).returncode == 0
    ok = wh("doctor", "--python", py, "--json", "--check", "stack")
    assert ok.returncode == 0, ok.stdout[-2000:]
    pip_install(py, other)
    r = wh("doctor", "--python", py, "--json", "--check", "stack")
    assert r.returncode == 1
    res = {x["id"]: x for x in json.loads(r.stdout)["results"]}
    dist = res["stack:distributions"]
    assert dist["verdict"] == "fail" and "foo 1.0: its files are another build's" in dist["evidence"]
    assert "installer now: pip" in dist["evidence"] and "wh install --reinstall foo" in dist["hint"]
    assert wh("install", house, "--python", py).returncode == 0
    assert code(py) == "locked" and wh("doctor", "--python", py, "--check", "stack").returncode == 0
    pip_install(py, locked)  # the same wheel again, by pip: the same build, no false red
    again = wh("doctor", "--python", py, "--json", "--check", "stack")
    assert again.returncode == 0, again.stdout[-2000:]
