"""kernels: every shared object with CUDA device code has SASS or PTX that the GPUs of this machine can run.

A library built for sm_100 imports fine on an sm_89 card and fails at its
first kernel launch ("no kernel image is available for execution on the
device"), deep in serving. This check reads the fatbin of every ``.so`` a
distribution ships (:mod:`wheelhouse.doctor.fatbin`; nothing is loaded) and
judges it against the GPUs nvidia-smi reports: SASS of the same major with a
minor <= the GPU's, or PTX of an arch <= the GPU's that the driver can JIT.
An object whose same-named sibling in the same distribution runs on the GPU
is an architecture variant the package chooses between (``sgl_kernel/sm100/``
beside ``sgl_kernel/``): reported, not failed. An object whose fatbin covers
no GPU here is read whole for fatbin containers it loads itself (cuFFT keeps
its PTX in ``.ldata``). SASS for older majors only (and no PTX) is a warning:
cuFFTW ships an sm_75-only fatbin and runs everywhere.
"""

from __future__ import annotations

from wheelhouse.doctor.fatbin import DeviceCode, device_code, kernel_gaps, sm_number
from wheelhouse.doctor.report import CheckResult
from . import DoctorContext, Distribution
from .sharedlibs import shared_objects

__all__ = ["GROUP", "CHECKS", "run"]

GROUP = "kernels"
CHECKS = {"kernels:<distribution>": "every .so with CUDA device code has SASS or PTX the GPUs here can run "
                                    "(read from its fatbin, not loaded)"}


def _gpu_sms(ctx: DoctorContext) -> dict[int, list[int]]:
    """sm -> GPU indexes."""
    out: dict[int, list[int]] = {}
    for g in ctx.gpu.gpus:
        if g.compute_capability:
            try:
                out.setdefault(sm_number(g.compute_capability), []).append(g.index)
            except ValueError:
                continue
    return out


def _which(sm: int, sms: dict[int, list[int]]) -> str:
    idx = sms.get(sm, [])
    if len(sms) == 1:
        return "this GPU" if len(idx) <= 1 else "every GPU here"
    return f"GPU {', '.join(map(str, idx))}"


def _verdict(ctx: DoctorContext, d: Distribution, codes: dict[str, DeviceCode], sms: dict[int, list[int]]) -> CheckResult:
    cid = f"kernels:{d.key}"
    title = f"{d.name} {d.version}: its {len(codes)} .so file(s) with CUDA device code run on the GPUs here"
    data = {"objects": {rel: c.to_json() for rel, c in codes.items()}, "gpu_sms": [f"sm_{s}" for s in sms]}
    listing = [f"{rel}: {c.describe()}" for rel, c in codes.items()]
    if not sms:
        return CheckResult(cid, title, "skip", "no GPU to judge against; embedded: " + "; ".join(listing), data=data)
    gaps = kernel_gaps(codes, sms, ctx.gpu.cuda_version)
    hard = [g for g in gaps if not g.variant_of and not g.older_only]
    older = [g for g in gaps if not g.variant_of and g.older_only]
    variants = [g for g in gaps if g.variant_of]
    data["missing"] = [{"object": g.path, "sm": f"sm_{g.sm}", **g.code.to_json()} for g in hard + older]
    data["variants"] = [{"object": g.path, "sm": f"sm_{g.sm}", "runs_instead": g.variant_of} for g in variants]
    notes = [g.sentence(_which(g.sm, sms)) for g in variants]
    if hard:
        lines = [g.sentence(_which(g.sm, sms)) for g in hard + older] + notes
        return CheckResult(cid, title, "fail", "\n".join(lines),
                           hint=f"install a build of {d.name} made for "
                                f"{', '.join(f'sm_{s}' for s in sorted({g.sm for g in hard}))} (or with PTX the driver "
                                "can JIT): stage it for this GPU with a target profile captured here "
                                "(`wh target capture`), then `wh install`",
                           data=data)
    lines = []
    skipped = {g.path for g in gaps}
    for rel, c in codes.items():
        if rel in skipped:
            continue  # said below
        if not (c.sass or c.ptx):
            lines.append(f"{rel}: LTO-IR only (linked at run time, not judged)")
            continue
        runs = [f"sm_{sm}: {r.name}" + (" (PTX, JIT)" if r.kind == "ptx" else "")
                for sm in sms for r in [c.runner(sm, ctx.gpu.cuda_version)] if r is not None]
        lines.append(f"{rel}: {c.describe()} -> " + "; ".join(runs))
    if older:
        lines = [g.sentence(_which(g.sm, sms)) + " (older GPUs only: a library may keep such kernels for those GPUs "
                 "alone and never launch them here)" for g in older] + lines + notes
        return CheckResult(cid, title, "warn", "\n".join(lines),
                           hint=f"if {d.name} fails with 'no kernel image is available', install a build made for "
                                f"{', '.join(f'sm_{s}' for s in sorted({g.sm for g in older}))}", data=data)
    return CheckResult(cid, title, "ok", "\n".join(lines + notes), data=data)


def _codes(d: Distribution, sms: dict[int, list[int]], driver_cuda: str | None) -> dict[str, DeviceCode]:
    """RECORD path -> device code; an object whose fatbin covers no GPU here is read whole for the device code
    it loads itself (cuFFT keeps PTX for every GPU in .ldata, its fatbin section has sm_75 only)."""
    codes: dict[str, DeviceCode] = {}
    for rel, path in shared_objects(d):
        code = device_code(path)
        if code is None:
            continue
        if sms and any(not code.runs_on(sm, driver_cuda) for sm in sms) and (code.sass or code.ptx):
            code = device_code(path, deep=True) or code
        codes[rel] = code
    return codes


def run(ctx: DoctorContext) -> list[CheckResult]:
    sms = _gpu_sms(ctx)
    out = []
    for d in sorted(ctx.distributions.values(), key=lambda d: d.key):
        if not ctx.wants(f"kernels:{d.key}"):
            continue
        codes = _codes(d, sms, ctx.gpu.cuda_version)
        if codes:
            out.append(_verdict(ctx, d, codes, sms))
    return out
