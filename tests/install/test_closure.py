"""The wheelhouse together with what is installed must satisfy every requirement, judged before any write
(issue 10.3): what is missing, and what an install would break, are refused with the list."""

from __future__ import annotations

import subprocess
import sys

from faults import wh_command
from nvidia_fixtures import make_wheelhouse, tree_listing
from wheelmaker import make_wheel

import pytest

from wheelhouse.install.closure import Dist, MissingRequirements, check_closure, installed_view, unmet, wheel_dist
from wheelhouse.target import target_from_flags

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"
ENV = target_from_flags("3.12", ["manylinux_2_17_x86_64"])  # judged for a Linux 3.12 target, not the host


def wh(*args):
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300)


def test_unmet_judges_markers_for_the_target_and_follows_extras():
    view = {
        "app": Dist("app", "1.0", ("lib[fast]>=2", "winonly; sys_platform == 'win32'", "old; python_version < '3.8'")),
        "lib": Dist("lib", "2.1", ("speedup; extra == 'fast'", "other; extra == 'slow'")),
    }
    assert unmet(view, ENV) == {("lib", "speedup; extra == \"fast\""): "not installed"}
    view["speedup"] = Dist("speedup", "1.0", ())
    assert unmet(view, ENV) == {}
    view["lib"] = Dist("lib", "1.5", ())
    assert unmet(view, ENV) == {("app", "lib[fast]>=2"): "1.5 installed"}


def test_a_version_that_is_not_pep_440_meets_only_a_requirement_without_a_bound():
    # It cannot be compared: a bound "met" by it would be a green nobody judged.
    view = {"app": Dist("app", "1.0", ("lib>=2", "tool")), "lib": Dist("lib", "main-branch", ()),
            "tool": Dist("tool", "custom build", ())}
    assert unmet(view, ENV) == {("app", "lib>=2"): "main-branch installed, not a PEP 440 version: it cannot be judged"}


def test_check_closure_names_missing_and_broken_but_not_what_was_broken_before():
    installed = {"tool": Dist("tool", "1.0", ("click>=8.1",)), "click": Dist("click", "8.1.7", ()),
                 "legacy": Dist("legacy", "1.0", ("gone-long-ago",))}
    with pytest.raises(MissingRequirements) as exc:
        check_closure(installed, [Dist("click", "7.0", ()), Dist("web", "1.0", ("core>=2",))], ENV)
    assert "missing: web needs core>=2 (not installed)" in exc.value.detail
    assert "would break: tool needs click>=8.1 (7.0 installed after this install)" in exc.value.detail
    assert "legacy" not in exc.value.detail  # unmet before this install: the doctor's to report
    assert "--allow-missing" in exc.value.hint
    check_closure(installed, [Dist("click", "8.2", ())], ENV)


def test_wheel_dist_reads_metadata_without_extracting(tmp_path):
    w = make_wheel(tmp_path, "web", "1.0", requires=["core>=2", "x; python_version < '3'"])
    assert wheel_dist(w) == Dist("web", "1.0", ("core>=2", "x; python_version < '3'"))


def test_install_refuses_a_wheelhouse_missing_a_requirement(tmp_path):
    house = make_wheelhouse(tmp_path / "house", [make_wheel(tmp_path / "w", "web", "1.0", requires=["core>=2"],
                                                            modules={"web.py": "import core\n"})])
    venv = tmp_path / "venv"
    r = wh("install", house, "--venv", venv)
    assert r.returncode == 2, r.stderr
    assert "missing: web needs core>=2 (not installed)" in r.stderr and "nothing was installed" in r.stderr
    assert "hint:" in r.stderr and "--allow-missing" in r.stderr
    assert not venv.exists()
    r = wh("install", house, "--venv", venv, "--allow-missing")
    assert r.returncode == 0, r.stderr


def test_install_refuses_to_break_what_is_installed(tmp_path):
    """As wh's own click>=8.1 when installing into wh's environment: an installed requirer is not broken."""
    venv = tmp_path / "venv"
    w = tmp_path / "w"
    first = make_wheelhouse(tmp_path / "first", [make_wheel(w, "tool", "1.0", requires=["click>=8.1"]),
                                                 make_wheel(w, "click", "8.1.7", modules={"click.py": ""})])
    assert wh("install", first, "--venv", venv).returncode == 0
    before = tree_listing(venv)
    downgrade = make_wheelhouse(tmp_path / "down", [make_wheel(tmp_path / "w2", "click", "7.0", modules={"click.py": ""})])
    r = wh("install", downgrade, "--python", venv / "bin" / "python")
    assert r.returncode == 2
    assert "would break: tool needs click>=8.1 (7.0 installed after this install)" in r.stderr
    assert tree_listing(venv) == before


def test_what_the_target_imports_counts_in_its_own_sys_path_order(tmp_path):
    """A parent venv's packages satisfy a child made with --system-site-packages; the child's own copy wins."""
    w = tmp_path / "w"
    parent = tmp_path / "parent"
    assert wh("install", make_wheelhouse(tmp_path / "p", [make_wheel(w, "core", "2.0", modules={"core.py": ""})]),
              "--venv", parent).returncode == 0
    child = tmp_path / "child"
    web = make_wheelhouse(tmp_path / "web", [make_wheel(w, "web", "1.0", requires=["core>=2"], modules={"web.py": ""})])
    r = wh("install", web, "--venv", child, "--system-site-packages", "--python", parent / "bin" / "python")
    assert r.returncode == 0, r.stderr
    own = make_wheelhouse(tmp_path / "own", [make_wheel(tmp_path / "w1", "core", "1.0", modules={"core.py": ""})])
    r = wh("install", own, "--venv", child, "--allow-missing")
    assert r.returncode == 0, r.stderr
    view = installed_view(str(child / "bin" / "python"))
    asked = subprocess.run([child / "bin" / "python", "-c", "import importlib.metadata as m; print(m.version('core'))"],
                           capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    assert view["core"].version == asked == "1.0"
    assert view["web"].version == "1.0"


def test_a_venv_made_with_whs_interpreter_does_not_see_whs_environment(tmp_path):
    """issue 29.10: before, --system-site-packages from wh's interpreter tied the venv to wh's environment (a
    .pth into it), and an old click was refused as breaking wh. The engine's venv is its own: it is made from
    wh's base, sees none of wh's packages, and takes the wheelhouse's click."""
    down = make_wheelhouse(tmp_path / "down", [make_wheel(tmp_path / "w", "click", "7.0", modules={"click.py": ""})])
    child = tmp_path / "child"
    r = wh("install", down, "--venv", child, "--system-site-packages", "--python", sys.executable, "--allow-missing")
    assert r.returncode == 0, r.stderr
    assert "wh needs click" not in r.stderr  # (the base interpreter's own packages may still need a newer click)
    assert "is wh's own environment" in r.stderr and "installed 1" in r.stderr
    assert not list(child.glob("lib/python*/site-packages/*.pth"))
