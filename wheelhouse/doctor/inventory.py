"""What a node has, for ``wh doctor compare``: its name, and every installed distribution with its hashes.

Written into the doctor's JSON report (``facts.node``, ``facts.installed``, ``facts.wh_version``) so that
reports gathered from many nodes can be compared without going back to the nodes.

A distribution's ``files_sha256`` is one sha256 over the files its RECORD lists inside the site folder
(path and the sha256 of the file ON DISK, sorted; a missing file counts as missing), leaving out what the
installer writes for itself (INSTALLER, REQUESTED, direct_url.json, RECORD), byte code and anything
outside the site folder (launchers carry the venv's path in their shebang). Two venvs installed from the
same wheel give the same value on any node; one changed file changes it, whatever its RECORD says (the
digests come from ``install.digests``: the doctor's ``stack:files`` check has hashed them already, or
their identity is unchanged since they were). ``wheel_sha256`` is the sha256 of the wheel file wh installed it from (the install state),
when wh installed it.
"""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from wheelhouse.recordfile import read_record

__all__ = ["NODE_ENV", "node_identity", "installed_inventory", "files_sha256"]

# The node's name, first found wins: wh's own variable (set from the Kubernetes downward API, where the
# pod's host name is the pod's), then Slurm's, then the host name.
NODE_ENV = ("WH_NODE_NAME", "SLURMD_NODENAME")

_INSTALLER_FILES = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD", "RECORD.jws", "RECORD.p7s"}


def node_identity(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``{name, source, host}``: what ``wh doctor compare`` calls this node, and where the name came from."""
    env = os.environ if environ is None else environ
    host = platform.node()
    for var in NODE_ENV:
        if env.get(var, "").strip():
            return {"name": env[var].strip(), "source": var, "host": host}
    return {"name": host, "source": "hostname", "host": host}


def _site_rows(rows: Iterable[tuple[str, str | None, int | None]]) -> list[tuple[str, str]]:
    """The (path, recorded sha256) rows ``files_sha256`` covers (see the module docstring)."""
    out = []
    for path, digest, _ in rows:
        p = path.replace("\\", "/")
        if not digest or p.startswith(("../", "/")) or p.endswith((".pyc", ".pyo")) or "__pycache__/" in p:
            continue
        head, _, base = p.rpartition("/")
        if not (head.endswith(".dist-info") and "/" not in head and base in _INSTALLER_FILES):
            out.append((path, digest))
    return out


def _rows_sha256(rows: Sequence[tuple[str, str]], states: Sequence[Any] | None = None) -> tuple[str, int]:
    """``states``: each row's file ``(digest, size)`` on disk, or None when it is missing; without them, the
    digests RECORD records stand in (what the file should hold)."""
    if states is None:
        lines = [f"{path} sha256={recorded}\n" for path, recorded in rows]
    else:
        lines = [f"{path} sha256={state[0]}\n" if state else f"{path} missing\n"
                 for (path, _), state in zip(rows, states)]
    lines.sort()
    return hashlib.sha256("".join(lines).encode("utf-8", "surrogateescape")).hexdigest(), len(lines)


def files_sha256(record_text: str) -> tuple[str, int]:
    """The sha256 over a RECORD's site-folder entries (see the module docstring), with the digests RECORD records,
    and how many entries it covers."""
    return _rows_sha256(_site_rows(read_record(record_text)))


def _wheel_hashes(site_dirs: Iterable[Path]) -> dict[str, tuple[str, str]]:
    """name -> (version, wheel sha256) from wh's install state of each site folder (the first wins)."""
    from wheelhouse.install import read_install_state

    out: dict[str, tuple[str, str]] = {}
    for site in site_dirs:
        for name, p in read_install_state(site).get("packages", {}).items():
            if isinstance(p.get("sha256"), str) and name not in out:
                out[name] = (str(p.get("version") or ""), p["sha256"])
    return out


def installed_inventory(distributions: Mapping[str, Any], site_dirs: Sequence[Path],
                        digests: Any = None) -> list[dict[str, Any]]:
    """One entry per distribution the interpreter imports: name, version, files_sha256, files, wheel_sha256.

    ``distributions`` maps canonical names to the doctor's ``Distribution`` (name, version, its parsed RECORD);
    ``digests``: an ``install.digests.FileDigests`` (the files' real digests; None: RECORD's).
    """
    wheels = _wheel_hashes(site_dirs)
    # No RECORD (an egg-info, a develop install): nothing to vouch for (None).
    rows = {key: None if d.record.error else _site_rows(d.record.rows) for key, d in distributions.items()}
    sites = {key: os.path.dirname(os.path.abspath(d.dist_info)) for key, d in distributions.items() if rows[key]}
    items = [(sites[key], path) for key, r in rows.items() if r for path, _ in r]
    states: dict[str, Sequence[Any]] = {}
    if digests is not None:  # known already when stack:files ran: nothing is stat'ed or hashed twice
        flat, at = digests.states(items), 0
        for key, r in rows.items():
            if r is not None:
                states[key], at = flat[at:at + len(r)], at + len(r)
    out = []
    for key in sorted(distributions):
        d = distributions[key]
        digest, count = (None, None) if rows[key] is None else _rows_sha256(rows[key], states.get(key))
        wheel = wheels.get(key)
        out.append({"name": d.name, "version": d.version, "files_sha256": digest, "files": count,
                    "wheel_sha256": wheel[1] if wheel and wheel[0] == d.version else None})
    return out
