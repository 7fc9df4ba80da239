"""links: unversioned sonames, lib64, and which libcuda the loader really picks (stub? compat?)."""

from __future__ import annotations

from wheelhouse.doctor.probes import probe_script, run_probe
from wheelhouse.doctor.report import CheckResult
from . import DoctorContext

__all__ = ["GROUP", "CHECKS", "run"]

_STUB_MAX_BYTES = 2 << 20  # the toolkit's stub is tens of KB; a real libcuda tens of MB

GROUP = "links"
CHECKS = {
    "links:sonames": "NVIDIA lib folders have the unversioned sonames runtime builds link against",
    "links:lib64": "lib64 exists where tools expect it",
    "links:stubs": "no stub libcuda.so inside the environment",
    "links:libcuda": "dlopen(libcuda.so.1) resolves to the real driver, not a stub (executed)",
    "links:ld-library-path": "no stubs folder on LD_LIBRARY_PATH",
}


def run(ctx: DoctorContext) -> list[CheckResult]:
    from wheelhouse.env.links import nvidia_lib_dirs, plan_links

    out: list[CheckResult] = []
    roots = list(ctx.site_dirs)
    plan = plan_links(roots)
    libdirs = nvidia_lib_dirs(roots)
    builds = ctx.dist("nvidia-cuda-nvcc") or ctx.dist("triton") or any(
        k.startswith("flashinfer") for k in ctx.distributions)
    missing = [c for c in plan if c.action == "symlink"]
    if not libdirs:
        out.append(CheckResult("links:sonames", CHECKS["links:sonames"], "skip", "no NVIDIA wheel lib folders installed"))
    elif missing:
        by_dir: dict[str, list[str]] = {}
        for c in missing:
            d, _, name = c.path.rpartition("/")
            by_dir.setdefault(d, []).append(f"{name} -> {c.target}")
        ev = "; ".join(f"{d} lacks {', '.join(names)}" for d, names in by_dir.items())
        out.append(CheckResult("links:sonames", CHECKS["links:sonames"], "fail" if builds else "warn", ev,
                               hint="`wh links --fix` (or `wh doctor --fix`) adds them; `wh links --undo` reverts",
                               fix="wh links --fix", data={"missing": [c.to_json() for c in missing]}))
    else:
        out.append(CheckResult("links:sonames", CHECKS["links:sonames"], "ok",
                               f"{len(libdirs)} lib folder(s) have their unversioned names"))
    lib64 = [c for c in plan if c.action == "lib64"]
    if not libdirs:
        out.append(CheckResult("links:lib64", CHECKS["links:lib64"], "skip", "no NVIDIA wheel lib folders installed"))
    else:
        out.append(CheckResult("links:lib64", CHECKS["links:lib64"], "warn" if lib64 else "ok",
                               "; ".join(f"{c.path} missing" for c in lib64) or "lib64 present where lib is",
                               hint="`wh links --fix`" if lib64 else None, fix="wh links --fix" if lib64 else None))
    stubs = [c for c in plan if c.action == "remove-stub"]
    out.append(CheckResult("links:stubs", CHECKS["links:stubs"], "fail" if stubs else "ok",
                           "; ".join(f"{c.path}: {c.reason}" for c in stubs) or "no libcuda.so stub in the NVIDIA lib folders",
                           hint="`wh links --fix` moves them aside (undo: `wh links --undo`)" if stubs else None,
                           fix="wh links --fix" if stubs else None))
    res = run_probe(ctx.python, probe_script("libcuda"), timeout=ctx.timeout, env=ctx.engine_env, name="libcuda")
    if not res.ok:
        out.append(CheckResult("links:libcuda", CHECKS["links:libcuda"], "fail",
                               f"the libcuda probe {res.failure(ctx.timeout)}\n{res.tail()}",
                               hint="a crash inside dlopen(libcuda.so.1) means a broken driver install"))
        return out
    d = res.data
    out.append(_libcuda_verdict(ctx, d))
    stub_dirs = d.get("stub_dirs_on_ld_library_path") or []
    n_ld = len(d.get("ld_library_path") or [])
    out.append(CheckResult("links:ld-library-path", CHECKS["links:ld-library-path"], "fail" if stub_dirs else "ok",
                           ("stubs folder(s) on LD_LIBRARY_PATH: " + ", ".join(stub_dirs)) if stub_dirs else
                           f"LD_LIBRARY_PATH (engine environment) has {n_ld} {'entry' if n_ld == 1 else 'entries'}, no stubs",
                           hint="remove them from LD_LIBRARY_PATH; use `eval \"$(wh env)\"`, which never adds stubs"
                           if stub_dirs else None,
                           data={"ld_library_path": d.get("ld_library_path"), "ldconfig": d.get("ldconfig")}))
    return out


def _libcuda_verdict(ctx: DoctorContext, d: dict) -> CheckResult:
    title = CHECKS["links:libcuda"]
    order = d.get("libcuda_on_ld_library_path") or []
    ahead = "; ".join(f"{x['path']} ({x.get('size')} bytes)" for x in order)
    ldc = d.get("ldconfig")
    search = f"LD_LIBRARY_PATH candidates: {ahead or 'none'}; ldconfig: {', '.join(ldc) if ldc else 'none'}"
    if d.get("dlopen_error"):
        verdict = "fail" if ctx.gpu.gpus else "skip"
        return CheckResult("links:libcuda", title, verdict, f"dlopen(libcuda.so.1) failed: {d['dlopen_error']}; {search}",
                           hint="install the NVIDIA driver, or expose its libcuda.so.1 to the container" if verdict == "fail"
                           else None, data=dict(d))
    ld = d.get("loaded") or {}
    where = ld.get("realpath") or ld.get("path")
    ev = (f"dlopen(libcuda.so.1) -> {where} ({ld.get('size')} bytes); cuDriverGetVersion={ld.get('cuDriverGetVersion')} "
          f"({ld.get('driver_cuda_version')}), cuInit={ld.get('cuInit')}; {search}")
    if ld.get("is_stub"):
        return CheckResult("links:libcuda", title, "fail", "a STUB libcuda is loaded ahead of the driver: " + ev,
                           hint="remove the stubs folder from LD_LIBRARY_PATH and run `wh links --fix`", data=dict(d))
    if ld.get("in_compat_dir"):
        # The toolkit's compat/ libcuda is a real forward-compatibility driver library, not a stub:
        # it works only with a matching kernel driver on supported (datacenter) GPUs.
        verdict = "warn" if ld.get("cuInit") not in (0, None) else "info"
        return CheckResult("links:libcuda", title, verdict,
                           "the CUDA forward-compat libcuda is loaded (a real driver library, not a stub): " + ev,
                           hint="fine when cuInit is 0; otherwise take compat/ off LD_LIBRARY_PATH to use the system driver"
                           if verdict == "warn" else None, data=dict(d))
    stubs_ahead = [x["path"] for x in order if x.get("in_stubs_dir") or (x.get("size") or 1 << 30) < _STUB_MAX_BYTES]
    if stubs_ahead:
        return CheckResult("links:libcuda", title, "warn",
                           "libcuda.so.1 is the driver, but a stub is on LD_LIBRARY_PATH ahead of it (anything that "
                           f"dlopens the unversioned libcuda.so gets the stub): {', '.join(stubs_ahead)}; " + ev,
                           hint="take the stubs folder off LD_LIBRARY_PATH", data=dict(d))
    if ld.get("cuInit") not in (0, None) and ctx.gpu.gpus:
        return CheckResult("links:libcuda", title, "fail", "the driver library loads but cuInit fails: " + ev,
                           hint="check `nvidia-smi`; a driver/kernel-module mismatch needs a reboot or container restart",
                           data=dict(d))
    return CheckResult("links:libcuda", title, "ok", ev, data=dict(d))
