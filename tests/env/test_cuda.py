"""`wh env`: existing LD_LIBRARY_PATH kept first, system lib dir next, wheel libs last, pinned nvcc first on PATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wheelhouse.env.cuda import (
    EnvPlan,
    apply_plan,
    engine_environment,
    env_plan,
    removed_entries,
    render_bash,
    driver_dir,
)


def wh(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd)


@pytest.fixture
def site(tmp_path):
    """NVIDIA layouts: cu13 (with nvcc and a stubs folder) and a per-package lib64 one."""
    root = tmp_path / "site"
    for d in ("nvidia/cu13/lib/stubs", "nvidia/cu13/bin", "nvidia/cublas/lib64", "nvidia/cuda_nvcc/bin"):
        (root / d).mkdir(parents=True)
    for nvcc in (root / "nvidia/cu13/bin/nvcc", root / "nvidia/cuda_nvcc/bin/nvcc"):
        nvcc.write_text(f"#!/bin/sh\necho {nvcc.parent.parent.name}\n")
        nvcc.chmod(0o755)
    (root / "nvidia/cu13/lib/libcudart.so.13").write_bytes(b"x")
    (root / "nvidia/cu13/lib/stubs/libcuda.so").write_bytes(b"x")
    return root


def test_existing_ld_library_path_stays_first(site):
    env = engine_environment([site], {"LD_LIBRARY_PATH": "/keep/me:/and/me", "PATH": "/usr/bin"})
    parts = env["LD_LIBRARY_PATH"].split(":")
    assert parts[:2] == ["/keep/me", "/and/me"]
    driver = [driver_dir()] if driver_dir() else []  # (only where the loader's cache lacks the driver's libcuda)
    assert parts[2:] == [*driver, str(site / "nvidia/cu13/lib"), str(site / "nvidia/cublas/lib64")]
    assert not any("stubs" in p for p in parts)


def test_pinned_nvcc_first_on_path_and_cuda_home(site):
    env = engine_environment([site], {"PATH": "/usr/local/cuda/bin:/usr/bin"})
    first = env["PATH"].split(":")[0]
    assert first in (str(site / "nvidia/cu13/bin"), str(site / "nvidia/cuda_nvcc/bin"))
    assert env["CUDA_HOME"] == str(Path(first).parent)
    assert env["PATH"].endswith("/usr/local/cuda/bin:/usr/bin")
    assert env["LIBRARY_PATH"].split(":")[0] == str(site / "nvidia/cu13/lib")


def test_no_nvidia_packages_keeps_everything(tmp_path):
    base = {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/keep/me", "CUDA_HOME": "/opt/cuda"}
    env = engine_environment([tmp_path], base)
    assert env["PATH"] == "/usr/bin" and env["CUDA_HOME"] == "/opt/cuda"
    assert env["LD_LIBRARY_PATH"].split(":")[0] == "/keep/me"


def test_env_cli_json_keeps_ld_library_path_first(site):
    env = dict(os.environ, LD_LIBRARY_PATH="/keep/me")
    r = wh("env", "--json", "--path", site, env=env)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["env"]["LD_LIBRARY_PATH"].split(":")[0] == "/keep/me"
    assert data["nvcc"].endswith("/bin/nvcc")


@pytest.mark.parametrize("existing", ["/keep/me", "/usr/local/cuda/lib64/stubs:/keep/me:/x/stubs/:/and/me", "/a/stubs"])
@pytest.mark.parametrize("shell", [s for s in ("bash", "dash", "zsh") if shutil.which(s)])
def test_sourced_snippet_matches_and_is_idempotent(site, shell, tmp_path, existing):
    r = wh("env", "--shell", "bash", "--path", site)
    assert r.returncode == 0, r.stderr
    snippet = tmp_path / "env.sh"
    snippet.write_text(r.stdout)
    out = subprocess.run(
        [shell, "-c", f'. "{snippet}"; . "{snippet}"; echo "$LD_LIBRARY_PATH"; echo "$PATH"; nvcc; echo "${{__wh_rest-x}}${{__wh_kept-x}}${{__wh_p-x}}"'],
        capture_output=True, text=True, env={"LD_LIBRARY_PATH": existing, "PATH": "/usr/bin:/bin"},
    )
    ld, path, nvcc, helpers = out.stdout.splitlines()
    expected = engine_environment([site], {"LD_LIBRARY_PATH": existing, "PATH": "/usr/bin:/bin"})
    assert ld == expected["LD_LIBRARY_PATH"]  # sourcing twice adds nothing twice; stubs folders left out
    assert not any(Path(p).name == "stubs" for p in ld.split(":"))
    assert path == expected["PATH"]
    assert nvcc in ("cu13", "cuda_nvcc")
    assert helpers == "xxx"  # the snippet's helper variables are unset after sourcing


def test_dotenv_output(site):
    r = wh("env", "--dotenv", "--path", site, env=dict(os.environ, LD_LIBRARY_PATH="/keep/me"))
    assert r.returncode == 0, r.stderr
    values = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert values["LD_LIBRARY_PATH"].startswith("/keep/me:")
    assert set(values) == {"PATH", "CUDA_HOME", "LIBRARY_PATH", "LD_LIBRARY_PATH"}


def test_fish_snippet_when_fish_exists(site, tmp_path):
    r = wh("env", "--shell", "fish", "--path", site)
    assert r.returncode == 0 and "set -gx CUDA_HOME" in r.stdout
    if not shutil.which("fish"):
        return
    snippet = tmp_path / "env.fish"  # a file, not the text inside fish -c '...': the snippet quotes with '
    snippet.write_text(r.stdout)
    out = subprocess.run(["fish", "--no-config", "-c", f'source "{snippet}"; echo $LD_LIBRARY_PATH'],
                         capture_output=True, text=True, env={"LD_LIBRARY_PATH": "/keep/me", "PATH": "/usr/bin:/bin"})
    assert out.stdout.split()[0] == "/keep/me"


def test_plan_ignores_stubs(site):
    plan = env_plan([site])
    assert not any(Path(p).name == "stubs" for p in plan.ld_append + plan.library_path)
    assert "()" not in render_bash(plan)  # plain POSIX sh, no helper functions left behind


def test_existing_stubs_entries_are_left_out_and_named(site):
    base = {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64/stubs:/keep:/opt/stubs/lib:/x/stubs/:/and/me", "PATH": "/usr/bin"}
    parts = engine_environment([site], base)["LD_LIBRARY_PATH"].split(":")
    # The others stay first and in order; a folder merely under a `stubs` folder is not one.
    assert parts[:3] == ["/keep", "/opt/stubs/lib", "/and/me"] and parts[3] == (driver_dir() or str(site / "nvidia/cu13/lib"))
    assert [(r.variable, r.entry) for r in removed_entries(base)] == [
        ("LD_LIBRARY_PATH", "/usr/local/cuda/lib64/stubs"), ("LD_LIBRARY_PATH", "/x/stubs/")]
    assert all("shadows the real driver" in r.reason for r in removed_entries(base))


def test_env_cli_says_which_stubs_entries_it_left_out(site):
    env = dict(os.environ, LD_LIBRARY_PATH="/usr/local/cuda/lib64/stubs:/keep")
    r = wh("env", "--json", "--path", site, env=env)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["env"]["LD_LIBRARY_PATH"].split(":")[0] == "/keep"
    assert not any(Path(p).name == "stubs" for p in data["env"]["LD_LIBRARY_PATH"].split(":"))
    assert data["removed"] == [{"variable": "LD_LIBRARY_PATH", "entry": "/usr/local/cuda/lib64/stubs",
                                "reason": "a stub libcuda.so there shadows the real driver"}]
    assert "LD_LIBRARY_PATH entry /usr/local/cuda/lib64/stubs left out: a stub libcuda.so" in r.stderr
    r = wh("env", "--dotenv", "--path", site, env=env)
    assert r.returncode == 0 and "left out" in r.stderr
    assert dict(line.split("=", 1) for line in r.stdout.splitlines())["LD_LIBRARY_PATH"].startswith("/keep:")
    r = wh("env", "--json", "--path", site, env=dict(os.environ, LD_LIBRARY_PATH="/keep"))
    assert json.loads(r.stdout)["removed"] == [] and "left out" not in r.stderr


def test_relative_path_gives_absolute_folders(site):
    for args in (["--json"], ["--shell", "bash"]):
        r = wh("env", *args, "--path", site.name, cwd=site.parent)
        assert r.returncode == 0, r.stderr
        if args == ["--json"]:
            data = json.loads(r.stdout)
            dirs = data["lib_dirs"] + data["ld_library_path_appended"] + [data["cuda_home"], data["nvcc"]]
            assert dirs and all(Path(d).is_absolute() for d in dirs)
            assert data["lib_dirs"][0] == str(site / "nvidia/cu13/lib")
        else:
            assert f"'{site}/nvidia/cu13/lib'" in r.stdout and "'site/" not in r.stdout


def test_no_empty_variables_when_there_is_nothing_to_put_there(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("LIBRARY_PATH", "CUDA_HOME")}
    r = wh("env", "--dotenv", "--path", empty, env=env)
    assert r.returncode == 0, r.stderr
    values = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert "LIBRARY_PATH" not in values and "CUDA_HOME" not in values
    assert all(v not in ("", '""') for v in values.values())
    data = json.loads(wh("env", "--json", "--path", empty, env=env).stdout)
    assert "LIBRARY_PATH" not in data["env"] and all(data["env"].values())
    # Nothing at all: nothing set. A value that must go (only stubs) is cleared, not left in place.
    nothing = EnvPlan(path_prepend=(), cuda_home=None, library_path=(), ld_append=(), nvcc=None)
    assert apply_plan(nothing, {}) == {}
    assert apply_plan(nothing, {"LD_LIBRARY_PATH": "/a/stubs", "LIBRARY_PATH": ""}) == {"LD_LIBRARY_PATH": ""}


def test_the_system_folder_is_added_only_where_the_loader_would_not_find_the_driver(tmp_path, monkeypatch):
    """On LD_LIBRARY_PATH the system folder comes before every RUNPATH: a pyenv interpreter (RUNPATH to its own
    libpython3.11.so.1.0) then loaded Debian's, and `import ssl` died (`_ssl: undefined symbol: _PyModule_Add`). It
    is added only for a driver's libcuda.so.1 the loader's cache lacks."""
    import wheelhouse.env.cuda as cuda

    sysdir = tmp_path / "usr" / "lib" / "x86_64-linux-gnu"
    sysdir.mkdir(parents=True)
    monkeypatch.setattr(cuda, "system_lib_dir", lambda machine=None: str(sysdir))
    assert cuda.driver_dir(cached=lambda name: False) is None  # no driver here
    (sysdir / "libcuda.so.1").write_bytes(b"\x7fELF")
    assert cuda.driver_dir(cached=lambda name: True) is None  # the cache finds it
    assert cuda.driver_dir(cached=lambda name: False) == str(sysdir)  # mounted after the cache was built
