"""Direct tests of the check modules' helpers, on a DoctorContext built from facts (no probe runs here)."""

from __future__ import annotations

from wheelhouse.doctor.checks import DoctorContext, Distribution, selected
from wheelhouse.doctor.checks import gpu as gpu_check
from wheelhouse.doctor.checks import platform as platform_check
from wheelhouse.doctor.checks.native import variant_for_other_gpu
from wheelhouse.doctor.checks.toolchain import DEFAULT_GROUP, judge_groups
from wheelhouse.manifest import DoctorExpectations, StackManifest, ToolchainGroup
from wheelhouse.target import target_from_flags
from wheelhouse.target.gpu import Gpu, GpuFacts


def _ctx(facts=None, gpus=(), manifest=None, target=None) -> DoctorContext:
    return DoctorContext(python="/venv/bin/python", facts=facts or {}, gpu=GpuFacts(tuple(gpus), "580.1", "13.0"),
                         distributions={}, site_dirs=(), environ={}, engine_env={}, manifest=manifest, target=target,
                         target_source="test")


def _dist(top=(), ext_top=(), extensions=()) -> Distribution:
    return Distribution("pm-dist", "1.0", "/site", "/site/pm_dist-1.0.dist-info", tuple(top), len(extensions),
                        tuple(ext_top), extensions=tuple(extensions))


def test_selected_is_a_prefix_match_both_ways():
    assert selected("native:numpy", ())
    assert selected("native:numpy", ("native",)) and selected("native:numpy", ("native:num",))
    assert selected("native", ("native:numpy",))  # a group runs when one of its checks is asked for
    assert not selected("deps:requirements", ("native",))


def test_a_native_distribution_imports_every_top_level_name_and_names_its_extensions():
    d = _dist(top=("pm_good", "pm_bad", "not-a-name"), ext_top=("pm_good",),
              extensions=(("pm_good/_core.so", "pm_good._core"), ("pm_good/sub/_x.so", "pm_good.sub._x")))
    assert d.import_names == ("pm_good", "pm_bad")  # pm_bad holds no extension, and is imported all the same
    assert d.extension_module_names == ("pm_good._core", "pm_good.sub._x")


def test_variant_folders_are_judged_against_the_gpus_here(tmp_path):
    so = tmp_path / "x.so"  # no fatbin in it: the folder name decides
    so.write_bytes(b"")
    l4 = [Gpu(0, "NVIDIA L4", "8.9")]
    skipped = variant_for_other_gpu("k.sm100.ops", so, "k/sm100/ops.so", l4)
    assert skipped.reason == "built for sm_100; GPU 0 is sm_89" and skipped.decided_by == "its folder name"
    assert variant_for_other_gpu("k.sm80.ops", so, "k/sm80/ops.so", l4) is None  # sm_80 code runs on sm_89
    assert variant_for_other_gpu("k.sm90a.ops", so, "k/sm_90a/ops.so", [Gpu(0, "H200", "9.0")]) is None
    assert variant_for_other_gpu("k.ops", so, "k/ops.so", l4) is None  # not a variant folder: always loaded
    assert variant_for_other_gpu("k.sm100.ops", so, "k/sm100/ops.so", []) is None  # no GPU: load everything
    mixed = [Gpu(0, "NVIDIA L4", "8.9"), Gpu(1, "B200", "10.0")]
    assert variant_for_other_gpu("k.sm100.ops", so, "k/sm100/ops.so", mixed) is None  # one GPU can use it


def test_judge_groups_uses_the_declared_rule():
    installed = {"nvidia-cuda-nvcc": ("nvidia-cuda-nvcc", "13.4.59"), "nvidia-cuda-crt": ("nvidia-cuda-crt", "13.4.1"),
                 "nvidia-nvvm": ("nvidia-nvvm", "13.4.59"), "nvidia-cuda-runtime": ("nvidia-cuda-runtime", "13.5.2")}
    assert judge_groups([DEFAULT_GROUP], installed).verdict == "ok"  # one major.minor, runtime not a member
    exact = judge_groups([ToolchainGroup("cuda", ("nvidia-cuda-nvcc", "nvidia-cuda-crt"), True)], installed)
    assert exact.verdict == "fail" and "nvidia-cuda-crt 13.4.1" in exact.evidence
    assert judge_groups([DEFAULT_GROUP], {}).verdict == "skip"


def test_platform_fails_on_an_older_glibc_than_the_target():
    target = target_from_flags("3.12", ["manylinux_2_39_x86_64"])
    facts = {"implementation": "cpython", "python_version": "3.12", "machine": "x86_64", "glibc": "2.35",
             "system": "Linux", "executable": "/venv/bin/python"}
    res = {r.id: r for r in platform_check.run(_ctx(facts, target=target))}
    assert res["platform:interpreter"].verdict == "ok"
    assert res["platform:glibc"].verdict == "fail" and "glibc 2.35 here" in res["platform:glibc"].evidence


def test_gpu_expectations_without_a_gpu_are_a_fail_and_the_rest_skip():
    m = StackManifest(path=None, name="s", doctor=DoctorExpectations(gpus=4, sm="8.9"))
    res = {r.id: r for r in gpu_check.run(_ctx(manifest=m))}
    assert res["gpu:expected"].verdict == "fail" and "manifest expects 4 GPU(s) sm 8.9" in res["gpu:expected"].evidence
    assert {res[i].verdict for i in res if i != "gpu:expected"} == {"skip"}


def test_checks_package_is_what_list_checks_shows():
    from wheelhouse.doctor import GROUPS, list_checks

    ids = [i for i, _ in list_checks({})]
    for group in GROUPS:
        assert any(i.startswith(group + ":") for i in ids), group
    assert "deps:requirements" in ids and "install:transaction" in ids


def test_an_extension_under_another_distributions_failed_package_is_a_fail_not_a_crash():
    from wheelhouse.doctor.checks.native import LoadPlan, _verdict
    from wheelhouse.doctor.imports import ImportOutcome
    from wheelhouse.doctor.optional import OptionalData
    from wheelhouse.doctor.severity import StackReach

    plugin = Distribution("host-plugin", "1.0", "/site", None, (), 1, ("host",),
                          extensions=(("host/plugins/_fast.so", "host.plugins._fast"),))
    outcomes = {"host": ImportOutcome("host", ok=False, error_type="ImportError", error="host is broken")}
    r = _verdict(plugin, LoadPlan(("host.plugins._fast",), {}), outcomes, StackReach(), OptionalData(), {})
    assert r.verdict == "fail" and r.evidence == "not loaded, as host does not import: host.plugins._fast"
    assert r.data["drop"]["reason"] == "import failed"
