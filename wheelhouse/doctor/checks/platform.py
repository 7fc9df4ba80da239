"""platform: the interpreter against the wheelhouse's target, and the C library."""

from __future__ import annotations

from wheelhouse.doctor.report import CheckResult
from .context import DoctorContext

__all__ = ["GROUP", "CHECKS", "run"]

GROUP = "platform"
CHECKS = {
    "platform:interpreter": "the interpreter is the one the wheelhouse was resolved for",
    "platform:glibc": "the C library is new enough for the wheels",
}


def _glibc_tuple(value: str | None) -> tuple[int, int] | None:
    try:
        major, minor = (value or "").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def run(ctx: DoctorContext) -> list[CheckResult]:
    f = ctx.facts
    impl = {"cpython": "cp", "pypy": "pp"}.get(f.get("implementation", ""), f.get("implementation", "?"))
    here = f"{impl}{f.get('python_version', '?').replace('.', '')} {f.get('machine')} ({f.get('executable')})"
    out = []
    t = ctx.target
    if t is None:
        out.append(CheckResult("platform:interpreter", CHECKS["platform:interpreter"], "skip",
                               f"{here}; no wheelhouse target known (pass --wheelhouse DIR, or install with `wh install`)"))
    else:
        problems = []
        if t.implementation != impl:
            problems.append(f"implementation {impl} != target {t.implementation}")
        if t.python_version != f.get("python_version"):
            problems.append(f"Python {f.get('python_version')} != target {t.python_version}")
        if t.machine != f.get("machine"):
            problems.append(f"machine {f.get('machine')} != target {t.machine}")
        verdict = "fail" if problems else "ok"
        evidence = (f"{here} vs target {t.describe()} from {ctx.target_source}"
                    + (": " + "; ".join(problems) if problems else ""))
        out.append(CheckResult(
            "platform:interpreter", CHECKS["platform:interpreter"], verdict, evidence,
            hint=None if not problems else "run with the interpreter the wheelhouse was staged for (--python PY), "
                                           "or re-stage for this one: `python capture_target.py -o target.json` then "
                                           "`wh stage --target target.json`",
        ))
    glibc = f.get("glibc")
    have = _glibc_tuple(glibc)
    need = t.glibc if t is not None else None
    if have is None:
        out.append(CheckResult("platform:glibc", CHECKS["platform:glibc"], "skip" if f.get("system") != "Linux" else "warn",
                               "no glibc found (musl or not Linux)",
                               hint=None if f.get("system") != "Linux" else
                               "manylinux wheels need glibc: stage for this box from a target captured here, "
                               "`python capture_target.py -o target.json` then `wh stage --target target.json`"))
    elif need and have < need:
        out.append(CheckResult("platform:glibc", CHECKS["platform:glibc"], "fail",
                               f"glibc {glibc} here; the wheelhouse targets glibc {need[0]}.{need[1]}",
                               hint="re-stage for this box: `python capture_target.py -o target.json` then "
                                    "`wh stage --target target.json`"))
    else:
        extra = f" (target needs {need[0]}.{need[1]})" if need else ""
        out.append(CheckResult("platform:glibc", CHECKS["platform:glibc"], "ok", f"glibc {glibc}{extra}"))
    return out
