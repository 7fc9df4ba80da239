"""A target written as flags gets the tag list packaging would compute on that machine."""

import sysconfig

import pytest
from packaging import _manylinux, _musllinux
from packaging import tags as ptags

from wheelhouse.errors import TargetError
from wheelhouse.target import target_from_flags

VERSIONS = [(3, m) for m in range(8, 15)]


def _packaging_platforms(monkeypatch, libc: str, version: tuple[int, int], arch: str) -> list[str]:
    """packaging's own platform list on a Linux machine with this libc and architecture.

    packaging reads these facts from the host; the test makes the host say what the target is.
    """
    monkeypatch.setattr(sysconfig, "get_platform", lambda: f"linux-{arch}")
    if libc == "glibc":
        monkeypatch.setattr(_manylinux, "_have_compatible_abi", lambda exe, archs: True)
        monkeypatch.setattr(_manylinux, "_get_glibc_version", lambda: version)
        monkeypatch.setattr(_musllinux, "_get_musl_version", lambda exe: None)
    else:
        monkeypatch.setattr(_manylinux, "_have_compatible_abi", lambda exe, archs: False)
        monkeypatch.setattr(_musllinux, "_get_musl_version", lambda exe: _musllinux._MuslVersion(*version))
    return list(ptags._linux_platforms(is_32bit=False))


def _packaging_tags(version: tuple[int, int], abi: str, platforms: list[str]) -> list[str]:
    """What packaging.tags.sys_tags() yields on a CPython with this version, ABI and platform list."""
    interp = f"cp{version[0]}{version[1]}"
    return [str(t) for t in ptags.cpython_tags(version, [abi], platforms)] + [
        str(t) for t in ptags.compatible_tags(version, interp, platforms)]


def _abis(version: tuple[int, int]) -> list[str]:
    nodot = f"{version[0]}{version[1]}"
    return [f"cp{nodot}", f"cp{nodot}t"] if version >= (3, 13) else [f"cp{nodot}"]


@pytest.mark.parametrize("libc,libc_version,arch,flag", [
    ("glibc", (2, 35), "x86_64", "manylinux_2_35_x86_64"),
    ("glibc", (2, 28), "aarch64", "manylinux_2_28_aarch64"),
    ("glibc", (2, 17), "x86_64", "manylinux2014_x86_64"),
    ("musl", (1, 2), "x86_64", "musllinux_1_2_x86_64"),
    ("musl", (1, 1), "aarch64", "musllinux_1_1_aarch64"),
    ("glibc", (2, 31), "i686", "manylinux_2_31_i686"),
    ("glibc", (2, 28), "ppc64le", "manylinux_2_28_ppc64le"),
    ("glibc", (2, 34), "s390x", "manylinux_2_34_s390x"),
])
def test_flag_tags_equal_packagings_for_a_grid_of_linux_targets(monkeypatch, libc, libc_version, arch, flag):
    platforms = _packaging_platforms(monkeypatch, libc, libc_version, arch)
    monkeypatch.undo()
    for version in VERSIONS:
        for abi in _abis(version):
            t = target_from_flags(f"{version[0]}.{version[1]}", [flag], "cp", abi)
            assert list(t.tags) == _packaging_tags(version, abi, platforms), (version, abi, flag)
            assert list(t.platforms) == platforms


def test_free_threaded_target_accepts_abi3t_wheels():
    t = target_from_flags("3.13", ["manylinux_2_35_x86_64"], abi="cp313t")
    assert t.wheel_rank("x-1-cp311-abi3t-manylinux_2_17_x86_64.whl") is not None
    assert t.wheel_rank("x-1-cp311-abi3-manylinux_2_17_x86_64.whl") is None  # abi3 needs the GIL
    assert t.wheel_rank("x-1-cp313-cp313-manylinux_2_17_x86_64.whl") is None
    assert len(t.tags) == len(_packaging_tags((3, 13), "cp313t", list(t.platforms)))


def test_free_threaded_abi_is_taken_from_the_version_flag():
    """``--python-version 3.14t`` is how uv and pip write a free-threaded interpreter."""
    t = target_from_flags("3.14t", ["manylinux_2_35_x86_64"])
    assert t.abi == "cp314t" and t.python_version == "3.14"
    assert t.tags[0] == "cp314-cp314t-linux_x86_64"


def test_macos_target_tags_equal_packagings():
    t = target_from_flags("3.12", ["macosx_14_0_arm64"])
    platforms = list(ptags.mac_platforms((14, 0), "arm64"))
    assert list(t.platforms) == platforms
    assert list(t.tags) == _packaging_tags((3, 12), "cp312", platforms)
    assert t.evaluate('sys_platform == "darwin" and platform_machine == "arm64"')
    assert t.libc is None


def test_cpython_37_target_derives_the_pymalloc_abi():
    """Every CPython 3.7 wheel is tagged cp37m (issue 12); cp37 matched none of them."""
    t = target_from_flags("3.7", ["manylinux_2_17_x86_64"])
    assert t.abi == "cp37m"
    assert t.wheel_rank("numpy-1.21.6-cp37-cp37m-manylinux_2_17_x86_64.manylinux2014_x86_64.whl") is not None


@pytest.mark.parametrize("bad,suggestion", [
    ("manylinux_2_35_x86_65", "manylinux_2_35_x86_64"),
    ("manylinux_2_35_amd64", "manylinux_2_35_x86_64"),
    ("musllinux_1_2_arm64", "musllinux_1_2_aarch64"),
    ("manylinux_2_35", None),
    ("foo", None),
])
def test_a_mistyped_platform_is_refused_with_the_accepted_forms(bad, suggestion):
    with pytest.raises(TargetError) as err:
        target_from_flags("3.12", [bad])
    assert f"--platform {bad}" in err.value.message
    assert "manylinux_X_Y_ARCH" in err.value.hint and "musllinux_X_Y_ARCH" in err.value.hint
    if suggestion:
        assert f"did you mean {suggestion}?" in err.value.message
    assert err.value.exit_code == 2


def test_the_cli_refuses_a_mistyped_platform_before_any_work(tmp_path):
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "stage", "six", "--python-version", "3.12",
                           "--platform", "manylinux_2_35_amd64", "-o", str(tmp_path / "wh")],
                          capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300"})
    assert proc.returncode == 2
    assert ("error: --platform manylinux_2_35_amd64 is not a platform tag: unknown architecture 'amd64'; "
            "did you mean manylinux_2_35_x86_64?") in proc.stderr
    assert "hint: accepted forms: manylinux_X_Y_ARCH" in proc.stderr
    assert not (tmp_path / "wh").exists()


def test_pypy_target_takes_pypys_own_abi_and_tags():
    t = target_from_flags("3.10", ["manylinux_2_17_x86_64"], implementation="pp")
    assert t.abi == "pypy310_pp73"
    assert t.wheel_rank("numpy-1.26.4-pp310-pypy310_pp73-manylinux_2_17_x86_64.manylinux2014_x86_64.whl") is not None
    assert t.wheel_rank("numpy-1.26.4-cp310-cp310-manylinux_2_17_x86_64.whl") is None
    platforms = list(t.platforms)
    expected = [str(x) for x in ptags.generic_tags("pp310", ["pypy310_pp73"], platforms)] + [
        str(x) for x in ptags.compatible_tags((3, 10), "pp3", platforms)]
    assert list(t.tags) == expected
    assert t.evaluate('platform_python_implementation == "PyPy"')


def test_python_version_alone_means_this_hosts_platform_with_a_note():
    """As pip does: `--python-version 3.12` without --platform targets this machine's platform."""
    import json
    import os
    import subprocess
    import sys

    from wheelhouse.target import host_target

    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "target", "show", "--python-version", "3.12", "--json"],
                          capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    host = host_target()
    assert data["python_version"] == "3.12" and data["platforms"] == list(host.platforms)
    assert data["compatible_tags"][0] == f"cp312-cp312-{host.platforms[0]}"
    assert "--python-version 3.12 without --platform: this host's platform" in proc.stderr


def test_a_free_threaded_python_before_3_13_is_refused():
    """PEP 703's free-threaded build starts with 3.13: ``3.12t`` names an interpreter that does not exist (issue 30)."""
    with pytest.raises(TargetError) as err:
        target_from_flags("3.12t", ["manylinux_2_35_x86_64"])
    assert "no free-threaded CPython 3.12" in err.value.message and "3.13t" in err.value.hint
    assert target_from_flags("3.13t", ["manylinux_2_35_x86_64"]).abi == "cp313t"
