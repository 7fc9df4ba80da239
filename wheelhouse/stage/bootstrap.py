"""Bootstrap: wh's own wheel (and its dependencies' wheels) so the offline box can install wh itself.

wh's wheel comes from the source checkout when wh runs from one (built through
the PEP 517 backend by ``engine.pep517.build_wheel``, no isolation: setuptools is
a dependency of wh, so nothing is downloaded), otherwise it is rebuilt from the
installed distribution's RECORD. Either way it is cached by content. The same
repacking turns any installed pure distribution back into a wheel, which is how
a bootstrap can be made with no index at all (tests, air-gapped stagers).

The dependencies themselves are resolved for the TARGET by ``stage`` with the
same resolver as the stack; this module only writes ``bootstrap/pylock.toml``
and ``BOOTSTRAP.txt``, kept apart from the stack's lock.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from packaging.utils import canonicalize_name

from wheelhouse.atomic import write_atomic
from wheelhouse.digest import record_digest
from wheelhouse.lock import Lock, LockedFile, write_pylock
from wheelhouse.lock.bootstrap import BootstrapError

__all__ = [
    "BootstrapError",
    "BOOTSTRAP_DIR",
    "BOOTSTRAP_TXT",
    "bootstrap_command",
    "FAST",
    "WH_VENV",
    "SelfWheel",
    "self_wheel",
    "build_from_checkout",
    "repack_installed",
    "write_bootstrap",
    "pip_wheel_of",
]

BOOTSTRAP_DIR = "bootstrap"
BOOTSTRAP_TXT = "BOOTSTRAP.txt"
_DIST = "wh"
# The extra bootstrap/ carries where the target has wheels for it: zlib-ng and ISA-L, so that the box's
# `wh install` inflates 3-4x faster than with the standard zlib (wheelhouse/inflate.py).
FAST = "fast"
_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the wheelhouse package
_CHECKOUT = _PACKAGE_DIR.parent
# What a wheel built from the checkout is made of; the cache key hashes exactly these.
_SOURCE_PARTS = ("pyproject.toml", "setup.cfg", "setup.py", "README.md", "LICENSE", "wheelhouse", "doctor", "manifests", "engine_src")
_DATA_DIRS = ("doctor", "manifests", "engine_src")  # package-dir targets in pyproject.toml
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same files make the same bytes


@dataclass(frozen=True)
class SelfWheel:
    """wh's own wheel, and how it was made (``checkout`` or ``installed``)."""

    path: Path
    origin: str
    # wh's extras bootstrap/ also carries (``fast`` where the target has its wheels); the command asks for them
    extras: tuple[str, ...] = ()


# Where the printed line installs wh: the home folder is writable where a carried wheelhouse may not
# be (a read-only dataset mount).
WH_VENV = "~/wh-venv"


def _dist(extras: Sequence[str] = ()) -> str:
    """What pip is asked for: ``wh``, or ``'wh[fast]'`` (quoted: brackets are a glob to a shell)."""
    return f"'{_DIST}[{','.join(sorted(extras))}]'" if extras else _DIST


def bootstrap_command(folder: str = f"{BOOTSTRAP_DIR}/", extras: Sequence[str] = (), pip_wheel: str | None = None) -> str:
    """The one offline command that installs wh from a wheelhouse's bootstrap folder.

    A venv of its own first: Debian 12 / Ubuntu 24.04 system Pythons refuse ``pip install``
    (PEP 668, externally-managed-environment). ``--without-pip`` needs no ensurepip (absent
    without python3-venv). With ``pip_wheel`` (bootstrap/ carries pip: wh requires it), the pip
    that installs is that wheel, run from the archive (pip supports ``python pip.whl/pip``): the
    box's own pip may be any version (Ubuntu 22.04's 22.0.2 has no ``--python``) or absent. Without
    it, the system's pip installs into the venv with ``--python`` (pip >= 22.3).
    """
    if pip_wheel:
        return (f"python3 -m venv --without-pip {WH_VENV} && "
                f"{WH_VENV}/bin/python {folder}{pip_wheel}/pip install --no-index --find-links {folder} {_dist(extras)}")
    return _system_pip_command(folder, extras)


def _system_pip_command(folder: str, extras: Sequence[str] = ()) -> str:
    return (f"python3 -m venv --without-pip {WH_VENV} && "
            f"python3 -m pip --python {WH_VENV}/bin/python install --no-index --find-links {folder} {_dist(extras)}")


def pip_wheel_of(files: Sequence[LockedFile]) -> str | None:
    """The pip wheel among bootstrap/'s files (a pure-Python one, runnable from its archive), if any."""
    return next((f.filename for f in files if f.name == "pip" and f.filename.endswith("-py3-none-any.whl")), None)


def _current_env_command(folder: str, extras: Sequence[str] = ()) -> str:
    return f"python3 -m pip install --no-index --find-links {folder} {_dist(extras)}"


def _is_checkout(root: Path) -> bool:
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or not (root / "wheelhouse" / "__init__.py").is_file():
        return False
    try:
        return tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("name") == _DIST
    except (OSError, ValueError):
        return False


def _source_files(root: Path) -> list[Path]:
    out = []
    for part in _SOURCE_PARTS:
        p = root / part
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc")
    return out


def _tree_hash(root: Path, files: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def build_from_checkout(root: Path, cache: Path) -> Path:
    """Build wh's wheel from the source tree at ``root`` (cached by the tree's content).

    The build runs on a copy so the checkout gets no build/ or egg-info folders.
    The backend's output is captured and shown only when it fails.
    """
    files = _source_files(root)
    key = _tree_hash(root, files)
    out_dir = Path(cache) / "self" / key[:32]
    existing = sorted(out_dir.glob("*.whl")) if out_dir.is_dir() else []
    if existing:
        return existing[0]
    from wheelhouse.engine.pep517 import BuildDepsMissing, BuildFailed, build_wheel

    with tempfile.TemporaryDirectory(prefix="wh-self-build-") as tmp:
        src = Path(tmp) / "src"
        for f in files:
            dst = src / f.relative_to(root)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst)
        for d in _DATA_DIRS:  # a package-dir that does not exist yet would fail the build
            (src / d).mkdir(exist_ok=True)
        if not (src / "README.md").exists():
            (src / "README.md").write_text("wh\n", encoding="utf-8")
        # The backend's output goes to the log only; on failure its error lines are the error's detail.
        log = Path(cache) / "self" / f"{key[:32]}.log"
        try:
            built = build_wheel(src, out_dir, python=sys.executable, env=os.environ, log_path=log, label="wh").wheel
        except (BuildFailed, BuildDepsMissing) as exc:
            raise BootstrapError(
                f"building wh's own wheel from {root} failed: {exc.message}",
                hint="run `python -m build --wheel --no-isolation` in the checkout to see the backend's error",
                detail=exc.detail,
            ) from exc
    return built


def _tag_string(tags: Sequence[str]) -> str:
    """``py2-none-any`` + ``py3-none-any`` -> ``py2.py3-none-any`` (PEP 425 compressed set)."""
    if not tags:
        return "py3-none-any"
    parts = [t.split("-") for t in tags]
    interps, abis, plats = (list(dict.fromkeys(p[i] for p in parts)) for i in range(3))
    if len(interps) * len(abis) * len(plats) == len(set(tags)):
        return "-".join(".".join(x) for x in (interps, abis, plats))
    return tags[0]


def repack_installed(name: str, out_dir: Path) -> Path:
    """Rebuild a wheel from an installed distribution's RECORD (what ``pip install`` put on disk).

    Byte-compiled files, installer bookkeeping (INSTALLER, REQUESTED,
    direct_url.json) and console scripts (pip recreates them from
    entry_points.txt) are left out; RECORD is written anew. Editable installs
    have no files to repack and are refused.
    """
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError as exc:
        raise BootstrapError(f"{name} is not installed here, so it cannot be repacked", hint=f"pip install {name}") from exc
    info = Path(str(dist.locate_file(""))) / _info_dir_name(dist)
    if not info.name.endswith(".dist-info"):
        raise BootstrapError(f"{name} {dist.version} was not installed from a wheel ({info.name}); it has no RECORD to repack",
                             hint=f"install it with pip (pip install {name}), or build it from its source")
    direct = dist.read_text("direct_url.json")
    if direct and json.loads(direct).get("dir_info", {}).get("editable"):
        raise BootstrapError(f"{name} is an editable install; it has no files to repack", hint="build it from its source instead")
    files = dist.files
    if not files:
        raise BootstrapError(f"{name} {dist.version} has no RECORD", hint=f"reinstall it with pip: pip install --force-reinstall {name}")
    wheel_text = dist.read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel_text.splitlines() if line.startswith("Tag:")]
    skip = {f"{info.name}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    contents: list[tuple[str, bytes]] = []
    for pp in files:
        rel = pp.as_posix() if hasattr(pp, "as_posix") else str(pp)
        if rel.startswith("..") or rel.startswith("/") or "__pycache__" in rel.split("/") or rel.endswith(".pyc") or rel in skip:
            continue
        path = Path(str(dist.locate_file(pp)))
        if not path.is_file():
            continue
        contents.append((rel, path.read_bytes()))
    if not wheel_text:
        wheel_text = "Wheel-Version: 1.0\nGenerator: wh-repack\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        contents.append((f"{info.name}/WHEEL", wheel_text.encode()))
    record = [f"{rel},sha256={record_digest(hashlib.sha256(data).digest())},{len(data)}" for rel, data in contents]
    record.append(f"{info.name}/RECORD,,")
    contents.append((f"{info.name}/RECORD", ("\n".join(record) + "\n").encode()))
    dist_name = canonicalize_name(dist.metadata["Name"]).replace("-", "_")
    filename = f"{dist_name}-{dist.version}-{_tag_string(tags)}.whl"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel, data in sorted(contents, key=lambda c: (c[0].startswith(info.name + "/"), c[0])):
            zi = zipfile.ZipInfo(rel, _ZIP_TIME)
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = 0o644 << 16
            zf.writestr(zi, data)
    return write_atomic(Path(out_dir) / filename, buf.getvalue())


def _info_dir_name(dist: importlib.metadata.Distribution) -> str:
    path = getattr(dist, "_path", None)  # PathDistribution: the .dist-info folder itself
    if path is not None:
        return Path(str(path)).name
    return f"{canonicalize_name(dist.metadata['Name']).replace('-', '_')}-{dist.version}.dist-info"


def self_wheel(cache: Path) -> SelfWheel:
    """wh's own wheel: built from the checkout when running from one, else repacked from the install."""
    if _is_checkout(_CHECKOUT):
        return SelfWheel(build_from_checkout(_CHECKOUT, cache), "checkout")
    out_dir = Path(cache) / "self" / "installed"
    return SelfWheel(repack_installed(_DIST, out_dir), "installed")


def write_bootstrap(folder: Path, files: Sequence[LockedFile], *, requires_python: str | None,
                    environments: Sequence[str], extras: Sequence[str] = ()) -> Path:
    """Write ``bootstrap/pylock.toml`` (paths relative to the bootstrap folder) and BOOTSTRAP.txt."""
    folder = Path(folder)
    write_pylock(folder, Lock(files=tuple(files), environments=tuple(environments), requires_python=requires_python))
    pip_wheel = pip_wheel_of(files)
    dist = _dist(extras)
    lines = [
        "Install wh on the offline box from this folder (no index, no network), run from the wheelhouse folder\n"
        "(or give --find-links the path of this folder). Into a venv of its own, which works on system Pythons\n"
        "that refuse pip (PEP 668, externally-managed-environment: Debian 12, Ubuntu 24.04).\n",
    ]
    if pip_wheel:
        lines.append("With any pip or none at all (no ensurepip needed either): the pip carried here installs,\n"
                     "run from its wheel:\n\n"
                     f"    {bootstrap_command('bootstrap/', extras, pip_wheel)}\n")
    lines += [
        "Where `python3 -m venv` gives the venv a pip of its own (ensurepip; python3-venv on Debian), any pip\n"
        "from 20 on:\n\n"
        f"    python3 -m venv {WH_VENV} && {WH_VENV}/bin/python -m pip install --no-index --find-links bootstrap/ {dist}\n",
        "With the system's pip, where it is 22.3 or newer (`--python`):\n\n"
        f"    {_system_pip_command('bootstrap/', extras)}\n",
        "Or into the current environment, where pip may install (a venv, conda, a container image's Python):\n\n"
        f"    {_current_env_command('bootstrap/', extras)}\n",
        f"Then: {WH_VENV}/bin/wh install . --venv ~/engine-venv && {WH_VENV}/bin/wh doctor --python ~/engine-venv/bin/python\n",
    ]
    text = "\n".join(lines)
    return write_atomic(folder / BOOTSTRAP_TXT, text)
