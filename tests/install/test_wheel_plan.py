"""Planning a wheel refuses, before any write, what a hostile wheel could do (issue 11.7, 11.8, 11.16)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from faults import wh_command
from nvidia_fixtures import make_wheelhouse, tree_listing
from wheelmaker import make_wheel

from wheelhouse.install.wheel.plan import plan_wheel
from wheelhouse.install.wheel.record import RecordMismatch, UnpackError, UnsafeWheelPath

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def wh(*args):
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300)


def test_plan_maps_files_to_the_scheme_with_record_hashes(tmp_path, scheme):
    w = make_wheel(tmp_path, "tool", "1.0", modules={"tool/__init__.py": "X = 1\n"},
                   files={"tool-1.0.data/scripts/tool-sh": "#!python\n", "tool-1.0.data/headers/t.h": ""},
                   entry_points={"console_scripts": {"tool": "tool:main"}})
    plan = plan_wheel(w, scheme)
    dests = {m.name: m.dest for m in plan.members}
    assert dests["tool/__init__.py"] == f"{scheme['purelib']}/tool/__init__.py"
    assert dests["tool-1.0.data/scripts/tool-sh"] == f"{scheme['scripts']}/tool-sh"
    assert dests["tool-1.0.data/headers/t.h"] == f"{scheme['headers']}/tool/t.h"
    assert [p for p, _ in plan.launchers] == [f"{scheme['scripts']}/tool"]
    assert f"{scheme['purelib']}/tool-1.0.dist-info/RECORD" in plan.written_paths()
    assert all(m.digest for m in plan.members)


def test_dist_info_must_match_the_filename(tmp_path, scheme):
    """issue 11.7: wrongdist-1.0 shipping numpy-1.0.dist-info/ would replace the real numpy."""
    evil = make_wheel(tmp_path, "numpy", "1.0", modules={"numpy/__init__.py": "FAKE = True\n"},
                      filename="wrongdist-1.0-py3-none-any.whl")
    with pytest.raises(UnpackError, match="ships numpy-1.0.dist-info/, not the wrongdist 1.0"):
        plan_wheel(evil, scheme)
    other_version = make_wheel(tmp_path, "numpy", "2.0", filename="numpy-1.0-py3-none-any.whl")
    with pytest.raises(UnpackError, match="not the numpy 1.0"):
        plan_wheel(other_version, scheme)
    # Normalised names and versions are the same distribution (PEP 491, 440).
    plan_wheel(make_wheel(tmp_path, "My.Pkg", "1.0.0", filename="my_pkg-1.0-py3-none-any.whl"), scheme)


def test_a_second_dist_info_folder_is_refused(tmp_path, scheme):
    w = make_wheel(tmp_path, "good", "1.0", files={"numpy-1.0.dist-info/RECORD": "numpy/__init__.py,,\n"})
    with pytest.raises(UnpackError, match="2 .dist-info folders"):
        plan_wheel(w, scheme)


def test_wheel_cannot_write_wh_state(tmp_path, scheme):
    """issue 11.8: .wh/links.json (any path under <site>/.wh/) is never a wheel's to write."""
    w = make_wheel(tmp_path, "evil", "1.0", files={".wh/links.json": "{}"})
    with pytest.raises(UnsafeWheelPath, match="wh's state folder"):
        plan_wheel(w, scheme)
    via_data = make_wheel(tmp_path / "d", "evil", "1.0", files={"evil-1.0.data/purelib/.wh/installed.json": "{}"})
    with pytest.raises(UnsafeWheelPath, match="wh's state folder"):
        plan_wheel(via_data, scheme)


@pytest.mark.parametrize("script", ["python", "python3", f"python3.{sys.version_info[1]}", "activate", "pip"])
def test_console_script_cannot_replace_the_interpreter_or_venv_tools(tmp_path, scheme, script):
    w = make_wheel(tmp_path, "evil", "1.0", modules={"evil.py": "def main(): pass\n"},
                   entry_points={"console_scripts": {script: "evil:main"}})
    with pytest.raises(UnsafeWheelPath, match=f"script '{script}' would replace"):
        plan_wheel(w, scheme)
    raw = make_wheel(tmp_path / "raw", "evil", "1.0", files={f"evil-1.0.data/scripts/{script}": "#!python\n"})
    with pytest.raises(UnsafeWheelPath, match="would replace"):
        plan_wheel(raw, scheme)


def test_pip_may_ship_its_own_scripts(tmp_path, scheme):
    w = make_wheel(tmp_path, "pip", "25.0", modules={"pip/__init__.py": ""},
                   entry_points={"console_scripts": {"pip": "pip:main", "pip3": "pip:main"}})
    assert len(plan_wheel(w, scheme).launchers) == 2


def test_record_size_must_match_the_archive(tmp_path, scheme):
    w = make_wheel(tmp_path, "liar", "1.0", modules={"liar.py": "X = 1\n"})
    import zipfile
    with zipfile.ZipFile(w) as zf:
        items = {n: zf.read(n) for n in zf.namelist()}
    rec = "liar-1.0.dist-info/RECORD"
    items[rec] = items[rec].replace(b"liar.py,sha256=", b"liar.py,sha256=").replace(b",6\n", b",3\n", 1)
    with zipfile.ZipFile(w, "w") as zf:
        for n, d in items.items():
            zf.writestr(n, d)
    with pytest.raises(RecordMismatch, match="6 bytes in the archive, 3 in RECORD"):
        plan_wheel(w, scheme)


def test_install_of_a_hostile_wheel_changes_nothing(tmp_path):
    """End to end: the real numpy, the venv's python and wh's records survive three hostile wheels."""
    venv = tmp_path / "venv"
    real = make_wheelhouse(tmp_path / "real", [make_wheel(tmp_path / "w", "numpy", "1.0",
                                                          modules={"numpy/__init__.py": "REAL = True\n"})])
    assert wh("install", real, "--venv", venv).returncode == 0
    before = tree_listing(venv)
    hostile = [
        make_wheel(tmp_path / "h1", "numpy", "1.0", modules={"numpy/__init__.py": "REAL = False\n"},
                   filename="wrongdist-1.0-py3-none-any.whl"),
        make_wheel(tmp_path / "h2", "links", "1.0", files={".wh/links.json": '{"links": []}'}),
        make_wheel(tmp_path / "h3", "shadow", "1.0", modules={"shadow.py": "def main(): pass\n"},
                   entry_points={"console_scripts": {"python": "shadow:main"}}),
    ]
    for i, w in enumerate(hostile):
        r = wh("install", make_wheelhouse(tmp_path / f"house{i}", [w]), "--venv", venv)
        assert r.returncode == 1 and "error:" in r.stderr and "hint:" in r.stderr, r.stderr
        assert tree_listing(venv) == before
    out = subprocess.run([venv / "bin" / "python", "-c", "import numpy; print(numpy.REAL)"], capture_output=True,
                         text=True)
    assert out.stdout.strip() == "True"


def test_a_plan_made_ahead_is_taken_once_and_only_for_the_same_file_and_scheme(tmp_path, scheme):
    """Planning while the venv is made (issue 14): the plan is the one plan_wheel would make, taken once;
    a wheel replaced since, or another scheme, is planned anew; a hostile wheel is still refused."""
    from wheelhouse.install.wheel.plan import forget_ahead, plan_ahead

    w = make_wheel(tmp_path / "a", "tool", "1.0", modules={"tool/__init__.py": "X = 1\n"})
    evil = make_wheel(tmp_path / "e", "evil", "1.0", files={".wh/links.json": "{}"})
    try:
        plan_ahead([w, evil], scheme)
        first = plan_wheel(w, scheme)
        assert [(m.name, m.dest) for m in first.members] == [(m.name, m.dest) for m in plan_wheel(w, scheme).members]
        assert plan_wheel(w, scheme) is not first  # taken once: the batch marks what it was given
        with pytest.raises(UnsafeWheelPath, match="wh's state folder"):
            plan_wheel(evil, scheme)
        plan_ahead([w], scheme)
        other = dict(scheme, purelib=str(tmp_path / "elsewhere"), platlib=str(tmp_path / "elsewhere"))
        assert plan_wheel(w, other).members[0].dest.startswith(str(tmp_path / "elsewhere"))
        replaced = make_wheel(tmp_path / "b", "tool", "1.0", modules={"tool/__init__.py": "X = 1\n", "tool/new.py": ""})
        replaced.replace(w)
        assert "tool/new.py" in {m.name for m in plan_wheel(w, scheme).members}
    finally:
        forget_ahead()
