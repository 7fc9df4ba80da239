"""The recipe's build requirements, staged into the build interpreter by `wh build` itself.

An engine built without build isolation (vLLM, FreeToken: they compile against the
target's torch) needs its build tools in the interpreter that builds it: cmake >= 3.26,
ninja, setuptools-scm, the torch it pins. ``[engine.build] requires`` names them;
``missing_build_tools`` says which the interpreter lacks (markers judged for ITS
profile), and ``stage_build_tools`` resolves those for that interpreter (what it already
has stays pinned as provided), fetches them through the verified fetch (sha256 before a
file is named) and installs exactly those files with no index and no dependencies
(``pip --python``: wh's own pip, so a pip-less venv works too).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Mapping, Sequence

from packaging.utils import canonicalize_name

from wheelhouse.progress import NullReporter, Reporter
from .pep517 import BuildDepsMissing, missing_build_requirements

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["build_system_requires", "installed_versions", "missing_build_tools", "stage_build_tools"]


def build_system_requires(pyproject: bytes | None) -> tuple[str, ...]:
    """``[build-system] requires`` of a pyproject.toml's bytes (None or unreadable: none)."""
    if pyproject is None:
        return ()
    try:
        data = tomllib.loads(pyproject.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return ()  # the backend itself refuses a broken pyproject, with its own words
    reqs = (data.get("build-system") or {}).get("requires") or []
    return tuple(r for r in reqs if isinstance(r, str))


def installed_versions(python: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """{name: version} that ``python`` imports."""
    from wheelhouse.target.installed import installed_distributions

    return {k: d.version for k, d in installed_distributions(python, env=env).items()}


def missing_build_tools(requires: Sequence[str], interp, installed: Mapping[str, str] | None = None) -> list[str]:
    """The recipe's build requirements ``interp`` does not satisfy, as ``req (installed: X)``."""
    have = installed if installed is not None else installed_versions(interp.executable)
    return missing_build_requirements(requires, have, interp.target)


def stage_build_tools(requires: Sequence[str], interp, *, index_urls: Sequence[str], find_links: Sequence[str],
                      cache_dir: Path, reporter: Reporter | None = None, client=None) -> tuple[str, ...]:
    """Install into ``interp`` the build requirements it lacks; return ``name==version`` of each installed."""
    from packaging.requirements import Requirement
    from packaging.utils import parse_wheel_filename

    reporter = reporter or NullReporter()
    installed = installed_versions(interp.executable)
    missing = missing_build_tools(requires, interp, installed)
    if not missing:
        return ()
    wanted = [r for r in requires if any(m.startswith(r + " (") for m in missing)]
    if not index_urls and not find_links:
        raise BuildDepsMissing(
            f"{interp.executable} lacks build requirements: {'; '.join(missing)}",
            hint="give wh build an index or folder to stage them from (-i URL / -f DIR), "
                 f"or install them into {interp.executable} yourself",
        )
    reporter.note(f"staging {len(wanted)} build requirement(s) into {interp.executable}: {', '.join(missing)}")
    names = {canonicalize_name(Requirement(r).name) for r in wanted}
    # What the interpreter has and the recipe does not ask to change stays as it is (torch, its CUDA wheels).
    provided = [(n, v) for n, v in installed.items() if n not in names]
    files = _fetch(wanted, interp, index_urls, find_links, cache_dir, reporter, client, provided)
    try:
        if files:
            _pip_install([str(f) for f in files], interp.executable)
    finally:
        if files:
            shutil.rmtree(files[0].parent, ignore_errors=True)
    added = tuple(f"{n}=={v}" for n, v, *_ in (parse_wheel_filename(f.name) for f in files))
    still = missing_build_tools(requires, interp)
    if still:  # pragma: no cover - pip installed something else than the verified files
        raise BuildDepsMissing(f"{interp.executable} still lacks {'; '.join(still)} after staging",
                               hint=f"install them by hand: {interp.executable} -m pip install ...")
    reporter.note(f"staged into the build interpreter: {', '.join(added)}")
    return added


def _fetch(wanted, interp, index_urls, find_links, cache_dir: Path, reporter, client, provided) -> list[Path]:
    from wheelhouse.fetch import FetchItem, fetch_all
    from wheelhouse.index import PackageSource
    from wheelhouse.index.http import HttpClient
    from wheelhouse.index.metadata import MetadataReader
    from wheelhouse.resolve import resolve

    client = client or HttpClient(cache_dir=cache_dir)
    source = PackageSource(list(index_urls), list(find_links), client=client)
    pins = resolve(list(wanted), interp.target, source, reporter=reporter,
                   metadata=MetadataReader(client, cache_dir=cache_dir), provided=provided).pins
    new = [p for p in pins if not p.provided]
    scratch = Path(cache_dir) / f"build-tools-{uuid.uuid4().hex[:8]}"
    items = [FetchItem(p.distfile.url, p.distfile.filename, p.distfile.sha256, p.distfile.size) for p in new]
    return list(fetch_all(items, scratch, cache_dir, client=client, reporter=reporter, task="download"))


def _pip_install(files: list[str], python: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--python", python, "install", "--no-index", "--no-deps",
           "--disable-pip-version-check", "--no-input", *files]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildDepsMissing(f"installing the build requirements into {python} failed (pip exited {proc.returncode})",
                               hint="read pip's lines above; the files were verified, so it is the interpreter",
                               detail=(proc.stderr or proc.stdout)[-3000:])
