"""Release manifests: the JSON an engine publishes beside its release, read into verified wheel
artifacts; every problem names the entry, and a moved release is refused when the stack pins its sha256."""

from __future__ import annotations

import hashlib
import json

import pytest

from wheelhouse.errors import HashMismatch
from wheelhouse.index import PackageSource
from wheelhouse.index.http import HttpClient
from wheelhouse.manifest import ReleaseManifest
from wheelhouse.stage.release import (
    ReleaseError,
    fetch_release_artifacts,
    load_release,
    parse_release,
    release_links_page,
)
from wheelmaker import make_wheel

SHA = "ab" * 32
URL = "https://releases.example.invalid/nightly/engine-linux_x86_64.json"


def _entry(name="freetoken_rt-0.3.1-cp312-cp312-linux_x86_64.whl", url=None, sha=SHA, **more):
    return {"name": name, "url": url or name, "sha256": sha, **more}


def test_named_entries_become_pinned_artifacts_with_urls_relative_to_the_manifest():
    data = {"runtime": _entry(size=123), "kernel_cache": _entry("kc-1.0-py3-none-any.whl",
                                                                url="https://cdn.example.invalid/kc.whl"), "version": "x"}
    (rt,) = parse_release(data, ReleaseManifest(URL, ("runtime",)))
    assert (rt.key, rt.project, rt.version, rt.requirement) == ("runtime", "freetoken-rt", "0.3.1", "freetoken-rt==0.3.1")
    assert rt.url == "https://releases.example.invalid/nightly/freetoken_rt-0.3.1-cp312-cp312-linux_x86_64.whl"
    assert rt.size == 123 and rt.manifest_url == URL
    every = parse_release(data, ReleaseManifest(URL, ()))
    assert [a.key for a in every] == ["runtime", "kernel_cache"], "no keys: every entry that has a sha256"
    assert every[1].url == "https://cdn.example.invalid/kc.whl"


@pytest.mark.parametrize("data, keys, says", [
    ([], ("runtime",), "is not a JSON object"),
    ({"version": "x"}, (), "has no entries with a sha256"),
    ({"runtime": _entry()}, ("kernels",), "has no entry 'kernels' (it has: runtime)"),
    ({"runtime": {"name": "a-1-py3-none-any.whl"}}, ("runtime",), "'runtime' lacks url, sha256"),
    ({"runtime": _entry(sha="abc")}, ("runtime",), "'runtime' has sha256 'abc', not 64 hex digits"),
    ({"runtime": _entry(name="engine-0.3.tar.gz")}, ("runtime",), "'runtime' names 'engine-0.3.tar.gz', which is not a wheel"),
])
def test_each_problem_is_one_error_naming_the_entry(data, keys, says):
    with pytest.raises(ReleaseError) as exc:
        parse_release(data, ReleaseManifest(URL, keys))
    assert says in str(exc.value) and URL in str(exc.value)
    assert exc.value.hint and exc.value.code == "bad-release-manifest"


def test_a_release_that_moved_is_refused_when_the_stack_pins_its_sha256(tmp_path):
    manifest = tmp_path / "engine.json"
    manifest.write_text(json.dumps({"runtime": _entry()}))
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()
    found, got = load_release(ReleaseManifest(manifest.as_uri(), ("runtime",), digest.upper()), HttpClient())
    assert got == digest and [a.key for a in found] == ["runtime"]
    with pytest.raises(ReleaseError, match="the stack manifest expects " + "0" * 64):
        load_release(ReleaseManifest(manifest.as_uri(), ("runtime",), "0" * 64), HttpClient())
    manifest.write_text("{not json")
    with pytest.raises(ReleaseError, match="is not valid JSON"):
        load_release(ReleaseManifest(manifest.as_uri(), ("runtime",)), HttpClient())
    with pytest.raises(ReleaseError, match="could not download release manifest"):
        load_release(ReleaseManifest((tmp_path / "gone.json").as_uri(), ("runtime",)), HttpClient())


def test_the_links_page_makes_artifacts_ordinary_candidates_with_their_hash(tmp_path):
    data = {"runtime": _entry(), "kc": _entry("kc-1.0-py3-none-any.whl", sha="cd" * 32)}
    page = tmp_path / "release.html"
    page.write_text(release_links_page(parse_release(data, ReleaseManifest(URL, ()))))
    source = PackageSource((), find_links=[str(page)])
    (kc,) = source.files("kc")
    assert (kc.version, kc.sha256) == ("1.0", "cd" * 32)
    assert kc.url == "https://releases.example.invalid/nightly/kc-1.0-py3-none-any.whl"


def test_fetched_artifacts_are_verified_and_a_wrong_sha256_keeps_no_bytes(tmp_path):
    wheel = make_wheel(tmp_path / "pub", "engine-rt", "0.3")
    good = hashlib.sha256(wheel.read_bytes()).hexdigest()
    manifest = tmp_path / "engine.json"
    manifest.write_text(json.dumps({"runtime": _entry(wheel.name, wheel.as_uri(), good)}))
    arts, prov = fetch_release_artifacts([ReleaseManifest(manifest.as_uri(), ("runtime",))], tmp_path / "links",
                                         tmp_path / "cache")
    assert (tmp_path / "links" / wheel.name).read_bytes() == wheel.read_bytes()
    assert prov[0]["artifacts"] == {"runtime": {"name": wheel.name, "sha256": good}}
    manifest.write_text(json.dumps({"runtime": _entry(wheel.name, wheel.as_uri(), "f" * 64)}))
    with pytest.raises(HashMismatch):
        fetch_release_artifacts([ReleaseManifest(manifest.as_uri(), ("runtime",))], tmp_path / "bad", tmp_path / "cache2")
    assert not (tmp_path / "bad" / wheel.name).exists()
