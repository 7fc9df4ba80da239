"""resolve() for a target, against a real index on 127.0.0.1 serving real wheels."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.version import Version

from wheelhouse.index import PackageSource
from wheelhouse.manifest import ToolchainGroup
from wheelhouse.index.metadata import MetadataReader
from wheelhouse.progress import RecordingReporter
from wheelhouse.resolve import (
    NoCompatibleWheel,
    NoMatchingVersion,
    PackageNotFound,
    ResolutionConflict,
    ToolchainSkew,
    resolve,
)
from wheelhouse.target import target_from_flags
from uv_tool import run_uv, uv_binary
from wheelmaker import make_wheel

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCENARIOS = Path(__file__).parent / "scenarios"

CP312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
CP310 = target_from_flags("3.10", ["manylinux_2_35_x86_64"])
ARM = target_from_flags("3.12", ["manylinux_2_35_aarch64"])
MUSL = target_from_flags("3.12", ["musllinux_1_2_x86_64"])
OLD_GLIBC = target_from_flags("3.12", ["manylinux_2_17_x86_64"])


def publish(pyindex, tmp_path, packages, **knobs):
    """packages: [(name, version, {make_wheel kwargs})] -> (IndexServer, PackageSource)."""
    folder = tmp_path / "index-files"
    for name, version, kw in packages:
        make_wheel(folder, name, version, **kw)
    idx = pyindex(folder, **knobs)
    return idx, PackageSource([idx.url])


def versions(res):
    return {p.name: p.version for p in res.pins}


# --- targets, not the host --------------------------------------------------------------------------
@pytest.fixture
def native(pyindex, tmp_path):
    pkgs = [
        ("fastlib", "2.0", {"tags": "cp311-cp311-manylinux_2_17_x86_64"}),
        ("fastlib", "2.0", {"tags": "cp312-cp312-manylinux_2_17_x86_64"}),
        ("fastlib", "2.0", {"tags": "cp312-cp312-manylinux_2_28_x86_64"}),
        ("fastlib", "2.0", {"tags": "cp312-cp312-manylinux_2_17_aarch64"}),
        ("fastlib", "2.0", {"tags": "cp312-cp312-musllinux_1_2_x86_64"}),
        ("fastlib", "1.0", {"tags": "py3-none-any"}),
    ]
    return publish(pyindex, tmp_path, pkgs)


@pytest.mark.parametrize(
    "target, chosen",
    [
        (CP312, "fastlib-2.0-cp312-cp312-manylinux_2_28_x86_64.whl"),  # best-ranked of two that fit
        (ARM, "fastlib-2.0-cp312-cp312-manylinux_2_17_aarch64.whl"),
        (MUSL, "fastlib-2.0-cp312-cp312-musllinux_1_2_x86_64.whl"),
        (CP310, "fastlib-1.0-py3-none-any.whl"),  # no cp310 build of 2.0: falls back to 1.0
    ],
    ids=["cp312", "aarch64", "musllinux", "cp310"],
)
def test_wheel_is_chosen_for_the_target_not_the_host(native, target, chosen):
    _, src = native
    res = resolve(["fastlib"], target, src)
    assert res.pin("fastlib").distfile.filename == chosen


def test_markers_are_evaluated_for_the_target(pyindex, tmp_path):
    _, src = publish(pyindex, tmp_path, [
        ("app", "1.0", {"requires": ['backport; python_version < "3.12"', 'armonly; platform_machine == "aarch64"']}),
        ("backport", "1.0", {}),
        ("armonly", "1.0", {}),
    ])
    assert set(versions(resolve(["app"], CP310, src))) == {"app", "backport"}
    assert set(versions(resolve(["app"], CP312, src))) == {"app"}
    assert set(versions(resolve(["app"], ARM, src))) == {"app", "armonly"}
    # a requested requirement whose marker excludes the target is skipped, and said so
    res = resolve(['backport; python_version < "3.11"'], CP312, src)
    assert res.pins == () and res.skipped == ('backport; python_version < "3.11"',)


# --- no wheel for the target ------------------------------------------------------------------------
@pytest.fixture
def glibc(pyindex, tmp_path):
    return publish(pyindex, tmp_path, [
        ("stack", "1.0", {"requires": ["newglibc", "oldglibc"]}),
        ("oldglibc", "1.0", {"tags": "cp312-cp312-manylinux_2_17_x86_64"}),
        ("newglibc", "3.0", {"tags": "cp312-cp312-manylinux_2_25_x86_64"}),
        ("newglibc", "3.0", {"tags": "cp312-cp312-macosx_11_0_arm64"}),
    ])


def test_newer_glibc_wheel_is_fine_for_a_newer_target(glibc):
    _, src = glibc
    res = resolve(["stack"], CP312, src)
    assert res.pin("newglibc").distfile.filename.endswith("manylinux_2_25_x86_64.whl")


def test_newer_glibc_wheel_is_refused_for_an_old_target_with_the_tags_it_publishes(glibc):
    _, src = glibc
    with pytest.raises(NoCompatibleWheel) as err:
        resolve(["stack"], OLD_GLIBC, src)
    msg = str(err.value)
    assert "newglibc has no wheel for the target" in msg
    assert "manylinux_2_25_x86_64" in msg and "macosx_11_0_arm64" in msg
    assert msg.index("manylinux_2_25_x86_64") < msg.index("macosx_11_0_arm64")  # same arch first
    assert "up to manylinux_2_17_x86_64" in msg
    assert "stack==1.0" in msg  # who pulled it in
    assert err.value.hint and err.value.code == "no-compatible-wheel"


def test_only_sdists_is_said_plainly(pyindex, tmp_path):
    idx, src = publish(pyindex, tmp_path, [("app", "1.0", {"requires": ["srconly"]})])
    sdist = tmp_path / "index-files" / "srconly-1.0.tar.gz"
    sdist.write_bytes(b"sdist")
    idx.add(sdist)
    with pytest.raises(NoCompatibleWheel, match="srconly publishes only source distributions"):
        resolve(["app"], CP312, src)


def test_unknown_project(pyindex, tmp_path):
    _, src = publish(pyindex, tmp_path, [("app", "1.0", {"requires": ["ghost>=1"]})])
    with pytest.raises(PackageNotFound, match=r"no project named ghost .*required by app==1.0"):
        resolve(["app"], CP312, src)


# --- reading metadata without the wheel -----------------------------------------------------------
def test_dependencies_read_by_range_requests_not_whole_wheels(pyindex, tmp_path):
    big = 3_000_000
    idx, src = publish(pyindex, tmp_path, [
        ("heavy", "1.0", {"requires": ["heavier"], "pad_bytes": big, "tags": "cp312-cp312-manylinux_2_17_x86_64"}),
        ("heavier", "1.0", {"pad_bytes": big}),
    ], serve_metadata=False)
    res = resolve(["heavy"], CP312, src)
    assert versions(res) == {"heavy": "1.0", "heavier": "1.0"}
    served = idx.bytes_served("heavy-1.0-cp312-cp312-manylinux_2_17_x86_64.whl") + idx.bytes_served("heavier-1.0-py3-none-any.whl")
    assert served < 2 * 70_000 and served * 40 < 2 * big
    assert res.stats["range"] == 2 and res.stats["download"] == 0


def test_pep658_metadata_is_used_when_served(pyindex, tmp_path):
    idx, src = publish(pyindex, tmp_path, [
        ("heavy", "1.0", {"requires": ["light"], "pad_bytes": 1_000_000}),
        ("light", "1.0", {}),
    ], serve_metadata=True)
    res = resolve(["heavy"], CP312, src)
    assert versions(res) == {"heavy": "1.0", "light": "1.0"}
    assert idx.bytes_served("heavy-1.0-py3-none-any.whl") == 0
    assert res.stats["pep658"] == 2


# --- versions: yanked, requires-python, extras, constraints, pre-releases --------------------------
def test_yanked_is_skipped_unless_pinned_exactly(pyindex, tmp_path):
    _, src = publish(pyindex, tmp_path, [("lib", "1.0", {}), ("lib", "2.0", {})],
                     yanked={"lib-2.0-py3-none-any.whl": "broken"})
    assert versions(resolve(["lib"], CP312, src)) == {"lib": "1.0"}
    seen = RecordingReporter()
    res = resolve(["lib==2.0"], CP312, src, reporter=seen)
    assert versions(res) == {"lib": "2.0"}
    # used, as uv does, but never silently: a warning with the reason, and the pin says so
    assert any(e[0] == "note" and e[1].startswith("warning: lib==2.0 is yanked (broken)") for e in seen.events)
    assert res.pin("lib").to_json()["yanked"] is True and res.pin("lib").to_json()["yanked_reason"] == "broken"


def test_requires_python_from_index_and_from_metadata(pyindex, tmp_path):
    _, src = publish(pyindex, tmp_path, [
        ("lib", "1.0", {}),
        ("lib", "2.0", {}),  # the index says >=3.13 (data-requires-python)
        ("lib", "3.0", {"requires_python": ">=3.14"}),  # only the METADATA says so
    ], requires_python={"lib-2.0-py3-none-any.whl": ">=3.13"})
    assert versions(resolve(["lib"], CP312, src)) == {"lib": "1.0"}
    with pytest.raises(NoMatchingVersion, match="needs another Python"):
        resolve(["lib==2.0"], CP312, src)
    with pytest.raises(NoMatchingVersion, match=r"lib==3.0 needs Requires-Python >=3.14; the target has Python 3.12.0"):
        resolve(["lib==3.0"], CP312, src)


def test_extras_pull_their_dependencies_and_are_recorded(pyindex, tmp_path):
    _, src = publish(pyindex, tmp_path, [
        ("web", "1.0", {"requires": ["core"], "extras": {"speed": ["uvloop-ish"], "tls": ["certs; python_version < '3.11'"]}}),
        ("core", "1.0", {}),
        ("uvloop-ish", "1.0", {}),
        ("certs", "1.0", {}),
    ])
    assert set(versions(resolve(["web"], CP312, src))) == {"web", "core"}
    res = resolve(["web[speed,tls]"], CP312, src)
    assert set(versions(res)) == {"web", "core", "uvloop-ish"}
    assert res.pin("web").extras == ("speed", "tls")
    assert res.pin("uvloop-ish").parents == ("web==1.0",)


def test_constraints_restrict_versions_without_adding_packages(pyindex, tmp_path):
    _, src = publish(pyindex, tmp_path, [("a", "1.0", {}), ("a", "2.0", {}), ("b", "1.0", {})])
    res = resolve(["a"], CP312, src, constraints=["a<2", "b==1.0"])
    assert versions(res) == {"a": "1.0"}
    with pytest.raises(NoMatchingVersion, match=r"no version of a matches a>=2 and a<2 \(constraint\)"):
        resolve(["a>=2"], CP312, src, constraints=["a<2"])


def test_prereleases_only_when_asked_or_named(pyindex, tmp_path):
    _, src = publish(pyindex, tmp_path, [("a", "1.0", {}), ("a", "2.0rc1", {}), ("only-pre", "1.0b1", {})])
    assert versions(resolve(["a"], CP312, src)) == {"a": "1.0"}
    assert versions(resolve(["a"], CP312, src, prereleases=True)) == {"a": "2.0rc1"}
    assert versions(resolve(["a>=2.0rc1"], CP312, src)) == {"a": "2.0rc1"}
    assert versions(resolve(["only-pre"], CP312, src)) == {"only-pre": "1.0b1"}


def test_direct_wheel_files_and_urls(pyindex, tmp_path):
    idx, src = publish(pyindex, tmp_path, [("dep", "1.0", {})])
    local = make_wheel(tmp_path / "local", "mine", "0.1", requires=["dep"])
    res = resolve([str(local)], CP312, src)
    assert versions(res) == {"mine": "0.1", "dep": "1.0"}
    assert res.pin("mine").distfile.origin == "direct"
    res = resolve([f"dep @ {idx.file_url('dep-1.0-py3-none-any.whl')}"], CP312, src)
    assert res.pin("dep").distfile.url == idx.file_url("dep-1.0-py3-none-any.whl")
    arm = make_wheel(tmp_path / "local", "armwheel", "0.1", tags="cp312-cp312-manylinux_2_17_aarch64")
    with pytest.raises(NoCompatibleWheel, match="not installable on the target"):
        resolve([str(arm)], CP312, src)


def test_conflict_names_both_requirements_and_their_parents(pyindex, tmp_path):
    _, src = publish(pyindex, tmp_path, [
        ("left", "1.0", {"requires": ["shared<2"]}),
        ("right", "1.0", {"requires": ["shared>=2"]}),
        ("shared", "1.0", {}),
        ("shared", "2.0", {}),
    ])
    with pytest.raises(ResolutionConflict) as err:
        resolve(["left", "right"], CP312, src)
    msg = str(err.value)
    assert "conflicting requirements on shared" in msg
    assert "shared<2 <- left==1.0 <- (requested)" in msg
    assert "shared>=2 <- right==1.0 <- (requested)" in msg


def test_progress_is_reported(pyindex, tmp_path):
    _, src = publish(pyindex, tmp_path, [("a", "1.0", {"requires": ["b"]}), ("b", "1.0", {})])
    rec = RecordingReporter()
    resolve(["a"], CP312, src, reporter=rec)
    assert rec.events[0][:2] == ("start", "resolve")
    assert ("advance", "resolve", 1) in rec.events and rec.events[-1] == ("finish", "resolve", "2 packages")


# --- toolchain groups ---------------------------------------------------------------------------------
CUDA = ToolchainGroup("cuda", ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl"), exceptions=("nvidia-cuda-cccl",))


@pytest.fixture
def cuda(pyindex, tmp_path):
    tag = {"tags": "py3-none-manylinux_2_27_x86_64"}
    return publish(pyindex, tmp_path, [
        ("nvidia-cuda-nvcc", "13.0.48", tag),
        ("nvidia-cuda-nvcc", "13.1.80", tag),
        ("nvidia-cuda-crt", "13.0.48", tag),
        ("nvidia-nvvm", "13.0.48", tag),
        ("nvidia-nvvm", "13.1.80", tag),
        ("nvidia-cuda-cccl", "12.9.27", tag),
        ("engine", "1.0", {"requires": ["nvidia-cuda-nvcc==13.1.80", "nvidia-cuda-crt==13.0.48"]}),
        ("kernels", "1.0", {"requires": ["nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-cccl"]}),
    ])


def test_toolchain_backtracks_to_one_release(cuda):
    _, src = cuda
    res = resolve(["kernels"], CP312, src, toolchains=[CUDA])
    v = versions(res)
    # newest nvcc/nvvm are 13.1, but crt only exists at 13.0: the group settles on 13.0
    assert v["nvidia-cuda-nvcc"] == v["nvidia-nvvm"] == v["nvidia-cuda-crt"] == "13.0.48"
    assert v["nvidia-cuda-cccl"] == "12.9.27"  # the headers-only exception may differ
    # without the group, the newest of each is taken (the skew the group exists to stop)
    assert versions(resolve(["kernels"], CP312, src))["nvidia-cuda-nvcc"] == "13.1.80"


def test_toolchain_skew_is_refused_with_the_chain(cuda):
    _, src = cuda
    with pytest.raises(ToolchainSkew) as err:
        resolve(["engine"], CP312, src, toolchains=[CUDA])
    msg = str(err.value)
    assert "toolchain group 'cuda' needs one major.minor release" in msg
    assert "nvidia-cuda-nvcc 13.1.80" in msg and "nvidia-cuda-crt 13.0.48" in msg
    assert "engine==1.0 <- (requested)" in msg
    assert err.value.versions == {"nvidia-cuda-nvcc": "13.1.80", "nvidia-cuda-crt": "13.0.48"}


def test_exact_toolchain_and_wildcard_members(pyindex, tmp_path):
    _, src = publish(pyindex, tmp_path, [
        ("nvidia-cuda-nvcc", "13.0.48", {}),
        ("nvidia-cuda-nvcc", "13.0.88", {}),
        ("nvidia-cuda-crt", "13.0.48", {}),
        ("nvidia-cuda-cccl", "13.0.99", {}),
    ])
    group = ToolchainGroup("cuda", ("nvidia-cuda-*",), exact=True, exceptions=("nvidia-cuda-cccl",))
    v = versions(resolve(["nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-cuda-cccl"], CP312, src, toolchains=[group]))
    assert v == {"nvidia-cuda-nvcc": "13.0.48", "nvidia-cuda-crt": "13.0.48", "nvidia-cuda-cccl": "13.0.99"}


# --- scenarios as data ---------------------------------------------------------------------------------
def _scenario_ids():
    return sorted(p.stem for p in SCENARIOS.glob("*.toml"))


@pytest.mark.parametrize("scenario", _scenario_ids())
def test_scenario(scenario, pyindex, tmp_path):
    spec = tomllib.loads((SCENARIOS / f"{scenario}.toml").read_text())
    folder = tmp_path / "files"
    knobs = spec.get("index", {})
    for pkg in spec["packages"]:
        kw = {k: v for k, v in pkg.items() if k in ("requires", "tags", "requires_python", "extras")}
        make_wheel(folder, pkg["name"], pkg["version"], **kw)
    idx = pyindex(folder, serve_metadata=knobs.get("metadata", False), json=knobs.get("json", True),
                  yanked=knobs.get("yanked", {}), requires_python=knobs.get("requires_python", {}))
    t = spec["target"]
    target = target_from_flags(t["python"], t["platforms"])
    groups = [ToolchainGroup(g["name"], tuple(g["packages"]), g.get("exact", False), tuple(g.get("exceptions", ())))
              for g in spec.get("toolchain", [])]
    req = spec["request"]
    run = lambda: resolve(req["requirements"], target, PackageSource([idx.url]), constraints=req.get("constraints", ()),
                          toolchains=groups, prereleases=req.get("prereleases", False), metadata=MetadataReader(),
                          **({"max_rounds": req["max_rounds"]} if "max_rounds" in req else {}))
    expect = spec["expect"]
    if "error" in expect:
        with pytest.raises(Exception) as err:
            run()
        assert getattr(err.value, "code", None) == expect["error"], str(err.value)
        shown = f"{err.value}\nhint: {getattr(err.value, 'hint', None)}"  # what the user reads
        for text in expect.get("message", []):
            assert text in shown
        for text in expect.get("absent", []):
            assert text not in shown, shown
    else:
        res = run()
        assert versions(res) == expect["pins"]
        # a note where wh knowingly differs from uv, on exactly the pins that rule decided (docs/stage.md)
        assert {p.name: [n.code for n in p.notes] for p in res.pins if p.notes} == expect.get("notes", {})
        for name, filename in expect.get("files", {}).items():
            assert res.pin(name).distfile.filename == filename


# --- the same scenarios through uv, when uv is installed (loopback only, no registry) ------------
def _uv_platform(platform: str) -> str:
    import re

    m = re.fullmatch(r"(manylinux|musllinux)_(\d+)_(\d+)_(.+)", platform)
    assert m, platform
    if m.group(1) == "musllinux":
        return f"{m.group(4)}-unknown-linux-musl"
    return f"{m.group(4)}-manylinux_{m.group(2)}_{m.group(3)}"


@pytest.mark.skipif(uv_binary() is None, reason="uv is not installed (pip install uv, or set WH_UV)")
@pytest.mark.parametrize("scenario", [s for s in _scenario_ids() if "pins" in tomllib.loads((SCENARIOS / f"{s}.toml").read_text())["expect"]
                                      and not tomllib.loads((SCENARIOS / f"{s}.toml").read_text()).get("toolchain")])
def test_scenario_pins_equal_uvs(scenario, pyindex, tmp_path):
    """The expected pins are what uv picks for the same index, request and target (``uv-pins`` where the
    scenario shows a difference wh keeps on purpose, its pins noted)."""
    import re

    spec = tomllib.loads((SCENARIOS / f"{scenario}.toml").read_text())
    since = spec["expect"].get("uv-since")
    if since:
        have = re.search(r"\d+(\.\d+)+", run_uv("--version").stdout)
        if have is None or Version(have.group()) < Version(since):
            pytest.skip(f"uv {have.group() if have else '?'} predates the behaviour this scenario compares (uv >= {since})")
    folder = tmp_path / "files"
    for pkg in spec["packages"]:
        make_wheel(folder, pkg["name"], pkg["version"], **{k: v for k, v in pkg.items() if k in ("requires", "tags", "requires_python", "extras")})
    knobs = spec.get("index", {})
    idx = pyindex(folder, yanked=knobs.get("yanked", {}), requires_python=knobs.get("requires_python", {}))
    req = tmp_path / "req.in"
    req.write_text("\n".join(spec["request"]["requirements"]) + "\n")
    args = ["pip", "compile", str(req), "--index-url", idx.url, "--python-platform", _uv_platform(spec["target"]["platforms"][0]),
            "--python-version", spec["target"]["python"], "--no-header", "--no-annotate", "--quiet", "--no-cache"]
    if spec["request"].get("constraints"):
        (tmp_path / "c.txt").write_text("\n".join(spec["request"]["constraints"]) + "\n")
        args += ["-c", str(tmp_path / "c.txt")]
    out = run_uv(*args)  # given the test interpreter: --python-version sets what it resolves for
    assert out.returncode == 0, out.stderr
    assert dict(re.findall(r"^([a-z0-9\-_.]+)==(\S+)", out.stdout, re.M)) == spec["expect"].get("uv-pins", spec["expect"]["pins"])
