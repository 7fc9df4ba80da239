"""The resolver's toolchain groups: each group's virtual project and the release values every
member's requirement allows (what find_matches offers for ``<toolchain:NAME>``)."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from wheelhouse.resolve.toolchain import TOOLCHAIN_PREFIX, toolchain_ident, toolchain_versions


def test_the_virtual_identifier_cannot_collide_with_a_project_name():
    ident = toolchain_ident("cuda")
    assert ident.startswith(TOOLCHAIN_PREFIX) and ident == "<toolchain:cuda>"
    assert ident != toolchain_ident("cuda2")


def test_members_at_one_release_offer_that_release():
    specs = [SpecifierSet("==13.4.*"), SpecifierSet("==13.4.*")]
    assert toolchain_versions(specs, bad=()) == [Version("13.4")]


def test_members_at_different_releases_offer_nothing():
    assert toolchain_versions([SpecifierSet("==13.4.*"), SpecifierSet("==13.0.*")], bad=()) == []


def test_exact_groups_and_excluded_values():
    assert toolchain_versions([SpecifierSet("==2.9.1")], bad=()) == [Version("2.9.1")]
    assert toolchain_versions([SpecifierSet("==2.9.1")], bad=[Version("2.9.1")]) == [], \
        "a value resolvelib marked incompatible is not offered again"
