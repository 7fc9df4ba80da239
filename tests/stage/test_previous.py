"""read_previous: what a re-stage keeps of the wheelhouse already at -o: the wheels its lock vouches
for, and an engine `wh build` added (carried over unless gone, damaged or no longer the manifest's)."""

from __future__ import annotations

import hashlib
import json

from wheelhouse.lock import WH_JSON, WH_JSON_SCHEMA, Lock, LockedFile
from wheelhouse.lock.writer import write_index_files
from wheelhouse.manifest import StackManifest
from wheelhouse.progress import RecordingReporter
from wheelhouse.stage.previous import read_previous
from wheelhouse.target import target_from_flags
from wheelmaker import make_wheel

CP312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
COMMIT = "c0ffee" + "0" * 34


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _wheelhouse(out, *, engine=True, incomplete=False):
    """A wheelhouse holding lib 1.0 and, when ``engine``, a built toyengine with its log."""
    lib = make_wheel(out / "wheels", "lib", "1.0")
    files = [LockedFile("lib", "1.0", lib.name, f"wheels/{lib.name}", _sha(lib))]
    meta = {"schema": WH_JSON_SCHEMA}
    if engine:
        eng = make_wheel(out / "wheels", "toyengine", "0.1.0", tags="cp312-cp312-linux_x86_64",
                         requires=["lib>=1", "winlib; sys_platform == 'win32'"])
        (out / "logs").mkdir()
        (out / "logs" / "build.log").write_text("built\n")
        files.append(LockedFile("toyengine", "0.1.0", eng.name, f"wheels/{eng.name}", _sha(eng),
                                tool={"source": "build", "commit": COMMIT}))
        meta["engine"] = {"name": "toyengine", "commit": COMMIT, "wheel": f"wheels/{eng.name}", "sha256": _sha(eng),
                          "log": "logs/build.log", "artifacts": [{"path": "patches/gone.patch"}]}
        if incomplete:
            meta["engine"]["incomplete"] = ["lib>=1"]
    write_index_files(out, Lock(tuple(files)), meta)
    return files


def _notes(reporter):
    return [e[1] for e in reporter.events if e[0] == "note"]


def test_no_wheelhouse_or_someone_elses_folder_keeps_nothing(tmp_path):
    assert read_previous(tmp_path / "none", None, CP312, RecordingReporter()).wheels == {}
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / WH_JSON).write_text(json.dumps({"schema": "not-wh"}))
    assert read_previous(tmp_path / "other", None, CP312, RecordingReporter()).wheels == {}


def test_the_locked_wheels_are_offered_for_reuse_by_their_sha256(tmp_path):
    files = _wheelhouse(tmp_path / "wh", engine=False)
    prev = read_previous(tmp_path / "wh", None, CP312, RecordingReporter())
    assert prev.wheels == {f.filename: f.sha256 for f in files} and prev.engine is None and prev.notes == ()


def test_a_built_engine_is_carried_over_with_its_log_and_target_requirements(tmp_path):
    out = tmp_path / "wh"
    files = _wheelhouse(out)
    reporter = RecordingReporter()
    kept = read_previous(out, None, CP312, reporter).engine
    assert kept is not None and kept.file.filename == files[1].filename
    assert kept.paths == (files[1].path, "logs/build.log"), "an artifact whose file is gone is not carried"
    assert kept.requirements == ("lib>=1",), "the win32-only requirement does not apply to the target"
    assert kept.file.tool == {"source": "build", "commit": COMMIT}
    assert any(n.startswith("keeping the engine ") and COMMIT[:12] in n for n in _notes(reporter))


def test_an_engine_built_with_allow_incomplete_carries_no_requirements(tmp_path):
    _wheelhouse(tmp_path / "wh", incomplete=True)
    assert read_previous(tmp_path / "wh", None, CP312, RecordingReporter()).engine.requirements == ()


def test_a_damaged_engine_wheel_is_left_out_with_the_reason(tmp_path):
    out = tmp_path / "wh"
    files = _wheelhouse(out)
    (out / files[1].path).write_bytes(b"not the wheel that was built")
    reporter = RecordingReporter()
    prev = read_previous(out, None, CP312, reporter)
    assert prev.engine is None and files[1].filename in prev.wheels
    assert prev.notes == (f"leaving out the engine {files[1].filename}: its wheel is missing or damaged "
                          "(run `wh build` again)",)
    assert _notes(reporter) == list(prev.notes)


def test_an_engine_the_manifest_no_longer_names_is_left_out_naming_the_build_to_run(tmp_path):
    out = tmp_path / "wh"
    _wheelhouse(out)
    recipe = tmp_path / "engine.toml"
    manifest = StackManifest(path=None, name="s", engine_recipe=recipe)
    recipe.write_text(f'[engine]\nname = "toyengine"\nrepo = "/r"\ncommit = "{COMMIT}"\n')
    assert read_previous(out, manifest, CP312, RecordingReporter()).engine is not None
    recipe.write_text(f'[engine]\nname = "toyengine"\nrepo = "/r"\ncommit = "{"b" * 40}"\n')
    prev = read_previous(out, manifest, CP312, RecordingReporter())
    assert prev.engine is None
    (note,) = prev.notes
    assert f"now toyengine at {'b' * 12}" in note and f"wh build {recipe} -o {out}" in note
