"""Why a resolution failed: every hint must be one that can help (issue 12)."""

from __future__ import annotations

import pytest

from wheelhouse.resolve import NoCompatibleWheel, NoMatchingVersion, resolve
from wheelhouse.target import target_from_flags
from index_fixtures import package_source

OLD_GLIBC = target_from_flags("3.12", ["manylinux_2_17_x86_64"])
CP312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])




def test_no_version_with_a_wheel_for_the_target_does_not_hint_an_older_pin(pyindex, tmp_path):
    """Pinning below the newest loops when no version has a wheel: say so, as uv does."""
    src = package_source(pyindex, tmp_path, [
        ("psyco", "2.9.12", {"tags": "cp312-cp312-manylinux_2_28_x86_64"}),
        ("psyco", "2.9.13", {"tags": "cp312-cp312-manylinux_2_28_x86_64"}),
    ])
    with pytest.raises(NoCompatibleWheel) as err:
        resolve(["psyco"], OLD_GLIBC, src)
    assert "no version of psyco has a wheel for the target" in err.value.message
    assert "psyco<" not in err.value.hint and "--platform" in err.value.hint


def test_an_older_version_with_a_wheel_is_named_exactly(pyindex, tmp_path):
    src = package_source(pyindex, tmp_path, [
        ("fastlib", "1.0", {"tags": "cp312-cp312-manylinux_2_17_x86_64"}),
        ("fastlib", "2.0", {"tags": "cp312-cp312-manylinux_2_28_x86_64"}),
    ])
    with pytest.raises(NoCompatibleWheel) as err:
        resolve(["fastlib>=2"], OLD_GLIBC, src)
    assert "fastlib==1.0" in err.value.hint  # the newest version that has one, outside the range: loosen to it


def test_sdist_only_names_the_project_once_and_hints_a_build_for_the_target(pyindex, tmp_path):
    src = package_source(pyindex, tmp_path, [("app", "1.0", {"requires": ["pycrypto"]})], sdists=["pycrypto-2.6.1.tar.gz"])
    with pytest.raises(NoCompatibleWheel) as err:
        resolve(["app"], CP312, src)
    assert err.value.message.startswith("pycrypto publishes only source distributions (required by app==1.0")
    assert "for pycrypto" not in err.value.message
    assert "pip wheel" not in err.value.hint and "wh build" in err.value.hint


def test_a_range_only_yanked_releases_satisfy_names_every_one(pyindex, tmp_path):
    src = package_source(pyindex, tmp_path, [("np", "2.3.0", {}), ("np", "2.4.0", {}), ("np", "2.4.0.post1", {})],
                 yanked={"np-2.4.0-py3-none-any.whl": "ABI break", "np-2.4.0.post1-py3-none-any.whl": ""})
    with pytest.raises(NoMatchingVersion) as err:
        resolve(["np==2.4.0.*"], CP312, src)
    msg = err.value.message
    assert "2.4.0 (yanked: ABI break)" in msg and "2.4.0.post1 (yanked: no reason given)" in msg
    assert "np==2.4.0.post1" in err.value.hint


def test_releases_skipped_for_requires_python_are_named_only_when_the_request_admits_them(pyindex, tmp_path):
    """An exact pin asked for the old release: its dependency is the reason, not the newer releases (issue 30)."""
    cp314 = target_from_flags("3.14", ["manylinux_2_35_x86_64"])
    src = package_source(pyindex, tmp_path, [
        ("crewai", "1.0", {"requires_python": ">=3.10,<3.14"}),
        ("crewai", "0.9", {"requires": ["regex==2023.1"]}),
        ("regex", "2023.1", {"tags": "cp311-cp311-manylinux_2_17_x86_64"}),
    ])
    with pytest.raises(NoMatchingVersion) as err:
        resolve(["crewai"], cp314, src)
    assert err.value.message.startswith("crewai 1.0 was skipped for Requires-Python <3.14")
    with pytest.raises(NoCompatibleWheel) as err:
        resolve(["crewai==0.9"], cp314, src)
    assert "skipped" not in err.value.message
