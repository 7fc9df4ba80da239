"""gpu: cards, compute capability, memory in use, driver vs torch's CUDA, interconnect, expectations."""

from __future__ import annotations

from wheelhouse.doctor.probes import probe_script, run_cached_probe
from wheelhouse.doctor.report import CheckResult
from wheelhouse.target.gpu import GpuFacts
from .context import DoctorContext, reinstall_command

__all__ = ["GROUP", "CHECKS", "run", "DEFAULT_MAX_USED_MIB"]

GROUP = "gpu"
CHECKS = {
    "gpu:devices": "NVIDIA GPUs visible (count, name, sm, memory), all of one sm",
    "gpu:expected": "GPU count and sm match the manifest's [doctor] expectations",
    "gpu:memory": "no card already has memory in use by another job",
    "gpu:driver-cuda": "the driver supports the CUDA version torch was built for (asked torch, executed)",
    "gpu:interconnect": "interconnect between cards (NVLink or PCIe only)",
}
DEFAULT_MAX_USED_MIB = 1024


def _mm(version: str | None) -> tuple[int, int] | None:
    try:
        parts = (version or "").split(".")
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def run(ctx: DoctorContext) -> list[CheckResult]:
    g = ctx.gpu
    out: list[CheckResult] = []
    exp = ctx.manifest.doctor if ctx.manifest else None
    if not g.gpus:
        why = g.error or ("nvidia-smi not found" if g.source == "none" else
                          f"CUDA_VISIBLE_DEVICES={g.visible!r} hides all {g.total} cards" if g.total else
                          "nvidia-smi lists no GPU")
        for cid, title in CHECKS.items():
            if cid == "gpu:devices" and g.error:
                # nvidia-smi is there and says the driver cannot be used: a broken GPU box, not a CPU one
                out.append(CheckResult(cid, title, "fail", g.error,
                                       hint="the NVIDIA driver cannot be used: after a driver upgrade reboot (or reload "
                                            "the nvidia kernel modules); `nvidia-smi` and `dmesg` say more"))
            elif cid == "gpu:expected" and exp and (exp.gpus or exp.sm):
                want = f"{exp.gpus or '?'} GPU(s)" + (f" sm {exp.sm}" if exp.sm else "")
                out.append(CheckResult(cid, title, "fail", f"manifest expects {want}; found none ({why})",
                                       hint="run on the GPU box, or check `nvidia-smi`"))
            else:
                out.append(CheckResult(cid, title, "skip", f"no GPU: {why}"))
        return out
    out.append(_devices(g))
    # Expectations.
    if exp and (exp.gpus or exp.sm):
        problems = []
        if exp.gpus and len(g.gpus) != exp.gpus:
            problems.append(f"{len(g.gpus)} GPU(s), manifest expects {exp.gpus}")
        if exp.sm:
            want = exp.sm.replace("sm_", "")
            want = want if "." in want else f"{want[:-1]}.{want[-1]}"
            bad = [x for x in g.gpus if x.compute_capability != want]
            if bad:
                problems.append(", ".join(f"GPU {x.index} is sm {x.compute_capability}" for x in bad) + f", manifest expects {want}")
        out.append(CheckResult("gpu:expected", CHECKS["gpu:expected"], "fail" if problems else "ok",
                               "; ".join(problems) or f"{len(g.gpus)} GPU(s) as expected",
                               hint="run on the box the manifest was written for, or set CUDA_VISIBLE_DEVICES"
                               if problems else None))
    else:
        out.append(CheckResult("gpu:expected", CHECKS["gpu:expected"], "skip", "the manifest sets no [doctor] gpus/sm"))
    # Memory already in use.
    limit = (exp.max_used_mib if exp and exp.max_used_mib is not None else DEFAULT_MAX_USED_MIB)
    out.append(_memory(g, limit))
    out.append(_driver_vs_torch(ctx))
    if len(g.gpus) < 2:
        out.append(CheckResult("gpu:interconnect", CHECKS["gpu:interconnect"], "skip", "one GPU"))
    else:
        topo = {"nvlink": "NVLink between cards", "pcie": "PCIe only (no NVLink): every cross-GPU transfer crosses PCIe"}
        out.append(CheckResult("gpu:interconnect", CHECKS["gpu:interconnect"], "info",
                               topo.get(g.topology or "", "unknown (`nvidia-smi topo -m` gave nothing)"),
                               data={"topology": g.topology, "matrix": g.topology_matrix}))
    return out


def _memory(g: GpuFacts, limit: int) -> CheckResult:
    """Memory already in use per card; unknown (``[N/A]`` and no process listed with its memory) is not ok."""
    busy = [x for x in g.gpus if (x.memory_in_use_mib or 0) > limit]
    unknown = [x for x in g.gpus if x.memory_in_use_mib is None]
    problems = [f"GPU {x.index} has {x.memory_in_use_mib} MiB in use (> {limit} MiB"
                + ("; memory.used is [N/A]: what its processes hold" if x.memory_used_mib is None else "")
                + "): another job is on it"
                + (" (" + ", ".join(f"pid {p.pid} {p.name} {p.used_mib} MiB".replace("  ", " ") for p in x.processes) + ")"
                   if x.processes else "")
                for x in busy]
    problems += [f"GPU {x.index}: memory in use unknown (nvidia-smi says [N/A] and lists no process with its memory)"
                 for x in unknown]
    return CheckResult(
        "gpu:memory", CHECKS["gpu:memory"], "warn" if problems else "ok",
        "; ".join(problems) or f"every card uses <= {limit} MiB",
        hint="find the process with `nvidia-smi`, stop it, or pick other cards with CUDA_VISIBLE_DEVICES"
        if problems else None,
    )


def _devices(g: GpuFacts) -> CheckResult:
    """The cards, and whether they agree: a tensor- or pipeline-parallel group runs one kernel build on every rank,
    so one card of another sm is a fail (the driver is one per host: the same on every card)."""
    lines = [f"{x.index}: {x.name} sm {x.compute_capability} {x.memory_used_mib}/{x.memory_total_mib} MiB used"
             for x in g.gpus]
    limit = f" (CUDA_VISIBLE_DEVICES={g.visible}: {len(g.gpus)} of {g.total} cards)" if g.visible is not None else ""
    by_sm: dict[str | None, list[int]] = {}
    for x in g.gpus:
        by_sm.setdefault(x.compute_capability, []).append(x.index)
    head = f"{len(g.gpus)} GPU(s), driver {g.driver_version}, CUDA {g.cuda_version} ({g.source}){limit}"
    if len(by_sm) > 1:
        groups = sorted(by_sm.items(), key=lambda kv: -len(kv[1]))
        split = "; ".join(f"GPU {', '.join(map(str, ix))} sm {sm}" for sm, ix in groups)
        return CheckResult("gpu:devices", CHECKS["gpu:devices"], "fail",
                           f"{head}; the cards disagree: {split}; " + "; ".join(lines), data=g.to_json(),
                           hint="give the engine cards of one sm with CUDA_VISIBLE_DEVICES="
                                + ",".join(map(str, groups[0][1])))
    agree = f"; every card sm {g.gpus[0].compute_capability}" if len(g.gpus) > 1 else ""
    return CheckResult("gpu:devices", CHECKS["gpu:devices"], "ok", f"{head}{agree}; " + "; ".join(lines),
                       data=g.to_json())


def _driver_vs_torch(ctx: DoctorContext) -> CheckResult:
    title = CHECKS["gpu:driver-cuda"]
    if ctx.dist("torch") is None:
        return CheckResult("gpu:driver-cuda", title, "skip", "torch is not installed")
    res, since = run_cached_probe(ctx.verdicts, ctx.python, probe_script("torch_info"), timeout=max(ctx.timeout, 120),
                                  env=ctx.engine_env, name="torch_info",
                                  passed=lambda r: r.ok and bool(r.data.get("cuda_available")))
    if not res.ok:
        return CheckResult("gpu:driver-cuda", title, "fail",
                           f"asking torch failed: {res.failure(max(ctx.timeout, 120))}\n{res.tail()}",
                           hint=f"see native:torch; reinstall torch from the wheelhouse: `{reinstall_command(ctx, 'torch')}`")
    d = res.data
    torch_cuda, driver_cuda = d.get("cuda"), ctx.gpu.cuda_version
    ev = f"torch {d.get('version')} built for CUDA {torch_cuda}; driver {ctx.gpu.driver_version} supports CUDA {driver_cuda}"
    if not torch_cuda:
        return CheckResult("gpu:driver-cuda", title, "fail", ev + " (a CPU-only torch on a GPU box)",
                           hint="stage the CUDA build of torch for this target")
    if not d.get("cuda_available"):
        return CheckResult("gpu:driver-cuda", title, "fail",
                           ev + f"; torch.cuda.is_available() is False {d.get('cuda_error') or ''}".rstrip(),
                           hint="check links:libcuda, and that the driver is new enough for this torch")
    if _mm(driver_cuda) and _mm(torch_cuda) and _mm(torch_cuda) > _mm(driver_cuda):
        return CheckResult("gpu:driver-cuda", title, "warn",
                           ev + "; torch runs only through the forward-compat libcuda (see links:libcuda)",
                           hint="use a torch built for the driver's CUDA, or a newer driver")
    return CheckResult("gpu:driver-cuda", title, "ok",
                       ev + f"; torch sees {len(d.get('devices') or [])} device(s)"
                       + (f" (unchanged since {since}: torch's answer reused, nothing it loaded changed)" if since else ""),
                       data={**d, "reused_since": since})
