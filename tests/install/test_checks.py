"""What must hold before the first byte: one file per package for this interpreter, its target, its hashes."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel

from wheelhouse.errors import HashMismatch, UsageError
from wheelhouse.install.checks import check_target, fitting_wheelhouses, select_files, target_problems, verify_files
from wheelhouse.install.errors import TargetMismatch
from wheelhouse.install.wheelhouses import load_wheelhouse
from wheelhouse.progress import RecordingReporter
from wheelhouse.target import target_from_flags
from wheelhouse.target.interpreter import inspect_interpreter

OTHER = target_from_flags("3.8", ["manylinux_2_17_x86_64"]).to_json()


@pytest.fixture(scope="module")
def interp():
    return inspect_interpreter(sys.executable)


def test_select_files_takes_the_best_tag_and_judges_markers(tmp_path, interp):
    w = tmp_path / "w"
    cp = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    house = make_wheelhouse(tmp_path / "h", [
        make_wheel(w, "pkg", "1.0"), make_wheel(w, "pkg", "1.0", tags=f"{cp}-{cp}-manylinux_2_17_x86_64"),
        make_wheel(w, "lib", "1.0")])
    h = load_wheelhouse(house)
    files = [dataclasses.replace(f, marker="sys_platform == 'win32'") if f.name == "lib" else f for f in h.files]
    h = dataclasses.replace(h, files=tuple(files))
    chosen = select_files([h], interp, None)
    assert [f.filename for _, f in chosen] == [f"pkg-1.0-{cp}-{cp}-manylinux_2_17_x86_64.whl"]
    with pytest.raises(UsageError, match="not in the wheelhouse"):
        select_files([h], interp, {"lib"})


def test_target_problems_fitting_and_check_target(tmp_path, interp):
    w = tmp_path / "w"
    here = load_wheelhouse(make_wheelhouse(tmp_path / "here", [make_wheel(w, "a", "1.0")]))
    there = load_wheelhouse(make_wheelhouse(tmp_path / "there", [make_wheel(w, "a", "1.0")], target=OTHER))
    assert target_problems(here, interp) == []
    assert any("Python 3.8" in p for p in target_problems(there, interp))
    kept, notes = fitting_wheelhouses([here, there], interp)
    assert kept == [here] and "skipped" in notes[0]
    assert fitting_wheelhouses([there], interp) == ([there], [])
    odd = load_wheelhouse(make_wheelhouse(tmp_path / "odd", [make_wheel(w, "b", "1.0", tags="cp38-cp38-win_amd64")]))
    with pytest.raises(TargetMismatch, match="has no tag"):
        check_target([odd], select_files([odd], interp, None), interp)


def test_verify_files_names_every_bad_file(tmp_path):
    w = tmp_path / "w"
    h = load_wheelhouse(make_wheelhouse(tmp_path / "h", [make_wheel(w, "a", "1.0"), make_wheel(w, "b", "1.0"),
                                                         make_wheel(w, "c", "1.0")]))
    chosen = [(h, f) for f in h.files]
    assert len(verify_files(chosen, 2, RecordingReporter())) == 3
    (h.path / h.files[0].path).unlink()
    data = bytearray((h.path / h.files[1].path).read_bytes())
    data[50] ^= 1
    (h.path / h.files[1].path).write_bytes(bytes(data))
    with pytest.raises(HashMismatch) as exc:
        verify_files(chosen, 2, RecordingReporter())
    assert [a for _, _, a in exc.value.bad][0] == "missing" and len(exc.value.bad) == 2
    assert "nothing was installed" in str(exc.value)
