"""patch spec: unknown keys refused with a did-you-mean; bounded reading; bundled by name."""

from __future__ import annotations

import os

import pytest

from wheelhouse.patch.spec import PatchSpecError, load_patch_spec, parse_patch_spec

_P = {"name": "p", "distribution": "d", "file": "d/x.py", "payload": "x.py", "before-sha256": "a" * 64}


@pytest.mark.parametrize("data, where, typo, guess", [
    ({"patch": {**_P, "payload-sha": "b" * 64}}, "[patch]", "payload-sha", "payload-sha256"),
    ({"patch": {**_P, "verify": {"call": "a:b", "expcet": False}}}, "[patch.verify]", "expcet", "expect"),
    ({"patch": _P, "pacth": {}}, "patch spec", "pacth", "patch"),
])
def test_unknown_keys_are_refused_with_a_guess(data, where, typo, guess):
    with pytest.raises(PatchSpecError) as info:
        parse_patch_spec(data)
    assert info.value.message.startswith(f"{where}: unknown ")
    assert f"{typo!r} (did you mean {guess!r}?)" in info.value.message


def test_verify_call_must_be_a_string():
    with pytest.raises(PatchSpecError, match=r"needs call = \"module:function\""):
        parse_patch_spec({"patch": {**_P, "verify": {"call": 7}}})


def test_load_refuses_a_fifo_and_finds_bundled_specs(tmp_path):
    os.mkfifo(tmp_path / "s.toml")
    with pytest.raises(PatchSpecError, match=r"patch spec .*s\.toml is not a regular file"):
        load_patch_spec(tmp_path / "s.toml")
    assert load_patch_spec("freetoken-fp8-rowwise").name == load_patch_spec("freetoken-fp8-rowwise.toml").name
