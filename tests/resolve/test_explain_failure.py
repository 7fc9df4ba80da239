"""explain_failure: resolvelib's ResolutionImpossible turned into ONE wh error whose message names the
packages and the chain that pulled them in (``leaf>=5 <- mid==1.0 <- app==1.0 <- (requested)``).

The provider is the real one, walked the way resolvelib walks it (get_dependencies records who
requires what); the failure is resolvelib's own exception type with its own cause records.
"""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from resolvelib.resolvers import ResolutionImpossible
from resolvelib.structs import RequirementInformation

from wheelhouse.index import PackageSource
from wheelhouse.index.metadata import MetadataReader
from wheelhouse.manifest import ToolchainGroup
from wheelhouse.progress import RecordingReporter
from wheelhouse.resolve.candidates import Req
from wheelhouse.resolve.explain import (
    NoCompatibleWheel,
    NoMatchingVersion,
    PackageNotFound,
    ResolutionConflict,
    ToolchainSkew,
    explain_failure,
)
from wheelhouse.resolve.provider import Provider
from wheelhouse.resolve.toolchain import toolchain_rules
from wheelhouse.target import target_from_flags
from wheelmaker import make_wheel

CP312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])


def _provider(folder, groups=()):
    source = PackageSource((), find_links=[str(folder)])
    return Provider(CP312, source, MetadataReader(), constraints={}, groups=toolchain_rules(groups), prereleases=False,
                    reporter=RecordingReporter(), pool=None)


def _walk(provider, *names):
    """Pin the newest candidate of each name in turn and read its dependencies, as resolvelib does."""
    pinned = {}
    for name in names:
        cand = provider.candidates(name, [Req("pkg", name, name)])[0]
        pinned[name] = (cand, provider.get_dependencies(cand))
    return pinned


def _fail(provider, causes):
    return explain_failure(ResolutionImpossible([RequirementInformation(r, p) for r, p in causes]), provider, CP312,
                           provider.source, [])


def _dep(pinned, parent, name):
    return next(d for d in pinned[parent][1] if d.name == name)


def test_no_matching_version_names_the_chain_back_to_the_request(tmp_path):
    make_wheel(tmp_path, "app", "1.0", requires=["mid>=1"])
    make_wheel(tmp_path, "mid", "1.0", requires=["leaf>=5"])
    make_wheel(tmp_path, "leaf", "1.0")
    make_wheel(tmp_path, "leaf", "2.0")
    provider = _provider(tmp_path)
    provider.root_texts["app"] = {"app"}
    pinned = _walk(provider, "app", "mid")
    err = _fail(provider, [(_dep(pinned, "mid", "leaf"), pinned["mid"][0])])
    assert isinstance(err, NoMatchingVersion)
    assert err.message == ("no version of leaf matches leaf>=5 (required by mid==1.0 <- app==1.0 <- (requested)); "
                           "available: 2.0, 1.0")
    assert err.hint == "loosen the requirement or constraint"


def test_a_project_no_source_has_is_named_with_where_wh_looked(tmp_path):
    make_wheel(tmp_path, "app", "1.0", requires=["ghost"])
    provider = _provider(tmp_path)
    provider.root_texts["app"] = {"app"}
    pinned = _walk(provider, "app")
    err = _fail(provider, [(_dep(pinned, "app", "ghost"), pinned["app"][0])])
    assert isinstance(err, PackageNotFound)
    assert err.message == f"no project named ghost on {tmp_path} (required by app==1.0 <- (requested))"


def test_a_direct_wheel_for_another_platform_names_its_tags(tmp_path):
    wheel = make_wheel(tmp_path / "own", "own", "1.0", tags="cp312-cp312-manylinux_2_17_aarch64")
    provider = _provider(tmp_path)
    req = Req("pkg", "own", str(wheel), SpecifierSet(), direct=provider.source.direct(str(wheel)))
    err = _fail(provider, [(req, None)])
    assert isinstance(err, NoCompatibleWheel) and err.published == ("cp312-cp312-manylinux_2_17_aarch64",)
    assert err.message.startswith(f"{wheel.name} is not installable on the target {CP312.describe()}")


def test_a_conflict_lists_each_requirement_with_its_own_chain(tmp_path):
    make_wheel(tmp_path, "app", "1.0", requires=["left", "right"])
    make_wheel(tmp_path, "left", "1.0", requires=["shared<2"])
    make_wheel(tmp_path, "right", "1.0", requires=["shared>=2"])
    for v in ("1.0", "2.0"):
        make_wheel(tmp_path, "shared", v)
    provider = _provider(tmp_path)
    provider.root_texts["app"] = {"app"}
    pinned = _walk(provider, "app", "left", "right")
    err = _fail(provider, [(_dep(pinned, "left", "shared"), pinned["left"][0]),
                           (_dep(pinned, "right", "shared"), pinned["right"][0])])
    assert isinstance(err, ResolutionConflict)
    assert err.message.splitlines() == ["conflicting requirements on shared:",
                                        "  shared<2 <- left==1.0 <- app==1.0 <- (requested)",
                                        "  shared>=2 <- right==1.0 <- app==1.0 <- (requested)"]


def test_a_requires_python_the_target_fails_says_which_python(tmp_path):
    make_wheel(tmp_path, "app", "1.0", requires_python=">=3.13")
    provider = _provider(tmp_path)
    provider.root_texts["app"] = {"app"}
    pinned = _walk(provider, "app")
    py = next(d for d in pinned["app"][1] if d.kind == "python")
    err = _fail(provider, [(py, pinned["app"][0])])
    assert isinstance(err, NoMatchingVersion)
    assert err.message == f"app==1.0 needs Requires-Python >=3.13; the target has Python {CP312.python_full_version}"


def test_a_chain_is_cut_at_a_cycle_and_at_six_links(tmp_path):
    names = [f"p{i}" for i in range(9)]
    for a, b in zip(names, names[1:]):
        make_wheel(tmp_path, a, "1.0", requires=[b])
    make_wheel(tmp_path, "p8", "1.0", requires=["zzz>=9"])
    make_wheel(tmp_path, "zzz", "1.0")
    provider = _provider(tmp_path)
    provider.root_texts["p0"] = {"p0"}
    pinned = _walk(provider, *names)
    err = _fail(provider, [(_dep(pinned, "p8", "zzz"), pinned["p8"][0])])
    assert "(required by p8==1.0 <- p7==1.0 <- p6==1.0 <- p5==1.0 <- p4==1.0 <- p3==1.0 <- p2==1.0);" in err.message
    make_wheel(tmp_path / "loop", "x", "1.0", requires=["y"])
    make_wheel(tmp_path / "loop", "y", "1.0", requires=["x", "zzz>=9"])
    make_wheel(tmp_path / "loop", "zzz", "1.0")
    provider = _provider(tmp_path / "loop")
    pinned = _walk(provider, "x", "y")
    err = _fail(provider, [(_dep(pinned, "y", "zzz"), pinned["y"][0])])
    assert "(required by y==1.0 <- x==1.0 <- y==1.0);" in err.message, "stops where the chain comes back"


def test_members_of_a_toolchain_group_at_two_releases_are_a_skew_naming_each(tmp_path):
    make_wheel(tmp_path, "nvidia-cuda-nvcc", "13.4.59")
    make_wheel(tmp_path, "nvidia-cuda-crt", "13.0.88")
    provider = _provider(tmp_path, groups=[ToolchainGroup("cuda", ("nvidia-cuda-*",))])
    provider.root_texts.update({"nvidia-cuda-nvcc": {"nvidia-cuda-nvcc"}, "nvidia-cuda-crt": {"nvidia-cuda-crt"}})
    pinned = _walk(provider, "nvidia-cuda-nvcc", "nvidia-cuda-crt")
    causes = [(next(d for d in deps if d.kind == "toolchain"), cand) for cand, deps in pinned.values()]
    err = _fail(provider, causes)
    assert isinstance(err, ToolchainSkew) and err.group == "cuda"
    assert err.versions == {"nvidia-cuda-nvcc": "13.4.59", "nvidia-cuda-crt": "13.0.88"}
    assert err.message.splitlines()[0] == ("toolchain group 'cuda' needs one major.minor release, but no consistent set "
                                           "exists: nvidia-cuda-nvcc 13.4.59, nvidia-cuda-crt 13.0.88")
    assert "  nvidia-cuda-crt 13.0.88 <- (requested)" in err.message.splitlines()
