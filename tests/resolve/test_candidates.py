"""CandidateFinder: the wheels of a project that a TARGET can install, best-ranked wheel per version,
highest version first; judged for the target (never the host), from index pages only."""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from wheelhouse.index import PackageSource
from wheelhouse.resolve.candidates import CandidateFinder, Req, exact_pins, single_pin, spec_of
from wheelhouse.target import target_from_flags
from wheelmaker import make_wheel

CP312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
ARM = target_from_flags("3.12", ["manylinux_2_35_aarch64"])


def _source(pyindex, tmp_path, wheels, **knobs):
    """wheels: [(name, version, tags)] published on a loopback index -> (IndexServer, PackageSource)."""
    folder = tmp_path / "idx"
    for name, version, tags in wheels:
        make_wheel(folder, name, version, tags=tags)
    idx = pyindex(folder, **knobs)
    return idx, PackageSource([idx.url])


def _finder(target, source, *, constraints=None, prereleases=False):
    return CandidateFinder(target, source, constraints=constraints or {}, prereleases=prereleases)


def _req(name, spec=""):
    return Req("pkg", name, f"{name}{spec}", SpecifierSet(spec))


def _picked(cands):
    return [(str(c.version), c.distfile.filename) for c in cands]


def test_each_version_offers_the_wheel_the_target_ranks_best_highest_version_first(pyindex, tmp_path):
    _, source = _source(pyindex, tmp_path, [
        ("fast", "1.0", "py3-none-any"),
        ("fast", "2.0", "py3-none-any"),
        ("fast", "2.0", "cp312-cp312-manylinux_2_17_x86_64"),
        ("fast", "2.0", "cp312-cp312-manylinux_2_28_x86_64"),
        ("fast", "2.0", "cp312-cp312-manylinux_2_28_aarch64"),
        ("fast", "3.0", "cp311-cp311-manylinux_2_17_x86_64"),  # another Python: not a candidate at all
    ])
    got = _picked(_finder(CP312, source).candidates("fast", [_req("fast")]))
    assert got == [("2.0", "fast-2.0-cp312-cp312-manylinux_2_28_x86_64.whl"), ("1.0", "fast-1.0-py3-none-any.whl")]
    arm = _picked(_finder(ARM, source).candidates("fast", [_req("fast")]))
    assert arm[0] == ("2.0", "fast-2.0-cp312-cp312-manylinux_2_28_aarch64.whl"), "the target's tag order, not the host's"


def test_requires_python_on_the_index_page_is_judged_for_the_target(pyindex, tmp_path):
    _, source = _source(pyindex, tmp_path, [("lib", "1.0", "py3-none-any"), ("lib", "2.0", "py3-none-any")],
                        requires_python={"lib-2.0-py3-none-any.whl": ">=3.13"})
    assert _picked(_finder(CP312, source).candidates("lib", [_req("lib")])) == [("1.0", "lib-1.0-py3-none-any.whl")]
    cp313 = target_from_flags("3.13", ["manylinux_2_35_x86_64"])
    assert [v for v, _ in _picked(_finder(cp313, source).candidates("lib", [_req("lib")]))] == ["2.0", "1.0"]


def test_a_yanked_release_is_offered_only_where_the_users_own_pin_allows_it(pyindex, tmp_path):
    _, source = _source(pyindex, tmp_path, [("lib", "1.0", "py3-none-any"), ("lib", "1.1", "py3-none-any")],
                        yanked={"lib-1.1-py3-none-any.whl": "broken"})
    finder = _finder(CP312, source)
    assert [str(c.version) for c in finder.candidates("lib", [_req("lib")])] == ["1.0"]
    assert [str(c.version) for c in finder.candidates("lib", [_req("lib", ">=1.1")])] == []
    assert [str(c.version) for c in finder.candidates("lib", [_req("lib", "==1.1")])] == [], \
        "a dependency's == does not select a yanked release (uv's rule)"
    allowed = CandidateFinder(CP312, source, constraints={}, prereleases=False, allowed_yanks={"lib": frozenset({Version("1.1")})})
    assert [str(c.version) for c in allowed.candidates("lib", [_req("lib", "==1.1")])] == ["1.1"]
    assert [str(c.version) for c in allowed.candidates("lib", [_req("lib")])] == ["1.1", "1.0"]


def test_pre_releases_come_after_every_final_release_unless_asked(pyindex, tmp_path):
    _, source = _source(pyindex, tmp_path, [("lib", "1.0", "py3-none-any"), ("lib", "2.0rc1", "py3-none-any"),
                                            ("only", "0.1b1", "py3-none-any")])
    versions = lambda cands: [str(c.version) for c in cands]  # noqa: E731
    assert versions(_finder(CP312, source).candidates("lib", [_req("lib")])) == ["1.0", "2.0rc1"]
    assert versions(_finder(CP312, source, prereleases=True).candidates("lib", [_req("lib")])) == ["2.0rc1", "1.0"]
    assert versions(_finder(CP312, source).candidates("lib", [_req("lib", ">=1.0a1")])) == ["1.0", "2.0rc1"], \
        "a specifier naming a pre-release does not make it preferred (uv's if-necessary)"
    assert versions(_finder(CP312, source).candidates("lib", [_req("lib", ">=2.0rc1")])) == ["2.0rc1"]
    assert versions(_finder(CP312, source).candidates("lib", [_req("lib", ">1.0")])) == ["2.0rc1"], \
        "PEP 440: no final release satisfies, so the pre-release is accepted"
    assert versions(_finder(CP312, source).candidates("only", [_req("only")])) == ["0.1b1"]


def test_constraints_narrow_the_versions_of_a_requested_project(pyindex, tmp_path):
    _, source = _source(pyindex, tmp_path, [("lib", v, "py3-none-any") for v in ("1.0", "1.5", "2.0")])
    cons = {"lib": [Req("pkg", "lib", "lib<2 (constraint)", SpecifierSet("<2"))]}
    finder = _finder(CP312, source, constraints=cons)
    assert [str(c.version) for c in finder.candidates("lib", [_req("lib", ">=1.5")])] == ["1.5"]


def test_a_direct_wheel_is_the_only_candidate_if_the_target_can_install_it(tmp_path):
    source = PackageSource(())  # no index: a direct reference needs none
    x86 = source.direct(str(make_wheel(tmp_path, "own", "1.0", tags="cp312-cp312-manylinux_2_17_x86_64")))
    req = Req("pkg", "own", "./own.whl", SpecifierSet(), direct=x86)
    assert _picked(_finder(CP312, source).candidates("own", [req])) == [("1.0", x86.filename)]
    assert _finder(ARM, source).candidates("own", [req]) == []
    pinned_away = Req("pkg", "own", "own>=2", SpecifierSet(">=2"))
    assert _finder(CP312, source).candidates("own", [req, pinned_away]) == []


def test_index_pages_only_no_wheel_body_or_metadata_is_fetched(pyindex, tmp_path):
    idx, source = _source(pyindex, tmp_path, [("lib", "1.0", "py3-none-any"), ("lib", "2.0", "py3-none-any")],
                          serve_metadata=True)
    _finder(CP312, source).candidates("lib", [_req("lib")])
    assert [p for p in idx.hits if not p.startswith("/simple/")] == []


def test_exact_pins_and_requires_python_parsing():
    assert {str(v) for v in exact_pins(SpecifierSet("==1.2,===1.3,==2.*,>=1"))} == {"1.2", "1.3"}
    assert str(single_pin(SpecifierSet("==1.2"))) == "1.2" and str(single_pin(SpecifierSet("===1.3"))) == "1.3"
    assert single_pin(SpecifierSet("==1.2,>=1")) is None and single_pin(SpecifierSet("==1.*")) is None
    assert spec_of(">=3.10") == SpecifierSet(">=3.10")
    assert spec_of("") is None and spec_of(None) is None
    assert spec_of(">=3.10,<banana") is None, "a malformed requires-python is ignored, as pip and uv do"


def test_the_tag_filter_judges_a_whole_page_of_names_as_it_judges_each():
    """``many`` (a big page's names at once) must agree with the per-name filter on every shape of
    name (wheels with and without a build tag, sdists, too few or too many fields, empty fields,
    odd extensions, a line break inside a name), except that it drops an sdist of a release the
    page has a kept wheel of: the one the caveats skip, found here by parsing both names."""
    import random

    from wheelhouse.index.pages import parse_simple_json
    from wheelhouse.resolve.candidates import _TagFilter

    names = ["a-1.0-py3-none-any.whl", "a-1.0-1-cp312-cp312-manylinux_2_17_x86_64.whl", "a-1.0.tar.gz", "",
             "a-b-c-d-e-f-g.whl", "x-1-cp312-abi3-manylinux_2_28_x86_64.whl", "x-1-cp311-cp311-manylinux_2_28_x86_64.whl",
             "--py3-none-any.whl", "-py3-none-any.whl", "a-1.0-py3-none-any.whl.metadata", "a-1.0-py2.py3-none-any.whl",
             "a-1.0-py3-none-any.WHL", "a--1-py3-none-any.whl", ".whl", "-", "a-1-cp312-cp312-manylinux_2_17_aarch64.whl",
             "A.b-2.0.zip", "a_b-2.0-py3-none-any.whl", "a-01.0.tar.gz", "a-3.0.tar.gz", "a-3.0-cp311-cp311-linux_x86_64.whl",
             "x-1.tar.bz2", "x-1.tar.gz", "c-01-py3-none-any.whl", "c-1.tar.gz"]
    rng = random.Random(14)
    names += ["".join(rng.choice("ab-.whl3_py") for _ in range(rng.randint(0, 24))) for _ in range(2000)]
    names += [f"{rng.choice(['a', 'A', 'a_b', 'a.b'])}-{rng.choice(['1', '1.0', '2.0', '01', '1.0.0'])}{rng.choice(['.tar.gz', '.zip', '-py3-none-any.whl'])}"
              for _ in range(300)]
    one, bulk = _TagFilter(CP312), _TagFilter(CP312)
    expected = [one(f) for f in names]
    # what the JSON page parser makes of each kept name, and the caveats' rule on it: an sdist whose
    # (name, version text) a kept wheel also carries is never read
    made = {f: parse_simple_json({"files": [{"filename": f, "url": f"https://f/{f}"}]}, "https://i/", "o")
            for f, ok in zip(names, expected) if ok}
    kept_wheels = {(d.name, d.version) for ds in made.values() for d in ds if d.is_wheel}

    def has_kept_wheel(f: str) -> bool:  # (an sdist whose version is spelled otherwise is kept: never wrong)
        return any((d.name, d.version) in kept_wheels and f.endswith((f"-{d.version}.tar.gz", f"-{d.version}.zip"))
                   for d in made[f] if not d.is_wheel)

    pruned = [ok and not (not f.endswith(".whl") and has_kept_wheel(f)) for f, ok in zip(names, expected)]
    assert bulk.many(names) == pruned and sum(pruned) >= 4 and sum(expected) - sum(pruned) >= 3
    assert bulk.many(["a\nb-1-py3-none-any.whl", "a-1-py3-none-any.whl"]) == [one("a\nb-1-py3-none-any.whl"), True]
