"""merge_inputs: the one rule for a manifest and the command line (lists add, single values replace)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from faults import wh_command
from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_wheel
from wheelhouse.errors import UsageError
from wheelhouse.lock import read_pylock
from wheelhouse.manifest import load_manifest
from wheelhouse.stage import StageFlags, merge_inputs
from wheelhouse.target import target_from_flags

PLATFORM = ["--python-version", "3.12", "--platform", "manylinux_2_35_x86_64", "--no-bootstrap"]


def _manifest(tmp_path: Path, main: str, extra: str, links: str = "") -> Path:
    path = tmp_path / "stack.toml"
    path.write_text(
        '[stack]\nname = "s"\nrequirements = ["app"]\nconstraints = ["lib<9"]\n'
        f'index-url = "{main}"\nextra-index-urls = ["{extra}"]\n'
        + (f'find-links = ["{links}"]\n' if links else "")
        + '[target]\npython-version = "3.11"\nplatforms = ["manylinux_2_17_x86_64"]\n'
    )
    return path


def test_lists_add_to_the_manifests_and_single_values_replace_them(tmp_path):
    m = load_manifest(_manifest(tmp_path, "http://127.0.0.1:1/main/", "http://127.0.0.1:1/extra/", "http://127.0.0.1:1/links/"))
    t312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
    flags = StageFlags(requirements=("tool",), constraints=("lib<5",), index_url="http://127.0.0.1:2/cli/",
                       extra_index_urls=("http://127.0.0.1:2/more/", "http://127.0.0.1:1/extra/"),
                       find_links=("/srv/wheels",), target=t312)
    got = merge_inputs(m, flags, tmp_path / "out", jobs=3)
    assert got.requirements == ("app", "tool") and got.constraints == ("lib<9", "lib<5")
    # --index-url replaces the manifest's index-url; the manifest's extra-index-urls stay, the CLI's add (once).
    assert got.index_urls == ("http://127.0.0.1:2/cli/", "http://127.0.0.1:1/extra/", "http://127.0.0.1:2/more/")
    assert got.find_links == ("http://127.0.0.1:1/links/", "/srv/wheels")
    assert got.target is t312 and got.jobs == 3 and got.out == tmp_path / "out"

    plain = merge_inputs(m, StageFlags(), tmp_path / "out")
    assert plain.index_urls == ("http://127.0.0.1:1/main/", "http://127.0.0.1:1/extra/")
    assert plain.target.python_version == "3.11"  # the manifest's [target] when no flag is given


def test_a_bad_index_url_is_refused_whichever_side_gave_it(tmp_path):
    m = load_manifest(_manifest(tmp_path, "http://127.0.0.1:1/main/", "ftp://mirror/simple"))
    with pytest.raises(UsageError, match="ftp://mirror/simple"):
        merge_inputs(m, StageFlags(), tmp_path / "out")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_cli_index_url_keeps_the_manifests_extra_index(pyindex, tmp_path, how):
    """app is only on the CLI's index, lib only on the manifest's extra index: both are needed.
    Before, --index-url (or a set WH_INDEX_URL) silently dropped the manifest's extra-index-urls."""
    make_wheel(tmp_path / "a", "app", "1.0", requires=["lib"])
    make_wheel(tmp_path / "b", "lib", "1.0")
    main, extra = pyindex(tmp_path / "a"), pyindex(tmp_path / "b")
    stack = _manifest(tmp_path, "http://127.0.0.1:9/unused/", extra.url)
    args = ["stage", str(stack), "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), *PLATFORM]
    env = {**os.environ, "NO_COLOR": "1"}
    if how == "flag":
        args += ["--index-url", main.url]
    else:
        env["WH_INDEX_URL"] = main.url
    proc = subprocess.run(wh_command(args), capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert {f.name for f in read_pylock(tmp_path / "out").files} == {"app", "lib"}


def test_help_states_the_rule():
    proc = subprocess.run(wh_command(["stage", "--help"]), capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})
    text = " ".join(proc.stdout.split())
    assert "lists ADD to the manifest's" in text and "single values REPLACE it" in text
    assert "replaces the manifest's index-url (its extra-index-urls stay)" in text


def _no_index_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "WH_INDEX_URL")}
    # PIP_NO_INDEX: pip itself would use no index, so wh asks no pip for its stated default either.
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "HOME": str(tmp_path), "NO_COLOR": "1",
            "COLUMNS": "200"}


def test_find_links_alone_stage_when_no_index_is_configured_anywhere(tmp_path, monkeypatch):
    """No --index-url, none in the manifest, none in pip's configuration: -f is enough (pip --no-index -f)."""
    make_wheel(tmp_path / "local", "app", "1.0", requires=["lib"])
    make_wheel(tmp_path / "local", "lib", "1.0")
    env = _no_index_env(tmp_path)
    proc = subprocess.run(wh_command(["stage", "app", "-f", str(tmp_path / "local"), "-o", str(tmp_path / "out"),
                                      "--cache-dir", str(tmp_path / "c"), *PLATFORM]),
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert {f.name for f in read_pylock(tmp_path / "out").files} == {"app", "lib"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "WH_INDEX_URL"):
        monkeypatch.delenv(key, raising=False)
    got = merge_inputs(None, StageFlags(find_links=("/w",)), tmp_path / "o")
    assert got.index_urls == () and got.find_links == ("/w",)

    # Nothing at all to stage from: the missing index is named, with the flag to pass.
    proc = subprocess.run(wh_command(["stage", "app", "-o", str(tmp_path / "out2"), "--cache-dir",
                                      str(tmp_path / "c"), *PLATFORM]),
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode != 0 and "no package index configured" in proc.stderr and "--index-url" in proc.stderr
    assert not (tmp_path / "out2").exists()
