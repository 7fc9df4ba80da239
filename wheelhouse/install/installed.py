"""Distributions already installed in an environment: finding them, and moving or removing their files.

An installed distribution is a ``<name>-<version>.dist-info`` folder in a site folder
whose RECORD lists its files. ``inside_scheme`` keeps only paths inside the environment's
scheme and out of wh's state folder, whatever an old RECORD says: the one guard every
removal (``uninstall``, a replaced version) goes through.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

from packaging.utils import canonicalize_name

from wheelhouse.target.interpreter import distinct_dirs

__all__ = [
    "canonical_name",
    "find_installed",
    "installed_paths",
    "inside_scheme",
    "real_roots",
    "stays_inside",
    "venv_own_file",
    "drop_bytecode",
    "prune_empty_dirs",
    "same_path",
]


def canonical_name(name: str) -> str:
    """PEP 503 normalisation (packaging's)."""
    return canonicalize_name(name)


def find_installed(site_dirs: Sequence[str | os.PathLike], name: str) -> list[tuple[Path, str]]:
    """``(dist-info folder, version)`` of every installed copy of ``name`` in ``site_dirs``."""
    want = canonical_name(name)
    out = []
    for site in distinct_dirs(site_dirs):
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        for e in entries:
            if e.endswith(".dist-info"):
                n, _, v = e[: -len(".dist-info")].partition("-")
                if canonical_name(n) == want:
                    out.append((Path(site) / e, v))
    return out


def installed_paths(dist_info: Path) -> list[str]:
    """The dist-info folder and every file its RECORD lists outside it (absolute paths; a row that names a
    folder is left out: RECORD lists files, and removing a folder would take whatever else is in it)."""
    base = dist_info.parent
    paths = [str(dist_info)]
    try:
        text = (dist_info / "RECORD").read_text(encoding="utf-8")
    except OSError:
        return paths
    from .wheel.record import read_record  # here, not above: the wheel package imports this module

    for path, _, _ in read_record(text):
        p = os.path.normpath(os.path.join(base, path))
        # A row naming a folder (``good,,``: another distribution's package) is no file of this one.
        if not p.startswith(str(dist_info) + os.sep) and not (os.path.isdir(p) and not os.path.islink(p)):
            paths.append(p)
    return paths


def real_roots(scheme: Mapping[str, str], *more: str | os.PathLike) -> tuple[str, ...]:
    """The real paths (each ending in a separator) of the environment's folders: what :func:`stays_inside` allows."""
    return tuple(sorted({os.path.join(os.path.realpath(r), "") for r in (*scheme.values(), *more)}))


def stays_inside(path: str, roots: Sequence[str]) -> bool:
    """True when ``path`` is below one of ``roots`` (from :func:`real_roots`) with every link in its parent
    folders followed and the leaf itself not: ``pkg/sub -> /elsewhere`` makes ``pkg/sub/victim.txt`` a path
    outside, and a leaf that is a link is removed as the link (``os.unlink``), never what it points to."""
    parent, leaf = os.path.split(os.path.normpath(path))
    if leaf in ("", ".", ".."):
        return False
    real = os.path.join(os.path.realpath(parent), leaf)
    return any(real.startswith(r) for r in roots)


def venv_own_file(path: str, scheme: Mapping[str, str]) -> bool:
    """The venv's interpreter (under any of its names), its activation scripts and ``pyvenv.cfg``: no
    distribution's, so no RECORD, journal or rollback may move or remove them (pip's scripts are pip's)."""
    from .wheel.launchers import protected_script  # here: the wheel package imports this module

    p = os.path.normpath(path)
    folder, name = os.path.split(p)
    if "data" in scheme and p == os.path.join(os.path.normpath(scheme["data"]), "pyvenv.cfg"):
        return True
    return "scripts" in scheme and folder == os.path.normpath(scheme["scripts"]) \
        and protected_script(name, "pip") is not None


def inside_scheme(paths: list[str], scheme: Mapping[str, str], dist: str | None = None) -> list[str]:
    """Only paths inside the environment, never wh's state folder, never the venv's interpreter, pyvenv.cfg or
    activation scripts (nor pip's, unless ``dist`` is pip): a RECORD naming ``../../outside.txt``, /etc/passwd,
    ``.wh/links.json`` or ``../../../bin/python`` must not make wh move or remove it. A path is judged with the
    links of its parent folders followed (``pkg/sub -> /elsewhere``: ``pkg/sub/x`` is outside) and its leaf not
    (a leaf that is a link is the link)."""
    from .wheel.launchers import protected_script  # here: the wheel package imports this module

    roots = [os.path.normpath(r) + os.sep for r in scheme.values()]
    state = [os.path.join(os.path.normpath(scheme[k]), ".wh") + os.sep for k in ("purelib", "platlib") if k in scheme]
    scripts = os.path.normpath(scheme["scripts"]) if "scripts" in scheme else None
    pyvenv = os.path.join(os.path.normpath(scheme["data"]), "pyvenv.cfg") if "data" in scheme else None
    # The same under each folder's other names (``lib64`` a link to ``lib``: platlib is called by purelib's
    # name, and a RECORD naming ``lib64/.../site-packages`` would else be a path inside, not the root).
    real_roots = {os.path.realpath(r) + os.sep for r in scheme.values()}
    real_state = [os.path.realpath(s) + os.sep for s in state]
    real_dirs: dict[str, str] = {}

    def real(d: str) -> str:  # os.path.realpath, one lstat per folder (the parents' answers are kept)
        if d not in real_dirs:
            up, name = os.path.split(d)
            r = os.path.join(real(up), name) if up != d else d
            real_dirs[d] = os.path.realpath(r) if os.path.islink(r) else r
        return real_dirs[d]

    out = []
    for p in paths:
        q = os.path.normpath(p) + os.sep
        if not any(q.startswith(r) for r in roots) or any(q.startswith(s) for s in state) or q in roots:
            continue
        parent, base = os.path.split(os.path.normpath(p))
        rq = os.path.join(real(parent), base) + os.sep  # (the path itself not followed: a link is removed as one)
        if rq in real_roots or any(rq.startswith(s) for s in real_state) \
                or not any(rq.startswith(r) for r in real_roots):
            continue
        if scripts and os.path.dirname(os.path.normpath(p)) == scripts \
                and protected_script(os.path.basename(os.path.normpath(p)), dist or "") is not None:
            continue
        if os.path.normpath(p) == pyvenv:  # which interpreter the venv is: no distribution's to remove
            continue
        out.append(p)
    return out


def _bytecode_of(path: str) -> list[str]:
    """The ``__pycache__/<stem>.*.pyc`` files of the module at ``path``."""
    cache = os.path.join(os.path.dirname(path), "__pycache__")
    stem = os.path.basename(path)[:-3] + "."
    if os.path.islink(cache):  # a __pycache__ that is a link out is not this module's bytecode to remove
        return []
    try:
        names = os.listdir(cache)
    except OSError:
        return []
    return [os.path.join(cache, c) for c in names if c.startswith(stem) and c.endswith(".pyc")]


def drop_bytecode(path: str) -> None:
    """Remove the cached bytecode of the module at ``path``, as far as possible."""
    for c in _bytecode_of(path):
        try:
            os.unlink(c)
        except OSError:
            pass


def same_path(path: str, folders: dict[str, str] | None = None) -> str:
    """``path`` with the links of its folders followed, the leaf not (a leaf that is a link is the link): one
    spelling for a file whatever name of its folder (``lib64`` for ``lib``) a RECORD used. ``folders``: a memo of
    folder -> its real path, for one pass over many files (each ``realpath`` walks every part of a deep path)."""
    folder, leaf = os.path.split(os.path.normpath(path))
    if folders is None:
        return os.path.join(os.path.realpath(folder), leaf)
    real = folders.get(folder)
    if real is None:
        real = folders[folder] = os.path.realpath(folder)
    return os.path.join(real, leaf)


def prune_empty_dirs(paths: list[str], stop: set[str]) -> None:
    """Remove the folders of ``paths`` (and their parents, up to ``stop``) that are now empty."""
    for d in sorted({os.path.dirname(p) for p in paths}, key=len, reverse=True):
        while d and d not in stop and os.path.isdir(d):
            try:
                cache = os.path.join(d, "__pycache__")
                if os.path.isdir(cache) and not os.listdir(cache):
                    os.rmdir(cache)
                os.rmdir(d)
            except OSError:
                break
            d = os.path.dirname(d)
