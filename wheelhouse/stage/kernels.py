"""Kernel coverage of the wheels being staged: refuse device code that no GPU of the target can run.

A wheel built for sm_90 installs and imports on an sm_89 box and fails at its
first kernel launch -- after gigabytes were carried there. When the target
profile names its GPUs, every shared object in every staged wheel is read for
CUDA device code (the same fatbin reader and the same rule as the doctor's
``kernels`` check, :mod:`wheelhouse.fatbin`), before the wheelhouse is
given its name. A wheel whose device code has no SASS or PTX for one of the
target's GPUs is refused (:class:`MissingKernels`, exit 1), or only reported
with ``--allow-missing-kernels``. Members are extracted one at a time to a
scratch folder (ELF section headers sit at the end of a file; a compressed
zip member cannot be read there without inflating it), and the result per
wheel is cached by its sha256, so a restage reads nothing again.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from wheelhouse.atomic import write_atomic
from wheelhouse.elf import is_shared_object
from wheelhouse.fatbin import DeviceCode, FatbinEntry, KernelGap, device_code, kernel_gaps
from wheelhouse.errors import WhError
from wheelhouse.progress import NullReporter, Reporter
from wheelhouse.target import TargetProfile

__all__ = ["MissingKernels", "WheelGap", "wheel_device_code", "wheel_kernel_gaps", "check_kernels", "ALLOW_FLAG"]

ALLOW_FLAG = "--allow-missing-kernels"
_CACHE_VERSION = 1
_MAX_JOBS = 4


class MissingKernels(WhError):
    """Staged wheels carry device code that none of the target's GPUs can run."""

    code = "missing-kernels"

    def __init__(self, gaps: Sequence["WheelGap"], gpus: str):
        lines = [g.sentence() for g in gaps]
        wheels = sorted({g.wheel for g in gaps})
        super().__init__(
            f"{len(wheels)} wheel(s) have no kernels for the target's GPU ({gpus}): " + lines[0]
            + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""),
            hint="pin a build of " + ", ".join(wheels) + " made for this GPU (another index or version), or stage "
                 f"anyway with `wh stage ... {ALLOW_FLAG}`",
            detail="\n".join(lines),
        )
        self.gaps = tuple(gaps)


@dataclass(frozen=True)
class WheelGap:
    wheel: str  # the wheel's file name
    gap: KernelGap

    def sentence(self) -> str:
        return f"{self.wheel}: {self.gap.sentence(gpu='the target GPU')}"

    def warning(self) -> str:
        """The note a staged-anyway gap leaves (shown as it happens, kept in ``wh stage --json``'s notes)."""
        why = ("older GPUs only: a library may keep such kernels for them and never launch them here"
               if self.gap.older_only else f"staged anyway: {ALLOW_FLAG}")
        return f"warning: {self.sentence()} ({why})"

    def to_json(self) -> dict:
        return {"wheel": self.wheel, "object": self.gap.path, "sm": f"sm_{self.gap.sm}", **self.gap.code.to_json()}


def _to_cache(codes: dict[str, tuple[DeviceCode, bool]]) -> dict:
    return {"version": _CACHE_VERSION,
            "objects": {m: {"entries": [[e.kind, e.arch, e.suffix, *e.version] for e in c.entries],
                            "self_loaded": c.self_loaded, "deep": deep} for m, (c, deep) in codes.items()}}


def _from_cache(data: dict) -> dict[str, tuple[DeviceCode, bool]] | None:
    if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION:
        return None
    try:
        out = {}
        for m, rec in data["objects"].items():
            entries = tuple(FatbinEntry(k, int(a), str(s), (int(x), int(y))) for k, a, s, x, y in rec["entries"])
            own = int(rec["self_loaded"])
            code = DeviceCode.of(entries[:len(entries) - own], entries[len(entries) - own:])
            out[m] = (code, bool(rec["deep"]))
        return out
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _covers(code: DeviceCode, sms: Sequence[str], driver_cuda: str | None) -> bool:
    return not (code.sass or code.ptx) or all(code.runs_on(sm, driver_cuda) for sm in sms)


def wheel_device_code(wheel: Path, scratch: Path, cache: Path | None = None, sha256: str | None = None,
                      sms: Sequence[str] = (), driver_cuda: str | None = None) -> dict[str, DeviceCode]:
    """Archive member -> device code, for every shared object in ``wheel`` that carries some.

    A member whose fatbin sections do not cover every sm of ``sms`` is read whole for the device code it
    loads itself (:func:`~wheelhouse.fatbin.device_code` ``deep``), as the doctor does.
    """
    cached = cache / f"{sha256}.json" if cache and sha256 else None
    if cached and cached.is_file():
        try:
            hit = _from_cache(json.loads(cached.read_text(encoding="utf-8")))
        except (OSError, ValueError, RecursionError):
            hit = None
        if hit is not None and all(deep or _covers(c, sms, driver_cuda) for c, deep in hit.values()):
            return {m: c for m, (c, _) in hit.items()}
    out: dict[str, tuple[DeviceCode, bool]] = {}
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory(dir=scratch, prefix="kernels-") as tmp:
        for i, member in enumerate(zf.infolist()):
            if member.is_dir() or not is_shared_object(member.filename) or member.file_size == 0:
                continue
            # A name per member: the ELF reader caches by (path, size, mtime), and two members of one size
            # written within one clock tick would otherwise look like the same file.
            path = os.path.join(tmp, f"{i}.so")
            with zf.open(member) as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            code, deep = device_code(path), False
            if code is not None and not _covers(code, sms, driver_cuda):
                code, deep = device_code(path, deep=True) or code, True
            os.unlink(path)
            if code is not None:
                out[member.filename] = (code, deep)
    if cached:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(cached, json.dumps(_to_cache(out)))
        except OSError:
            pass  # a cache that cannot be written costs a re-read next time, nothing more
    return {m: c for m, (c, _) in out.items()}


def _sms(target: TargetProfile) -> list[str]:
    return sorted({g.compute_capability for g in target.gpus if g.compute_capability})


def wheel_kernel_gaps(wheels: Sequence[tuple[Path, str | None]], target: TargetProfile, scratch: Path,
                      cache: Path | None = None, jobs: int = 4) -> list[WheelGap]:
    """Every (wheel, object, sm) with no image the target's GPUs can run; ``wheels``: (path, sha256)."""
    sms = _sms(target)
    if not sms:
        return []

    def one(item: tuple[Path, str | None]) -> list[WheelGap]:
        path, sha = item
        codes = wheel_device_code(path, scratch, cache, sha, sms, target.cuda_version)
        return [WheelGap(path.name, g) for g in kernel_gaps(codes, sms, target.cuda_version)]

    # Each worker inflates one member at a time to scratch (libtorch_cuda.so is ~1.5 GB): a few at once.
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, _MAX_JOBS, len(wheels) or 1))) as pool:
        return [g for gaps in pool.map(one, wheels) for g in gaps]


def check_kernels(wheels: Sequence[tuple[Path, str | None]], target: TargetProfile, scratch: Path, *,
                  allow: bool = False, cache: Path | None = None, jobs: int = 4,
                  reporter: Reporter | None = None) -> list[WheelGap]:
    """Raise :class:`MissingKernels` for device code no target GPU can run (with ``allow``: report and return it).

    Architecture variants (a same-named object in the same wheel that does run) are not gaps. SASS for
    older majors only is a warning, never a refusal (the doctor's rule: cuFFTW's sm_75-only fatbin runs
    everywhere). A target without GPUs is not checked.
    """
    reporter = reporter or NullReporter()
    if not _sms(target):
        return []
    reporter.note(f"checking CUDA kernels of {len(wheels)} wheel(s) against the target's GPUs")
    gaps = [g for g in wheel_kernel_gaps(wheels, target, scratch, cache, jobs) if not g.gap.variant_of]
    hard = [g for g in gaps if not g.gap.older_only]
    if hard and not allow:
        raise MissingKernels(hard, ", ".join(f"sm_{s.replace('.', '')}" for s in _sms(target)))
    for g in gaps:
        reporter.note(g.warning())
    return gaps
