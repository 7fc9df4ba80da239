"""kernels: every shared object with CUDA device code has SASS or PTX that the GPUs of the stack can run.

A library built for sm_100 imports fine on an sm_89 card and fails at its
first kernel launch ("no kernel image is available for execution on the
device", cudaError 209), deep in serving. This check reads the fatbin of every
``.so`` a distribution ships (:mod:`wheelhouse.fatbin`; nothing is
loaded) and judges it by the driver's own rule: SASS runs only on the same
major with a minor <= the GPU's; else PTX of an arch <= the GPU's that the
driver can JIT (a driver JITs PTX up to the ISA of its own CUDA release);
otherwise the object fails (sm_80-only SASS on sm_90 included: its launch
returns cudaError 209 on the H200). A fatbin section that cannot be read
fails too, naming what is wrong: the runtime cannot register those kernels
either, and "no SASS or PTX" is no proof of LTO-IR.

The GPUs judged against: those nvidia-smi reports; with no GPU here, the
manifest's ``[doctor] sm``, else the GPUs of the wheelhouse's target profile
(the evidence says which). An object that is another build of one in the same
distribution that runs on the GPU, its path differing only in folders or
file-name parts that name a GPU architecture or CUDA major, is an architecture
variant the package chooses between (``sgl_kernel/sm100/`` beside
``sgl_kernel/``, ``cu12/`` beside ``cu13/``): reported, not failed.
An object whose fatbin covers no GPU is read whole for fatbin containers it
loads itself (cuFFT keeps its PTX in ``.ldata``). A gap known to be harmless
(cuFFTW's sm_75-only fatbin) is named in ``doctor/kernels.toml`` with its
reason: ok, the reason in the evidence and data.
"""

from __future__ import annotations

import dataclasses

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from wheelhouse.datafile import get_value, load_tables
from wheelhouse.fatbin import DeviceCode, FatbinEntry, KernelGap, device_code, kernel_gaps, sm_number
from wheelhouse.doctor.verdicts import VerdictCache
from wheelhouse.doctor.report import CheckResult
from wheelhouse.errors import WhError
from wheelhouse.resources import doctor_dir
from .context import DoctorContext, Distribution
from .sharedlibs import shared_objects

__all__ = ["GROUP", "CHECKS", "run", "HarmlessGap", "load_harmless", "JudgedGpus", "judged_gpus"]

GROUP = "kernels"
CHECKS = {"kernels:<distribution>": "every .so with CUDA device code has SASS or PTX the GPUs here (or the "
                                    "manifest's / target's) can run (read from its fatbin, not loaded)"}


class KernelsDataError(WhError):
    code = "kernels-data"


@dataclass(frozen=True)
class HarmlessGap:
    """A ``[[harmless]]`` entry of ``doctor/kernels.toml``: an object whose gap the distribution never hits."""

    distribution: str
    objects: str
    images: tuple[str, ...]
    reason: str

    def covers(self, dist_key: str, rel: str, code: DeviceCode) -> bool:
        return (fnmatch.fnmatchcase(dist_key, self.distribution) and fnmatch.fnmatchcase(rel, self.objects)
                and set(code.names()) == set(self.images))


def load_harmless(path: Path | None = None) -> tuple[HarmlessGap, ...]:
    """The ``[[harmless]]`` entries of ``doctor/kernels.toml`` (or ``path``)."""
    path = path or doctor_dir() / "kernels.toml"
    out = []
    for where, t in load_tables(path, "harmless", ["distribution", "objects", "images", "reason"],
                                what="kernels data file", error=KernelsDataError):
        dist, objects, images, reason = (get_value(t, k, kinds, where, error=KernelsDataError) for k, kinds in
                                         (("distribution", (str,)), ("objects", (str,)), ("images", (list,)),
                                          ("reason", (str,))))
        if not (dist and objects and images and reason):
            raise KernelsDataError(f"{where} needs distribution, objects, images and reason",
                                   hint="the reason is the evidence: say why the gap is harmless")
        out.append(HarmlessGap(dist, objects, tuple(str(x) for x in images), reason))
    return tuple(out)


@dataclass(frozen=True)
class JudgedGpus:
    """The compute capabilities the fatbins are judged against, and where they come from."""

    sms: dict[int, list[int]]  # sm -> GPU indexes (empty for an expectation)
    source: str  # "nvidia-smi" | "manifest" | "target" | "none"
    label: str  # how a sentence names one: "this GPU", "the manifest's GPU"
    driver_cuda: str | None = None
    note: str = ""  # said in the evidence when the GPUs are not this machine's


def _sms_of(values) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for index, cc in values:
        try:
            out.setdefault(sm_number(str(cc)), []).append(index)
        except ValueError:
            continue
    return out


def judged_gpus(ctx: DoctorContext) -> JudgedGpus:
    """nvidia-smi's GPUs; with none, the manifest's ``[doctor] sm``, else the wheelhouse target's GPUs."""
    here = _sms_of((g.index, g.compute_capability) for g in ctx.gpu.gpus if g.compute_capability)
    if here:
        return JudgedGpus(here, "nvidia-smi", "this GPU", ctx.gpu.cuda_version)
    target = ctx.target
    driver = target.cuda_version if target else None
    sm = ctx.manifest.doctor.sm if ctx.manifest else None
    wanted = _sms_of([(0, sm)]) if sm is not None else {}
    if wanted:
        return JudgedGpus({k: [] for k in wanted}, "manifest", "the manifest's GPU", driver,
                          f"no GPU here: judged against the manifest's [doctor] sm = {sm}")
    wanted = _sms_of((g.index, g.compute_capability) for g in (target.gpus if target else ()) if g.compute_capability)
    if wanted:
        return JudgedGpus(wanted, "target", "the target's GPU", driver,
                          "no GPU here: judged against the GPUs of the wheelhouse's target profile "
                          f"({ctx.target_source}): " + ", ".join(f"sm_{s}" for s in wanted))
    return JudgedGpus({}, "none", "this GPU")


def _which(sm: int, judged: JudgedGpus) -> str:
    sms = judged.sms
    idx = sms.get(sm, [])
    if judged.source != "nvidia-smi":
        return judged.label
    if len(sms) == 1:
        return "this GPU" if len(idx) <= 1 else "every GPU here"
    return f"GPU {', '.join(map(str, idx))}"


def _verdict(d: Distribution, codes: dict[str, DeviceCode], judged: JudgedGpus,
             harmless: tuple[HarmlessGap, ...]) -> CheckResult:
    cid = f"kernels:{d.key}"
    sms = judged.sms
    title = f"{d.name} {d.version}: its {len(codes)} .so file(s) with CUDA device code run on the GPUs here"
    data = {"objects": {rel: c.to_json() for rel, c in codes.items()}, "gpu_sms": [f"sm_{s}" for s in sms],
            "judged_against": {"source": judged.source, "sms": [f"sm_{s}" for s in sms]}}
    listing = [f"{rel}: {c.describe()}" for rel, c in codes.items()]
    if not sms:
        return CheckResult(cid, title, "skip", "no GPU to judge against (none here, no [doctor] sm in the manifest, "
                           "no GPUs in the wheelhouse's target profile); embedded: " + "; ".join(listing), data=data)
    damaged = {rel: c for rel, c in codes.items() if c.damage}
    gaps = kernel_gaps(codes, sms, judged.driver_cuda)
    variants = [g for g in gaps if g.variant_of]
    known = [(g, rule) for g in gaps if not g.variant_of
             for rule in [next((h for h in harmless if h.covers(d.key, g.path, g.code)), None)] if rule]
    hard = [g for g in gaps if not g.variant_of and g not in {k for k, _ in known}]
    data["missing"] = [{"object": g.path, "sm": f"sm_{g.sm}", **g.code.to_json()} for g in hard]
    data["variants"] = [{"object": g.path, "sm": f"sm_{g.sm}", "runs_instead": g.variant_of} for g in variants]
    data["harmless"] = [{"object": g.path, "sm": f"sm_{g.sm}", "reason": rule.reason} for g, rule in known]
    data["damaged"] = [{"object": rel, "damage": list(c.damage)} for rel, c in damaged.items()]
    notes = [g.sentence(_which(g.sm, judged)) for g in variants]
    notes += [f"{g.sentence(_which(g.sm, judged))} -- harmless: {rule.reason}" for g, rule in known]
    said = [judged.note] if judged.note else []
    if hard or damaged:
        lines = [_unreadable(rel, c) for rel, c in damaged.items()] + [_failed(g, judged) for g in hard]
        return CheckResult(cid, title, "fail", "\n".join(lines + notes + said), hint=_hint(d, hard, damaged),
                           data=data)
    lines = []
    skipped = {g.path for g in gaps}
    for rel, c in codes.items():
        if rel in skipped:
            continue  # said below
        if not (c.sass or c.ptx):
            lines.append(f"{rel}: LTO-IR only (linked at run time, not judged)")
            continue
        runs = [f"sm_{sm}: {r.name}" + (_jit(r, judged) if r.kind == "ptx" else "")
                for sm in sms for r in [c.runner(sm, judged.driver_cuda)] if r is not None]
        lines.append(f"{rel}: {c.describe()} -> " + "; ".join(runs))
    return CheckResult(cid, title, "ok", "\n".join(lines + notes + said), data=data)


def _jit(ptx: FatbinEntry, judged: JudgedGpus) -> str:
    """How a PTX image gets run: JIT, and with no driver known (no GPU here), the driver its ISA asks for."""
    need = ptx.driver_needed()
    if judged.driver_cuda or need is None:
        return " (PTX, JIT)"
    return f" (PTX, JIT; its ISA {ptx.version[0]}.{ptx.version[1]} needs {need}, none known here to judge)"


def _unreadable(rel: str, code: DeviceCode) -> str:
    readable = f"; readable: {code.images()}" if code.sass or code.ptx else ""
    return (f"{rel}: its CUDA device code cannot be read: {'; '.join(code.damage)}{readable} (the CUDA runtime "
            "cannot register a fatbin it cannot read: those kernels cannot launch)")


def _hint(d: Distribution, hard: list[KernelGap], damaged: dict[str, DeviceCode]) -> str:
    parts = []
    if damaged:
        parts.append(f"a damaged file: `wh doctor --check stack:files` says whether it differs from what {d.name}'s "
                     f"RECORD lists; reinstall it (`wh install --reinstall {d.name}`)")
    if hard:
        parts.append(f"install a build of {d.name} made for "
                     f"{', '.join(f'sm_{s}' for s in sorted({g.sm for g in hard}))} (or with PTX the driver can JIT): "
                     "stage it for this GPU with a target profile captured here (`wh target capture`), then "
                     "`wh install`")
    return "; ".join(parts)


def _failed(gap: KernelGap, judged: JudgedGpus) -> str:
    text = gap.sentence(_which(gap.sm, judged))
    if gap.older_only:
        text += (f" (SASS runs only on its own major: a launch on sm_{gap.sm} returns cudaError 209, "
                 "no kernel image; there is no PTX to JIT)")
    return text


def _device_code(cache: VerdictCache | None, path: str, deep: bool = False) -> DeviceCode | None:
    """:func:`device_code`, kept in the verdict cache by the file's identity (a 700 MB cuBLAS is read once)."""
    if cache is None:
        return device_code(path, deep=deep)

    def read() -> dict | None:
        code = device_code(path, deep=deep)
        return None if code is None else dataclasses.asdict(code)

    # "-2": facts that also say what cannot be read; one stored before that would say nothing is damaged.
    d = cache.file_fact("fatbin-deep-2" if deep else "fatbin-2", path, read)
    if d is None:
        return None
    return DeviceCode(sass=tuple(d["sass"]), ptx=tuple(d["ptx"]), self_loaded=int(d["self_loaded"]),
                      entries=tuple(FatbinEntry(e["kind"], int(e["arch"]), e["suffix"], tuple(e["version"]))
                                    for e in d["entries"]), damage=tuple(d["damage"]))


def _codes(d: Distribution, sms: dict[int, list[int]], driver_cuda: str | None,
           cache: VerdictCache | None = None) -> dict[str, DeviceCode]:
    """RECORD path -> device code; an object whose fatbin covers no GPU here is read whole for the device code
    it loads itself (cuFFT keeps PTX for every GPU in .ldata, its fatbin section has sm_75 only)."""
    codes: dict[str, DeviceCode] = {}
    for rel, path in shared_objects(d):
        code = _device_code(cache, path)
        if code is None:
            continue
        if sms and any(not code.runs_on(sm, driver_cuda) for sm in sms) and (code.sass or code.ptx):
            code = _device_code(cache, path, deep=True) or code
        codes[rel] = code
    return codes


def run(ctx: DoctorContext) -> list[CheckResult]:
    judged = judged_gpus(ctx)
    harmless: tuple[HarmlessGap, ...] | None = None
    out = []
    for d in sorted(ctx.distributions.values(), key=lambda d: d.key):
        if not ctx.wants(f"kernels:{d.key}"):
            continue
        codes = _codes(d, judged.sms, judged.driver_cuda, ctx.verdicts)
        if codes:
            harmless = load_harmless() if harmless is None else harmless
            out.append(_verdict(d, codes, judged, harmless))
    return out
