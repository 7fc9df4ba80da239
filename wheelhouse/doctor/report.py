"""The doctor's verdicts: one CheckResult per check, a DoctorReport, JSON and JUnit renderings.

Exit codes (documented in ``wh doctor --help`` and docs/doctor.md#exit-codes in
wh's source repository): 0 nothing failed; 1 at least one check failed (or errored); 2 only
warnings that ``--strict`` counts (every warning but one whose ``strict`` is False: optional by design and
absent on this host); 3 the doctor itself could not run (raised as a
WhError with EXIT_INTERNAL, not a report).
"""

from __future__ import annotations

import platform
import re
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from wheelhouse.install.sharedfiles import SharedFile

__all__ = ["Verdict", "VERDICTS", "CheckResult", "Fix", "DoctorReport", "SCHEMA_VERSION", "render_junit"]

Verdict = Literal["ok", "warn", "fail", "skip", "error", "info"]
VERDICTS: tuple[str, ...] = ("ok", "warn", "fail", "skip", "error", "info")
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class CheckResult:
    """One verdict. ``evidence`` is what was executed or read; ``hint`` the next command; ``fix`` what --fix does."""

    id: str  # "native:numpy", "links:sonames", "rule:sm89-rowwise-scaled-mm"
    title: str
    verdict: Verdict
    evidence: str = ""
    hint: str | None = None
    fix: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    # A warning --strict counts. False only for one whose every cause is optional by design and absent on this
    # host (a plugin or backend the data names, a build for another CUDA major): reported, never exit 2.
    strict: bool = True

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")

    @property
    def group(self) -> str:
        return self.id.split(":", 1)[0]

    @property
    def first_line(self) -> str:
        """The evidence's first line (what a CI summary shows), else the title."""
        return next((ln for ln in self.evidence.splitlines() if ln.strip()), self.title)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "group": self.group, "title": self.title, "verdict": self.verdict,
                "evidence": self.evidence, "hint": self.hint, "fix": self.fix, "data": dict(self.data),
                "seconds": round(self.seconds, 3), "strict": self.strict}


@dataclass(frozen=True)
class Fix:
    """One thing ``--fix`` did (``rollback`` of an install a kill left half-done, ``links``, ``reinstall``, ``drop``)
    or did not do (``not-dropped``: deliberately;
    ``not-repaired``: a reinstall that could not run, with why)."""

    action: Literal["rollback", "links", "reinstall", "drop", "not-dropped", "not-repaired"]
    what: str  # "symlink .../libcudart.so -> libcudart.so.13", "undefsym 1.0"
    forced: bool = False  # a manifest force = true entry
    confirmed: bool | None = None  # drop: find_spec is None afterwards, in a new process
    reason: str | None = None
    check: str | None = None  # the check whose failure caused it
    still_found: tuple[str, ...] = ()  # drop: names find_spec still finds afterwards (another copy); the check
    # that caused the drop then fails in the report (``with_fixes``)
    dependents: tuple[str, ...] = ()  # drop: the installed distributions that required it
    kept: tuple[SharedFile, ...] = ()  # drop: its files another installed distribution lists too, left in place

    @property
    def changed(self) -> bool:
        return self.action not in ("not-dropped", "not-repaired")

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "what": self.what, "forced": self.forced, "confirmed": self.confirmed,
                "reason": self.reason, "check": self.check, "still_found": list(self.still_found),
                "dependents": list(self.dependents), "kept": [k.to_json() for k in self.kept]}


@dataclass(frozen=True)
class DoctorReport:
    python: str
    results: tuple[CheckResult, ...]
    facts: Mapping[str, Any] = field(default_factory=dict)  # summary facts (gpus, interpreter)
    started: float = field(default_factory=time.time)
    seconds: float = 0.0
    fixes: tuple[Fix, ...] = ()  # what --fix did

    def by_verdict(self, verdict: str) -> list[CheckResult]:
        return [r for r in self.results if r.verdict == verdict]

    @property
    def failed(self) -> list[CheckResult]:
        """Checks that failed or could not be evaluated (error)."""
        return [r for r in self.results if r.verdict in ("fail", "error")]

    @property
    def warnings(self) -> list[CheckResult]:
        return self.by_verdict("warn")

    def get(self, check_id: str) -> CheckResult | None:
        return next((r for r in self.results if r.id == check_id), None)

    def exit_code(self, strict: bool = False) -> int:
        if self.failed:
            return 1
        if strict and any(r.strict for r in self.warnings):
            return 2
        return 0

    def counts(self) -> dict[str, int]:
        return {v: sum(1 for r in self.results if r.verdict == v) for v in VERDICTS}

    def to_json(self, strict: bool = False) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": "wh doctor",
            "python": self.python,
            "host": platform.node(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "seconds": round(self.seconds, 3),
            "exit_code": self.exit_code(strict),
            "counts": self.counts(),
            "facts": dict(self.facts),
            "results": [r.to_json() for r in self.results],
            "fixes": [f.to_json() for f in self.fixes],
        }


# XML 1.0 has no way to write these (C0 controls but tab and newlines, lone surrogates, U+FFFE/F): an ESC of a
# coloured error message, or a path that is not UTF-8 (decoded with surrogateescape), made the file unwritable.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml(text: str) -> str:
    """``text`` with every character XML 1.0 cannot hold written as its escape (``\\x1b``, ``\\udce9``)."""
    return _NOT_XML.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), text)


def render_junit(report: DoctorReport) -> str:
    """JUnit XML: one testsuite, one testcase per check; fail -> <failure>, error -> <error>, skip -> <skipped>."""
    counts = report.counts()
    suite = ET.Element("testsuite", {
        "name": "wh doctor",
        "tests": str(len(report.results)),
        "failures": str(counts["fail"]),
        "errors": str(counts["error"]),
        "skipped": str(counts["skip"]),
        "time": f"{report.seconds:.3f}",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(report.started)),
    })
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", {"name": "python", "value": _xml(report.python)})
    for r in report.results:
        case = ET.SubElement(suite, "testcase", {
            "classname": _xml(f"wh.doctor.{r.group}"), "name": _xml(r.id), "time": f"{r.seconds:.3f}"})
        body = _xml(r.evidence + (f"\nhint: {r.hint}" if r.hint else ""))
        # CI shows the message attribute in its summary: the evidence's first line says why.
        if r.verdict == "fail":
            ET.SubElement(case, "failure", {"message": _xml(r.first_line), "type": "fail"}).text = body
        elif r.verdict == "error":
            ET.SubElement(case, "error", {"message": _xml(r.first_line), "type": "error"}).text = body
        elif r.verdict == "skip":
            ET.SubElement(case, "skipped", {"message": _xml(r.evidence or r.title)})
        else:
            label = "warn, not counted by --strict" if r.verdict == "warn" and not r.strict else r.verdict
            ET.SubElement(case, "system-out").text = f"[{label}] {body}"
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
