"""stack: what is installed is what was staged (the anchors: ``rpm -V``, ``debsums``).

``stack:distributions``: every distribution the install records (``<site>/.wh/installed.json`` of each
site folder the interpreter imports from) lists is installed, at the version its wheelhouse locked; and
what a delta wheelhouse assumed the image provides is there at that version. A locked distribution
that is missing (dropped by ``wh drop``, uninstalled by hand) or at another version is a fail naming it
and its wheelhouse; one a ``[[drop]]`` rule of the wheelhouse's manifest names may be absent (ok, said).

``stack:files``: every file a distribution's RECORD lists with a sha256 has that sha256 and size (byte
code aside: the interpreter rewrites it). wh's RECORD records the files wh wrote itself (launchers,
rewritten ``#!python`` lines) as written, so those must match too; a file ``wh patch`` changed must hold
the patch's payload; a ``libcuda.so`` stub ``wh links --fix`` moved aside is not missing. Emptied,
changed and missing files fail for the distributions of the stack (a wheelhouse's, or every one where no
wh install is recorded), and warn for the others (the base system's, beside a recorded stack), each named
with its distribution and wheelhouse. A distribution a system package manager installed (``INSTALLER``
rpm, conda, ...: it may rewrite files, e.g. conda's prefix replacement) is not judged by RECORD.

Digests come from ``install.digests`` (cached by file identity: an unchanged tree hashes nothing;
``--thorough`` hashes every file again).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from packaging.utils import canonicalize_name

from wheelhouse.doctor.report import CheckResult
from wheelhouse.install.digests import patched_files
from wheelhouse.install.state import installed_sources, read_install_state
from wheelhouse.recordfile import build_digest, system_installed
from wheelhouse.target.interpreter import distinct_dirs

from .context import DoctorContext, Distribution, reinstall_command

__all__ = ["GROUP", "CHECKS", "run", "StackEntry", "owned_by_dpkg", "recorded_stack", "covers"]

GROUP = "stack"
CHECKS = {
    "stack:distributions": "every distribution the install records list is installed at the version its "
                           "wheelhouse locked (and what a delta wheelhouse assumed the image provides)",
    "stack:files": "every file a RECORD lists has the recorded sha256 and size",
}

_SHOWN = 5  # files named per distribution before "and N more"
_DATA_SHOWN = 50  # in the JSON: a package emptied whole must not make the report megabytes


@dataclass(frozen=True)
class StackEntry:
    """One distribution of the stack: what the install record of ``site`` says it must be."""

    name: str
    version: str
    wheelhouse: str
    site: str
    build: str | None = None  # recordfile.build_digest of the copy the install left (records written since it)


def _sites(ctx: DoctorContext) -> list[str]:
    return distinct_dirs([*(p for p in (ctx.facts.get("platlib"), ctx.facts.get("purelib")) if p),
                          *map(str, ctx.site_dirs)])


def recorded_stack(ctx: DoctorContext) -> tuple[dict[str, StackEntry], list[tuple[str, str, Mapping[str, Any]]]]:
    """Every recorded distribution (the first site folder on sys.path that records a name wins, as an
    import would) and every recorded wheelhouse as (site, origin, facts)."""
    entries: dict[str, StackEntry] = {}
    sources = []
    for site in _sites(ctx):
        state = read_install_state(site)
        for key, p in state.get("packages", {}).items():
            entries.setdefault(canonicalize_name(key), StackEntry(key, str(p.get("version") or ""),
                                                                   str(p.get("wheelhouse") or "?"), site,
                                                                   str(p["build"]) if p.get("build") else None))
        sources += [(site, origin, facts) for origin, facts in installed_sources(state)]
    return entries, sources


def run(ctx: DoctorContext) -> list[CheckResult]:
    stack, sources = recorded_stack(ctx)
    out = []
    if ctx.wants("stack:distributions"):
        out.append(_distributions(ctx, stack, sources))
    if ctx.wants("stack:files"):
        out.append(_files(ctx, stack))
    return out


# ---- stack:distributions --------------------------------------------------------------------------------


def _dropped(site: str) -> dict[str, Mapping[str, Any]]:
    from wheelhouse.doctor.drop import read_dropped
    from wheelhouse.errors import WhError

    try:
        return {canonicalize_name(e["name"]): e for e in read_dropped(site)}
    except WhError:
        return {}


def _allowed_drops(ctx: DoctorContext) -> dict[str, str]:
    return {canonicalize_name(r.distribution): r.reason for r in (ctx.manifest.drops if ctx.manifest else ())}


def _distributions(ctx: DoctorContext, stack: Mapping[str, StackEntry],
                   sources: list[tuple[str, str, Mapping[str, Any]]]) -> CheckResult:
    cid, title = "stack:distributions", CHECKS["stack:distributions"]
    if not stack:
        return CheckResult(cid, title, "skip", f"no wh install is recorded in the {len(_sites(ctx))} site folder(s) "
                                               f"{ctx.python} imports from: no lock to compare with")
    allowed = _allowed_drops(ctx)
    problems, notes, missing, replaced = [], [], [], []
    dropped_by_site: dict[str, dict[str, Mapping[str, Any]]] = {}
    for key in sorted(stack):
        e = stack[key]
        d = ctx.dist(key)
        if d is None:
            if key in allowed:
                notes.append(f"{e.name} {e.version} ({e.wheelhouse}) is not installed, as the manifest's [[drop]] "
                             f"allows ({allowed[key] or 'no reason given'})")
                continue
            drop = dropped_by_site.setdefault(e.site, _dropped(e.site)).get(key)
            how = (f": dropped by `wh drop` at {drop.get('time')} ({drop.get('reason') or 'no reason recorded'})"
                   if drop else "")
            problems.append(f"{e.name} {e.version} (wheelhouse {e.wheelhouse}) is not installed{how}")
            missing.append((e, bool(drop)))
        elif not _same_version(d.version, e.version):
            problems.append(f"{e.name}: wheelhouse {e.wheelhouse} locks {e.version}, {d.version} is installed "
                            f"(in {d.location})")
        elif e.build and build_digest(d.record.rows) != e.build:
            # Its RECORD matches its files (stack:files), but they are another build's than the locked wheel's:
            # `pip install` of another build of the same version over it (the same wheel again gives the same digest).
            problems.append(f"{e.name} {e.version}: its files are another build's than the one wh installed from "
                            f"wheelhouse {e.wheelhouse} (its RECORD lists other sha256s; installer now: "
                            f"{_installer(d.dist_info) or 'unknown'})")
            replaced.append(e.name)
    for site, origin, facts in sources:
        for a in facts.get("assumed_present") or ():
            if not isinstance(a, Mapping) or not a.get("name"):
                continue
            d = ctx.dist(str(a["name"]))
            have = "is not installed" if d is None else f"{d.version} is installed"
            if d is None or not _same_version(d.version, str(a.get("version"))):
                problems.append(f"{a['name']}: wheelhouse {origin} assumed the image provides {a.get('version')}; "
                                f"{have}")
    houses = sorted({e.wheelhouse for e in stack.values()})
    data = {"distributions": len(stack), "wheelhouses": houses, "problems": problems, "notes": notes}
    if replaced:
        data["reinstall"] = [canonicalize_name(n) for n in replaced]
    if problems:
        hint = _hint(ctx, missing) if missing or not replaced else \
            f"install the locked build again: `{reinstall_command(ctx, *replaced)}`"
        return CheckResult(cid, title, "fail", "\n".join(problems + notes), hint=hint, data=data)
    per = {h: sum(1 for e in stack.values() if e.wheelhouse == h) for h in houses}
    return CheckResult(cid, title, "ok", f"{len(stack)} distribution(s) at their locked versions, from "
                       + "; ".join(f"{h} ({n})" for h, n in per.items()) + "".join(f"\n{n}" for n in notes), data=data)


def _same_version(installed: str, locked: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(installed) == Version(locked)  # 1.0 is 1.0.0
    except InvalidVersion:
        return installed == locked


def _hint(ctx: DoctorContext, missing: list[tuple[StackEntry, bool]]) -> str:
    dropped = [e.name for e, was in missing if was]
    if dropped:
        return (f"restore what was dropped: `wh drop --restore {dropped[0]} --python {ctx.python}`; a distribution "
                "the stack may do without is named in the manifest's [[drop]] rules")
    first = next((e for e, _ in missing), None)
    if first is not None:
        return f"install it again: `wh install {first.wheelhouse} --only {first.name} --python {ctx.python}`"
    return f"install the wheelhouse again: `wh install WHEELHOUSE --python {ctx.python}`"


# ---- stack:files -------------------------------------------------------------------------------------------


_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")
_DPKG_SITE = re.compile(r"/usr/lib/python3(\.\d+)?/dist-packages/?$")


def owned_by_dpkg(site: str, installer: str, rows) -> bool:
    """Debian's python3-* packages: dh-python writes RECORD (hex digests, no INSTALLER) or keeps the wheel's, then dpkg
    strips the .so files, debundles pip's certifi and moves scripts: the files are dpkg's, which `dpkg -V` judges.
    /usr/lib/python3/dist-packages is dpkg's alone (pip installs under /usr/local); no Python installer writes hex."""
    return not installer and bool(_DPKG_SITE.match(site) or (rows and all(_HEX_SHA256.fullmatch(d) for _, d, _ in rows)))


def _installer(dist_info: str) -> str:
    try:
        return Path(dist_info, "INSTALLER").read_text(encoding="utf-8", errors="replace").strip().lower()
    except OSError:
        return ""


def _moved_stubs(sites: list[str]) -> set[str]:
    """libcuda.so stubs `wh links --fix` moved aside (its record): not missing, removed on purpose."""
    from wheelhouse.env.links import read_record as read_links, record_path

    out: set[str] = set()
    for site in sites:
        try:
            out |= {os.path.normpath(c.path) for c in read_links(record_path(Path(site))) if c.action == "remove-stub"}
        except Exception:  # noqa: BLE001 - an unreadable links record moves nothing aside
            continue
    return out


def _b64_to_hex(digest: str) -> str:
    import base64

    return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()


def covers(other: Distribution, d: Distribution, rel: str) -> bool:
    """Whether ``other``'s bytes over ``d``'s copy of ``rel`` leave a package that works as one:

    - two builds of one release (the same version: opencv-python and opencv-python-headless 5.1.0.95 both write
      ``cv2/``; the one installed last wrote it, whatever else the first left beside it), where ``other`` ships the
      package itself (an ``__init__.py`` of a folder above ``rel``) where ``d`` does, not one module dropped into
      ``d``'s: an unrelated ``beta-tools 1.0`` writing ``shared/core.py`` into ``alpha 1.0``'s ``shared/`` left a
      package neither ships; in a namespace or data folder the same version is enough for a data file or a shared
      library (``nvidia/cu13/lib/``), not for a Python module (an unrelated ``acme-beta 1.0`` writing
      ``acme/_shared.py`` over ``acme-alpha 1.0``'s broke its import);
    - ``other`` ships every file ``d`` has in that package (opencv-contrib's ``cv2/`` over opencv's);
    - the file is a namespace's ``__init__.py`` whose halves ship disjoint subpackages (``backports.alpha`` and
      ``backports.beta`` each write ``backports/__init__.py``).

    Else a file of ``d`` that ``other`` does not ship stays ``d``'s beside ``other``'s: two releases mixed in one package
    (imgx 2.0's filters.py beside imgx-lite 1.0's core.py), which no RECORD vouches for. A row out of the site folder
    (``../../../bin/engine``) is never covered: another distribution's launcher of the same name runs its own entry
    point, whatever the versions."""
    top, _, rest = rel.partition("/")
    if not rest:
        return True  # a module at the top of the site folder: one file
    if top == "..":
        return False  # a launcher or data file out of the package folders: `engine` runs whichever wrote it last
    if other.version == d.version:
        parts = rel.split("/")
        above = ["/".join(parts[:i]) + "/__init__.py" for i in range(1, len(parts))]
        theirs_all = {r for r, _, _ in other.record.rows}
        mine_all = {r for r, _, _ in d.record.rows}
        # In a regular package of d's, the other must ship that package. In a namespace or data folder (NVIDIA's
        # nvidia/cu13/) the same version is enough for data and shared libraries (two builds of one release): a
        # Python module there (acme/_shared.py of an unrelated acme-beta 1.0 over acme-alpha 1.0's) is judged by the
        # rule below.
        if any(a in theirs_all for a in above) or (not any(a in mine_all for a in above) and not _is_python(rel)):
            return True
    mine = [r for r, _, _ in d.record.hashed if r.startswith(top + "/")]
    theirs = {r for r, _, _ in other.record.hashed if r.startswith(top + "/")}
    if all(r in theirs for r in mine):
        return True
    if rest == "__init__.py":
        sub = {r.split("/")[1] for r in mine if r.count("/") > 1}
        return not sub & {r.split("/")[1] for r in theirs if r.count("/") > 1} and \
            all(r.count("/") > 1 or r == rel or r.endswith(".pyc") for r in mine)
    return False


def _judge(site: str, rel: str, digest: str, size: int | None, state, patched, stubs) -> str | None:
    """What is wrong with one RECORD row's file (None: it matches, or differs on purpose)."""
    full = os.path.normpath(os.path.join(site, rel))
    if state is None:
        return None if full in stubs else f"{rel}: missing"
    have, have_size = state
    if have == digest and (size is None or size == have_size):
        return None
    if full in patched and _b64_to_hex(have) == patched[full][1]:
        return None  # wh patch's payload, recorded in its journal
    if size is not None and have_size != size:
        what = "emptied" if have_size == 0 else "other bytes"
        return f"{rel}: {have_size} bytes, RECORD records {size} ({what})"
    return f"{rel}: sha256 differs from RECORD's (same size: bytes changed in place)"


def _files(ctx: DoctorContext, stack: Mapping[str, StackEntry]) -> CheckResult:
    cid, title = "stack:files", CHECKS["stack:files"]
    digests = ctx.digests
    judged: list[tuple[Distribution, tuple[tuple[str, str, int | None], ...]]] = []
    foreign, no_record = [], 0
    for key in sorted(ctx.distributions):
        d = ctx.distributions[key]
        if not d.dist_info or not d.location:
            continue
        rows = d.record.hashed
        if not rows:
            no_record += 1  # install:records says why (none, unreadable, no hashes)
            continue
        installer = _installer(d.dist_info)
        # not "any installer wh does not know": pixi's and flit's write RECORD; and never a distribution an installed
        # wheelhouse holds: one word written into its INSTALLER later (`conda`) must not turn off the check of every
        # file (a system package manager's own, conda's prefix replacement included, stays unjudged)
        if system_installed(installer) and key not in stack:
            foreign.append(f"{d.name} ({installer})")
            continue
        if owned_by_dpkg(d.location, installer, rows):
            foreign.append(f"{d.name} (dpkg)")
            continue
        judged.append((d, rows))
    sites = sorted({d.location for d, _ in judged if d.location})
    patched = {p: v for s in sites for p, v in patched_files(s).items()}
    stubs = _moved_stubs(sites)
    # digests.states hashes what changed biggest first (a 600 MB library does not start last).
    tasks = [(d, rel, digest, size) for d, rows in judged for rel, digest, size in rows]
    states = digests.states([(d.location, rel) for d, rel, _, _ in tasks])
    bad: dict[str, list[str]] = {}
    code: set[str] = set()  # distributions with a changed file the interpreter loads as code
    replaced: list[str] = []
    listed: dict[str, list[tuple[Distribution, str, int | None]]] | None = None
    for (d, rel, digest, size), state in zip(tasks, states):
        if state is not None and state[0] == digest and (size is None or size == state[1]):
            continue  # the file RECORD records (most of them: no call per file)
        if state is not None:
            if listed is None:  # every RECORD row by the file it names, built at the first difference only
                listed = {}
                for d2, rel2, digest2, size2 in tasks:
                    listed.setdefault(os.path.normpath(os.path.join(d2.location, rel2)), []).append((d2, digest2, size2))
            other = next((d2 for d2, digest2, size2 in listed.get(os.path.normpath(os.path.join(d.location, rel)), ())
                          if d2.key != d.key and digest2 == state[0] and (size2 is None or size2 == state[1])), None)
            if other is not None and covers(other, d, rel) and (d.key not in stack or other.key in stack):
                # Two distributions ship the same file (opencv-python and opencv-contrib-python: cv2/): the one
                # installed last wrote its bytes over the other's, and its RECORD names what is on disk.
                replaced.append(f"{rel} ({d.name}'s) holds {other.name} {other.version}'s bytes")
                continue
            if other is not None and d.key in stack:
                # ... but not a distribution no installed wheelhouse holds, over a file of the stack's (a fork
                # pip-installed after wh: `mypkg-fork` writing mypkg/): the engine runs code nobody staged; nor
                # another's launcher of the same name (`engine` of othertool), whoever installed it
                whose = ("another distribution of the installed wheelhouses" if other.key in stack
                         else "a distribution no installed wheelhouse holds")
                bad.setdefault(d.key, []).append(
                    f"{rel}: holds {other.name} {other.version}'s bytes, {whose}, written over the stack's file")
                if _is_code(rel):
                    code.add(d.key)
                continue
        why = _judge(d.location, rel, digest, size, state, patched, stubs)
        if why:
            bad.setdefault(d.key, []).append(why)
            if _is_code(rel):
                code.add(d.key)
    fails, warns, damaged = [], [], []
    whole = not stack  # no wh install recorded: the environment is the stack, judged whole
    for key, whys in bad.items():
        d = ctx.distributions[key]
        e = stack.get(key)
        # Judged whole (no wheelhouse recorded), a changed data file is an image's own edit more often than
        # damage (the stock H200 image appends its CAs to certifi's cacert.pem): a warning, said so. Code
        # that differs from RECORD fails there too; in a recorded stack every difference fails.
        failed = bool(e) or (whole and key in code)
        origin = (f"wheelhouse {e.wheelhouse}" if e else
                  "no wheelhouse recorded" + ("" if failed else "; only data files differ, no code: a warning")
                  if whole else "not part of an installed wheelhouse: a warning")
        shown = whys[:_SHOWN] + ([f"and {len(whys) - _SHOWN} more"] if len(whys) > _SHOWN else [])
        line = f"{d.name} {d.version} ({origin}): " + "; ".join(shown)
        (fails if failed else warns).append(line)
        if failed:
            damaged.append(d.name)
    data: dict[str, Any] = {"files": len(tasks), "distributions": len(judged), "hashed": digests.hashed,
                            "hashed_bytes": digests.hashed_bytes, "thorough": digests.thorough,
                            "not_judged": foreign,
                            "changed": {k: v[:_DATA_SHOWN] for k, v in bad.items()},
                            "changed_count": {k: len(v) for k, v in bad.items()}}
    tail = (f"; {len(foreign)} installed by a system package manager, not judged by RECORD: {', '.join(foreign[:5])}"
            if foreign else "")
    if replaced:
        tail += (f"; {len(replaced)} file(s) hold the bytes another installed distribution's RECORD lists for them "
                 f"(both ship the file; the one installed last wrote it): {', '.join(replaced[:3])}"
                 + (f", and {len(replaced) - 3} more" if len(replaced) > 3 else ""))
        data["replaced"] = replaced[:_DATA_SHOWN]
    if fails or warns:
        hint = (f"reinstall it: `{reinstall_command(ctx, *damaged)}`" if damaged else "") + \
            ("; " if damaged and warns else "") + ("outside the stack: `pip install --force-reinstall --no-deps "
                                                    "NAME==VERSION` where it matters" if warns else "")
        return CheckResult(cid, title, "fail" if fails else "warn", "\n".join(fails + warns) + tail, hint=hint,
                           data={**data, **({"reinstall": [canonicalize_name(n) for n in damaged]} if damaged else {})})
    how = ("every file hashed (--thorough)" if digests.thorough else
           f"{digests.hashed} hashed this run, the others unchanged since they were hashed (digest cache)")
    return CheckResult(cid, title, "ok", f"{len(tasks)} file(s) of {len(judged)} distribution(s) match their RECORD "
                                         f"({how}){tail}", data=data)


_CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".so", ".pyd", ".pth", ".dylib")  # a .pyc RECORD lists: sourceless


def _is_python(rel: str) -> bool:
    """A file the interpreter imports or runs: a module, its byte code, an extension module, a .pth (not a library a
    loader maps by its name, ``lib*.so*``)."""
    name = rel.rsplit("/", 1)[-1]
    if name.startswith("lib") and (name.endswith(".so") or ".so." in name):
        return False
    return name.endswith((".py", ".pyc", ".pyo", ".pth", ".so", ".pyd"))


def _is_code(rel: str) -> bool:
    """A file the interpreter or the loader runs: Python sources, extension modules and libraries, .pth files."""
    name = rel.rsplit("/", 1)[-1]
    return name.endswith(_CODE_SUFFIXES) or ".so." in name or "/bin/" in f"/{rel}" or "/scripts/" in rel
