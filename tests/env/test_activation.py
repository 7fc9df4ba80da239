"""env.activation: wh-env.sh/.fish rendered from the env plan and hooked into the venv's activate once."""

from __future__ import annotations

import subprocess
import sys

from wheelhouse.env.activation import write_activation
from wheelhouse.target.interpreter import inspect_interpreter


def _venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    interp = inspect_interpreter(venv / "bin" / "python")
    lib = __import__("pathlib").Path(interp.platlib) / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudart.so.13").write_bytes(b"x")
    return venv, interp, lib


def test_activate_puts_the_wheel_libs_on_the_path_once(tmp_path):
    venv, interp, lib = _venv(tmp_path)
    snippet = write_activation(venv, interp)
    assert snippet == venv / "bin" / "wh-env.sh" and (venv / "bin" / "wh-env.fish").is_file()
    write_activation(venv, interp)  # idempotent: hooked once
    assert (venv / "bin" / "activate").read_text().count("# wh: CUDA toolchain") == 1
    out = subprocess.run(["bash", "-c", f'LD_LIBRARY_PATH=/keep/me; . "{venv}/bin/activate"; echo "$LD_LIBRARY_PATH"'],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out.startswith("/keep/me:") and str(lib) in out.split(":")  # appended, never clobbered


def test_an_activate_script_that_is_not_text_is_left_alone(tmp_path):
    venv, interp, _ = _venv(tmp_path)
    fish = venv / "bin" / "activate.fish"
    fish.write_bytes(b"\xff\xfe not utf-8")
    write_activation(venv, interp)  # was an internal error (UnicodeDecodeError)
    assert fish.read_bytes() == b"\xff\xfe not utf-8"
    assert "wh-env.sh" in (venv / "bin" / "activate").read_text()
