"""install: no install into this interpreter's site folders was left half-done.

``wh install`` is a transaction: an intent journal is written before the first
file and removed after the record (``wheelhouse.install.transaction``). A journal
whose run is gone means files of a killed install are on disk; whatever the other
checks find, the environment is neither what it was nor what the lock says, so
it is a fail until the next ``wh install`` rolls it back.
"""

from __future__ import annotations

from wheelhouse.doctor.report import CheckResult
from wheelhouse.target.interpreter import distinct_dirs
from wheelhouse.install.state import unfinished_transaction
from . import DoctorContext

__all__ = ["GROUP", "CHECKS", "run"]

GROUP = "install"
CHECKS = {"install:transaction": "no `wh install` into the interpreter's site folders was left unfinished"}


def run(ctx: DoctorContext) -> list[CheckResult]:
    title = CHECKS["install:transaction"]
    sites = distinct_dirs([*(p for p in (ctx.facts.get("platlib"), ctx.facts.get("purelib")) if p),
                           *map(str, ctx.site_dirs)])  # (lib64 -> lib: one folder, one journal, named once)
    found = [(site, u) for site in sites if (u := unfinished_transaction(site)) is not None]
    if not found:
        return [CheckResult("install:transaction", title, "ok",
                            f"no unfinished install in {len(sites)} site folder(s)")]
    running = any(u.running for _, u in found)
    evidence = "; ".join(f"unfinished install in {site}: {u.describe()} (journal {u.journal})" for site, u in found)
    hint = ("wait for the running `wh install` to finish, then run `wh doctor` again" if running else
            f"run `wh install` again (e.g. `wh install WHEELHOUSE --python {ctx.python}`) to roll it back")
    return [CheckResult("install:transaction", title, "fail", evidence, hint=hint,
                        data={"unfinished": [{"site": site, "journal": u.journal, "pid": u.pid, "started": u.started,
                                              "wheels": list(u.wheels), "running": u.running} for site, u in found]})]
