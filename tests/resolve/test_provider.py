"""The resolvelib provider only adapts: find_matches reads index pages and no metadata; metadata is
read in get_dependencies, where markers, Requires-Python and toolchain groups become requirements."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet

from wheelhouse.index import PackageSource
from wheelhouse.index.metadata import MetadataReader
from wheelhouse.manifest import ToolchainGroup
from wheelhouse.progress import RecordingReporter
from wheelhouse.resolve.candidates import PYTHON, Req
from wheelhouse.resolve.provider import Provider
from wheelhouse.resolve.toolchain import toolchain_ident, toolchain_rules
from wheelhouse.target import target_from_flags
from wheelmaker import make_wheel

CP312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])


def _provider(source, *, groups=(), reporter=None):
    return Provider(CP312, source, MetadataReader(source.client), constraints={}, groups=toolchain_rules(groups),
                    prereleases=False, reporter=reporter or RecordingReporter(), pool=None)


def _req(name, spec=""):
    return Req("pkg", name, f"{name}{spec}", SpecifierSet(spec))


def _metadata_hits(idx):
    return sum(n for p, n in idx.hits.items() if p.startswith("/files/"))


def _published(pyindex, tmp_path):
    folder = tmp_path / "idx"
    for v in ("1.0", "1.1", "2.0"):
        make_wheel(folder, "app", v, requires_python=">=3.9", requires=[
            "core>=1", "winonly; sys_platform == 'win32'", "fast; extra == 'speed'", "bad requirement !!"])
    make_wheel(folder, "core", "1.0")
    idx = pyindex(folder, serve_metadata=True)
    return idx, PackageSource([idx.url])


def test_find_matches_lists_candidates_without_reading_any_metadata(pyindex, tmp_path):
    idx, source = _published(pyindex, tmp_path)
    provider = _provider(source)
    matches = provider.find_matches("app", {"app": iter([_req("app", "<2")])}, {"app": iter([])})
    assert [str(c.version) for c in matches] == ["1.1", "1.0"]
    assert _metadata_hits(idx) == 0 and provider.reader.stats["pep658"] == 0
    assert idx.hits["/simple/app/"] == 1


def test_incompatible_versions_are_left_out(pyindex, tmp_path):
    _, source = _published(pyindex, tmp_path)
    provider = _provider(source)
    matches = provider.find_matches("app", {"app": iter([_req("app")])},
                                    {"app": iter(provider.candidates("app", [_req("app", "==2.0")]))})
    assert [str(c.version) for c in matches] == ["1.1", "1.0"]


def test_the_virtual_python_matches_the_targets_interpreter_only(pyindex, tmp_path):
    _, source = _published(pyindex, tmp_path)
    provider = _provider(source)
    ok = provider.find_matches(PYTHON, {PYTHON: iter([Req("python", "python", "Requires-Python >=3.9", SpecifierSet(">=3.9"))])},
                               {PYTHON: iter([])})
    assert [str(c.version) for c in ok] == [CP312.python_full_version]
    too_new = Req("python", "python", "Requires-Python >=3.13", SpecifierSet(">=3.13"))
    assert provider.find_matches(PYTHON, {PYTHON: iter([too_new])}, {PYTHON: iter([])}) == []


def test_get_dependencies_reads_metadata_once_and_judges_it_for_the_target(pyindex, tmp_path):
    idx, source = _published(pyindex, tmp_path)
    reporter = RecordingReporter()
    provider = _provider(source, reporter=reporter)
    app = provider.candidates("app", [_req("app")])[0]
    deps = provider.get_dependencies(app)
    assert [(d.kind, d.name, str(d.specifier)) for d in deps] == [("python", "python", ">=3.9"), ("pkg", "core", ">=1")], \
        "the win32-only and extra-only requirements do not apply on this target"
    assert provider.reader.stats["pep658"] == 1
    assert any("ignoring malformed Requires-Dist" in e[1] for e in reporter.events if e[0] == "note")
    assert list(provider.parents["core"]) == [("core>=1", "app==2.0")]
    provider.get_dependencies(app)
    assert provider.reader.stats["pep658"] == 1, "memoized: one read per candidate"


def test_an_extra_candidate_depends_on_its_base_and_its_extras_requirements(pyindex, tmp_path):
    _, source = _published(pyindex, tmp_path)
    provider = _provider(source)
    speed = provider.candidates("app", [Req("pkg", "app", "app[speed]", SpecifierSet(), frozenset({"speed"}))])[0]
    assert speed.ident == "app[speed]"
    deps = provider.get_dependencies(speed)
    assert [(d.name, str(d.specifier)) for d in deps] == [("app", "==2.0"), ("fast", "")]


def test_a_toolchain_member_depends_on_its_groups_virtual_release(tmp_path):
    source = PackageSource((), find_links=[str(tmp_path)])
    make_wheel(tmp_path, "nvidia-cuda-nvcc", "13.4.59")
    group = ToolchainGroup("cuda", ("nvidia-cuda-*",), False, ())
    provider = _provider(source, groups=[group])
    nvcc = provider.candidates("nvidia-cuda-nvcc", [_req("nvidia-cuda-nvcc")])[0]
    tool = [d for d in provider.get_dependencies(nvcc) if d.kind == "toolchain"]
    assert [(d.ident, str(d.specifier)) for d in tool] == [(toolchain_ident("cuda"), "==13.4.*")]
    assert list(provider.parents[toolchain_ident("cuda")]) == [("cuda==13.4.*", "nvidia-cuda-nvcc==13.4.59")]


def test_walking_past_versions_that_disagree_with_the_pins_reads_ahead_in_parallel(pyindex, tmp_path):
    """cuda-python-like: each release needs another line of a pinned project. The agreeing release
    is still found (first), and the releases walked past had their metadata read in the pool, not
    one round trip after another on the resolver's thread."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from packaging.version import Version

    from wheelhouse.resolve.candidates import Cand

    folder = tmp_path / "idx"
    for minor in range(12):
        make_wheel(folder, "walk", f"1.{minor}", requires=[f"base=={minor}.0"])
    for minor in range(12):
        make_wheel(folder, "base", f"{minor}.0")
    idx = pyindex(folder, serve_metadata=True)
    source = PackageSource([idx.url])
    reader = MetadataReader(source.client)
    threads = []
    real_read = reader._read

    def read(d, key):
        threads.append(threading.current_thread().name)
        return real_read(d, key)

    reader._read = read
    with ThreadPoolExecutor(8, thread_name_prefix="wh-prefetch") as pool:
        provider = Provider(CP312, source, reader, constraints={}, groups=(), prereleases=False,
                            reporter=RecordingReporter(), pool=pool)
        base = provider.candidates("base", [_req("base", "==2.0")])[0]
        provider._pins = {"base": base}
        order = [str(c.version) for c in provider.find_matches("walk", {"walk": iter([_req("walk")])}, {"walk": iter([])})]
    assert order[0] == "1.2" and sorted(order[1:]) == sorted(f"1.{m}" for m in range(12) if m != 2)
    assert len(threads) == 12
    assert sum(t.startswith("wh-prefetch") for t in threads) >= 6, threads  # read ahead, not one by one
