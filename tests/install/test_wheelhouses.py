"""Finding wheelhouses on the box: below given roots, the same one counted once, disagreements refused."""

from __future__ import annotations

import pytest

from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel

from wheelhouse.install.errors import AmbiguousWheelhouse
from wheelhouse.install.wheelhouses import check_unambiguous, find_wheelhouses, load_wheelhouse
from wheelhouse.lock import WheelhouseNotFound


def test_load_reads_lock_and_meta(tmp_path):
    house = make_wheelhouse(tmp_path / "h", [make_wheel(tmp_path / "w", "a", "1.0")], patches=["patches/x.toml"])
    h = load_wheelhouse(house)
    assert [(f.name, f.version) for f in h.files] == [("a", "1.0")]
    assert h.patches == ("patches/x.toml",) and h.target is not None


def test_find_explicit_and_searched_and_not_inside_a_wheelhouse(tmp_path):
    one = make_wheelhouse(tmp_path / "mnt" / "a" / "wh", [make_wheel(tmp_path / "w", "a", "1.0")])
    # A wheelhouse's own folders hold no further wheelhouses; dot folders and too-deep ones are not searched.
    make_wheelhouse(one / "nested", [make_wheel(tmp_path / "w2", "n", "1.0")])
    make_wheelhouse(tmp_path / "mnt" / ".hidden" / "wh", [make_wheel(tmp_path / "w3", "h", "1.0")])
    make_wheelhouse(tmp_path / "mnt" / "1" / "2" / "3" / "4" / "5" / "6" / "7" / "wh",
                    [make_wheel(tmp_path / "w4", "d", "1.0")])
    assert find_wheelhouses([], [tmp_path / "mnt"]) == [one.resolve()]
    assert find_wheelhouses([one]) == [one.resolve()]
    assert find_wheelhouses([one / "wh.json"]) == [one.resolve()]
    for bad, msg in ((tmp_path / "nope", "does not exist"), (one / "pylock.toml", "is a file"),
                     (tmp_path / "w", "no wheelhouse")):
        with pytest.raises(WheelhouseNotFound, match=msg):
            find_wheelhouses([bad])


def test_two_wheelhouses_disagreeing_on_a_version_are_refused(tmp_path):
    a = load_wheelhouse(make_wheelhouse(tmp_path / "a", [make_wheel(tmp_path / "w", "x", "1.0")]))
    b = load_wheelhouse(make_wheelhouse(tmp_path / "b", [make_wheel(tmp_path / "w2", "x", "2.0")]))
    check_unambiguous([a, a])
    with pytest.raises(AmbiguousWheelhouse, match="x: 1.0 in .*, 2.0 in"):
        check_unambiguous([a, b])


def test_search_with_one_stack_staged_for_two_pythons_picks_the_one_for_this_interpreter(pyindex, tmp_path):
    # issue 32 (10): the same stack staged for cp311 and cp312 under one root pins lib differently; the target
    # decides which one is meant before the versions are compared.
    import json
    import os
    import subprocess
    import sys

    from faults import wh_command

    def wh(*args):
        return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300,
                              env={**os.environ, "NO_COLOR": "1"})

    pub = tmp_path / "pub"
    make_wheel(pub, "lib", "1.0")
    make_wheel(pub, "lib", "2.0", tags="cp312-cp312-manylinux_2_17_x86_64")
    make_wheel(pub, "lib", "3.0", tags="cp311-cp311-manylinux_2_17_x86_64")
    idx = pyindex(pub)
    here = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    other = "3.12" if here != "cp312" else "3.11"
    common = ["--index-url", idx.url, "--cache-dir", tmp_path / "c", "--no-bootstrap"]
    assert wh("stage", "lib", "-o", tmp_path / "root" / here, *common).returncode == 0
    r = wh("stage", "lib", "--python-version", other, "--platform", "manylinux_2_35_x86_64",
           "-o", tmp_path / "root" / "other", *common)
    assert r.returncode == 0, r.stderr
    r = wh("install", "--search", tmp_path / "root", "--venv", tmp_path / "venv", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["wheelhouses"] == [str((tmp_path / "root" / here).resolve())]
    assert [d["name"] for d in report["installed"]] == ["lib"]
    assert "skipped" in r.stderr and "other" in r.stderr  # the one for the other Python, said
