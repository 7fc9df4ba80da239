"""add_to_wheelhouse: a built engine recorded in its wheelhouse (wheel, exported backports, lock entry,
simple/ page, wh.json["engine"]) through the one writer; a failure at any step puts back exactly what
was there."""

from __future__ import annotations

import hashlib
import sys

import pytest

from nvidia_fixtures import tree_listing
from wheelhouse.engine.record import Built, add_to_wheelhouse
from wheelhouse.engine.recipe import parse_recipe
from wheelhouse.engine.requirements import EngineIncomplete
from wheelhouse.engine.source import AppliedBackport
from wheelhouse.lock import WH_JSON_SCHEMA, Lock, LockedFile, read_pylock, read_wh_json
from wheelhouse.lock.writer import environment_marker, requires_python_for, write_index_files
from wheelhouse.progress import RecordingReporter
from wheelhouse.target import target_from_flags
from wheelhouse.target.interpreter import inspect_interpreter
from wheelmaker import make_wheel

CP312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
COMMIT = "a" * 40
PATCH = b"--- a/x.py\n+++ b/x.py\n"


@pytest.fixture(scope="module")
def interp():
    return inspect_interpreter(sys.executable)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _wheelhouse(root):
    lib = make_wheel(root / "wheels", "lib", "1.0")
    files = (LockedFile("lib", "1.0", lib.name, f"wheels/{lib.name}", _sha(lib.read_bytes())),)
    write_index_files(root, Lock(files, (environment_marker(CP312),), requires_python_for(CP312)),
                      {"schema": WH_JSON_SCHEMA, "target": CP312.to_json(), "owned": ["wheels"]})
    return root


def _built(cache, *, requires=(), backports=(), version="0.1.0"):
    wheel = make_wheel(cache, "toyengine", version, tags="cp312-cp312-linux_x86_64", requires=list(requires))
    return Built(wheel=wheel, key="k1", reused=False, refs={"main": COMMIT}, backports=tuple(backports),
                 tree_status=(), env={"PATH": "/opt/cuda/bin:/usr/bin"}, log_rel="logs/toyengine.log", links=())


def _add(wh, built, interp, tmp_path, **kw):
    recipe = parse_recipe({"engine": {"name": "toyengine", "repo": "/r", "commit": COMMIT}})
    return add_to_wheelhouse(recipe, built, interp, wh, read_wh_json(wh), tmp_path / "cache-dl", RecordingReporter(),
                             kw.pop("index_urls", []), kw.pop("find_links", []), kw.pop("allow_incomplete", False), None)


def test_the_engine_joins_the_lock_beside_what_was_staged(tmp_path, interp):
    wh = _wheelhouse(tmp_path / "wh")
    (wh / "logs").mkdir()
    (wh / "logs" / "toyengine.log").write_text("built\n")
    built = _built(tmp_path / "cache", requires=["lib>=1"])
    done = _add(wh, built, interp, tmp_path)
    assert done.wheel == wh / "wheels" / built.wheel.name and done.wheel.read_bytes() == built.wheel.read_bytes()
    lock = read_pylock(wh).by_name()
    assert set(lock) == {"lib", "toyengine"} and done.added == () and done.missing == ()
    assert lock["toyengine"].tool == {"source": "build", "recipe": "toyengine", "commit": COMMIT}
    assert lock["toyengine"].sha256 == done.sha256 == _sha(built.wheel.read_bytes())
    engine = read_wh_json(wh)["engine"]
    assert engine == dict(done.record)
    assert (engine["commit"], engine["wheel"], engine["log"]) == (COMMIT, f"wheels/{built.wheel.name}", "logs/toyengine.log")
    assert engine["build"]["PATH_head"] == "/opt/cuda/bin" and engine["build"]["python"] == interp.executable
    assert built.wheel.name in (wh / "simple" / "toyengine" / "index.html").read_text()
    assert (wh / "capture_target.py").is_file()
    assert done.log_path == wh / "logs" / "toyengine.log"


def test_a_rebuild_replaces_the_engines_lock_entry(tmp_path, interp):
    wh = _wheelhouse(tmp_path / "wh")
    _add(wh, _built(tmp_path / "c1"), interp, tmp_path)
    second = _built(tmp_path / "c2", version="0.2.0")
    _add(wh, second, interp, tmp_path)
    locked = [f for f in read_pylock(wh).files if f.name == "toyengine"]
    assert [f.filename for f in locked] == [second.wheel.name]
    assert read_wh_json(wh)["engine"]["log"] is None, "no log in the wheelhouse: none recorded"


def test_an_exported_backport_is_written_and_recorded_as_an_artifact(tmp_path, interp):
    wh = _wheelhouse(tmp_path / "wh")
    bp = AppliedBackport("x.py", "pr/243", "b" * 40, _sha(PATCH), None, export="patches/pr243.patch", content=PATCH)
    done = _add(wh, _built(tmp_path / "cache", backports=[bp]), interp, tmp_path)
    assert (wh / "patches" / "pr243.patch").read_bytes() == PATCH
    (art,) = done.record["artifacts"]
    assert art == {"path": "patches/pr243.patch", "sha256": _sha(PATCH), "before_sha256": None,
                   "source": "pr/243:x.py", "file": "x.py"}
    assert "patches/pr243.patch" in read_wh_json(wh)["owned"]


def test_missing_requirements_undo_everything_unless_incomplete_is_allowed(tmp_path, interp):
    wh = _wheelhouse(tmp_path / "wh")
    before = tree_listing(wh)
    bp = AppliedBackport("x.py", "pr/243", "b" * 40, _sha(PATCH), None, export="patches/pr243.patch", content=PATCH)
    built = _built(tmp_path / "cache", requires=["lib>=1", "zmqlike>=25"], backports=[bp])
    with pytest.raises(EngineIncomplete, match="needs 1 requirement"):
        _add(wh, built, interp, tmp_path)
    assert tree_listing(wh) == before, "the wheel and the exported patch were put back out"
    done = _add(wh, built, interp, tmp_path, allow_incomplete=True)
    assert done.missing == ("zmqlike>=25",) and read_wh_json(wh)["engine"]["incomplete"] == ["zmqlike>=25"]


def test_missing_requirements_are_staged_from_the_given_find_links(tmp_path, interp):
    wh = _wheelhouse(tmp_path / "wh")
    dep = make_wheel(tmp_path / "links", "zmqlike", "25.1")
    done = _add(wh, _built(tmp_path / "cache", requires=["zmqlike>=25"]), interp, tmp_path,
                find_links=[str(tmp_path / "links")])
    assert done.added == ("zmqlike==25.1",)
    assert (wh / "wheels" / dep.name).read_bytes() == dep.read_bytes()
    assert set(read_pylock(wh).by_name()) == {"lib", "toyengine", "zmqlike"}


def test_the_engine_s_image_requirements_join_the_delta_s_assumptions():
    from wheelhouse.engine.record import _with_assumed

    data = {"assumed_present": [{"name": "torch", "version": "2.11.0"}], "image": {"full": False}}
    out = _with_assumed(data, (("numpy", "2.4.6"), ("torch", "2.11.0")))
    assert out["assumed_present"] == [{"name": "numpy", "version": "2.4.6"}, {"name": "torch", "version": "2.11.0"}]
    assert data["assumed_present"] == [{"name": "torch", "version": "2.11.0"}]  # the caller's dict is not changed
    assert _with_assumed(data, ()) is data
