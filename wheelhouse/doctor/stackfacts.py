"""The facts of the wheelhouses a doctor judges by: ``wh.json``'s target, ``[doctor]``, ``[[toolchain]]``, ``[[drop]]``.

From ``--wheelhouse`` (a folder, a ``wh pack`` archive or an ``oci://`` reference, as ``wh install``
takes), else from the install records (``install.state``), which carry a copy of each installed
wheelhouse's facts: an archive or registry install keeps its expectations after its temporary folder
is gone. Several wheelhouses installed into one environment are merged (``merge_facts``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.utils import canonicalize_name

from wheelhouse.errors import WhError

__all__ = ["wheelhouse_facts", "merge_facts"]


def wheelhouse_facts(wheelhouse: Path | str | None, site_dirs: Sequence[Path]) -> tuple[Mapping[str, Any] | None, str | None]:
    """The wheelhouse facts (``wh.json``'s shape): from --wheelhouse, else from the install records.

    The records carry a copy of each installed wheelhouse's facts (an archive or oci:// install too);
    a record written by an older wh has none, and then a folder wheelhouse's wh.json is read where it is.
    """
    if wheelhouse:
        return _given_meta(wheelhouse, site_dirs), f"--wheelhouse {wheelhouse}"
    found: list[tuple[str, Mapping[str, Any]]] = []
    where = []
    for site in reversed(site_dirs):  # the environment's own site folder last: its wheelhouse speaks last
        sources = _recorded_sources(site)
        found += sources
        if sources:
            where.append(f"{site}/.wh/installed.json -> {', '.join(o for o, _ in sources)}")
    if not found:
        return None, None
    return merge_facts([f for _, f in found]), "; ".join(reversed(where))


def _recorded_sources(site: Path) -> list[tuple[str, Mapping[str, Any]]]:
    from wheelhouse.install.state import installed_sources, read_install_state
    from wheelhouse.lock import read_wh_json

    out = []
    for origin, facts in installed_sources(read_install_state(site)):
        if not facts:  # a record older than the copied facts
            try:
                facts = read_wh_json(origin)
            except WhError:
                continue  # moved or removed since the install: nothing to compare with
        out.append((origin, facts))
    return out


def _given_meta(wheelhouse: Path | str, site_dirs: Sequence[Path]) -> Mapping[str, Any]:
    """``--wheelhouse``: a folder, an archive or an oci:// reference (what ``wh install`` takes)."""
    from contextlib import ExitStack

    from wheelhouse.carry import OCI_SCHEME, is_archive, materialize
    from wheelhouse.lock import read_wh_json

    given = os.fspath(wheelhouse)
    remote = given.startswith(OCI_SCHEME)
    if not remote and is_archive(given) is None:
        return read_wh_json(given)  # not a wheelhouse: a usage error
    origin = given if remote else os.path.abspath(given)
    for site in site_dirs:  # installed from it: the record holds its facts, nothing to unpack or pull
        for o, facts in _recorded_sources(site):
            if o == origin:
                return facts
    with ExitStack() as held:
        return read_wh_json(materialize([given], held)[0])


def merge_facts(facts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several wheelhouses' facts as one: the latest target, name, ``[doctor]`` and ``[serve]`` win;
    ``[[toolchain]]`` groups, ``[[drop]]`` rules and ``[[exclude]]`` entries of all of them hold (the latest
    wins for one name), and so do every wheelhouse's requirements and overrides; an engine built with
    link-sonames in any of them is kept (its builds need the links)."""
    out: dict[str, Any] = {}
    drops: dict[str, Any] = {}
    groups: dict[str, Any] = {}
    assumed: dict[str, Any] = {}
    excludes: dict[str, Any] = {}
    requirements: list[str] = []
    overrides: list[str] = []
    for f in facts:
        for key in ("name", "target", "doctor", "created", "serve"):
            if f.get(key):
                out[key] = f[key]
        engine = f.get("engine")
        if isinstance(engine, Mapping) and (not out.get("engine") or (engine.get("build") or {}).get("link_sonames")):
            out["engine"] = engine
        for d in f.get("drops") or ():
            if isinstance(d, Mapping) and d.get("distribution"):
                drops[canonicalize_name(str(d["distribution"])) + "/" + str(d.get("module") or "")] = d
        inputs = f.get("inputs") if isinstance(f.get("inputs"), Mapping) else {}
        for t in inputs.get("toolchains") or ():
            if isinstance(t, Mapping) and t.get("name"):
                groups[str(t["name"])] = t
        requirements += [str(r) for r in inputs.get("requirements") or () if str(r) not in requirements]
        overrides += [str(r) for r in inputs.get("overrides") or () if str(r) not in overrides]
        for e in inputs.get("excludes") or ():
            if isinstance(e, Mapping) and e.get("distribution"):
                excludes[canonicalize_name(str(e["distribution"]))] = e
        for a in f.get("assumed_present") or ():
            if isinstance(a, Mapping) and a.get("name"):
                assumed[canonicalize_name(str(a["name"]))] = a
    out.update(drops=list(drops.values()),
               inputs={"toolchains": list(groups.values()), "requirements": requirements, "overrides": overrides,
                       "excludes": list(excludes.values())},
               assumed_present=list(assumed.values()))
    return out
