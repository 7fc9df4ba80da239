"""Libraries a package loads by path (``torch.ops.load_library``: torchvision's, torchaudio's, xformers' ``_C.so``).

They hold no Python init function, so they are never imported by name; the native check's import probe loads
each after its package's import, as that loads it (``MOD@library=FILE`` in ``doctor/probes/imports.py``), and
this module plans those probes and judges what they found. An undefined torch symbol (a build for another torch)
shows only there: the package's own import swallows the error and the ops the library registers are missing.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from wheelhouse.elf import BadElf, read_elf
from wheelhouse.doctor.imports import ImportOutcome
from wheelhouse.doctor.report import CheckResult
from .context import Distribution

__all__ = ["LIBRARY_SUFFIX", "ASKED_ONLY", "library_probes", "judge_libraries"]

_SHOWN = 6  # libraries named in a verdict's evidence; the JSON data lists every failure
LIBRARY_SUFFIX = "@library"  # the import probe's name for a library loaded by path (doctor/probes/imports.py)
ASKED_ONLY = "@library-asked"  # ... loaded by the probe only where its package's import asked for it


def _links_torch(path: Path) -> bool:
    """Does the library link libtorch or libc10 (a torch op library, ``torch.ops.load_library``'s kind)?"""
    try:
        return any(n.startswith(("libtorch", "libc10")) for n in read_elf(path).needed)
    except BadElf:
        return False


_NOT_FOUND = "cannot open shared object file"  # a missing DT_NEEDED library: the sharedlibs check judges it
_PASSED_OVER = "its package's import tried it and loaded another build instead"  # doctor/probes/imports.py's words


def library_probes(location: Path, libraries: Sequence[str], dotted: Callable[[str], str]) -> dict[str, str]:
    """The import probe's name for each library (RECORD path) under a package folder -> its RECORD path.

    A torch op library (it links libtorch/libc10) is made to be loaded into any torch process, so one its package's
    import does not load is loaded too (``@library``); any other only where its package's import asks for it
    (``@library-asked``: a plugin of another program is not loaded into a process it was not made for)."""
    return {f"{dotted(rel)}{LIBRARY_SUFFIX if _links_torch(location / rel) else ASKED_ONLY}": rel
            for rel in libraries if "/" in rel and all(p.isidentifier() for p in rel.split("/")[:-1])
            and os.path.isfile(location / rel)}


def judge_libraries(d: Distribution, library_keys: Mapping[str, str], outcomes: Mapping[str, ImportOutcome],
                    result: CheckResult) -> CheckResult:
    """``result`` (the verdict on ``d``'s modules) with its libraries loaded by path judged too: one its package's
    import asked for and that does not load is a fail (the package went on without it: what it registers is
    missing); one loaded only on demand that does not load is a warning --strict counts. A library missing is
    the sharedlibs check's (not judged twice)."""
    # Judged: a dlopen that fails (OSError: an undefined symbol, a missing symbol version). Not judged here: a
    # needed library missing (sharedlibs'), a package that does not import (its own verdict), a load that crashed
    # or hung the process (loading it beside what its package loaded may register the same ops twice: torch
    # aborts; that says nothing of the library).
    loaded, later, passed_over, unjudged = [], [], [], []
    failed: list[tuple[str, ImportOutcome]] = []
    for key, rel in library_keys.items():
        o = outcomes.get(key)
        if o is None:
            continue
        how = o.library_load or ""
        if o.ok:
            (later if how.startswith("not loaded") else loaded).append(rel)
            continue
        missing_lib = o.error_type != "OSError" or _NOT_FOUND in (o.error or "")
        if how.startswith(_PASSED_OVER):
            passed_over.append(rel)
        elif not missing_lib:
            failed.append((rel, o))
        if missing_lib:
            unjudged.append(rel)
    evidence = result.evidence
    if loaded:
        evidence += f"\nlibraries loaded after its package's import ({len(loaded)}): {', '.join(loaded[:_SHOWN])}"
    if later:
        evidence += (f"\nlibraries loaded only on demand, not loaded here (no torch op library; links checked by "
                     f"sharedlibs) ({len(later)}): {', '.join(later[:_SHOWN])}")
    if passed_over:
        evidence += (f"\nbuilds its package's import tried and passed over, loading another (a fallback, not a "
                     f"failure) ({len(passed_over)}): {', '.join(passed_over[:_SHOWN])}")
    if unjudged:
        evidence += (f"\nlibraries not judged here ({len(unjudged)}: a needed library missing, for sharedlibs; or "
                     f"the load crashed beside its package's own): {', '.join(unjudged[:_SHOWN])}")
    if not failed:
        return replace(result, evidence=evidence) if loaded or later or unjudged or passed_over else result
    asked = [(rel, o) for rel, o in failed if o.library_load and o.library_load.startswith("asked")]
    lines = [f"library {rel} does not load: {o.error} ({o.library_load})" for rel, o in failed]
    verdict = "fail" if asked or result.verdict == "fail" else "warn"
    hint = result.hint if result.verdict == "fail" else (
        f"{d.name}'s library was built for other libraries than these (an undefined symbol: another torch?): "
        f"install a build of {d.name} that matches them")
    payload = {**(result.data or {}), "library_failures": [{"path": rel, "error": o.error, "how": o.library_load}
                                                          for rel, o in failed]}
    return replace(result, verdict=verdict, evidence=evidence + "\n" + "\n".join(lines), hint=hint, data=payload,
                   strict=True)
