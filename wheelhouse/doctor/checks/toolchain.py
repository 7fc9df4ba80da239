"""toolchain: nvcc / crt / nvvm / runtime wheels agree, the nvcc on PATH is the pinned one, and it compiles."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelhouse.doctor.probes import probe_script, run_probe
from wheelhouse.doctor.report import CheckResult
from . import DoctorContext

__all__ = ["GROUP", "CHECKS", "run", "TOOLCHAIN_PACKAGES"]

GROUP = "toolchain"
CHECKS = {
    "toolchain:versions": "nvidia-cuda-nvcc / -crt / nvidia-nvvm / -runtime wheels share one release",
    "toolchain:nvcc": "the nvcc on the engine's PATH is the pinned one",
    "toolchain:ptxas": "ptxas matches nvcc",
    "toolchain:compile": "nvcc compiles (and, with a GPU, runs) a tiny .cu",
}
TOOLCHAIN_PACKAGES = ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-runtime")
_RELEASE = re.compile(r"release (\d+\.\d+), V(\d+[\d.]*)")
_CU_SUFFIX = re.compile(r"-cu\d+$")


def _installed(ctx: DoctorContext) -> dict[str, tuple[str, str]]:
    """base name (``nvidia-cuda-nvcc``) -> (distribution, version), accepting ``-cu12`` suffixed names."""
    out = {}
    for key, d in ctx.distributions.items():
        base = _CU_SUFFIX.sub("", key)
        if base in TOOLCHAIN_PACKAGES:
            out[base] = (d.name, d.version)
    return out


def _mm(v: str) -> tuple[int, ...]:
    try:
        return Version(v).release[:2]
    except InvalidVersion:
        return tuple(int(x) for x in re.findall(r"\d+", v)[:2])


def _exact_required(ctx: DoctorContext, names: list[str]) -> tuple[bool, set[str]]:
    m = ctx.manifest
    if m is None:
        return False, set()
    exceptions: set[str] = set()
    exact = m.doctor.toolchain_exact
    for group in m.toolchains:
        members = {canonicalize_name(p) for p in group.packages}
        if members & set(names):
            exact = exact or group.exact
            exceptions |= {canonicalize_name(p) for p in group.exceptions}
    return exact, exceptions


def _version_of(tool: str, env: dict) -> tuple[str | None, str]:
    try:
        proc = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, str(exc)
    text = proc.stdout + proc.stderr
    m = _RELEASE.search(text)
    return (m.group(1) if m else None), text.strip().splitlines()[-1] if text.strip() else ""


def run(ctx: DoctorContext) -> list[CheckResult]:
    out: list[CheckResult] = []
    inst = _installed(ctx)
    # 1. Wheel versions agree.
    if not inst:
        out.append(CheckResult("toolchain:versions", CHECKS["toolchain:versions"], "skip",
                               "no NVIDIA toolchain wheels installed"))
    else:
        exact, exceptions = _exact_required(ctx, list(inst))
        considered = {b: v for b, v in inst.items() if b not in exceptions}
        listing = ", ".join(f"{name} {ver}" for name, ver in sorted(considered.values()))
        key = (lambda v: v) if exact else _mm
        distinct = {key(v) for _, v in considered.values()}
        if len(distinct) > 1:
            out.append(CheckResult(
                "toolchain:versions", CHECKS["toolchain:versions"], "fail",
                f"mixed {'versions' if exact else 'releases'}: {listing} (mixing makes ptxas reject the PTX: "
                "'Unsupported .version')",
                hint="pin them to one version in the manifest's [[toolchain]] group and re-stage: `wh stage`",
                data={"installed": {b: v for b, (_, v) in considered.items()}, "exact": exact}))
        else:
            out.append(CheckResult("toolchain:versions", CHECKS["toolchain:versions"], "ok",
                                   f"{listing} ({'exact' if exact else 'same major.minor'})",
                                   data={"installed": {b: v for b, (_, v) in considered.items()}, "exact": exact}))
    # 2. The nvcc the engine gets.
    env = dict(ctx.engine_env)
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    from wheelhouse.env.cuda import find_nvcc

    found = find_nvcc(list(ctx.site_dirs))
    pinned = str(found) if found else None
    if nvcc is None:
        for cid in ("toolchain:nvcc", "toolchain:ptxas", "toolchain:compile"):
            out.append(CheckResult(cid, CHECKS[cid], "skip", "no nvcc on the engine's PATH and no nvidia-cuda-nvcc wheel"))
        return out
    release, line = _version_of(nvcc, env)
    want = inst.get("nvidia-cuda-nvcc")
    problems = []
    if pinned and os.path.realpath(nvcc) != os.path.realpath(pinned):
        problems.append(f"PATH gives {nvcc}, the installed wheel's is {pinned}")
    if want and release and _mm(want[1]) != _mm(release):
        problems.append(f"nvcc reports release {release}, {want[0]} is {want[1]}")
    if release is None:
        problems.append(f"`{nvcc} --version` printed no release: {line}")
    out.append(CheckResult("toolchain:nvcc", CHECKS["toolchain:nvcc"], "fail" if problems else "ok",
                           f"{nvcc}: release {release}" + ("; " + "; ".join(problems) if problems else ""),
                           hint="put the wheel's nvcc first on PATH: `eval \"$(wh env)\"`" if problems else None,
                           data={"nvcc": nvcc, "release": release, "pinned": pinned}))
    # 3. ptxas next to it.
    ptxas = Path(nvcc).resolve().parent / "ptxas"
    ptxas_path = str(ptxas) if ptxas.exists() else shutil.which("ptxas", path=env.get("PATH"))
    if not ptxas_path:
        out.append(CheckResult("toolchain:ptxas", CHECKS["toolchain:ptxas"], "fail", f"no ptxas next to {nvcc} or on PATH",
                               hint="install nvidia-cuda-nvcc from the wheelhouse (it ships ptxas)"))
    else:
        p_release, p_line = _version_of(ptxas_path, env)
        same = p_release is not None and release is not None and _mm(p_release) == _mm(release)
        out.append(CheckResult("toolchain:ptxas", CHECKS["toolchain:ptxas"], "ok" if same else "fail",
                               f"{ptxas_path}: release {p_release}; nvcc release {release}",
                               hint=None if same else "use one toolchain: pin nvcc/crt/nvvm together and re-stage"))
    # 4. Execute: compile, and run where a GPU exists.
    args = [nvcc] + (["--run"] if ctx.gpu.gpus else [])
    res = run_probe(ctx.python, probe_script("jit_nvcc"), args, timeout=max(ctx.timeout, 120), env=env, name="jit_nvcc")
    d = res.data
    if not res.ok:
        out.append(CheckResult("toolchain:compile", CHECKS["toolchain:compile"], "fail",
                               f"compile probe {res.failure(max(ctx.timeout, 120))}\n{res.tail()}",
                               hint="run the nvcc command by hand to see why"))
    elif not d.get("compiled"):
        out.append(CheckResult("toolchain:compile", CHECKS["toolchain:compile"], "fail",
                               f"nvcc failed (exit {d.get('compile_returncode')}):\n{d.get('compiler_output', '').strip()}",
                               hint="fix the toolchain mix (toolchain:versions) or the headers it names"))
    elif d.get("ran") and not d.get("run_ok"):
        out.append(CheckResult("toolchain:compile", CHECKS["toolchain:compile"], "fail",
                               f"compiled, but running it failed (exit {d.get('run_returncode')}): "
                               f"{d.get('run_output', '').strip()}",
                               hint="check gpu:driver-cuda and links:libcuda"))
    else:
        ran = "compiled and ran a kernel on the GPU" if d.get("ran") else "compiled (no GPU here to run it)"
        out.append(CheckResult("toolchain:compile", CHECKS["toolchain:compile"], "ok", f"{nvcc} {ran}"))
    return out
