"""One-file patches of an installed distribution that refuse to guess.

The spec is in ``spec``, its conditions on facts in ``conditions``, the journal that makes an apply
recoverable in ``journal``; ``apply`` holds the three verbs (apply, verify, revert) and says how an
apply lands; ``outcome`` what they report.
"""

from __future__ import annotations

from .apply import apply_patch, revert_patch, verify_patch
from .conditions import check_conditions, gather_facts
from .journal import PatchDrifted
from .outcome import PatchOutcome, PatchRolledBack, PatchTargetMissing, PatchTargetSymlink, VerifyResult
from .spec import PatchSpec, PatchSpecError, PatchVerify, load_patch_spec, parse_patch_spec

__all__ = [
    "PatchSpec",
    "PatchVerify",
    "VerifyResult",
    "PatchOutcome",
    "PatchSpecError",
    "PatchDrifted",
    "PatchRolledBack",
    "PatchTargetMissing",
    "PatchTargetSymlink",
    "parse_patch_spec",
    "load_patch_spec",
    "gather_facts",
    "check_conditions",
    "apply_patch",
    "verify_patch",
    "revert_patch",
]
