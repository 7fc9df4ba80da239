"""`wh install --dry-run` (issue 32, finding 5): what an install would add, upgrade, downgrade, keep or refuse,
and the checks it would run, before an image's interpreter is touched. Real venvs, real wheels, the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from broken_packages import install_wheel, make_venv, site_packages
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel


def wh(*args):
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def _listing(py: Path) -> list[str]:
    return sorted(p.name for p in site_packages(py).iterdir())


def test_the_plan_names_each_action_and_writes_nothing(tmp_path):
    old = tmp_path / "old"
    image = make_venv(tmp_path / "image")
    for w in (make_wheel(old, "lib", "1.0"), make_wheel(old, "other", "2.0"), make_wheel(old, "keepme", "1.0")):
        install_wheel(image, w)
    new = tmp_path / "new"
    house = make_wheelhouse(tmp_path / "house", [
        make_wheel(new, "app", "1.0", requires=["lib>=2"]), make_wheel(new, "lib", "2.0"),
        make_wheel(new, "other", "1.0"), old / "keepme-1.0-py3-none-any.whl"])
    before = _listing(image)
    r = wh("install", house, "--python", image, "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    actions = {d["name"]: (d["action"], d["installed"]) for d in plan["distributions"]}
    assert actions == {"app": ("add", None), "lib": ("upgrade", "1.0"), "other": ("downgrade", "2.0"),
                       "keepme": ("keep", "1.0")}
    assert [(c["check"], c["ok"]) for c in plan["checks"]] == [("target", True), ("files", True), ("assumed", True),
                                                               ("requirements", True)]
    assert _listing(image) == before  # nothing written
    text = wh("install", house, "--python", image, "--dry-run")
    assert text.returncode == 0, text.stderr
    assert "upgrade   lib 2.0 (now 1.0)" in text.stdout and "check requirements: ok" in text.stdout
    assert "dry run, nothing written: 1 add, 1 upgrade, 1 downgrade, 1 keep" in text.stderr


def test_a_missing_requirement_is_refused_in_the_plan_and_exits_1(tmp_path):
    house = make_wheelhouse(tmp_path / "house", [make_wheel(tmp_path / "w", "app", "1.0", requires=["zmqish>=25"])])
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv, "--dry-run", "--json")
    assert r.returncode == 1, r.stderr
    plan = json.loads(r.stdout)
    (app,) = plan["distributions"]
    assert app["action"] == "refused" and "zmqish>=25" in app["why"]
    assert {c["check"]: c["ok"] for c in plan["checks"]}["requirements"] is False
    assert not venv.exists()  # no venv made for a plan


def test_a_damaged_wheel_fails_the_files_check(tmp_path):
    house = make_wheelhouse(tmp_path / "house", [make_wheel(tmp_path / "w", "app", "1.0")])
    wheel = next((house / "wheels").iterdir())
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    r = wh("install", house, "--venv", tmp_path / "venv", "--dry-run", "--json")
    assert r.returncode == 1, r.stderr
    checks = {c["check"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["files"]["ok"] is False and "app-1.0-py3-none-any.whl" in checks["files"]["detail"]
    assert checks["requirements"]["detail"].startswith("not checked")
