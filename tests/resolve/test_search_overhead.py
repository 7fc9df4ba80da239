"""What a resolution costs besides the search itself: the cyclic collector's walks over what the search
allocated, and resolvelib's choice of the next project to pin (the same choice, made in one pass)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from packaging.specifiers import SpecifierSet
from resolvelib import AbstractProvider, BaseReporter, Resolver

from wheelhouse.index import PackageSource
from wheelhouse.index.metadata import MetadataReader
from wheelhouse.progress import RecordingReporter
from wheelhouse.resolve import resolve
from wheelhouse.resolve.candidates import Req
from wheelhouse.resolve.provider import Provider
from wheelhouse.target import target_from_flags
from wheelmaker import make_wheel

CP312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])


def _index(pyindex, tmp_path):
    """app needs web and db; web and db share core; a few releases each, so there is something to choose."""
    folder = tmp_path / "idx"
    for v in ("1.0", "1.1", "2.0"):
        make_wheel(folder, "app", v, requires=["web>=1", "db>=1", "cli"])
        make_wheel(folder, "core", v)
    for name in ("web", "db", "cli"):
        for v in ("1.0", "1.5"):
            make_wheel(folder, name, v, requires=["core>=1.1"] if name != "cli" else [])
    return PackageSource([pyindex(folder).url])


def test_a_resolve_leaves_the_collector_nothing_young_to_walk(pyindex, tmp_path):
    source = _index(pyindex, tmp_path)
    assert gc.isenabled()
    res = resolve(["app"], CP312, source)
    assert {p.name: p.version for p in res.pins} == {"app": "2.0", "web": "1.5", "db": "1.5", "cli": "1.5", "core": "2.0"}
    # the collector is on again, and what the search allocated is not in its young generations: the
    # first collection after the search would have walked all of it (and the next ones the survivors)
    assert gc.isenabled()
    young = len(gc.get_objects(generation=0)) + len(gc.get_objects(generation=1))
    assert young < 2000


class _Checked(Provider):
    """The provider, checking each narrowed selection against resolvelib's own rule (min of get_preference)."""

    narrowed: list[tuple[list[str], list[str]]]

    def narrow_requirement_selection(self, identifiers, resolutions, candidates, information, backtrack_causes):
        identifiers = list(identifiers)
        picked = list(super().narrow_requirement_selection(identifiers, resolutions, candidates, information,
                                                           backtrack_causes))
        by_preference = min(identifiers, key=lambda i: self.get_preference(i, resolutions, candidates, information,
                                                                            backtrack_causes))
        self.narrowed.append((picked, [by_preference]))
        return picked


@pytest.mark.skipif(not hasattr(AbstractProvider, "narrow_requirement_selection"),
                    reason="resolvelib < 1.1 asks get_preference of every name (pyproject allows >= 1.0.1)")
def test_the_next_project_to_pin_is_chosen_once_a_round_as_get_preference_would(pyindex, tmp_path):
    source = _index(pyindex, tmp_path)
    provider = _Checked(CP312, source, MetadataReader(source.client), constraints={}, groups=[], prereleases=False,
                        reporter=RecordingReporter(), pool=None)
    provider.narrowed = []
    result = Resolver(provider, BaseReporter()).resolve([Req("pkg", "app", "app", SpecifierSet())])
    assert str(result.mapping["app"].version) == "2.0"
    assert provider.narrowed, "resolvelib asked which project to pin next"
    # one identifier each round (resolvelib then skips its own min over get_preference), and the same one
    assert all(picked == expected for picked, expected in provider.narrowed)


def test_the_cli_leaves_the_collector_nothing_to_walk_at_exit():
    # An atexit handler registered before wh's runs after it (last in, first out): it sees what the
    # interpreter's collections at exit would walk.
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: sys.stderr.write(f'frozen at exit: {gc.get_freeze_count()}\\n'))\n"
            "from wheelhouse.cli import main\n"
            "sys.argv = ['wh', 'stage', '--python-version']\n"
            "main()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    frozen = int(proc.stderr.rsplit("frozen at exit: ", 1)[1].split()[0])
    assert frozen > 1000
