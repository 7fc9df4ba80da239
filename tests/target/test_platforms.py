"""Platform tags understood in one place: the libc a tag means, its machine, and what it expands to."""

import pytest
from packaging import tags as ptags

from wheelhouse.errors import TargetError
from wheelhouse.target.capture import expand_platform, split_libc_platform
from wheelhouse.target.platforms import expand_platforms, parse_platform
from wheelhouse.target.profile import libc_of


@pytest.mark.parametrize("tag,split", [
    ("manylinux_2_35_x86_64", ("glibc", 2, 35, "x86_64")),
    ("manylinux2014_aarch64", ("glibc", 2, 17, "aarch64")),
    ("manylinux1_i686", ("glibc", 2, 5, "i686")),
    ("musllinux_1_2_armv7l", ("musl", 1, 2, "armv7l")),
    ("linux_x86_64", None),
    ("macosx_14_0_arm64", None),
])
def test_split_libc_platform(tag, split):
    assert split_libc_platform(tag) == split


def test_libc_of_takes_the_newest():
    assert libc_of(["linux_x86_64", "manylinux_2_17_x86_64", "manylinux_2_35_x86_64", "manylinux2014_x86_64"]) == ("glibc", "2.35")
    assert libc_of(["musllinux_1_1_x86_64"]) == ("musl", "1.1") and libc_of(["win_amd64"]) is None


def test_parse_platform_reads_each_system():
    assert parse_platform("manylinux2014_x86_64").libc == ("glibc", "2.17")
    mac = parse_platform("macosx_11_0_universal2")
    assert (mac.system, mac.machine, mac.os_version) == ("Darwin", "universal2", (11, 0))
    assert parse_platform("win_amd64").machine == "AMD64"
    with pytest.raises(TargetError, match="did you mean manylinux2014_aarch64"):
        parse_platform("manylinux2014_arm64")


def test_expansion_merges_several_platforms_in_order():
    got = expand_platforms([parse_platform("manylinux_2_28_x86_64"), parse_platform("musllinux_1_2_x86_64")])
    assert got == list(dict.fromkeys(expand_platform("manylinux_2_28_x86_64") + expand_platform("musllinux_1_2_x86_64")))
    assert expand_platforms([parse_platform("macosx_14_0_arm64")]) == list(ptags.mac_platforms((14, 0), "arm64"))
