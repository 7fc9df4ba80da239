"""kernels: every shared object with CUDA device code has SASS or PTX that the GPUs of this machine can run.

A library built for sm_100 imports fine on an sm_89 card and fails at its
first kernel launch ("no kernel image is available for execution on the
device"), deep in serving. This check reads the fatbin of every ``.so`` a
distribution ships (:mod:`wheelhouse.doctor.fatbin`; nothing is loaded) and
judges it against the GPUs nvidia-smi reports: SASS of the same major with a
minor <= the GPU's, or PTX of an arch <= the GPU's that the driver can JIT.
An object whose same-named sibling in the same distribution runs on the GPU
is an architecture variant the package chooses between (``sgl_kernel/sm100/``
beside ``sgl_kernel/``): reported, not failed.
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
    hard = [g for g in gaps if not g.variant_of]
    variants = [g for g in gaps if g.variant_of]
    data["missing"] = [{"object": g.path, "sm": f"sm_{g.sm}", **g.code.to_json()} for g in hard]
    data["variants"] = [{"object": g.path, "sm": f"sm_{g.sm}", "runs_instead": g.variant_of} for g in variants]
    if hard:
        lines = [g.sentence(_which(g.sm, sms)) for g in hard] + [g.sentence(_which(g.sm, sms)) for g in variants]
        return CheckResult(cid, title, "fail", "\n".join(lines),
                           hint=f"install a build of {d.name} made for "
                                f"{', '.join(f'sm_{s}' for s in sorted({g.sm for g in hard}))} (or with PTX the driver "
                                "can JIT): stage it for this GPU with a target profile captured here "
                                "(`wh target capture`), then `wh install`",
                           data=data)
    ok_lines = []
    variant_paths = {g.path for g in variants}
    for rel, c in codes.items():
        if rel in variant_paths:
            continue  # said below, with the sibling that runs instead
        if not (c.sass or c.ptx):
            ok_lines.append(f"{rel}: LTO-IR only (linked at run time, not judged)")
            continue
        runs = [f"sm_{sm}: {r.name}" + (" (PTX, JIT)" if r.kind == "ptx" else "")
                for sm in sms for r in [c.runner(sm, ctx.gpu.cuda_version)] if r is not None]
        ok_lines.append(f"{rel}: {c.describe()} -> " + "; ".join(runs))
    ok_lines += [g.sentence(_which(g.sm, sms)) for g in variants]
    return CheckResult(cid, title, "ok", "\n".join(ok_lines), data=data)


def run(ctx: DoctorContext) -> list[CheckResult]:
    sms = _gpu_sms(ctx)
    out = []
    for d in sorted(ctx.distributions.values(), key=lambda d: d.key):
        if not ctx.wants(f"kernels:{d.key}"):
            continue
        codes = {rel: c for rel, path in shared_objects(d) for c in [device_code(path)] if c is not None}
        if codes:
            out.append(_verdict(ctx, d, codes, sms))
    return out
