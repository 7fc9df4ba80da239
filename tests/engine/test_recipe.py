"""recipe: unknown keys are refused with a did-you-mean; the file is read through the bounded loader."""

from __future__ import annotations

import os

import pytest

from wheelhouse.engine.recipe import RecipeError, load_recipe, parse_recipe

_BASE = {"name": "e", "repo": "/r", "commit": "a" * 40}


@pytest.mark.parametrize("data, where, typo, guess", [
    ({"engine": {**_BASE, "fetchs": []}}, "[engine]", "fetchs", "fetch"),
    ({"engine": {**_BASE, "build": {"subdirectroy": "."}}}, "[engine.build]", "subdirectroy", "subdirectory"),
    ({"engine": {**_BASE, "backport": [{"path": "a.py", "ref": "r", "exprot": "x"}]}}, "[[engine.backport]] #1",
     "exprot", "export"),
    ({"engine": _BASE, "engin": {}}, "recipe", "engin", "engine"),
])
def test_unknown_keys_are_refused_with_a_guess(data, where, typo, guess):
    with pytest.raises(RecipeError) as info:
        parse_recipe(data)
    assert info.value.message.startswith(f"{where}: unknown ")
    assert f"{typo!r} (did you mean {guess!r}?)" in info.value.message and guess in info.value.hint


def test_load_refuses_a_fifo_and_names_bad_toml(tmp_path):
    os.mkfifo(tmp_path / "r.toml")
    with pytest.raises(RecipeError, match=r"recipe .*r\.toml is not a regular file \(a FIFO\)"):
        load_recipe(tmp_path / "r.toml")
    (tmp_path / "bad.toml").write_text('[engine]\nname = "e"\nrepo =\n')
    with pytest.raises(RecipeError, match=r"recipe .*bad\.toml is not valid TOML: .*line 3"):
        load_recipe(tmp_path / "bad.toml")


def test_bundled_by_name_and_unknown_name_lists_recipes():
    assert load_recipe("freetoken-pr70").name == "freetoken"
    with pytest.raises(RecipeError) as info:
        load_recipe("no-such-recipe")
    assert "freetoken-pr70" in info.value.hint and "rowwise" not in info.value.hint
