"""The distributions an interpreter imports: asked of that interpreter, first on its ``sys.path`` wins.

A venv made with ``--system-site-packages`` from an image venv sees three site
folders (its own, the image venv's through a ``.pth``, the base system's); two of
them may hold setuptools. What ``import setuptools`` loads, and what
``importlib.metadata.version("setuptools")`` answers in that interpreter, is the
first copy on its ``sys.path``. Every part of wh that asks what is installed (the
doctor, the engine build's build requirements, install's requirement closure)
asks here, so they all agree with the interpreter (issue 10.7).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Mapping

from packaging.utils import canonicalize_name

from wheelhouse.errors import UsageError
from wheelhouse.script_answer import PRINT_ANSWER, read_answer

__all__ = ["InstalledDistribution", "InstalledListError", "installed_distributions"]

# Runs in the TARGET interpreter, stdlib only, from an empty folder (with -c, sys.path[0] is the cwd).
# importlib.metadata.distributions() walks sys.path in order: the first copy of a name is the one imported.
_LIST = r"""
import json, os, re, sys
def may_hold(entry):
    # Whether importlib.metadata could find a distribution through this sys.path entry: it lists a folder's
    # children for *.dist-info / *.egg-info (in an *.egg folder, EGG-INFO too) and reads a zip file's.
    path = entry or "."
    if path.lower().endswith(".egg") or not os.path.isdir(path):
        return os.path.exists(path)
    try:
        return any(n.lower().endswith((".dist-info", ".egg-info")) for n in os.listdir(path))
    except OSError:
        return True
def listed():
    # importlib.metadata (0.1-0.3 s of imports) only where it could find something: an entry that may hold
    # a distribution, or a finder besides the standard ones (a .pth may install one with find_distributions).
    standard = all(getattr(f, "__module__", "").startswith(("_frozen_importlib", "importlib."))
                   for f in sys.meta_path)
    if standard and not any(may_hold(p) for p in sys.path):
        return []
    import importlib.metadata as m
    def undecodable(d):
        # importlib.metadata cannot read a METADATA that is not UTF-8 (a latin-1 author name); the package imports.
        import email
        for f in ("METADATA", "PKG-INFO"):
            try:
                return email.message_from_string((d._path / f).read_bytes().decode("utf-8", "replace"))
            except (OSError, TypeError, AttributeError):
                pass
        return None
    seen, out = set(), []
    for d in m.distributions():
        try:
            meta, read = d.metadata, True
        except UnicodeDecodeError:
            meta, read = undecodable(d), False
        except Exception:
            continue
        name = meta["Name"] if meta else None
        if not name:
            continue
        version, requires = (d.version, list(d.requires or [])) if read else (meta["Version"], meta.get_all("Requires-Dist") or [])
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        path = getattr(d, "_path", None)
        out.append([name, version, requires, str(path.parent) if path else None])
    return out
answer = listed()
""" + PRINT_ANSWER


class InstalledListError(UsageError):
    code = "cannot-list-installed"


@dataclass(frozen=True)
class InstalledDistribution:
    """One distribution as the interpreter imports it: the first copy of its name on ``sys.path``."""

    name: str
    version: str
    requires: tuple[str, ...]  # Requires-Dist, as written (markers judged by the caller, for the target)
    location: str | None = None  # the site folder holding its .dist-info

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


def installed_distributions(python: str, env: Mapping[str, str] | None = None,
                            timeout: float = 120) -> dict[str, InstalledDistribution]:
    """What ``python`` imports, by canonical name, in its own ``sys.path`` order (first of a name wins)."""
    hint = f"check that it runs: {python} -c 'import importlib.metadata'"
    exe = os.path.abspath(python) if os.sep in python else python  # it runs from another folder
    try:
        with tempfile.TemporaryDirectory(prefix="wh-installed-") as cwd:  # an empty cwd shadows nothing
            proc = subprocess.run([exe, "-c", _LIST], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                                  env=dict(env) if env is not None else None)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InstalledListError(f"{python} could not list its installed distributions: {exc}", hint=hint) from exc
    if proc.returncode != 0:
        raise InstalledListError(f"{python} could not list its installed distributions (exit {proc.returncode})",
                                 hint=hint, detail=proc.stderr[-2000:])
    try:
        rows = read_answer(proc.stdout)
        dists = [InstalledDistribution(str(n), str(v), tuple(str(r) for r in reqs), loc) for n, v, reqs, loc in rows]
    except (ValueError, TypeError) as exc:
        raise InstalledListError(f"{python} printed something that is not a list of distributions", hint=hint,
                                 detail=proc.stdout[-2000:]) from exc
    return {d.key: d for d in dists}
