"""Hostile round 8 for `wh env` and the activation hook: folders with ':' in their path, an existing
LIBRARY_PATH, empty and unset variables, the hook under `set -e`, activating twice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from wheelhouse.env.activation import write_activation
from wheelhouse.env.cuda import apply_plan, env_plan, render_bash
from wheelhouse.target.interpreter import inspect_interpreter


def _site(root: Path) -> Path:
    for d in ("nvidia/cu13/lib", "nvidia/cu13/bin"):
        (root / d).mkdir(parents=True)
    (root / "nvidia/cu13/lib/libcudart.so.13").write_bytes(b"x")
    nvcc = root / "nvidia/cu13/bin/nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    return root


def _sourced(snippet: str, env: dict[str, str], names=("PATH", "LIBRARY_PATH", "LD_LIBRARY_PATH")) -> dict[str, str | None]:
    """The variables after sourcing ``snippet`` in sh over ``env`` (None: unset)."""
    show = "; ".join(f'if [ -n "${{{n}+x}}" ]; then printf "%s=[%s]\\n" {n} "${n}"; fi' for n in names)
    out = subprocess.run(["sh", "-c", f". /dev/stdin\n{show}"], input=snippet, env=env, capture_output=True,
                         text=True, check=True).stdout
    got: dict[str, str | None] = dict.fromkeys(names)
    for line in out.splitlines():
        k, _, v = line.partition("=")
        got[k] = v[1:-1]
    return got


def _relative_entries(value: str | None) -> list[str]:
    """Entries the loader or shell would read relative to the current folder ('' is the current folder)."""
    return [p for p in (value or "").split(":") if not p.startswith("/")] if value is not None else []


def test_a_site_folder_with_a_colon_never_puts_a_relative_entry_on_a_path(tmp_path):
    site = _site(tmp_path / "odd:name" / "site")
    plan = env_plan([site])
    got = apply_plan(plan, {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/keep/me"})
    for var in ("PATH", "LIBRARY_PATH", "LD_LIBRARY_PATH"):
        assert _relative_entries(got.get(var)) == [], (var, got.get(var))
    assert got["LD_LIBRARY_PATH"].startswith("/keep/me")
    shell = _sourced(render_bash(plan), {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/keep/me"})
    for var in ("PATH", "LIBRARY_PATH", "LD_LIBRARY_PATH"):
        assert _relative_entries(shell[var]) == [], (var, shell[var])


def test_an_existing_library_path_entry_is_kept_by_every_renderer(tmp_path):
    """LIBRARY_PATH is link-time: a stubs folder there is how -lcuda links without a driver. Never dropped."""
    plan = env_plan([_site(tmp_path / "site")])
    base = {"PATH": "/usr/bin:/bin", "LIBRARY_PATH": "/usr/local/cuda/lib64/stubs:/opt/x/lib"}
    static = apply_plan(plan, base)["LIBRARY_PATH"].split(":")
    sourced = _sourced(render_bash(plan), base)["LIBRARY_PATH"].split(":")
    for got in (static, sourced):
        assert got[-2:] == ["/usr/local/cuda/lib64/stubs", "/opt/x/lib"], got
    assert static == sourced


def test_empty_or_unset_variables_never_gain_an_empty_entry(tmp_path):
    plan = env_plan([_site(tmp_path / "site")])
    for base in ({"PATH": "/usr/bin:/bin"}, {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "", "LIBRARY_PATH": ""}):
        got = apply_plan(plan, base)
        shell = _sourced(render_bash(plan), base)
        for var in ("LIBRARY_PATH", "LD_LIBRARY_PATH"):
            assert _relative_entries(got[var]) == [] and _relative_entries(shell[var]) == [], (base, var, got, shell)


def _venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    interp = inspect_interpreter(venv / "bin" / "python")
    _site(Path(interp.platlib))
    write_activation(venv, interp)
    return venv


def test_the_activate_hook_with_its_snippet_gone_does_not_fail_a_set_e_script(tmp_path):
    venv = _venv(tmp_path)
    (venv / "bin" / "wh-env.sh").unlink()
    run = subprocess.run(["bash", "-c", f'set -e; . "{venv}/bin/activate"; echo activated'], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "activated", run.stderr


def test_activating_twice_adds_nothing_twice(tmp_path):
    venv = _venv(tmp_path)
    out = subprocess.run(["bash", "-c", f'export LD_LIBRARY_PATH=/keep/me; . "{venv}/bin/activate"; . "{venv}/bin/activate"; '
                                        'echo "$LD_LIBRARY_PATH"; echo "$PATH"'],
                         capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]}).stdout.split("\n")
    ld, path = out[0].split(":"), out[1].split(":")
    assert ld[0] == "/keep/me" and len(ld) == len(set(ld)), ld
    assert len(path) == len(set(path)) or path.count(str(venv / "bin")) == 1, path


def test_an_activate_hooked_by_an_older_wh_gets_the_safe_form(tmp_path):
    venv = _venv(tmp_path)
    activate = venv / "bin" / "activate"
    hook = "# wh: CUDA toolchain and NVIDIA library paths\n"
    old = hook + '[ -f "$VIRTUAL_ENV/bin/wh-env.sh" ] && . "$VIRTUAL_ENV/bin/wh-env.sh"\n'
    text = activate.read_text()
    activate.write_text(text[:text.index(hook)] + old)
    write_activation(venv, inspect_interpreter(venv / "bin" / "python"))
    assert activate.read_text().count(hook) == 1 and "] && ." not in activate.read_text()
