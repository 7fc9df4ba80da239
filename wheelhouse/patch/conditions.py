"""Facts about the target (its GPUs' compute capabilities, installed versions) and a patch's conditions on them.

``gather_facts`` asks the target interpreter and ``nvidia-smi``; ``check_conditions``
is pure, and names every condition that does not hold (or is unknown).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any, Mapping

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from wheelhouse.errors import UsageError
from wheelhouse.script_answer import PRINT_ANSWER, read_answer
from wheelhouse.target.gpu import query_gpu_facts

__all__ = ["gather_facts", "check_conditions"]

_VERSIONS = (
    "import json, sys, importlib.metadata as m\n"
    "out = {}\n"
    "for n in sys.argv[1:]:\n"
    "    try: out[n] = m.version(n)\n"
    "    except m.PackageNotFoundError: out[n] = None\n"
    "answer = out\n" + PRINT_ANSWER + "\n"
)


def _gpu_sms() -> list[str] | None:
    """The GPUs' compute capabilities (``["8.9", ...]``), as the doctor sees them; None when unknown."""
    sms = [g.compute_capability for g in query_gpu_facts().gpus if g.compute_capability]
    return sms or None


def _last_json(stdout: str) -> dict[str, Any]:
    """The JSON object on the last output line (a sitecustomize may print before it); {} when there is none."""
    try:
        data = read_answer(stdout)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def gather_facts(python: str | None, distributions: list[str]) -> dict[str, Any]:
    """``{"sm": [...] or None, "<dist>": version or None}`` as seen by the target interpreter."""
    facts: dict[str, Any] = {"sm": _gpu_sms()}
    if distributions:
        try:
            proc = subprocess.run([python or sys.executable, "-c", _VERSIONS, *distributions], capture_output=True, text=True)
        except OSError as exc:  # missing or not executable
            raise UsageError(f"cannot run interpreter {python}: {exc.strerror}",
                             hint="pass a working interpreter with --python") from exc
        versions = _last_json(proc.stdout) if proc.returncode == 0 else {}
        for d in distributions:
            facts[d] = versions.get(d)
    return facts


def check_conditions(when: Mapping[str, Any], facts: Mapping[str, Any]) -> tuple[bool, list[str]]:
    """Whether every condition holds; the reasons name each one that does not (or is unknown)."""
    reasons = []
    for key, want in when.items():
        if key == "sm":
            have = facts.get("sm")
            have = [have] if isinstance(have, str) else have
            if not have:
                reasons.append(f"GPU compute capability unknown (wanted sm {', '.join(want)})")
            elif not set(map(str, have)) & set(want):
                reasons.append(f"GPUs are sm {', '.join(map(str, have))}, the patch is for sm {', '.join(want)}")
            continue
        have = facts.get(key)
        if have is None:
            reasons.append(f"{key} is not installed (wanted {key}{want})")
            continue
        try:
            ok = SpecifierSet(str(want)).contains(Version(str(have)), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            reasons.append(f"{key} {have} is outside {want}")
    return (not reasons), reasons
