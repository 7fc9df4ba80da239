"""The environment the engine needs: pinned nvcc on PATH, CUDA_HOME, library paths.

Rules (from the reference deployment's failures): LD_LIBRARY_PATH is APPENDED to, never
clobbered -- the existing entries stay first and in order, then the system
library folder where the driver's ``libcuda.so.1`` lives, only where the loader's
cache lacks it (``driver_dir``: anywhere else it would put system libraries ahead
of every RUNPATH), then the wheel lib folders; rank workers inherit it. No ``stubs`` folder is ever on LD_LIBRARY_PATH
(a stub ``libcuda.so`` would shadow the driver): wh adds none, and leaves out
the existing entries that are one (``removed_entries`` says which). The nvcc is
the one from the installed ``nvidia-cuda-nvcc`` wheel, so the toolchain matches
the pinned crt/nvvm. wh never sets a variable to an empty value it did not have.

``env_plan`` computes the parts; ``engine_environment`` applies them to a base
environment; ``render_*`` turn a plan into shell (dynamic: it reads the
variables at source time), dotenv or JSON text.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .links import nvidia_lib_dirs

__all__ = [
    "EnvPlan",
    "RemovedEntry",
    "env_plan",
    "apply_plan",
    "removed_entries",
    "engine_environment",
    "serving_variables",
    "system_lib_dir",
    "driver_dir",
    "find_nvcc",
    "nvcc_files",
    "render_bash",
    "render_fish",
    "render_dotenv",
    "render_json",
    "ENV_KEYS",
]

ENV_KEYS = ("PATH", "CUDA_HOME", "LIBRARY_PATH", "LD_LIBRARY_PATH")
STUBS_REASON = "a stub libcuda.so there shadows the real driver"


@dataclass(frozen=True)
class EnvPlan:
    """What to add: ``path_prepend`` before PATH, ``library_path`` before LIBRARY_PATH, ``ld_append`` after LD_LIBRARY_PATH."""

    path_prepend: tuple[str, ...]
    cuda_home: str | None
    library_path: tuple[str, ...]
    ld_append: tuple[str, ...]
    nvcc: str | None


@dataclass(frozen=True)
class RemovedEntry:
    """An entry of an existing variable that wh leaves out, and why."""

    variable: str
    entry: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"variable": self.variable, "entry": self.entry, "reason": self.reason}


def system_lib_dir(machine: str | None = None) -> str | None:
    """The system library folder where the driver lives (``/usr/lib/x86_64-linux-gnu`` on Debian/Ubuntu)."""
    machine = machine or platform.machine()
    for cand in (f"/usr/lib/{machine}-linux-gnu", "/usr/lib64", "/usr/lib"):
        if os.path.isdir(cand):
            return cand
    return None


def driver_dir(machine: str | None = None, cached: Callable[[str], bool] | None = None) -> str | None:
    """The system library folder, for LD_LIBRARY_PATH, only where the driver's ``libcuda.so.1`` is in it and the
    loader would not find it there by itself (its cache, ``ldconfig -p``, has no entry: a container whose driver
    was mounted after the cache was built, the reference notebook's case). Anywhere else the folder on
    LD_LIBRARY_PATH only reorders the search: it then comes before every RUNPATH, and a system library of the same
    name shadows the one an object's RUNPATH names (a pyenv interpreter's own libpython3.11.so.1.0, behind Debian's:
    ``_ssl``: undefined symbol ``_PyModule_Add``)."""
    sysdir = system_lib_dir(machine)
    if sysdir is None or not os.path.exists(os.path.join(sysdir, "libcuda.so.1")):
        return None
    return None if (cached or _in_loader_cache)("libcuda.so.1") else sysdir


def _in_loader_cache(name: str) -> bool:
    """Whether ``ldconfig -p`` lists ``name`` (False when it cannot be asked: then nothing says the loader finds it)."""
    exe = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(p, os.X_OK)), None)
    if exe is None:
        return False
    try:
        out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.strip().startswith(name + " ") for line in out.splitlines())


def nvcc_files(site_dirs: Sequence[Path]) -> list[Path]:
    """Every ``nvcc`` the NVIDIA wheels put in ``site_dirs`` (``nvidia/cuda_nvcc/bin``, ``nvidia/cu13/bin``), runnable
    or not, in order."""
    found: list[Path] = []
    for site in site_dirs:
        base = Path(site) / "nvidia"
        if base.is_dir():
            found += [*base.glob("*/bin/nvcc"), *base.glob("bin/nvcc")]
    return sorted(found)


def find_nvcc(site_dirs: Sequence[Path]) -> Path | None:
    """The nvcc of the installed nvidia-cuda-nvcc wheel: the first of :func:`nvcc_files` that may run."""
    return next((p for p in nvcc_files(site_dirs) if os.access(p, os.X_OK)), None)


def _split(value: str | None) -> list[str]:
    return [p for p in (value or "").split(os.pathsep) if p]


def _is_stubs(entry: str) -> bool:
    return Path(entry).name == "stubs"


def removed_entries(base: Mapping[str, str]) -> tuple[RemovedEntry, ...]:
    """The entries of ``base``'s LD_LIBRARY_PATH that ``apply_plan`` leaves out: ``stubs`` folders."""
    stubs = [p for p in _split(base.get("LD_LIBRARY_PATH")) if _is_stubs(p)]
    return tuple(RemovedEntry("LD_LIBRARY_PATH", p, STUBS_REASON) for p in dict.fromkeys(stubs))


def env_plan(site_dirs: Sequence[Path], machine: str | None = None) -> EnvPlan:
    """The additions for the NVIDIA packages installed under ``site_dirs`` (made absolute: the
    result is sourced or read elsewhere, where a relative folder means something else)."""
    site_dirs = [Path(os.path.abspath(s)) for s in site_dirs]
    # A folder with ':' in its path cannot be one entry of a path list: its pieces would be
    # read as other folders, the last one relative to wherever the engine runs.
    libs = [str(d) for d in nvidia_lib_dirs(site_dirs) if "stubs" not in d.parts and os.pathsep not in str(d)]
    nvcc = find_nvcc(site_dirs)
    sysdir = driver_dir(machine)
    ld = ([sysdir] if sysdir else []) + libs
    return EnvPlan(
        path_prepend=(str(nvcc.parent),) if nvcc and os.pathsep not in str(nvcc.parent) else (),
        cuda_home=str(nvcc.parent.parent) if nvcc else None,
        library_path=tuple(libs),
        ld_append=tuple(dict.fromkeys(ld)),
        nvcc=str(nvcc) if nvcc else None,
    )


def apply_plan(plan: EnvPlan, base: Mapping[str, str]) -> dict[str, str]:
    """The four variables after applying ``plan`` to ``base`` (only the keys wh sets).

    A variable that comes out empty is left out unless ``base`` had a value for it (then the
    empty value clears it), so ``base.update(result)`` is right and no ``X=""`` is printed for nothing.
    """
    out: dict[str, str] = {}
    out["PATH"] = os.pathsep.join(dict.fromkeys(list(plan.path_prepend) + _split(base.get("PATH"))))
    if plan.cuda_home:
        out["CUDA_HOME"] = plan.cuda_home
    elif base.get("CUDA_HOME"):
        out["CUDA_HOME"] = base["CUDA_HOME"]
    # LIBRARY_PATH is for the linker: an existing stubs folder there (how -lcuda links on a box
    # without a driver) stays, as the sourced snippet keeps it.
    out["LIBRARY_PATH"] = os.pathsep.join(dict.fromkeys(list(plan.library_path) + _split(base.get("LIBRARY_PATH"))))
    # Existing entries first (in their order), less the stubs folders (removed_entries), then ours.
    existing = [p for p in _split(base.get("LD_LIBRARY_PATH")) if not _is_stubs(p)]
    ours = [p for p in plan.ld_append if p not in existing]
    out["LD_LIBRARY_PATH"] = os.pathsep.join(existing + ours)
    return {k: v for k, v in out.items() if v or base.get(k)}


def engine_environment(site_dirs: Sequence[Path], base: Mapping[str, str]) -> dict[str, str]:
    """PATH, CUDA_HOME, LIBRARY_PATH and LD_LIBRARY_PATH for the engine, computed over ``base``."""
    return apply_plan(env_plan(site_dirs), base)


def serving_variables(site_dirs: Sequence[Path], base: Mapping[str, str],
                      serve_env: Mapping[str, object] | None = None) -> dict[str, str]:
    """What wh sets over ``base`` for the engine it serves: :func:`engine_environment`'s variables, then the
    manifest's ``[serve] env`` over them. ``wh serve`` starts the engine with ``base`` plus these, and the doctor's
    probes run in the same (the one engine environment, docs/design.md)."""
    return {**engine_environment(site_dirs, base), **{k: str(v) for k, v in (serve_env or {}).items()}}


def _sh_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def _sh_prepend(var: str, value: str) -> str:
    q = _sh_quote(value)
    return f'case ":${{{var}:-}}:" in *:{q}:*) ;; *) export {var}={q}"${{{var}:+:${var}}}" ;; esac'


def _sh_append(var: str, value: str) -> str:
    q = _sh_quote(value)
    return f'case ":${{{var}:-}}:" in *:{q}:*) ;; *) export {var}="${{{var}:+${var}:}}"{q} ;; esac'


# Sourced into the user's shell: the helper variables are unset again, and the loop uses only
# POSIX expansions (zsh does not word-split "$VAR" on IFS by default).
_SH_DROP_STUBS = f"""# no stubs folder on LD_LIBRARY_PATH: {STUBS_REASON}
if [ -n "${{LD_LIBRARY_PATH:-}}" ]; then
  __wh_rest="$LD_LIBRARY_PATH:"; __wh_kept=
  while [ -n "$__wh_rest" ]; do
    __wh_p="${{__wh_rest%%:*}}"; __wh_rest="${{__wh_rest#*:}}"
    case "$__wh_p" in ''|stubs|stubs/|*/stubs|*/stubs/) ;; *) __wh_kept="${{__wh_kept:+$__wh_kept:}}$__wh_p" ;; esac
  done
  if [ -n "$__wh_kept" ]; then export LD_LIBRARY_PATH="$__wh_kept"; else unset LD_LIBRARY_PATH; fi
  unset __wh_rest __wh_kept __wh_p
fi"""

_FISH_DROP_STUBS = f"""# no stubs folder on LD_LIBRARY_PATH: {STUBS_REASON}
if set -q LD_LIBRARY_PATH
    set -gx --path LD_LIBRARY_PATH (string match -rv '(^|/)stubs/*$' -- $LD_LIBRARY_PATH | string match -v '')
    test -n "$LD_LIBRARY_PATH"; or set -e LD_LIBRARY_PATH
end"""


def render_bash(plan: EnvPlan) -> str:
    """A POSIX sh snippet (bash, zsh, dash) for ``source``: it reads the variables when sourced,
    keeps LD_LIBRARY_PATH's entries first (less stubs folders), and adding an entry twice is a no-op."""
    lines = ["# wh env: pinned CUDA toolchain and NVIDIA wheel libraries (generated by `wh env`)"]
    for p in reversed(plan.path_prepend):
        lines.append(_sh_prepend("PATH", p))
    if plan.cuda_home:
        lines.append(f"export CUDA_HOME={_sh_quote(plan.cuda_home)}")
    for p in reversed(plan.library_path):
        lines.append(_sh_prepend("LIBRARY_PATH", p))
    lines.append(_SH_DROP_STUBS)
    for p in plan.ld_append:
        lines.append(_sh_append("LD_LIBRARY_PATH", p))
    return "\n".join(lines) + "\n"


def render_fish(plan: EnvPlan) -> str:
    lines = ["# wh env: pinned CUDA toolchain and NVIDIA wheel libraries (generated by `wh env`)"]
    for p in reversed(plan.path_prepend):
        lines.append(f"contains -- {_sh_quote(p)} $PATH; or set -gx PATH {_sh_quote(p)} $PATH")
    if plan.cuda_home:
        lines.append(f"set -gx CUDA_HOME {_sh_quote(plan.cuda_home)}")
    for p in reversed(plan.library_path):
        lines.append(f"contains -- {_sh_quote(p)} $LIBRARY_PATH; or set -gx --path LIBRARY_PATH {_sh_quote(p)} $LIBRARY_PATH")
    lines.append(_FISH_DROP_STUBS)
    for p in plan.ld_append:
        lines.append(f"contains -- {_sh_quote(p)} $LD_LIBRARY_PATH; or set -gx --path LD_LIBRARY_PATH $LD_LIBRARY_PATH {_sh_quote(p)}")
    return "\n".join(lines) + "\n"


def render_dotenv(env: Mapping[str, str]) -> str:
    """``KEY="value"`` lines of a computed environment (static values, for docker --env-file and the like)."""
    def fmt(v: str) -> str:
        return v if v and all(c.isalnum() or c in "/._-:+,=@" for c in v) else json.dumps(v)

    return "".join(f"{k}={fmt(v)}\n" for k, v in env.items())


def render_json(plan: EnvPlan, env: Mapping[str, str], removed: Sequence[RemovedEntry] = ()) -> dict:
    return {
        "env": dict(env),
        "nvcc": plan.nvcc,
        "cuda_home": plan.cuda_home,
        "lib_dirs": list(plan.library_path),
        "ld_library_path_appended": list(plan.ld_append),
        "removed": [r.to_json() for r in removed],
    }
