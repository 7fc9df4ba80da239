"""wheelhouse.lock.simple_index: the static PEP 503 index written next to the wheels is one that
real pip reads: the right file is chosen (requires-python honoured), its hash is checked, and the
tree still works after it was moved."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from wheelmaker import make_wheel

from wheelhouse.index.pages import parse_simple_html
from wheelhouse.lock.simple_index import IndexEntry, render_project_page, write_simple_index


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _house(root: Path, specs) -> list[IndexEntry]:
    """root/wheels/<wheels> and root/simple/...; specs: (name, version, requires_python)."""
    entries = []
    for name, version, rp in specs:
        w = make_wheel(root / "wheels", name, version, requires_python=rp)
        entries.append(IndexEntry(name, w.name, _sha(w), rp))
    write_simple_index(root / "simple", entries)
    return entries


def _pip_download(simple: Path, req: str, dest: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--isolated", "--no-cache-dir",
         "--disable-pip-version-check", "--index-url", simple.as_uri(), req, "-d", str(dest)],
        capture_output=True, text=True, env=env, timeout=120,
    )


def test_pip_picks_the_newest_wheel_its_python_may_use_and_survives_a_move(tmp_path):
    house = tmp_path / "house"
    _house(house, [
        ("My_Pkg", "1.0", None),
        ("My_Pkg", "1.1+cu124", ">=3.8,!=3.0.*"),  # a local version ('+' in the link) and an escaped '!'
        ("My_Pkg", "1.5", "<3"),  # '<' must reach pip as '<', not as markup
        ("My_Pkg", "2.0", ">=99"),
        ("other", "3.0", None),
    ])
    moved = tmp_path / "mounted elsewhere"  # a space: the file:// URL is percent-encoded
    shutil.move(house, moved)
    done = _pip_download(moved / "simple", "my.pkg", tmp_path / "dl")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == ["My_Pkg-1.1+cu124-py3-none-any.whl"]
    assert (tmp_path / "dl" / "My_Pkg-1.1+cu124-py3-none-any.whl").read_bytes() == \
        (moved / "wheels" / "My_Pkg-1.1+cu124-py3-none-any.whl").read_bytes()


def test_pip_refuses_a_wheel_whose_bytes_are_not_the_listed_ones(tmp_path):
    [entry] = _house(tmp_path, [("demo", "1.0", None)])
    wheel = tmp_path / "wheels" / "demo-1.0-py3-none-any.whl"
    wheel.write_bytes(wheel.read_bytes() + b"\0")  # changed after the index was written
    done = _pip_download(tmp_path / "simple", "demo", tmp_path / "dl")
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "do not match the hashes" in out.lower() and f"Expected sha256 {entry.sha256}" in out
    assert not (tmp_path / "dl" / wheel.name).exists()


def test_the_tree_has_a_root_page_and_one_canonical_page_per_project(tmp_path):
    entries = _house(tmp_path, [("Zope.Interface", "6.0", None), ("zope_interface", "6.1", None), ("a", "1", None)])
    simple = tmp_path / "simple"
    assert sorted(str(p.relative_to(simple)) for p in simple.rglob("index.html")) == \
        ["a/index.html", "index.html", "zope-interface/index.html"]
    root = (simple / "index.html").read_text()
    assert 'href="a/"' in root and 'href="zope-interface/"' in root
    # Read back with wh's own PEP 503 parser: every wheel, its hash, the URL resolving to the file.
    page = simple / "zope-interface" / "index.html"
    got = parse_simple_html(page.read_text(), page.as_uri(), "local")
    assert sorted((d.filename, d.sha256) for d in got) == sorted((e.filename, e.sha256) for e in entries[:2])
    for d in got:
        assert d.local_path == tmp_path / "wheels" / d.filename and d.local_path.is_file()


def test_requires_python_is_html_escaped_and_round_trips():
    entry = IndexEntry("demo", "demo-1.0-py3-none-any.whl", "ab" * 32, '>=3.9,<4,!=3.9.1')
    html = render_project_page("demo", [entry], "../../wheels")
    assert 'data-requires-python="&gt;=3.9,&lt;4,!=3.9.1"' in html
    assert "<4" not in html
    [d] = parse_simple_html(html, "file:///w/simple/demo/", "local")
    assert (d.requires_python, d.sha256, d.url) == ('>=3.9,<4,!=3.9.1', "ab" * 32, "file:///w/wheels/demo-1.0-py3-none-any.whl")


@pytest.mark.parametrize("rel", ["../../wheels", "../../../shared/wheels"])
def test_links_follow_the_wheels_folder_given(rel):
    html = render_project_page("demo", [IndexEntry("demo", "demo-1.0-py3-none-any.whl", "cd" * 32)], rel)
    assert f'href="{rel}/demo-1.0-py3-none-any.whl#sha256={"cd" * 32}"' in html
    assert "data-requires-python" not in html
