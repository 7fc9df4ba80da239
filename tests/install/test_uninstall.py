"""The one guarded uninstaller: RECORD-driven, inside the scheme only, all or nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nvidia_fixtures import tree_listing
from wheelmaker import make_wheel

from wheelhouse.install.uninstall import remove_distribution
from wheelhouse.install.wheel import install_wheels


def test_uninstall_removes_files_scripts_and_bytecode(tmp_path, scheme):
    w = make_wheel(tmp_path / "w", "gone", "1.0", modules={"gone/__init__.py": "X = 1\n", "gone/sub/m.py": ""},
                   entry_points={"console_scripts": {"gone-run": "gone:main"}})
    before = tree_listing(tmp_path / "env")
    install_wheels([w], scheme, sys.executable)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", "import gone.sub.m"], check=True, cwd=scheme["purelib"], env=env)
    assert list((tmp_path / "env" / "site" / "gone" / "sub" / "__pycache__").glob("*.pyc"))
    assert remove_distribution("gone", scheme) == ["1.0"]
    assert tree_listing(tmp_path / "env") == before


def test_uninstall_stays_inside_the_environment_and_out_of_wh_state(tmp_path, scheme):
    install_wheels([make_wheel(tmp_path / "w", "victim", "1.0", modules={"victim.py": ""})], scheme, sys.executable)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    state = tmp_path / "env" / "site" / ".wh" / "installed.json"
    state.parent.mkdir()
    state.write_text("{}\n")
    record = tmp_path / "env" / "site" / "victim-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + "../../outside.txt,,\n.wh/installed.json,,\n.,,\n")
    assert remove_distribution("victim", scheme) == ["1.0"]
    assert outside.read_text() == "keep\n" and state.read_text() == "{}\n"
    assert not (tmp_path / "env" / "site" / "victim.py").exists()
    assert (tmp_path / "env" / "site").is_dir()


def test_uninstall_of_something_not_installed_removes_nothing(tmp_path, scheme):
    assert remove_distribution("absent", scheme) == []


def test_a_record_naming_the_interpreter_or_activate_never_removes_them(tmp_path):
    """The venv's python, activate and pip are not any distribution's to remove (pip's own pip is pip's)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    from wheelhouse.target.interpreter import inspect_interpreter

    scheme = inspect_interpreter(venv / "bin" / "python").scheme()
    for name in ("victim", "pip"):
        install_wheels([make_wheel(tmp_path / name, name, "1.0", modules={f"{name}_mod.py": ""})], scheme,
                       str(venv / "bin" / "python"))
    (venv / "bin" / "pip").write_text("#!/bin/sh\n")
    site = Path(scheme["purelib"])
    for name in ("victim", "pip"):
        record = site / f"{name}-1.0.dist-info" / "RECORD"
        record.write_text(record.read_text() + "../../../bin/python,,\n../../../bin/python3,,\n"
                          "../../../bin/activate,,\n../../../bin/pip,,\n")
    assert remove_distribution("victim", scheme) == ["1.0"]
    assert (venv / "bin" / "activate").exists() and (venv / "bin" / "pip").exists()
    ok = subprocess.run([venv / "bin" / "python", "-c", "print('alive')"], capture_output=True, text=True)
    assert ok.stdout.strip() == "alive"
    assert remove_distribution("pip", scheme) == ["1.0"]
    assert not (venv / "bin" / "pip").exists() and (venv / "bin" / "python3").exists()
