"""Installed-preference: what the target's image provides is treated as installed, as pip treats
installed packages. Real wheels on a real index on 127.0.0.1."""

from __future__ import annotations

import pytest

from wheelhouse.index import PackageSource
from wheelhouse.resolve import ResolutionConflict, resolve
from wheelhouse.resolve.image import ImageChange, provided_versions
from wheelhouse.target import target_from_flags
from wheelhouse.target.profile import ProvidedDist
from wheelmaker import make_wheel

CP312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])


def _image(*pairs: tuple[str, str]) -> tuple[ProvidedDist, ...]:
    return tuple(ProvidedDist(n, v, "system") for n, v in pairs)


@pytest.fixture
def index(pyindex, tmp_path):
    """app 1.0 -> lib<2; app 2.0 -> lib>=2; lib 1.0, 2.0, 3.0 (3.0 -> extra-dep); gpu extra of app;
    native 1.5 only for aarch64 (-> helper); tool 1.0rc1 only as a pre-release beside 0.9."""
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["lib<2"], extras={"gpu": ["kernels"]})
    make_wheel(d, "app", "2.0", requires=["lib>=2"], extras={"gpu": ["kernels"]})
    for v in ("1.0", "2.0"):
        make_wheel(d, "lib", v)
    make_wheel(d, "lib", "3.0", requires=["extra-dep"])
    make_wheel(d, "extra-dep", "1.0")
    make_wheel(d, "kernels", "1.0")
    make_wheel(d, "native", "1.0", tags="cp312-cp312-manylinux_2_17_x86_64")
    make_wheel(d, "native", "1.5", tags="cp312-cp312-manylinux_2_17_aarch64", requires=["helper"])
    make_wheel(d, "helper", "1.0")
    make_wheel(d, "tool", "0.9")
    make_wheel(d, "tool", "1.0rc1")
    idx = pyindex(d)
    return idx, PackageSource([idx.url])


def _pins(res):
    return {p.name: (p.version, p.provided) for p in res.pins}


def test_provided_version_is_kept_over_a_newer_one(index):
    _, src = index
    res = resolve(["lib"], CP312, src, provided=_image(("lib", "2.0")))
    assert _pins(res) == {"lib": ("2.0", True)}  # 3.0 is newer; the image's 2.0 is kept
    assert res.kept == (res.pin("lib"),) and res.changes == ()
    assert res.pin("lib").to_json()["provided"] is True and "url" not in res.pin("lib").to_json()


def test_without_the_image_the_pins_are_todays(index):
    _, src = index
    assert _pins(resolve(["lib"], CP312, src)) == {"lib": ("3.0", False), "extra-dep": ("1.0", False)}
    assert _pins(resolve(["lib"], CP312, src, provided=())) == _pins(resolve(["lib"], CP312, src))


def test_provided_too_old_is_upgraded_and_said(index):
    _, src = index
    res = resolve(["app==2.0"], CP312, src, provided=_image(("lib", "1.0")))
    assert _pins(res) == {"app": ("2.0", False), "lib": ("3.0", False), "extra-dep": ("1.0", False)}
    assert res.changes == (ImageChange("lib", "1.0", "3.0", "upgrade"),)
    assert res.changes[0].describe() == "lib 1.0 (image) -> 3.0 (upgrade)"


def test_provided_excluded_by_a_constraint_is_downgraded_and_said(index):
    _, src = index
    res = resolve(["lib"], CP312, src, constraints=["lib<3"], provided=_image(("lib", "3.0")))
    assert _pins(res) == {"lib": ("2.0", False)}
    assert [c.to_json() for c in res.changes] == [{"name": "lib", "image": "3.0", "staged": "2.0",
                                                    "direction": "downgrade"}]


def test_kept_version_brings_its_own_dependencies_from_the_index_metadata(index):
    _, src = index
    # the image's lib 3.0 needs extra-dep (the index's metadata of 3.0 says so): it is staged
    res = resolve(["lib"], CP312, src, provided=_image(("lib", "3.0")))
    assert _pins(res) == {"lib": ("3.0", True), "extra-dep": ("1.0", False)}


def test_a_provided_version_whose_dependencies_conflict_is_given_up(index):
    _, src = index
    # the image's app 1.0 needs lib<2, the stack wants lib>=2: app 2.0 is staged instead
    res = resolve(["app", "lib>=2,<3"], CP312, src, provided=_image(("app", "1.0")))
    assert _pins(res) == {"app": ("2.0", False), "lib": ("2.0", False)}
    assert res.changes == (ImageChange("app", "1.0", "2.0", "upgrade"),)


def test_a_provided_version_the_index_does_not_have_is_kept_with_no_dependencies(index):
    _, src = index
    res = resolve(["lib>=1.5"], CP312, src, provided=_image(("lib", "2.5")))
    assert _pins(res) == {"lib": ("2.5", True)}
    assert res.unknown_deps == ("lib==2.5",)
    # a name the index does not know at all is the image's too
    res = resolve(["imageonly"], CP312, src, provided=_image(("imageonly", "0.3")))
    assert _pins(res) == {"imageonly": ("0.3", True)}


def test_a_provided_version_with_no_wheel_for_the_target_reads_another_wheels_metadata(index):
    _, src = index
    # native 1.5 has only an aarch64 wheel: not installable here, but the image has it; its deps count
    res = resolve(["native"], CP312, src, provided=_image(("native", "1.5")))
    assert _pins(res) == {"native": ("1.5", True), "helper": ("1.0", False)}
    assert res.unknown_deps == ()


def test_extras_of_a_kept_distribution_are_staged(index):
    _, src = index
    res = resolve(["app[gpu]==1.0"], CP312, src, provided=_image(("app", "1.0"), ("lib", "1.0")))
    assert _pins(res) == {"app": ("1.0", True), "lib": ("1.0", True), "kernels": ("1.0", False)}


def test_a_provided_prerelease_is_kept_without_pre(index):
    _, src = index
    assert _pins(resolve(["tool"], CP312, src)) == {"tool": ("0.9", False)}
    assert _pins(resolve(["tool"], CP312, src, provided=_image(("tool", "1.0rc1")))) == {"tool": ("1.0rc1", True)}


def test_local_version_of_the_image_is_kept_and_compared(index):
    _, src = index
    res = resolve(["lib==2.0"], CP312, src, provided=_image(("lib", "2.0+cu130")))
    assert _pins(res) == {"lib": ("2.0+cu130", True)}  # ==2.0 admits a local build of 2.0 (PEP 440)
    res = resolve(["lib==3.0"], CP312, src, provided=_image(("lib", "2.0+cu130")))
    assert res.changes == (ImageChange("lib", "2.0+cu130", "3.0", "upgrade"),)


def test_a_pin_that_nothing_satisfies_still_fails(index):
    _, src = index
    with pytest.raises(ResolutionConflict):
        resolve(["app==1.0", "lib>=2"], CP312, src, provided=_image(("app", "1.0"), ("lib", "1.0")))


def test_provided_versions_first_copy_wins_and_bad_versions_are_left_out():
    got = provided_versions([ProvidedDist("Foo_Bar", "1.0", "venv"), ProvidedDist("foo-bar", "2.0", "system"),
                             ProvidedDist("weird", "not a version", "system")])
    assert got == {"foo-bar": "1.0"}
