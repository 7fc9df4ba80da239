"""The install state: ``<site-packages>/.wh/installed.json``, what wh installed from which wheelhouse.

Read by later installs (the same version with the same sha256 is skipped), by
``wh doctor`` and by drops. It is written last, inside the install's transaction: an
install that did not finish is never recorded; ``unfinished_transaction`` tells a doctor
about its journal (see ``transaction``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from wheelhouse.atomic import write_atomic
from wheelhouse.datafile import parse_json
from wheelhouse.errors import UsageError
from .installed import canonical_name
from .transaction import UnfinishedInstall, journal_path, unfinished_transaction
from wheelhouse.lock import LockedFile
from .wheelhouses import Wheelhouse

__all__ = ["state_path", "read_install_state", "write_install_state", "unfinished_transaction", "UnfinishedInstall"]


def state_path(site_dir: str | Path) -> Path:
    """Where the install state of the environment with ``site_dir`` lives."""
    return Path(site_dir) / ".wh" / "installed.json"


def read_install_state(site_dir: str | Path) -> dict[str, Any]:
    """``{wheelhouses: [...], packages: {name: {version, filename, sha256, wheelhouse}}, installed_at}``.

    While an install's journal is there (running, or killed before its commit), the state vouches for
    nothing: it reads as empty, and the next install rolls the journal back.
    """
    if journal_path(site_dir).exists():
        return {"wheelhouses": [], "packages": {}, "installed_at": None}
    return _read(site_dir)


def _read(site_dir: str | Path) -> dict[str, Any]:
    try:
        data = parse_json(state_path(site_dir).read_text(encoding="utf-8"), source=str(state_path(site_dir)))
    except (OSError, ValueError, UsageError):  # (nested deeper than MAX_DEPTH included)
        data = None
    # A damaged state is read like a missing one (as unreadable JSON always was): it is only a cache of
    # what wh did, and the next install rewrites it.
    if not (isinstance(data, dict) and isinstance(data.get("wheelhouses", []), list)
            and all(isinstance(w, str) for w in data.get("wheelhouses", []))
            and isinstance(data.get("packages", {}), dict)
            and all(isinstance(p, dict) for p in data.get("packages", {}).values())):
        return {"wheelhouses": [], "packages": {}, "installed_at": None}
    data.setdefault("wheelhouses", [])
    data.setdefault("packages", {})
    return data


def write_install_state(site_dir: str, chosen: Sequence[tuple[Wheelhouse, LockedFile]],
                        houses: Sequence[Wheelhouse], to: Path | None = None) -> Path:
    """Add ``houses`` and the ``chosen`` files to the state of ``site_dir`` (written atomically).

    Called inside the install's transaction (its journal is there), as its last write. ``to``: written there
    instead (the install's pending copy, renamed into place by its commit).
    """
    from wheelhouse.carry import origin_of  # an archive or oci:// source is recorded, not its temporary folder

    state = _read(site_dir)
    for h in houses:
        if origin_of(h.path) not in state["wheelhouses"]:
            state["wheelhouses"].append(origin_of(h.path))
    for h, f in chosen:
        state["packages"][canonical_name(f.name)] = {
            "version": f.version, "filename": f.filename, "sha256": f.sha256, "wheelhouse": origin_of(h.path),
            "path": f.path,
        }
    state["installed_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return write_atomic(to or state_path(site_dir), json.dumps(state, indent=2, sort_keys=True) + "\n")
