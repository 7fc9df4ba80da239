"""Install wheelhouses on the box: find them, check them, verify them, install them, record them.

Order matters and is the point of this module: nothing in the environment
changes until (1) the wheelhouse's target matches the receiving interpreter
(asked of that interpreter: its implementation, version, abi, its own tag list,
its glibc), and (2) every file to install has the sha256 (and size) the
``pylock.toml`` says. Installation itself has no index and no network: wh's own
parallel unpacker (``unpack``), or pip with ``--no-index --no-deps`` on the
verified files. Then: optional bytecode, the install state, links, patches,
and an activation snippet in the venv.

Nothing here imports anything that can open a socket.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from packaging.markers import InvalidMarker, Marker
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from .atomic import write_atomic
from .cudaenv import env_plan, render_bash, render_fish
from .errors import UsageError, WhError
from .interpreter import Interpreter, create_venv, inspect_interpreter, venv_python
from .links import LinkChange, apply_links, plan_links, record_path
from .lock import WH_JSON, LockedFile, WheelhouseNotFound, read_pylock, read_wh_json
from .progress import NullReporter, Reporter
from .target import TargetProfile, target_from_json
from .unpack import InstalledDist, canonical_name, find_installed, install_wheels

__all__ = [
    "Wheelhouse",
    "InstallReport",
    "TargetMismatch",
    "HashMismatch",
    "AmbiguousWheelhouse",
    "InstallFailed",
    "find_wheelhouses",
    "load_wheelhouse",
    "install_wheelhouses",
    "read_install_state",
    "state_path",
    "write_activation",
]

_MAX_DEPTH = 6
_SKIP_DIRS = {"wheels", "simple", "bootstrap", "__pycache__", ".git", "node_modules", "site-packages"}


class TargetMismatch(UsageError):
    code = "target-mismatch"


class HashMismatch(WhError):
    code = "hash-mismatch"

    def __init__(self, message: str, *, bad: Sequence[tuple[str, str, str]] = (), **kw):
        super().__init__(message, **kw)
        self.bad = list(bad)  # (path, expected, actual)


class AmbiguousWheelhouse(UsageError):
    code = "ambiguous-wheelhouse"


class InstallFailed(WhError):
    code = "install-failed"


class PatchesUnavailable(UsageError):
    code = "patches-unavailable"


@dataclass(frozen=True)
class Wheelhouse:
    path: Path
    files: tuple[LockedFile, ...]
    meta: Mapping[str, Any]

    @property
    def target(self) -> TargetProfile | None:
        data = self.meta.get("target")
        return target_from_json(data) if data else None

    @property
    def patches(self) -> tuple[str, ...]:
        return tuple(self.meta.get("patches") or ())


@dataclass(frozen=True)
class InstallReport:
    interpreter: str
    venv: str | None
    wheelhouses: tuple[str, ...]
    installed: tuple[InstalledDist, ...]
    skipped: tuple[str, ...]
    links: tuple[LinkChange, ...] = ()
    patches: tuple[str, ...] = ()
    compiled: int = 0
    state_file: str | None = None
    activation: str | None = None
    seconds: float = 0.0
    installer: str = "wh"
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "interpreter": self.interpreter,
            "venv": self.venv,
            "wheelhouses": list(self.wheelhouses),
            "installer": self.installer,
            "installed": [{"name": canonical_name(d.name), "version": d.version, "wheel": d.wheel, "replaced": d.replaced}
                          for d in self.installed],
            "skipped": list(self.skipped),
            "links": [c.to_json() for c in self.links],
            "patches": list(self.patches),
            "compiled": self.compiled,
            "state_file": self.state_file,
            "activation": self.activation,
            "seconds": round(self.seconds, 3),
            "notes": list(self.notes),
        }


# ---- finding ------------------------------------------------------------------------------------


def _walk_for(root: Path, name: str, depth: int) -> list[Path]:
    out: list[Path] = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return out
    for e in entries:
        if e.name == name and e.is_file():
            out.append(Path(e.path).parent)
    if (root / name).is_file():
        return out  # a wheelhouse's own folders hold no further wheelhouses
    if depth > 0:
        for e in entries:
            if e.is_dir() and e.name not in _SKIP_DIRS and not e.name.startswith("."):
                out += _walk_for(Path(e.path), name, depth - 1)
    return out


def _fingerprint(path: Path) -> str:
    try:
        return hashlib.sha256((path / "pylock.toml").read_bytes()).hexdigest()
    except OSError:
        return str(path.resolve())


def find_wheelhouses(paths: Sequence[str | Path], search_roots: Sequence[str | Path] = ()) -> list[Path]:
    """Wheelhouse folders (holding ``wh.json``) from explicit ``paths`` and below ``search_roots``.

    An explicit path is a wheelhouse, or a root to search. Mounts move (a dataset may
    appear at ``<root>/<name>/`` or ``<root>/notebooks/<owner>/<name>/``), so nothing is
    hard-coded: wh.json is looked for up to six levels down. The same wheelhouse mounted
    twice counts once; two different wheelhouses offering different files for one
    package are ambiguous and refused with the candidates listed.
    """
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if (p / WH_JSON).is_file():
            found.append(p)
        elif p.is_file() and p.name == WH_JSON:
            found.append(p.parent)
        elif p.is_dir():
            hits = _walk_for(p, WH_JSON, _MAX_DEPTH)
            if not hits:
                raise WheelhouseNotFound(f"no wheelhouse (wh.json) under {p}",
                                         hint="pass the folder `wh stage -o` wrote, or a folder above it")
            found += hits
        else:
            raise WheelhouseNotFound(f"{p} does not exist", hint="pass the folder `wh stage -o` wrote")
    for root in search_roots:
        root = Path(root)
        if root.is_dir():
            found += _walk_for(root, WH_JSON, _MAX_DEPTH)
    if not found:
        raise WheelhouseNotFound(
            "no wheelhouse found" + (f" under {', '.join(map(str, search_roots))}" if search_roots else ""),
            hint="pass it: `wh install PATH`, or search a mount: `wh install --search /mnt/data`",
        )
    unique: dict[str, Path] = {}
    for p in found:
        unique.setdefault(_fingerprint(p), p)  # the same wheelhouse mounted twice
    result = list(dict.fromkeys(p.resolve() for p in unique.values()))
    _check_unambiguous([load_wheelhouse(p) for p in result])
    return result


def load_wheelhouse(path: str | Path) -> Wheelhouse:
    path = Path(path)
    meta = read_wh_json(path)
    lock = read_pylock(path)
    return Wheelhouse(path=path, files=lock.files, meta=meta)


def _check_unambiguous(houses: Sequence[Wheelhouse]) -> None:
    seen: dict[str, tuple[Wheelhouse, LockedFile]] = {}
    clashes: list[str] = []
    for wh in houses:
        for f in wh.files:
            key = canonical_name(f.name)
            prev = seen.get(key)
            if prev and prev[0] is not wh and prev[1].version != f.version:
                clashes.append(f"{key}: {prev[1].version} in {prev[0].path}, {f.version} in {wh.path}")
            seen.setdefault(key, (wh, f))
    if clashes:
        raise AmbiguousWheelhouse(
            f"wheelhouses disagree on {len(clashes)} package(s): " + "; ".join(clashes[:5]),
            hint="pass exactly the wheelhouses you mean: `wh install PATH [PATH ...]`",
        )


# ---- state ---------------------------------------------------------------------------------------


def state_path(site_dir: str | Path) -> Path:
    return Path(site_dir) / ".wh" / "installed.json"


def read_install_state(site_dir: str | Path) -> dict[str, Any]:
    """``{wheelhouses: [...], packages: {name: {version, filename, sha256, wheelhouse}}, installed_at}``."""
    try:
        data = json.loads(state_path(site_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"wheelhouses": [], "packages": {}, "installed_at": None}
    data.setdefault("wheelhouses", [])
    data.setdefault("packages", {})
    return data


def _write_state(site_dir: str, chosen: Sequence[tuple[Wheelhouse, LockedFile]], houses: Sequence[Wheelhouse]) -> Path:
    state = read_install_state(site_dir)
    for h in houses:
        if str(h.path) not in state["wheelhouses"]:
            state["wheelhouses"].append(str(h.path))
    for h, f in chosen:
        state["packages"][canonical_name(f.name)] = {
            "version": f.version, "filename": f.filename, "sha256": f.sha256, "wheelhouse": str(h.path),
            "path": f.path,
        }
    state["installed_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return write_atomic(state_path(site_dir), json.dumps(state, indent=2, sort_keys=True) + "\n")


# ---- checks ------------------------------------------------------------------------------------


def _wheel_tags(filename: str) -> set[str]:
    try:
        return {str(t) for t in parse_wheel_filename(filename)[3]}
    except InvalidWheelFilename:
        return set()


def _applies(f: LockedFile, interp: Interpreter) -> bool:
    if not f.marker:
        return True
    try:
        env = dict(interp.markers)
        env["extra"] = ""
        return Marker(f.marker).evaluate(env)
    except InvalidMarker:
        return True


def _select(houses: Sequence[Wheelhouse], interp: Interpreter, only: set[str] | None) -> list[tuple[Wheelhouse, LockedFile]]:
    """One file per package: markers judged for the receiving interpreter, best tag by its own order."""
    rank = {t: i for i, t in enumerate(interp.tags)}
    best: dict[str, tuple[int, Wheelhouse, LockedFile]] = {}
    for h in houses:
        for f in h.files:
            if not _applies(f, interp):
                continue
            r = min((rank[t] for t in _wheel_tags(f.filename) if t in rank), default=len(rank) + 1)
            key = canonical_name(f.name)
            if key not in best or r < best[key][0]:
                best[key] = (r, h, f)
    if only is not None:
        wanted = {canonical_name(n) for n in only}
        missing = sorted(wanted - set(best))
        if missing:
            raise UsageError(f"not in the wheelhouse(s): {', '.join(missing)}",
                             hint="list what a wheelhouse holds in its pylock.toml")
        best = {k: v for k, v in best.items() if k in wanted}
    return [(h, f) for _, h, f in (best[k] for k in sorted(best))]


def check_target(houses: Sequence[Wheelhouse], chosen: Sequence[tuple[Wheelhouse, LockedFile]],
                 interp: Interpreter) -> None:
    """Raise TargetMismatch naming every difference between the wheelhouses' target and ``interp``."""
    problems: list[str] = []
    for h in houses:
        t = h.target
        if t is None:
            continue
        for what, theirs, ours in (
            ("implementation", t.implementation, interp.implementation),
            ("Python", t.python_version, interp.python_version),
            ("ABI", t.abi, interp.abi),
        ):
            if theirs != ours:
                problems.append(f"{h.path} is for {what} {theirs}, {interp.executable} is {ours}")
        if t.glibc and interp.glibc and t.glibc > interp.glibc:
            problems.append(f"{h.path} is for glibc {t.libc[1]}, this machine has {interp.libc[1]}")
        if t.glibc and interp.libc and interp.libc[0] != "glibc":
            problems.append(f"{h.path} is for glibc, this machine has {interp.libc[0]}")
    own = set(interp.tags)
    for _, f in chosen:
        if not (_wheel_tags(f.filename) & own):
            problems.append(f"{f.filename} has no tag {interp.executable} accepts (its best: {interp.tags[0]})")
    if problems:
        raise TargetMismatch(
            f"wheelhouse does not fit {interp.describe()}: " + "; ".join(problems[:4])
            + (f" (and {len(problems) - 4} more)" if len(problems) > 4 else ""),
            hint="stage for this interpreter: run `python capture_target.py -o target.json` here, then "
                 "`wh stage --target target.json` on the networked host",
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def verify_files(chosen: Sequence[tuple[Wheelhouse, LockedFile]], jobs: int, reporter: Reporter) -> list[Path]:
    """Hash every file against pylock.toml; raise HashMismatch listing every bad one. Returns the paths."""
    paths = [h.path / f.path for h, f in chosen]
    task = f"verifying {len(paths)} wheels"
    reporter.start(task, total=len(paths))

    def one(item):
        (h, f), path = item
        if not path.is_file():
            return (str(path), f.sha256, "missing")
        if f.size is not None and path.stat().st_size != f.size:
            return (str(path), f.sha256, f"size {path.stat().st_size} != {f.size}")
        actual = _sha256(path)
        reporter.advance(task)
        return None if actual == f.sha256 else (str(path), f.sha256, actual)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        bad = [b for b in pool.map(one, zip(chosen, paths)) if b]
    reporter.finish(task)
    if bad:
        first = bad[0]
        raise HashMismatch(
            f"{len(bad)} file(s) do not match pylock.toml, nothing was installed: {Path(first[0]).name} "
            f"(expected sha256 {first[1][:16]}..., got {first[2][:16]}{'...' if len(first[2]) > 16 else ''})",
            bad=bad,
            hint="the wheelhouse was altered or damaged in transit; copy it again or re-run `wh stage`",
            detail="\n".join(f"{p}: expected {e}, got {a}" for p, e, a in bad),
        )
    return paths


# ---- doing ----------------------------------------------------------------------------------------


def _pip_install(interp: Interpreter, paths: Sequence[Path], compile: bool) -> None:
    if interp.has_pip:
        cmd = [interp.executable, "-m", "pip"]
    else:
        cmd = [sys.executable, "-m", "pip", "--python", interp.executable]
    cmd += ["install", "--no-index", "--no-deps", "--disable-pip-version-check", "--no-input",
            "--compile" if compile else "--no-compile"]
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull)
    proc = subprocess.run(cmd + [str(p) for p in paths], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise InstallFailed(f"pip could not install the verified wheels (exit {proc.returncode})",
                            hint="re-run with the default installer: `wh install --installer wh`",
                            detail=(proc.stdout[-3000:] + proc.stderr[-3000:]))


# Runs in the RECEIVING interpreter (its bytecode magic): compiles each path as soon as it arrives
# on stdin, so compilation overlaps extraction. compileall's own -j only parallelises directory
# walks, and `-i -` reads the whole list before starting.
_COMPILE_WORKER = r"""
import compileall, sys
n = bad = 0
for line in sys.stdin:
    path = line.rstrip("\n")
    if path:
        n += 1
        try:
            bad += not compileall.compile_file(path, quiet=2)
        except Exception:
            bad += 1
sys.stdout.write(f"{n} {bad}\n")
"""


class _Compiler:
    """One streaming byte-compile worker per core, fed round-robin."""

    def __init__(self, python: str, workers: int):
        self._procs = [
            subprocess.Popen([python, "-c", _COMPILE_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, bufsize=1 << 16)
            for _ in range(max(1, workers))
        ]
        self._locks = [threading.Lock() for _ in self._procs]
        self._next = 0
        self._turn = threading.Lock()

    def submit(self, path: str) -> None:
        with self._turn:
            i = self._next = (self._next + 1) % len(self._procs)
        with self._locks[i]:
            try:
                self._procs[i].stdin.write(path + "\n")
            except (BrokenPipeError, ValueError):
                pass

    def abort(self) -> None:
        for p in self._procs:
            p.kill()
        for p in self._procs:
            p.communicate()

    def finish(self) -> int:
        total = 0
        failed = []
        for i, p in enumerate(self._procs):
            with self._locks[i]:
                out, err = p.communicate()
            if p.returncode != 0:
                failed.append(err[-3000:])
            else:
                total += int((out.split() or ["0"])[0])
        if failed:
            raise InstallFailed("byte-compilation failed", hint="re-run without --compile", detail=failed[0])
        return total


_HOOK = "# wh: CUDA toolchain and NVIDIA library paths"


def write_activation(venv: Path, interp: Interpreter) -> Path:
    """``<venv>/bin/wh-env.sh`` (and ``.fish``), sourced from the venv's activate scripts."""
    plan = env_plan([Path(d) for d in interp.site_dirs])
    bindir = Path(venv) / "bin"
    snippet = write_atomic(bindir / "wh-env.sh", render_bash(plan))
    write_atomic(bindir / "wh-env.fish", render_fish(plan))
    for activate, line in (
        ("activate", f'{_HOOK}\n[ -f "$VIRTUAL_ENV/bin/wh-env.sh" ] && . "$VIRTUAL_ENV/bin/wh-env.sh"\n'),
        ("activate.fish", f'{_HOOK}\ntest -f "$VIRTUAL_ENV/bin/wh-env.fish"; and source "$VIRTUAL_ENV/bin/wh-env.fish"\n'),
    ):
        path = bindir / activate
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        if _HOOK not in text:
            write_atomic(path, text.rstrip("\n") + "\n\n" + line, mode=path.stat().st_mode & 0o777)
    return snippet


def _apply_patches(houses: Sequence[Wheelhouse], interp: Interpreter, reporter: Reporter) -> list[str]:
    """Apply each wheelhouse's patch specs (``patches/**.toml``; the payload files beside them are data)."""
    from . import patch  # checked to exist before anything changed

    applied = []
    for h in houses:
        for rel in h.patches:
            if not rel.endswith(".toml"):
                continue
            outcome = patch.apply_patch(h.path / rel, python=interp.executable)
            line = f"patch {rel}: {outcome.state}" + (f" ({outcome.reason})" if outcome.reason else "")
            reporter.note(line)
            applied.append(line)
    return applied


def install_wheelhouses(
    wheelhouses: Sequence[Path],
    *,
    python: str | None = None,
    venv: Path | None = None,
    system_site_packages: bool = False,
    only: set[str] | None = None,
    installer: Literal["wh", "pip"] = "wh",
    compile: bool = False,
    jobs: int | None = None,
    links: bool = True,
    patches: bool = True,
    reporter: Reporter | None = None,
) -> InstallReport:
    """Check, verify, then install ``wheelhouses`` into ``venv`` (created if missing) or ``python``'s environment."""
    reporter = reporter or NullReporter()
    started = time.monotonic()
    venv = Path(venv).absolute() if venv is not None else None
    jobs = jobs or min(32, (os.cpu_count() or 2) * 2)
    houses = [load_wheelhouse(p) for p in wheelhouses]
    if not houses:
        raise WheelhouseNotFound("no wheelhouse given", hint="pass one: `wh install PATH`")
    _check_unambiguous(houses)

    # 1. Facts of the receiving interpreter. A venv gets its base's tags, so the
    #    check runs before the venv exists: a refused wheelhouse creates nothing.
    created_venv = False
    if venv is not None and venv_python(venv).exists():
        interp = inspect_interpreter(venv_python(venv))
    else:
        interp = inspect_interpreter(python)
    chosen = _select(houses, interp, only)
    check_target(houses, chosen, interp)

    existing = venv is None or venv_python(venv).exists()
    state = read_install_state(interp.platlib) if existing else {"packages": {}}
    # What the receiving environment already imports: its own site folders, plus the base's
    # with --system-site-packages (the image's torch). The same version there counts as
    # installed, so it is not shadowed by a second copy.
    if existing:
        visible: tuple[str, ...] = interp.visible_site_dirs
    else:
        visible = interp.visible_site_dirs if system_site_packages else ()
    todo: list[tuple[Wheelhouse, LockedFile]] = []
    skipped: list[str] = []
    for h, f in chosen:
        key = canonical_name(f.name)
        installed = find_installed(visible, f.name) if visible else []
        rec = state["packages"].get(key)
        if any(v == f.version for _, v in installed) and (rec is None or rec.get("sha256") == f.sha256):
            skipped.append(f"{key}=={f.version}")
        else:
            todo.append((h, f))

    # 2. Every byte verified before the first one is written.
    paths = verify_files(todo, jobs, reporter)
    if patches and any(h.patches for h in houses) and importlib.util.find_spec("wheelhouse.patch") is None:
        raise PatchesUnavailable("the wheelhouse lists patches but this wh has no patch module",
                                 hint="install without them (`wh install --no-patches`) or upgrade wh")

    # 3. Change things.
    if venv is not None and not venv_python(venv).exists():
        interp = create_venv(venv, python=python, system_site_packages=system_site_packages)
        created_venv = True
    notes: list[str] = []
    installed_dists: list[InstalledDist] = []
    compiled = 0
    try:
        if todo:
            if installer == "pip":
                _pip_install(interp, paths, compile)
                installed_dists = [InstalledDist(canonical_name(f.name), f.version, f.filename, "", 0)
                                   for _, f in todo]
            else:
                compiler = _Compiler(interp.executable, min(jobs, os.cpu_count() or 2)) if compile else None
                try:
                    installed_dists = install_wheels(
                        paths, interp.scheme(), interp.executable, jobs=jobs, reporter=reporter,
                        on_written=compiler.submit if compiler else None,
                        on_abort=compiler.abort if compiler else None,
                    )
                except BaseException:
                    if compiler is not None:
                        compiler.abort()
                    raise
                if compiler is not None:
                    # Launchers and .data scripts are not modules; everything importable was streamed.
                    compiled = compiler.finish()
        state_file = _write_state(interp.platlib, chosen, houses)
    except BaseException:
        if created_venv:
            shutil.rmtree(venv, ignore_errors=True)
        raise
    link_changes: list[LinkChange] = []
    if links:
        link_changes = apply_links(plan_links([Path(d) for d in interp.site_dirs]), record_path(interp.platlib))
    applied_patches: list[str] = []
    if patches and any(h.patches for h in houses):
        applied_patches = _apply_patches(houses, interp, reporter)
    activation = None
    if venv is not None:
        activation = str(write_activation(Path(venv), interp))
    return InstallReport(
        interpreter=interp.executable,
        venv=str(venv) if venv is not None else None,
        wheelhouses=tuple(str(h.path) for h in houses),
        installed=tuple(installed_dists),
        skipped=tuple(skipped),
        links=tuple(link_changes),
        patches=tuple(applied_patches),
        compiled=compiled,
        state_file=str(state_file),
        activation=activation,
        seconds=time.monotonic() - started,
        installer=installer,
        notes=tuple(notes),
    )

