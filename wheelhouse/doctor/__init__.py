"""``wh doctor``: gather facts in the TARGET interpreter, run every check, return one report.

``run_doctor`` (in ``run``, with ``gather_context``, ``run_checks`` and ``--fix``'s ``apply_fixes``)
gathers facts with probes run by the target interpreter (``probes``; never wh's own process) and
nvidia-smi, runs the checks (``checks.*``) and the known-bug rules (data: ``doctor/rules/*.toml``,
read by ``rules``), and returns a ``DoctorReport`` (``report``). A check that crashes is an
``error`` verdict, never a crashed doctor; only an interpreter that cannot run at all stops it
(``DoctorCannotRun``, exit 3).
"""

from __future__ import annotations

from .run import (GROUPS, RULES_ENV, DoctorCannotRun, DoctorInterrupted, apply_fixes, gather_context,
                  interrupted_report, list_checks, manifest_from_wh_json, roll_back_unfinished, run_checks, run_doctor,
                  with_fixes)

__all__ = ["DoctorCannotRun", "DoctorInterrupted", "interrupted_report", "run_doctor", "gather_context", "run_checks", "list_checks", "apply_fixes", "with_fixes",
           "roll_back_unfinished", "manifest_from_wh_json", "RULES_ENV", "GROUPS"]
