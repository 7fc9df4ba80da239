"""ToolchainRule: which packages belong to a [[toolchain]] group and the release a member is at; the
resolver and the doctor both judge by it, so it must be exact about names, wildcards and versions."""

from __future__ import annotations

from packaging.version import Version

from wheelhouse.manifest import ToolchainGroup
from wheelhouse.manifest.toolchain import ToolchainRule, toolchain_rules


def test_rules_take_canonical_names_from_the_manifests_groups():
    (rule,) = toolchain_rules([ToolchainGroup("cuda", ("NVIDIA_CUDA-*", "Triton"), False, ("NVIDIA.cuda-cccl",))])
    assert rule == ToolchainRule("cuda", ("nvidia-cuda-*", "triton"), False, frozenset({"nvidia-cuda-cccl"}))
    assert rule.has("nvidia-cuda-nvcc") and rule.has("triton")
    assert not rule.has("nvidia-cuda-cccl"), "an exception is not a member even when a pattern matches it"
    assert not rule.has("nvidia-cublas") and not rule.has("tritonclient")


def test_wildcards_match_case_sensitively_on_canonical_names():
    rule = ToolchainRule("cuda", ("nvidia-cuda-*",), False, frozenset())
    assert not rule.has("NVIDIA-CUDA-NVCC"), "callers pass canonical (lower-case) names"
    assert rule.has("nvidia-cuda-")


def test_a_loose_group_shares_major_minor_and_an_exact_group_the_whole_version():
    loose = ToolchainRule("cuda", ("*",), False, frozenset())
    exact = ToolchainRule("torch", ("*",), True, frozenset())
    assert (loose.release(Version("13.4.59")), loose.specifier(Version("13.4.59"))) == ("13.4", "==13.4.*")
    assert loose.release(Version("13")) == "13.0", "a bare major is release major.0"
    assert (exact.release(Version("2.9.1")), exact.specifier(Version("2.9.1"))) == ("2.9.1", "==2.9.1")


def test_members_at_one_release_agree_and_across_releases_do_not():
    from packaging.specifiers import SpecifierSet

    loose = ToolchainRule("cuda", ("*",), False, frozenset())
    spec = SpecifierSet(loose.specifier(Version("13.4.59")))
    assert spec.contains(loose.release(Version("13.4.1")))
    assert not spec.contains(loose.release(Version("13.0.88")))
