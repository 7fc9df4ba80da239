"""The doctor's checks, one module per area. Each exposes ``GROUP``, ``CHECKS`` and ``run(ctx) -> list[CheckResult]``.

``DoctorContext`` (in ``context``) carries the facts every check shares (gathered once, by
probes in the target interpreter) and the services they need (probe runner
settings, the reporter). Checks never raise for a finding: they return
verdicts; an unexpected exception in one check becomes an ``error`` verdict.
"""

from __future__ import annotations

from .context import DoctorContext, Distribution, installed_by_wh, reinstall_command, selected

__all__ = ["DoctorContext", "Distribution", "selected", "installed_by_wh", "reinstall_command"]
