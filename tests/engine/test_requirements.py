"""engine.requirements: an engine wheel's requirements judged for the wheelhouse's target, and staged."""

from __future__ import annotations

import pytest

from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_wheel, sha256_file
from wheelhouse.engine.requirements import EngineIncomplete, complete, missing_requirements
from wheelhouse.lock import LockedFile
from wheelhouse.target import target_from_flags

T312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])


def _locked(name, version):
    return LockedFile(name, version, f"{name}-{version}-py3-none-any.whl", f"wheels/{name}-{version}-py3-none-any.whl",
                      "ab" * 32, 1)


@pytest.fixture
def engine(tmp_path):
    return make_wheel(tmp_path / "built", "eng", "1.0", requires=[
        "dep>=2", "pinned==1.0", 'old; python_version < "3.12"', 'win; sys_platform == "win32"',
        "opt; extra == 'gpu'", "eng-core"])


def test_missing_is_judged_for_the_target_not_the_host(engine):
    lock = [_locked("dep", "1.5"), _locked("pinned", "1.0"), _locked("eng", "0.9"), _locked("eng-core", "3")]
    # dep 1.5 is too old; old/win do not apply to a cp312 Linux target; extras are not requested.
    assert missing_requirements(engine, lock, T312) == ["dep>=2"]
    t311 = target_from_flags("3.11", ["manylinux_2_35_x86_64"])
    assert missing_requirements(engine, lock, t311) == ["dep>=2", 'old; python_version < "3.12"']


def test_complete_stages_what_is_missing_from_an_index(engine, tmp_path, pyindex):
    pub = tmp_path / "pub"
    make_wheel(pub, "dep", "2.5", requires=["subdep"])
    make_wheel(pub, "subdep", "1.0")
    index = pyindex(pub)
    house = tmp_path / "wh"
    for name, version in (("pinned", "1.0"), ("eng-core", "3")):
        make_wheel(house / "wheels", name, version)  # what the lock already has, found in wheels/
    lock = [LockedFile(n, v, f"{n.replace('-', '_')}-{v}-py3-none-any.whl",
                       f"wheels/{n.replace('-', '_')}-{v}-py3-none-any.whl",
                       sha256_file(house / "wheels" / f"{n.replace('-', '_')}-{v}-py3-none-any.whl"), 1)
            for n, v in (("pinned", "1.0"), ("eng-core", "3"))]
    done = complete(engine, house, lock, T312, index_urls=[index.url], find_links=[], cache_dir=tmp_path / "c",
                    allow_incomplete=False)
    assert sorted(f"{f.name}=={f.version}" for f in done.added) == ["dep==2.5", "subdep==1.0"]
    for f in done.added:
        assert sha256_file(house / f.path) == f.sha256 and f.tool["source"] == "engine-requirement"
    assert done.missing == () and not [p for p in house.iterdir() if p.name.startswith(".")]


def test_offline_lists_every_missing_requirement_or_records_them(engine, tmp_path):
    with pytest.raises(EngineIncomplete) as info:
        complete(engine, tmp_path, [], T312, index_urls=[], find_links=[], cache_dir=tmp_path / "c",
                 allow_incomplete=False)
    assert "dep>=2, pinned==1.0, eng-core" in info.value.message and "--allow-incomplete" in info.value.hint
    done = complete(engine, tmp_path, [], T312, index_urls=[], find_links=[], cache_dir=tmp_path / "c",
                    allow_incomplete=True)
    assert done.missing == ("dep>=2", "pinned==1.0", "eng-core") and done.added == ()


def _image(*dists):
    from dataclasses import replace

    from wheelhouse.target.profile import ProvidedDist

    return replace(T312, provided=tuple(ProvidedDist(n, v, "venv") for n, v in dists))


def test_a_delta_counts_what_the_image_provides_and_records_what_the_engine_relies_on(engine, tmp_path, pyindex):
    from wheelhouse.engine.requirements import image_versions

    target = _image(("dep", "2.1"), ("pinned", "0.9"), ("subdep", "1.0"))
    delta = {"image": {"full": False}}
    image = image_versions(target, delta)
    # dep 2.1 from the image does; pinned 0.9 from the image does not (==1.0); eng-core is nowhere.
    assert missing_requirements(engine, [], target, image) == ["pinned==1.0", "eng-core"]
    assert image_versions(target, {"image": {"full": True}}) == {} and image_versions(target, {}) == {}
    pub = tmp_path / "pub"
    make_wheel(pub, "pinned", "1.0")
    make_wheel(pub, "eng-core", "3", requires=["subdep"])
    make_wheel(pub, "subdep", "1.1")
    index = pyindex(pub)
    (tmp_path / "wh" / "wheels").mkdir(parents=True)
    done = complete(engine, tmp_path / "wh", [], target, index_urls=[index.url], find_links=[],
                    cache_dir=tmp_path / "c", allow_incomplete=False, image=image)
    # the image's dep and subdep are kept (nothing fetched for them) and become assumptions the box must keep
    assert sorted(f"{f.name}=={f.version}" for f in done.added) == ["eng-core==3", "pinned==1.0"]
    assert dict(done.assumed) == {"dep": "2.1", "subdep": "1.0"}


def test_a_full_wheelhouse_stages_the_engine_requirements_the_image_has(engine, tmp_path):
    from wheelhouse.engine.requirements import image_versions

    target = _image(("dep", "2.1"), ("pinned", "1.0"), ("eng-core", "3"))
    with pytest.raises(EngineIncomplete) as info:  # --full: the box's image is not relied on
        complete(engine, tmp_path, [], target, index_urls=[], find_links=[], cache_dir=tmp_path / "c",
                 allow_incomplete=False, image=image_versions(target, {"image": {"full": True}}))
    assert "dep>=2, pinned==1.0, eng-core" in info.value.message
