"""What a resolution warns about though nothing failed (issue 30, finding 4): each warning is a line the
user sees (a reporter note) and ``Resolution.warnings`` carries for ``--json``. A real index on 127.0.0.1."""

from __future__ import annotations

from wheelhouse.index.metadata import MetadataReader
from wheelhouse.progress import RecordingReporter
from wheelhouse.resolve import resolve
from wheelhouse.target import target_from_flags
from index_fixtures import package_source

CP312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])


def _resolve(pyindex, tmp_path, packages, requirements, sdists=(), **knobs):
    rec = RecordingReporter()
    res = resolve(requirements, CP312, package_source(pyindex, tmp_path, packages, sdists, **knobs), reporter=rec,
                  metadata=MetadataReader())
    notes = [e[1] for e in rec.events if e[0] == "note"]
    assert list(res.warnings) == [n for n in notes if n.startswith("warning:")]
    return res, notes


def test_an_invalid_requires_python_in_metadata_is_named_with_its_file(pyindex, tmp_path):
    res, notes = _resolve(pyindex, tmp_path, [("oddpy", "1.0", {"requires_python": ">=3.15.*"})], ["oddpy"])
    assert res.versions() == {"oddpy": "1.0"}  # ignored, as pip and uv do
    assert any("oddpy-1.0-py3-none-any.whl" in n and "invalid Requires-Python '>=3.15.*'" in n for n in notes), notes


def test_an_invalid_requires_python_on_the_index_page_is_named_with_its_file(pyindex, tmp_path):
    res, notes = _resolve(pyindex, tmp_path, [("oddpy", "1.0", {})], ["oddpy"],
                          requires_python={"oddpy-1.0-py3-none-any.whl": ">=3.15.*"})
    assert res.versions() == {"oddpy": "1.0"}
    assert any("oddpy-1.0-py3-none-any.whl" in n and "'>=3.15.*'" in n for n in notes), notes


def test_an_extra_the_chosen_release_does_not_declare_warns(pyindex, tmp_path):
    res, notes = _resolve(pyindex, tmp_path, [("torch", "2.9.1", {"extras": {"cuda": ["cudalib"]}}), ("cudalib", "1.0", {})],
                          ["torch[nosuch]"])
    assert res.versions() == {"torch": "2.9.1"}
    assert any(n.startswith("warning: torch==2.9.1 declares no extra 'nosuch'") for n in notes), notes


def test_a_declared_extra_gives_no_warning(pyindex, tmp_path):
    res, notes = _resolve(pyindex, tmp_path, [("torch", "2.9.1", {"extras": {"cuda": ["cudalib"]}}), ("cudalib", "1.0", {})],
                          ["torch[cuda]"])
    assert res.versions() == {"torch": "2.9.1", "cudalib": "1.0"} and not res.warnings


def test_a_pin_older_than_sdist_only_releases_names_the_newest_of_them(pyindex, tmp_path):
    res, notes = _resolve(pyindex, tmp_path, [("deepspeed", "0.3.1.dev3", {})], ["deepspeed"],
                          sdists=["deepspeed-0.19.8.tar.gz", "deepspeed-0.18.0.tar.gz"])
    assert res.versions() == {"deepspeed": "0.3.1.dev3"}
    assert any(n.startswith("warning: deepspeed==0.3.1.dev3 is the newest release with a wheel") and "deepspeed 0.19.8" in n
               for n in notes), notes


def test_sdists_beside_the_pinned_wheel_give_no_warning(pyindex, tmp_path):
    res, _ = _resolve(pyindex, tmp_path, [("lib", "2.0", {}), ("lib", "1.0", {})], ["lib"],
                      sdists=["lib-2.0.tar.gz", "lib-1.0.tar.gz"])
    assert res.versions() == {"lib": "2.0"} and not res.warnings
    res, _ = _resolve(pyindex, tmp_path / "b", [("lib", "1.0", {})], ["lib<2"], sdists=["lib-2.0.tar.gz"])
    assert not res.warnings, "a newer sdist-only release the requirement excludes is no reason to warn"
