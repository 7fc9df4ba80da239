"""toolchain: the declared toolchain groups hold (nvcc/crt/nvvm by default), the nvcc on PATH is the pinned one, it compiles."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence

from packaging.version import InvalidVersion, Version

from wheelhouse.doctor.probes import probe_script, run_probe
from wheelhouse.doctor.report import CheckResult
from wheelhouse.manifest import ToolchainGroup
from wheelhouse.manifest.toolchain import toolchain_rules
from .context import DoctorContext, reinstall_command

__all__ = ["GROUP", "CHECKS", "run", "DEFAULT_GROUP", "judge_groups"]

GROUP = "toolchain"
CHECKS = {
    "toolchain:versions": "the toolchain groups the wheelhouse's manifest declares (default: nvidia-cuda-nvcc / "
                          "-crt / nvidia-nvvm at one release) hold for what is installed",
    "toolchain:nvcc": "the nvcc on the engine's PATH is the pinned one",
    "toolchain:ptxas": "ptxas matches nvcc",
    "toolchain:compile": "nvcc compiles (and, with a GPU, runs) a tiny .cu",
}
# When the manifest declares no [[toolchain]]: the compiler pieces that must agree for ptxas to accept the
# PTX nvcc writes. The runtime (nvcc 13.4 pulls runtime 13.5) and cccl (headers only) are not in it.
DEFAULT_GROUP = ToolchainGroup("cuda", ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc-cu*", "nvidia-cuda-crt",
                                        "nvidia-cuda-crt-cu*", "nvidia-nvvm", "nvidia-nvvm-cu*"))
_RELEASE = re.compile(r"release (\d+\.\d+), V(\d+[\d.]*)")
_CU_SUFFIX = re.compile(r"-cu\d+$")


def _nvcc_wheel(ctx: DoctorContext) -> tuple[str, str] | None:
    """(distribution, version) of the installed nvidia-cuda-nvcc wheel (a ``-cu12`` suffixed name too)."""
    for key, d in ctx.distributions.items():
        if _CU_SUFFIX.sub("", key) == "nvidia-cuda-nvcc":
            return d.name, d.version
    return None


def _mm(v: str) -> tuple[int, ...]:
    try:
        return Version(v).release[:2]
    except InvalidVersion:
        return tuple(int(x) for x in re.findall(r"\d+", v)[:2])


def _groups(ctx: DoctorContext) -> list[ToolchainGroup]:
    m = ctx.manifest
    exact = bool(m and m.doctor.toolchain_exact)
    declared = list(m.toolchains) if m and m.toolchains else [DEFAULT_GROUP]
    return [replace(g, exact=g.exact or exact) for g in declared]


def judge_groups(groups: Sequence[ToolchainGroup], installed: Mapping[str, tuple[str, str]]) -> CheckResult:
    """toolchain:versions for ``installed`` (canonical name -> (name, version)), by the resolver's own rule."""
    title = CHECKS["toolchain:versions"]
    seen, mixed = [], []
    for rule in toolchain_rules(groups):
        members = {k: nv for k, nv in sorted(installed.items()) if rule.has(k)}
        if not members:
            continue
        try:
            releases = {rule.release(Version(v)) for _, v in members.values()}
        except InvalidVersion:
            releases = {v for _, v in members.values()}
        listing = ", ".join(f"{n} {v}" for n, v in members.values())
        line = f"group {rule.name} ({'identical versions' if rule.exact else 'one major.minor'}): {listing}"
        seen.append(({"name": rule.name, "exact": rule.exact, "installed": {n: v for n, v in members.values()}}, line))
        if len(releases) > 1:
            mixed.append(line)
    data = {"groups": [g for g, _ in seen]}
    if not seen:
        return CheckResult("toolchain:versions", title, "skip", "no member of a toolchain group is installed "
                           f"(groups: {', '.join(g.name for g in groups)})", data=data)
    if mixed:
        return CheckResult("toolchain:versions", title, "fail",
                           "; ".join(f"mixed {x}" for x in mixed) + " (mixing makes ptxas reject the PTX: "
                           "'Unsupported .version')",
                           hint="pin them to one version in the manifest's [[toolchain]] group and re-stage: `wh stage`",
                           data=data)
    return CheckResult("toolchain:versions", title, "ok", "; ".join(line for _, line in seen), data=data)


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
    # 1. Wheel versions agree, group by group, as the manifest declares them.
    out.append(judge_groups(_groups(ctx), {k: (d.name, d.version) for k, d in ctx.distributions.items()}))
    # 2. The nvcc the engine gets.
    env = dict(ctx.engine_env)
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    from wheelhouse.env.cuda import find_nvcc, nvcc_files

    found = find_nvcc(list(ctx.site_dirs))
    pinned = str(found) if found else None
    wheel = _nvcc_wheel(ctx)
    if nvcc is None and found is None and wheel is not None:
        # the wheel is there, its nvcc is not one that can run (mode bits lost, a noexec mount): the runtime
        # kernel builds the toolchain group is for would fail the same way
        shipped = nvcc_files(list(ctx.site_dirs))
        where = f"{shipped[0]} is not executable (mode {oct(shipped[0].stat().st_mode & 0o777)}, or a noexec " \
                "mount)" if shipped else "it ships no bin/nvcc on disk"
        out.append(CheckResult("toolchain:nvcc", CHECKS["toolchain:nvcc"], "fail",
                               f"{wheel[0]} {wheel[1]} is installed, but {where}",
                               hint=f"reinstall it: `{reinstall_command(ctx, wheel[0])}`"))
        for cid in ("toolchain:ptxas", "toolchain:compile"):
            out.append(CheckResult(cid, CHECKS[cid], "skip", "the installed nvcc cannot run (toolchain:nvcc)"))
        return out
    if nvcc is None:
        for cid in ("toolchain:nvcc", "toolchain:ptxas", "toolchain:compile"):
            out.append(CheckResult(cid, CHECKS[cid], "skip", "no nvcc on the engine's PATH and no nvidia-cuda-nvcc wheel"))
        return out
    # The three processes (nvcc --version, ptxas --version, the compile probe) run at once; verdicts in order.
    ptxas = Path(nvcc).resolve().parent / "ptxas"
    ptxas_path = str(ptxas) if ptxas.exists() else shutil.which("ptxas", path=env.get("PATH"))
    pool = ThreadPoolExecutor(max_workers=2)
    args = [nvcc] + (["--run"] if ctx.gpu.gpus else [])
    compiled = pool.submit(run_probe, ctx.python, probe_script("jit_nvcc"), args, timeout=max(ctx.timeout, 120),
                           env=env, name="jit_nvcc")
    ptxas_version = pool.submit(_version_of, ptxas_path, env) if ptxas_path else None
    pool.shutdown(wait=False)  # both run on; their results are awaited below
    release, line = _version_of(nvcc, env)
    want = _nvcc_wheel(ctx)
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
    if ptxas_version is None:
        out.append(CheckResult("toolchain:ptxas", CHECKS["toolchain:ptxas"], "fail", f"no ptxas next to {nvcc} or on PATH",
                               hint="install nvidia-cuda-nvcc from the wheelhouse (it ships ptxas)"))
    else:
        p_release, p_line = ptxas_version.result()
        same = p_release is not None and release is not None and _mm(p_release) == _mm(release)
        out.append(CheckResult("toolchain:ptxas", CHECKS["toolchain:ptxas"], "ok" if same else "fail",
                               f"{ptxas_path}: release {p_release}; nvcc release {release}",
                               hint=None if same else "use one toolchain: pin nvcc/crt/nvvm together and re-stage"))
    # 4. Execute: compile, and run where a GPU exists.
    res = compiled.result()
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
