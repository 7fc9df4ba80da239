"""Fixtures shared by the stage tests."""

from __future__ import annotations

import pytest

from wheelhouse.lock.bootstrap import wheel_requirements
from wheelhouse.stage.bootstrap import repack_installed, self_wheel


def _installed_closure(roots) -> set[str]:
    """Names of the installed distributions ``roots`` need here (markers judged for this interpreter)."""
    import importlib.metadata as md

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = [canonicalize_name(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for line in md.requires(name) or ():
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


@pytest.fixture(scope="session")
def built_self_wheel(tmp_path_factory):
    """wh's own wheel, built once per process from the checkout (a PEP 517 build, ~2 s) for the tests that only
    read it; the test of self_wheel's cache builds its own."""
    return self_wheel(tmp_path_factory.mktemp("selfcache")).path


@pytest.fixture(scope="session")
def repacked_deps(tmp_path_factory, built_self_wheel):
    """wh's dependencies as wheels, repacked from this venv's installs: a hermetic stand-in for the index."""
    folder = tmp_path_factory.mktemp("repacked")
    wheel = built_self_wheel
    roots = [r.name for r in wheel_requirements(wheel) if r.marker is None or r.marker.evaluate({"extra": ""})]
    for name in sorted(_installed_closure(roots)):
        repack_installed(name, folder)
    return folder
