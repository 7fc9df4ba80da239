"""`wh stage -v` says why each pin was chosen (issue 32.11): the requirements that brought it in, the
newest version the target could have had against the one chosen, the newer releases left out and why,
"provided by the image", and what the resolver backtracked. Through the real `wh` entry point, against
a loopback index of real wheels."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

from wheelmaker import make_wheel

from wheelhouse.target import target_from_flags
from wheelhouse.target.profile import ProvidedDist

WH = [sys.executable, "-c", "import sys; from wheelhouse.cli import main; main(sys.argv[1:])"]


def _profile(tmp_path, *pairs):
    base = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
    box = dataclasses.replace(base, source="captured", provided=tuple(
        ProvidedDist(n, v, "system", "/usr/lib/python3/dist-packages") for n, v in pairs))
    path = tmp_path / "box.json"
    path.write_text(json.dumps(box.to_json()))
    return path


def _stage(tmp_path, idx, *extra):
    return subprocess.run([*WH, "stage", "app", "--dry-run", "--target", str(_profile(tmp_path, ("img", "1.0"))),
                           "-i", idx.url, "--cache-dir", str(tmp_path / "cache"), "--no-bootstrap", *extra],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"})


def test_verbose_stage_explains_each_pin_and_the_backtracking(pyindex, tmp_path):
    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0", requires=["lib<2", "dep", "img>=1"])
    for v in ("1.0", "1.5", "2.0", "2.1"):
        make_wheel(pub, "lib", v)
    make_wheel(pub, "dep", "1.0")
    make_wheel(pub, "dep", "2.0", requires=["lib>=2"])  # conflicts with app's lib<2: backtracked
    make_wheel(pub, "dep", "3.0", tags="cp313-cp313-manylinux_2_17_x86_64")  # no wheel for cp312
    make_wheel(pub, "dep", "4.0", requires_python=">=3.13")
    make_wheel(pub, "img", "1.0")
    make_wheel(pub, "img", "1.1")
    idx = pyindex(pub, serve_metadata=True)

    quiet = _stage(tmp_path, idx)
    assert quiet.returncode == 0, quiet.stderr
    assert "why " not in quiet.stderr and "backtracked" not in quiet.stderr  # only at -v

    r = _stage(tmp_path, idx, "-v")
    assert r.returncode == 0, r.stderr
    lines = {ln.split(":", 1)[0]: ln for ln in r.stderr.splitlines() if ln.startswith("why ")}
    assert lines["why app==1.0"].startswith("why app==1.0: app (requested)")
    lib = lines["why lib==1.5"]
    assert "lib<2 (from app==1.0)" in lib and "newest for the target 2.1" in lib
    assert "2.1 (excluded by lib<2 (from app==1.0))" in lib and "2.0 (excluded by lib<2 (from app==1.0))" in lib
    dep = lines["why dep==1.0"]
    assert "dep (from app==1.0)" in dep and "newest for the target 4.0" in dep  # (its index page names no Python)
    assert "4.0 (Requires-Python >=3.13: the target has Python 3.12" in dep  # from its METADATA
    assert "3.0 (no wheel for cp312" in dep
    assert "2.0 (it needs lib>=2, and lib==1.5 is pinned)" in dep
    assert "provided by the image" in lines["why img==1.0"] and "img>=1 (from app==1.0)" in lines["why img==1.0"]
    assert r.stdout == quiet.stdout  # the pins on stdout are the same: -v explains, on stderr


def test_verbose_stage_says_what_was_backtracked(pyindex, tmp_path):
    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0", requires=["a", "b"])
    make_wheel(pub, "a", "1.0")
    make_wheel(pub, "a", "2.0", requires=["c<2"])
    make_wheel(pub, "b", "1.0", requires=["d"])
    make_wheel(pub, "d", "1.0", requires=["c>=2"])
    make_wheel(pub, "c", "1.0")
    make_wheel(pub, "c", "2.0")
    make_wheel(pub, "img", "1.0")
    idx = pyindex(pub, serve_metadata=True)
    r = _stage(tmp_path, idx, "-v")
    assert r.returncode == 0, r.stderr
    assert "a==1.0" in r.stdout and "c==2.0" in r.stdout
    why_a = next(ln for ln in r.stderr.splitlines() if ln.startswith("why a==1.0: "))
    assert "newest for the target 2.0" in why_a
    assert "2.0 (backtracked: conflicts with c<2 (from a==2.0); c>=2 (from d==1.0))" in why_a
    gave_up = [ln for ln in r.stderr.splitlines() if ln.startswith("backtracked: ")]
    assert gave_up == ["backtracked: gave up a==2.0 (it conflicts with c<2 (from a==2.0); c>=2 (from d==1.0))"]
