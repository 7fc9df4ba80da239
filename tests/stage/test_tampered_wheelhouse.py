"""Hostile round 9: `wh stage` re-staging over a wheelhouse whose wh.json was tampered with.

A real index on 127.0.0.1 and real wheels; the previous wheelhouse is edited the way an attacker
(or a careless hand) would, and the re-stage must neither touch files outside the wheelhouse nor
carry what it cannot vouch for.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_wheel
from wheelhouse.lock import WH_JSON, read_wh_json
from wheelhouse.stage import StageFlags, merge_inputs, stage
from wheelhouse.target import target_from_flags

CP312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
COMMIT = "c0ffee" + "0" * 34


def _stage(idx, out, cache):
    flags = StageFlags(requirements=("app==1.0",), index_url=idx.url, target=CP312)
    return stage(merge_inputs(None, flags, out, cache_dir=cache, bootstrap=False))


def _forge_engine(out, **paths):
    """Record in wh.json an engine `wh build` never made: a real wheel, its sha256, and ``paths``."""
    eng = make_wheel(out / "wheels", "toyengine", "0.1.0")
    meta = json.loads((out / WH_JSON).read_text())
    meta["engine"] = {"name": "toyengine", "commit": COMMIT, "wheel": f"wheels/{eng.name}",
                      "sha256": hashlib.sha256(eng.read_bytes()).hexdigest(), **paths}
    (out / WH_JSON).write_text(json.dumps(meta))


@pytest.mark.parametrize("how", ["absolute", "dotdot"])
def test_a_tampered_engine_log_path_never_touches_a_file_outside_the_wheelhouse(pyindex, tmp_path, how):
    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0")
    idx = pyindex(pub)
    out, cache = tmp_path / "wh", tmp_path / "cache"
    _stage(idx, out, cache)
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's own file\n")
    _forge_engine(out, log=str(precious) if how == "absolute" else "../precious.txt",
                  artifacts=[{"path": str(precious) if how == "absolute" else "wheels/../../precious.txt"}])

    _stage(idx, out, cache)

    assert precious.read_text() == "the user's own file\n"
    engine = read_wh_json(out)["engine"]
    assert "precious" not in json.dumps(engine)  # the new wh.json names nothing outside the wheelhouse
    assert not [p for p in tmp_path.iterdir() if ".wh-new-" in p.name or ".wh-old-" in p.name]


def test_a_tampered_engine_wheel_path_outside_the_wheelhouse_is_left_out(pyindex, tmp_path):
    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0")
    idx = pyindex(pub)
    out, cache = tmp_path / "wh", tmp_path / "cache"
    _stage(idx, out, cache)
    outside = make_wheel(tmp_path / "elsewhere", "toyengine", "0.1.0")
    before = outside.read_bytes()
    meta = json.loads((out / WH_JSON).read_text())
    meta["engine"] = {"name": "toyengine", "commit": COMMIT, "wheel": str(outside),
                      "sha256": hashlib.sha256(before).hexdigest()}
    (out / WH_JSON).write_text(json.dumps(meta))

    res = _stage(idx, out, cache)

    assert outside.read_bytes() == before  # the file outside is neither removed nor replaced
    assert res.engine is None and "toyengine" not in (out / "pylock.toml").read_text()
    assert any("leaving out the engine" in n for n in res.notes)
