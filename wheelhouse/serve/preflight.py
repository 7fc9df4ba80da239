"""Serve preflight: refuse a launch that cannot work, before anything starts.

The vLLM reference deployment's launch script refuses any card count but the one its layout needs and any
card that already has more than 4 GB in use (another job holds it); the doctor's failing
checks block too; and the manifest's pending patches are applied first, because a doctor
rule may fail exactly on the unpatched file. Facts (the GPUs as ``target.gpu.query_gpus``
lists them, the doctor, the patcher) are injected, so this module runs nothing itself.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

from wheelhouse.progress import NullReporter, Reporter
from wheelhouse.target.gpu import Gpu, visible_gpus
from .errors import ServeError
from .listener import describe

__all__ = ["DEFAULT_MAX_USED_MIB", "PreflightFailed", "check_gpus", "engine_python", "run_preflight"]

# The vLLM reference deployment: its PP5 launch script warns and exits when a card already has > 4 GB in use.
DEFAULT_MAX_USED_MIB = 4096


class PreflightFailed(ServeError):
    code = "preflight-failed"

    def __init__(self, problems: Sequence[str], hint: str | None = None):
        self.problems = tuple(problems)
        super().__init__(
            f"preflight refused the launch ({len(self.problems)} problem{'s' if len(self.problems) != 1 else ''})",
            hint=hint or "fix the problems listed, or pass --no-preflight to launch anyway",
            detail="\n".join(f"  - {p}" for p in self.problems),
        )


def check_gpus(gpus: Sequence[Gpu], *, expected: int | None, max_used_mib: int | None, visible: str | None = None) -> list[str]:
    """Problems with the cards: a wrong count (exact, like the vLLM reference deployment's script), a card already
    busy, or, under an explicit ``max_used_mib``, one whose memory in use nvidia-smi cannot tell (a limit asked for
    and not checked is not passed)."""
    cards = visible_gpus(gpus, visible)
    problems = []
    if expected is not None and len(cards) != expected:
        where = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        found = f"found {len(cards)}" if cards else "found none (no nvidia-smi, or no GPU visible)"
        problems.append(f"expected exactly {expected} GPU(s){where}, {found}")
    limit = DEFAULT_MAX_USED_MIB if max_used_mib is None else max_used_mib
    for g in cards:
        used = g.memory_in_use_mib
        if used is None and max_used_mib is not None:  # (the default limit: not a reason to refuse an unknown)
            problems.append(f"GPU {g.index} ({g.name}): nvidia-smi says memory.used [N/A] and lists no process with "
                            f"its memory: the {limit} MiB limit cannot be checked")
        elif used is not None and used > limit:
            problems.append(
                f"GPU {g.index} ({g.name}) already has {used} MiB in use (limit {limit} MiB): another job holds it"
                + (f" ({_holders(g)})" if g.processes else "") + "; stop it first"
            )
    return problems


def _holders(g: Gpu) -> str:
    """``held by pid 4182 (python3 hog.py) with 6144 MiB``: the command line where /proc shows it, else nvidia-smi's name."""
    def one(p) -> str:
        who = describe(p.pid)
        if who == f"pid {p.pid}" and p.name:
            who += f" ({p.name})"
        return who + (f" with {p.used_mib} MiB" if p.used_mib is not None else "")
    return "held by " + ", ".join(one(p) for p in g.processes)


def engine_python(argv: Sequence[str]) -> str | None:
    """The interpreter the engine command runs on: argv[0] if it is a python, else its script's shebang.

    The doctor and the patches must look at the engine's environment, not wh's own.
    """
    if not argv:
        return None
    exe = shutil.which(argv[0])
    if exe is None:
        return None
    if os.path.basename(argv[0]).startswith("python"):
        return exe
    try:
        with open(exe, "rb") as fh:
            first = fh.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode("utf-8", "replace").split()
    if parts and os.path.basename(parts[0]) == "env" and len(parts) > 1:
        parts = [shutil.which(parts[1]) or parts[1]]
    return parts[0] if parts and os.path.basename(parts[0]).startswith("python") else None


def in_environment(argv: Sequence[str], python: str) -> tuple[str, ...]:
    """The command run in ``--python``'s environment: a bare program name (``engine-serve``, ``python``) that this
    environment's scripts folder holds is taken from there, as an activated venv would; one that PATH finds
    elsewhere, a program of another interpreter, is refused (the preflight judged ``python``'s environment, the
    engine would run another's). A program named by its path is run as named."""
    from wheelhouse.errors import UsageError

    prog = argv[0]
    if os.sep in prog:
        return tuple(argv)  # a program named by its path: the one asked for
    local = os.path.join(os.path.dirname(os.path.abspath(python)), prog)
    if os.path.isfile(local) and os.access(local, os.X_OK):
        return (local, *argv[1:])
    runs = engine_python(argv)
    if runs is not None and os.path.dirname(os.path.abspath(runs)) != os.path.dirname(os.path.abspath(python)):
        raise UsageError(f"the engine command's program {prog} runs {runs}, not the --python interpreter {python}: "
                         "the doctor would judge one environment and the engine run another",
                         hint=f"name the program in {os.path.dirname(os.path.abspath(python))}, or drop --python")
    return tuple(argv)


def run_preflight(
    *,
    gpus: Sequence[Gpu],
    expected_gpus: int | None,
    max_used_mib: int | None,
    visible: str | None = None,
    patches: Sequence[Path] = (),
    apply_patch: Callable[[Path], Any] | None = None,
    doctor: Callable[[], Sequence[Any]] | None = None,
    reporter: Reporter = NullReporter(),
) -> None:
    """GPU checks, then pending manifest patches, then the doctor; raise PreflightFailed listing every problem.

    GPU problems stop before anything is patched. Patches go before the doctor because
    its rules may fail exactly on the unpatched file.
    """
    problems = check_gpus(gpus, expected=expected_gpus, max_used_mib=max_used_mib, visible=visible)
    if problems:
        raise PreflightFailed(problems, hint="stop the other job or fix --gpus/CUDA_VISIBLE_DEVICES; --no-preflight skips this")
    if not gpus and expected_gpus is None:
        reporter.note("preflight: no GPU visible (nvidia-smi missing?); GPU checks skipped")
    for spec in patches:
        if apply_patch is None:
            raise PreflightFailed([f"patch {spec} is pending and patching is not available in this build"])
        outcome = apply_patch(spec)
        state = getattr(outcome, "state", "applied")
        reason = getattr(outcome, "reason", "")
        reporter.note(f"preflight: patch {Path(spec).name}: {state}" + (f" ({reason})" if reason else ""))
    if doctor is not None:
        failed = list(doctor())
        if failed:
            lines = [f"doctor {getattr(c, 'id', '?')}: {getattr(c, 'title', '')} -- {getattr(c, 'evidence', '')}".rstrip(" -")
                     for c in failed]
            hints = [h for h in (getattr(c, "hint", None) for c in failed) if h]
            raise PreflightFailed(lines, hint=hints[0] if len(hints) == 1 else "run `wh doctor` for the details and fixes")
        reporter.note("preflight: doctor found no failing check")
