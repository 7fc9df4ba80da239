"""Early downloads, attacked (wheelhouse.fetch.early): a guess is a speed-up, never a different answer,
and nothing is lost or leaked (no partial file, no stray helper, no file placed that was not pinned).

A real index on 127.0.0.1 (slow pages, slow files, scripted errors), real wheels, real helper processes;
WH_EARLY_FETCH=always so the helpers start at the first guess whatever the machine.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helper_procs import helper_pids
from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_wheel

from wheelhouse.progress import RecordingReporter
from wheelhouse.stage import StageFlags, merge_inputs, stage
from wheelhouse.target import target_from_flags

FETCH_HELPER = b"wheelhouse.fetch.procs"


@pytest.fixture(autouse=True)
def _always(monkeypatch):
    monkeypatch.setenv("WH_EARLY_FETCH", "always")


def _argv(idx, tmp_path: Path, *reqs: str, out: str = "out", cache: str = "cache") -> list[str]:
    return [sys.executable, "-m", "wheelhouse", "stage", *reqs, "--index-url", idx.url, "--python-version", "3.12",
            "--platform", "manylinux_2_35_x86_64", "--no-bootstrap", "--cache-dir", str(tmp_path / cache),
            "-o", str(tmp_path / out)]


def _cli(idx, tmp_path: Path, *reqs: str, early: str = "always", timeout: float = 60, env: dict | None = None,
         **kw) -> subprocess.CompletedProcess:
    return subprocess.run(_argv(idx, tmp_path, *reqs, **kw), env={**os.environ, "WH_EARLY_FETCH": early, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def _inproc(idx, tmp_path: Path, *reqs: str, out: str = "out", cache: str = "cache", **run):
    rec = RecordingReporter()
    flags = StageFlags(requirements=tuple(reqs), index_url=idx.url,
                       target=target_from_flags("3.12", ["manylinux_2_35_x86_64"]))
    res = stage(merge_inputs(None, flags, tmp_path / out, cache_dir=tmp_path / cache, bootstrap=False, **run),
                reporter=rec)
    return res, rec


def _wheels(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((folder / "wheels").glob("*.whl"))}


def _leftovers(cache: Path) -> list[str]:
    part = cache / "partial"
    return sorted(p.name for p in part.iterdir()) if part.is_dir() else []


def _no_helpers_left(parent: int | None = None) -> None:
    deadline = time.monotonic() + 10
    while helper_pids(FETCH_HELPER, parent=parent, zombies=False):
        assert time.monotonic() < deadline, "an early download helper outlived the stage"
        time.sleep(0.05)


def _bar(rec: RecordingReporter, task: str = "download") -> tuple[float | None, float]:
    total = [e[2] for e in rec.events if e[0] == "start" and e[1] == task]
    done = sum(e[2] for e in rec.events if e[0] == "advance" and e[1] == task)
    return (total[-1] if total else None), done


# --- a guess the resolution dropped, already filed --------------------------------------------------

@pytest.fixture
def filed_drop(tmp_path, pyindex):  # noqa: F811
    """Requested: b and app. The walk ahead guesses b 2.0 (2 MB, fast: filed long before the resolution
    ends, since app's page answers 1 s late); app needs b<2, so b 1.0 is pinned."""
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["b<2"])
    make_wheel(d, "b", "1.0", pad_bytes=300_000)
    make_wheel(d, "b", "2.0", pad_bytes=2_000_000)
    idx = pyindex(d, serve_metadata=True)
    idx.delays["/simple/app/"] = 1.0
    return idx


def test_the_download_bar_of_a_stage_with_a_dropped_filed_guess_ends_at_its_total(filed_drop, tmp_path):
    """The bytes of a guess the resolution dropped are not this stage's downloads: the bar counts only the
    pinned files' bytes, never more than its total."""
    idx = filed_drop
    res, rec = _inproc(idx, tmp_path, "b", "app")
    assert idx.hits["/files/b-2.0-py3-none-any.whl"] >= 1  # guessed and downloaded
    assert sorted(_wheels(tmp_path / "out")) == ["app-1.0-py3-none-any.whl", "b-1.0-py3-none-any.whl"]
    total, done = _bar(rec)
    pinned = sum(len(idx.files[f]) for f in ("app-1.0-py3-none-any.whl", "b-1.0-py3-none-any.whl"))
    assert total == pinned, (total, pinned)
    assert done == total, (done, total)
    _no_helpers_left()
    assert _leftovers(tmp_path / "cache") == []
