"""The install record: ``<site-packages>/.wh/installed.json``, what wh installed from which wheelhouse.

One record per site folder that accumulates: each ``wh install`` (also ``--only``, and the
reinstall of ``wh drop --restore``) adds or updates the entries of the distributions it chose
and of the wheelhouses it installed from, and never forgets the others. Each wheelhouse's entry
(``sources``) carries a copy of the ``wh.json`` facts the doctor needs (the target, ``[doctor]``
expectations, ``[[toolchain]]`` groups, ``[[drop]]`` rules, what a delta assumed present), so a
wheelhouse installed from an archive or an ``oci://`` reference (a temporary folder, gone after the
install) keeps its expectations.

Read by later installs (the same version with the same sha256 is skipped), by ``wh doctor`` (the
stack: every distribution recorded here must be installed at its version, each with the wheelhouse
it came from) and by drops. It is written last, inside the install's transaction: an install that
did not finish is never recorded; ``unfinished_transaction`` tells a doctor about its journal
(see ``transaction``). A record written by an older wh (no ``sources``) is read as it is: the
doctor then reads a folder wheelhouse's ``wh.json`` where it still is.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from wheelhouse.atomic import write_atomic
from wheelhouse.datafile import parse_json
from wheelhouse.errors import UsageError
from .installed import canonical_name
from .transaction import UnfinishedInstall, journal_path, unfinished_transaction
from wheelhouse.lock import LockedFile
from .wheelhouses import Wheelhouse

__all__ = ["SCHEMA", "state_path", "read_install_state", "write_install_state", "merged_state", "source_facts",
           "installed_sources", "unfinished_transaction", "UnfinishedInstall"]

SCHEMA = "wh-installed/2"

# The wh.json keys the doctor reads, copied into the record per wheelhouse: [doctor] and the target, [[drop]]
# rules, what a delta assumed, the engine's build facts, [serve] (the engine's environment, for sharedlibs),
# and of inputs only _INPUT_KEYS (toolchain groups, what was requested, overrides, [[exclude]]).
_FACT_KEYS = ("name", "created", "target", "doctor", "drops", "assumed_present", "engine", "serve")
_INPUT_KEYS = ("toolchains", "requirements", "overrides", "excludes")


def state_path(site_dir: str | Path) -> Path:
    """Where the install record of the environment with ``site_dir`` lives."""
    return Path(site_dir) / ".wh" / "installed.json"


def _empty() -> dict[str, Any]:
    return {"schema": SCHEMA, "wheelhouses": [], "sources": {}, "packages": {}, "installed_at": None}


def read_install_state(site_dir: str | Path) -> dict[str, Any]:
    """``{schema, wheelhouses: [origin], sources: {origin: facts}, packages: {name: entry}, installed_at}``.

    A package entry: ``{version, filename, sha256, wheelhouse (its origin), path, installed_at, build}`` (``build``:
    ``recordfile.build_digest`` of the copy installed, where its RECORD has hashes).
    While an install's journal is there (running, or killed before its commit), the record vouches
    for nothing: it reads as empty, and the next install rolls the journal back.
    """
    if journal_path(site_dir).exists():
        return _empty()
    return _read(site_dir)


def _read(site_dir: str | Path) -> dict[str, Any]:
    try:
        data = parse_json(state_path(site_dir).read_text(encoding="utf-8"), source=str(state_path(site_dir)))
    except (OSError, ValueError, UsageError):  # (nested deeper than MAX_DEPTH included)
        data = None
    # A damaged record is read like a missing one (as unreadable JSON always was): the next install
    # writes it again, and the doctor says it found none.
    if not (isinstance(data, dict) and isinstance(data.get("wheelhouses", []), list)
            and all(isinstance(w, str) for w in data.get("wheelhouses", []))
            and isinstance(data.get("packages", {}), dict)
            and all(isinstance(p, dict) for p in data.get("packages", {}).values())
            and isinstance(data.get("sources", {}), dict)
            and all(isinstance(s, dict) for s in data.get("sources", {}).values())):
        return _empty()
    data.setdefault("wheelhouses", [])
    data.setdefault("packages", {})
    data.setdefault("sources", {})  # wh-installed/1 (no schema key): no facts copied in
    return data


def source_facts(meta: Mapping[str, Any]) -> dict[str, Any]:
    """What of a wheelhouse's ``wh.json`` the record keeps, in ``wh.json``'s own shape."""
    facts = {k: meta[k] for k in _FACT_KEYS if meta.get(k) is not None}
    inputs = meta.get("inputs") if isinstance(meta.get("inputs"), Mapping) else {}
    kept = {k: inputs[k] for k in _INPUT_KEYS if inputs.get(k)}
    if kept:
        facts["inputs"] = kept
    return facts


def merged_state(previous: Mapping[str, Any], chosen: Sequence[tuple[Wheelhouse, LockedFile]],
                 houses: Sequence[Wheelhouse], now: str | None = None,
                 builds: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """``previous`` with ``houses`` and the ``chosen`` files added or updated; every other entry kept. ``builds``:
    canonical name -> ``recordfile.build_digest`` of the installed copy (what tells this build from another one of
    the same version: a later install of another build is seen by the next install and by the doctor)."""
    from wheelhouse.carry import origin_of  # an archive or oci:// source is recorded, not its temporary folder

    now = now or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    state = {**_empty(), **json.loads(json.dumps(previous))}  # a deep copy: the caller's value is not changed
    state["schema"] = SCHEMA
    for h in houses:
        origin = origin_of(h.path)
        if origin not in state["wheelhouses"]:
            state["wheelhouses"].append(origin)
        state["sources"][origin] = {**source_facts(h.meta), "installed_at": now}
    for h, f in chosen:
        state["packages"][canonical_name(f.name)] = {
            "version": f.version, "filename": f.filename, "sha256": f.sha256, "wheelhouse": origin_of(h.path),
            "path": f.path, "installed_at": now,
            **({"build": builds[canonical_name(f.name)]} if (builds or {}).get(canonical_name(f.name)) else {}),
        }
    state["installed_at"] = now
    return state


def write_install_state(site_dir: str, chosen: Sequence[tuple[Wheelhouse, LockedFile]],
                        houses: Sequence[Wheelhouse], previous: Mapping[str, Any] | None = None,
                        to: Path | None = None, builds: Mapping[str, str | None] | None = None) -> Path:
    """Add ``houses`` and the ``chosen`` files to the record of ``site_dir`` (written atomically).

    ``previous``: the record as it was before the install's transaction began. The transaction moves
    the record aside with everything else it will write, so reading it here would find none and
    forget every distribution installed before; the caller reads it first (``read_install_state``).
    Called inside the install's transaction (its journal is there), as its last write. ``to``: written there
    instead (the install's pending copy, renamed into place by its commit).
    """
    state = merged_state(_read(site_dir) if previous is None else previous, chosen, houses, builds=builds)
    return write_atomic(to or state_path(site_dir), json.dumps(state, indent=2, sort_keys=True) + "\n")


def installed_sources(state: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The wheelhouses at least one recorded distribution still comes from, oldest install first,
    each with its copied facts (empty for a record older than ``sources``)."""
    live = {p.get("wheelhouse") for p in state.get("packages", {}).values()}
    sources = state.get("sources", {})
    order = sorted(enumerate(w for w in state.get("wheelhouses", []) if w in live),
                   key=lambda iw: (str((sources.get(iw[1]) or {}).get("installed_at") or ""), iw[0]))
    return [(w, dict(sources.get(w) or {})) for _, w in order]
