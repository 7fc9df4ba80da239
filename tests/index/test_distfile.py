"""wheelhouse.index.distfile: which file names are distributions, and what a Distfile says about one."""

from __future__ import annotations


import pytest

from wheelhouse.index.distfile import Distfile, distfile_from_filename, split_hash_fragment


@pytest.mark.parametrize(
    "filename, name, version",
    [
        ("Foo_Bar-1.0-py3-none-any.whl", "foo-bar", "1.0"),
        ("torch-2.5.1+cu124-cp312-cp312-linux_x86_64.whl", "torch", "2.5.1+cu124"),
        ("pkg-1.0-1build-py3-none-any.whl", "pkg", "1.0"),
        ("foo_bar-2.0.tar.gz", "foo-bar", "2.0"),
        ("Foo.Bar-2.0rc1.zip", "foo-bar", "2.0rc1"),
        ("oldpkg-0.3.tar.bz2", "oldpkg", "0.3"),
        ("oldpkg-0.4.tgz", "oldpkg", "0.4"),
    ],
)
def test_wheels_and_sdists_are_recognised_with_canonical_names(filename, name, version):
    d = distfile_from_filename(filename, f"http://127.0.0.1/f/{filename}", origin="idx")
    assert (d.name, d.version, d.filename, d.origin) == (name, version, filename, "idx")
    assert d.is_wheel == filename.endswith(".whl")


@pytest.mark.parametrize("filename", ["pkg-1.0.exe", "pkg-1.0-py2.7.egg", "notawheel.whl", "README.txt", "pkg.tar.gz", ""])
def test_anything_else_is_not_a_distribution(filename):
    assert distfile_from_filename(filename, "http://127.0.0.1/x") is None


def test_wheel_tags_are_expanded_and_sorted_and_sdists_have_none():
    d = distfile_from_filename("a-1.0-py2.py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "u")
    assert d.tags == (
        "py2-none-manylinux2014_x86_64", "py2-none-manylinux_2_17_x86_64",
        "py3-none-manylinux2014_x86_64", "py3-none-manylinux_2_17_x86_64",
    )
    assert d.build_tag == ()
    assert distfile_from_filename("a-1.0-7-py3-none-any.whl", "u").build_tag == (7, "")
    sdist = distfile_from_filename("a-1.0.tar.gz", "u")
    assert sdist.tags == () and sdist.build_tag == ()


def test_hashes_and_index_facts_are_carried(tmp_path):
    d = distfile_from_filename("a-1.0-py3-none-any.whl", "u", hashes={"sha256": "ab" * 32, "md5": "x"},
                               requires_python=">=3.9", yanked=True, yanked_reason="broken", size=12)
    assert d.sha256 == "ab" * 32 and d.hashes["md5"] == "x"
    assert (d.requires_python, d.yanked, d.yanked_reason, d.size) == (">=3.9", True, "broken", 12)
    assert distfile_from_filename("a-1.0-py3-none-any.whl", "u").sha256 is None


def test_local_path_only_for_file_urls(tmp_path):
    folder = tmp_path / "find links"
    url = (folder / "a-1.0-py3-none-any.whl").as_uri()  # the space is percent-encoded
    assert "%20" in url
    assert distfile_from_filename("a-1.0-py3-none-any.whl", url).local_path == folder / "a-1.0-py3-none-any.whl"
    assert distfile_from_filename("a-1.0-py3-none-any.whl", "http://127.0.0.1/a-1.0-py3-none-any.whl").local_path is None


def test_split_hash_fragment_keeps_known_algorithms_only():
    base, hashes = split_hash_fragment("http://127.0.0.1/f/a.whl#sha256=abc&md5=def&blake2b=zzz&sha512=")
    assert base == "http://127.0.0.1/f/a.whl"
    assert hashes == {"sha256": "abc", "md5": "def"}
    assert split_hash_fragment("http://127.0.0.1/f/a.whl") == ("http://127.0.0.1/f/a.whl", {})


def test_distfiles_are_frozen_values():
    d = Distfile("a", "1.0", "a-1.0.tar.gz", "u")
    with pytest.raises(AttributeError):
        d.version = "2.0"  # type: ignore[misc]


def test_an_sdist_version_is_the_normal_form_packaging_gives_whatever_its_spelling():
    """An sdist's version is taken as written only when it already is its normal form; every other
    spelling (leading zeros, epochs, local parts, alternative pre/post/dev spellings) goes through
    packaging, so the text equals ``str(Version(...))`` either way."""
    import random

    from packaging.utils import parse_sdist_filename

    versions = ["1.0", "0", "01.2", "1.0.0a0", "1.0alpha1", "1.0-1", "1.0.post2", "1.0.dev0", "1.0rc1.post1.dev2", "2!1.0",
                "1.0+local", "1.0.RC1", "1.0c1", "v1.0", "1.0.0.0.1", "1_0", "1.0a01", "10.20.30"]
    rng = random.Random(30)
    versions += ["".join(rng.choice("0123456789.abcrpostdev!+") for _ in range(rng.randint(1, 10))) for _ in range(3000)]
    for v in versions:
        for suffix in (".tar.gz", ".zip"):
            filename = f"Some_Project-{v}{suffix}"
            d = distfile_from_filename(filename, "https://x/" + filename)
            try:
                name, version = parse_sdist_filename(filename)
            except ValueError:
                assert d is None, filename
                continue
            assert d is not None and (d.name, d.version) == (name, str(version)), filename
