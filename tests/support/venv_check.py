"""Does an environment equal a wheelhouse's lock? Asked of the environment's own interpreter.

``lock_problems(python, wheelhouse)`` lists every difference a user would notice: a locked
distribution missing or at another version, a file its RECORD lists missing or with other
bytes, a distribution that is not in the lock (``allowed`` names may be), wh's install
journal still there. Empty list: the environment is the lock.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable

__all__ = ["installed_files", "lock_problems"]

_SCAN = r"""
import base64, hashlib, importlib.metadata as m, json, sys
site = sys.argv[1]
out = {}
for d in m.distributions(path=[site]):
    name = d.metadata["Name"]
    if not name:  # a .dist-info folder without METADATA: half an install
        out[str(getattr(d, "_path", "?"))] = ["?", ["no METADATA"]]
        continue
    bad = []
    try:
        files = d.files or []
    except Exception as exc:
        files, bad = [], [f"RECORD unreadable: {exc}"]
    if not files:
        bad.append("no RECORD")
    for f in files:
        if f.hash is None or f.hash.mode != "sha256":
            continue
        p = f.locate()
        try:
            data = open(p, "rb").read()
        except OSError:
            bad.append(f"{f}: missing")
            continue
        if base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode() != f.hash.value:
            bad.append(f"{f}: other bytes")
    out[name.lower().replace("_", "-")] = [d.version, bad]
print(json.dumps(out))
"""


def installed_files(python: str | Path, site: str | Path) -> dict[str, list]:
    """``{name: [version, [problems with its RECORD's files]]}`` for every distribution in ``site``."""
    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.run([str(python), "-c", _SCAN, str(site)], capture_output=True, text=True, cwd=cwd,
                              check=True)
    return json.loads(proc.stdout)


def lock_problems(python: str | Path, site: str | Path, wheelhouse: str | Path,
                  allowed: Iterable[str] = ()) -> list[str]:
    """Every way the environment of ``python`` (its ``site``) differs from ``wheelhouse``'s pylock.toml."""
    from wheelhouse.lock import read_pylock

    want = {f.name.lower().replace("_", "-"): f.version for f in read_pylock(wheelhouse).files}
    have = installed_files(python, site)
    problems = []
    for name, version in sorted(want.items()):
        if name not in have:
            problems.append(f"{name} {version}: not installed")
        elif have[name][0] != version:
            problems.append(f"{name}: {have[name][0]} installed, lock says {version}")
        else:
            problems += [f"{name}: {b}" for b in have[name][1]]
    problems += [f"{n} {v[0]}: not in the lock" for n, v in sorted(have.items())
                 if n not in want and n not in set(allowed)]
    if (Path(site) / ".wh" / "journal.json").exists():
        problems.append("an install journal is still there")
    return problems
