"""What a patch verb reports (its outcome and the verification call's result), and the errors it raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from wheelhouse.errors import WhError

__all__ = ["State", "PatchRolledBack", "PatchTargetMissing", "PatchTargetSymlink", "VerifyResult", "PatchOutcome"]

State = Literal["applied", "already-patched", "skipped", "patched", "unpatched", "drifted", "reverted", "not-installed"]


class PatchRolledBack(WhError):
    code = "patch-rolled-back"


class PatchTargetMissing(WhError):
    code = "patch-target-missing"


class PatchTargetSymlink(WhError):
    code = "patch-target-symlink"


@dataclass(frozen=True)
class VerifyResult:
    call: str
    ran: bool  # the call returned (did not raise, did not time out)
    value: Any = None
    expected: Any = None
    compared: bool = False  # whether value was held against expected (conditions hold)
    matched: bool | None = None
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.ran and self.matched is not False

    def to_json(self) -> dict[str, Any]:
        return {"call": self.call, "ran": self.ran, "value": self.value, "expected": self.expected,
                "compared": self.compared, "matched": self.matched, "output": self.output[-2000:]}


@dataclass(frozen=True)
class PatchOutcome:
    name: str
    action: Literal["apply", "verify", "revert"]
    state: State
    file: str | None = None
    sha256: str | None = None  # the file's hash now
    before_sha256: tuple[str, ...] = ()
    payload_sha256: str | None = None
    conditions_met: bool | None = None
    reason: str = ""
    backup: str | None = None
    verification: VerifyResult | None = None

    @property
    def ok(self) -> bool:
        """Whether this outcome is what the user wants (for exit codes)."""
        if self.verification is not None and not self.verification.ok:
            return False
        if self.action == "verify":
            return self.state == "patched" or (self.state == "unpatched" and self.conditions_met is False)
        return self.state in ("applied", "already-patched", "skipped", "reverted", "unpatched")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "action": self.action, "state": self.state, "ok": self.ok, "file": self.file,
            "sha256": self.sha256, "before_sha256": list(self.before_sha256), "payload_sha256": self.payload_sha256,
            "conditions_met": self.conditions_met, "reason": self.reason, "backup": self.backup,
            "verification": self.verification.to_json() if self.verification else None,
        }
