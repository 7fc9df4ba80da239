"""env.activation: wh-env.sh/.fish rendered from the env plan and hooked into the venv's activate once."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wheelhouse.env.activation import write_activation
from wheelhouse.target.interpreter import inspect_interpreter


def _venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    interp = inspect_interpreter(venv / "bin" / "python")
    lib = Path(interp.platlib) / "nvidia" / "cu13" / "lib"
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


# --- deactivate undoes the snippet -------------------------------------------------------------
# Real venvs, real shells: the variables after each step, exactly (unset and empty kept apart).

_NAMES = ("PATH", "CUDA_HOME", "LIBRARY_PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV")
_SH_SHELLS = [s for s in ("bash", "dash", "zsh") if shutil.which(s)]
_STARTS = {
    "all-unset": {},
    "set-and-empty": {"CUDA_HOME": "/opt/cuda", "LIBRARY_PATH": "", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64/stubs:/keep/me"},
    "empty-ld": {"LD_LIBRARY_PATH": "", "LIBRARY_PATH": "/opt/x/lib"},
}
_SH_DUMP = "; ".join(f'if [ -n "${{{n}+x}}" ]; then printf "%s=[%s]\\n" {n} "${n}"; else printf "%s unset\\n" {n}; fi'
                     for n in _NAMES) + "; echo ---"
# Helper variables or functions the snippet left behind (bash's `set` lists functions too).
_SH_LEFTOVERS = "echo leftovers: $(set | grep -ci '^_*wh' || true)"


def _wh_venv(root: Path, name: str, hooked: bool = True) -> Path:
    """A real venv whose site-packages has an NVIDIA lib folder and an nvcc, hooked by wh (or not)."""
    venv = root / name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    interp = inspect_interpreter(venv / "bin" / "python")
    site = Path(interp.platlib) / "nvidia" / "cu13"
    for d in ("lib", "bin"):
        (site / d).mkdir(parents=True)
    (site / "lib" / "libcudart.so.13").write_bytes(b"x")
    (site / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (site / "bin" / "nvcc").chmod(0o755)
    if hooked:
        write_activation(venv, interp)
    return venv


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    root = tmp_path_factory.mktemp("venvs")
    return {name: _wh_venv(root, name, hooked=name != "plain") for name in ("a", "b", "plain")}


def _states(out: str) -> list[dict[str, str | None]]:
    """The dumps of a script's output, one dict per step (None: unset)."""
    states, cur = [], {}
    for line in out.splitlines():
        if line == "---":
            states.append(cur)
            cur = {}
        elif line.endswith(" unset") and line.split()[0] in _NAMES:
            cur[line.split()[0]] = None
        elif "=[" in line and line.split("=", 1)[0] in _NAMES:
            k, _, v = line.partition("=")
            cur[k] = v[1:-1]
    return states


def _run_sh(shell: str, steps: list[str], start: dict[str, str], prefix: str = "") -> tuple[list[dict], str]:
    script = prefix + "\n".join([_SH_DUMP] + [f"{s}\n{_SH_DUMP}" for s in steps] + [_SH_LEFTOVERS]) + "\n"
    argv = [shell, "-f", "-c", script] if shell == "zsh" else [shell, "-c", script]
    run = subprocess.run(argv, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **start})
    assert run.returncode == 0, (run.stdout, run.stderr)
    return _states(run.stdout), run.stdout.strip().splitlines()[-1]


def _lib(venv: Path) -> str:
    return str(next(venv.glob("lib/python*/site-packages/nvidia/cu13/lib")))


@pytest.mark.parametrize("start", _STARTS, ids=list(_STARTS))
@pytest.mark.parametrize("shell", _SH_SHELLS)
def test_deactivate_restores_every_variable_exactly(venvs, shell, start):
    a, b = (f'. "{venvs[n]}/bin/activate"' for n in ("a", "b"))
    states, leftovers = _run_sh(shell, [a, "deactivate", a, a, "deactivate", a, b, "deactivate", b,
                                        "deactivate nondestructive", "deactivate"], _STARTS[start])
    before, on_a, off1, _, _, off2, _, a_then_b, off3, on_b, nondestructive, off4 = states
    assert _lib(venvs["a"]) in on_a["LD_LIBRARY_PATH"].split(":") and on_a["CUDA_HOME"] != before["CUDA_HOME"]
    for off in (off1, off2, off3, nondestructive, off4):
        assert off == before  # CUDA_HOME unset again if it was; "" stays "", unset stays unset
    # B after A: A's libraries are gone, B's come exactly as if A had never been active.
    assert a_then_b == on_b and _lib(venvs["a"]) not in (a_then_b["LD_LIBRARY_PATH"] + a_then_b["LIBRARY_PATH"])
    assert leftovers == "leftovers: 0"


@pytest.mark.parametrize("shell", _SH_SHELLS)
def test_activate_and_deactivate_under_set_eu(venvs, shell):
    a, b = (f'. "{venvs[n]}/bin/activate"' for n in ("a", "b"))
    start = _STARTS["set-and-empty"]
    states, _ = _run_sh(shell, [a, a, "deactivate nondestructive", b, "deactivate"], start, prefix="set -eu\n")
    assert states[0] == states[3] == states[5] and len(states) == 6


@pytest.mark.parametrize("shell", _SH_SHELLS)
def test_a_record_left_by_an_unhooked_venv_does_not_undo_later_changes(venvs, shell):
    """A, then a venv wh did not hook (its deactivate is the plain one), then a value set by hand:
    activating A again must not put back the value from before the first A."""
    a, plain = (f'. "{venvs[n]}/bin/activate"' for n in ("a", "plain"))
    states, _ = _run_sh(shell, [a, plain, "deactivate", "export LD_LIBRARY_PATH=/new; unset CUDA_HOME", a, "deactivate"],
                        _STARTS["set-and-empty"])
    assert states[-1]["LD_LIBRARY_PATH"] == "/new" and states[-1]["CUDA_HOME"] is None
    assert states[-2]["LD_LIBRARY_PATH"].startswith("/new:")


def test_the_hook_without_a_recognisable_deactivate_only_adds(tmp_path):
    """An activate whose deactivate wh cannot copy: no wrapper, and no record that nothing would restore."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    activate = venv / "bin" / "activate"
    activate.write_text(activate.read_text().replace("deactivate () {", "deactivate()\n{"))
    write_activation(venv, inspect_interpreter(venv / "bin" / "python"))
    states, leftovers = _run_sh("bash", [f'. "{activate}"', "deactivate"], {"LD_LIBRARY_PATH": "/keep/me"})
    assert states[1]["LD_LIBRARY_PATH"].split(":")[0] == "/keep/me" and leftovers == "leftovers: 0"


_FISH_DUMP = ("for n in " + " ".join(_NAMES) + "; if set -q $n; printf '%s=[%s]\\n' $n (string join : -- $$n); "
              "else; printf '%s unset\\n' $n; end; end; echo ---")


@pytest.mark.skipif(not shutil.which("fish"), reason="fish is not installed")
@pytest.mark.parametrize("start", _STARTS, ids=list(_STARTS))
def test_fish_deactivate_restores_every_variable_exactly(venvs, start):
    a, b = (f'source "{venvs[n]}/bin/activate.fish"' for n in ("a", "b"))
    steps = [a, "deactivate", a, a, "deactivate", a, b, "deactivate", b, "deactivate nondestructive", "deactivate"]
    script = "\n".join([_FISH_DUMP] + [f"{s}\n{_FISH_DUMP}" for s in steps])
    script += "\necho leftovers: (count (set -n | string match -ri '^_*wh') (functions -a | string match -ri '^_*wh'))\n"
    run = subprocess.run(["fish", "--no-config", "-c", script], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(venvs["a"].parent), **_STARTS[start]})
    assert run.returncode == 0, (run.stdout, run.stderr)
    before, on_a, off1, _, _, off2, _, a_then_b, off3, on_b, nondestructive, off4 = _states(run.stdout)
    assert _lib(venvs["a"]) in on_a["LD_LIBRARY_PATH"].split(":")
    for off in (off1, off2, off3, nondestructive, off4):
        assert off == before
    assert a_then_b == on_b and _lib(venvs["a"]) not in a_then_b["LD_LIBRARY_PATH"]
    assert run.stdout.strip().splitlines()[-1] == "leftovers: 0"
