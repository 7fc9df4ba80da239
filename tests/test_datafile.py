"""datafile: one loader for every TOML/JSON file wh reads; bounded, regular files only, clear errors."""

from __future__ import annotations

import os
import threading

import pytest

from wheelhouse.datafile import (
    check_keys,
    did_you_mean,
    find_bundled,
    get_value,
    load_json,
    load_toml,
    read_text,
)
from wheelhouse.errors import EXIT_USAGE, UsageError


class SpecError(UsageError):
    code = "bad-thing"


def _err(fn, *a, **kw) -> SpecError:
    with pytest.raises(SpecError) as info:
        fn(*a, error=SpecError, what="thing", hint="HINT", **kw)
    e = info.value
    assert e.code == "bad-thing" and e.exit_code == EXIT_USAGE and e.hint
    return e


def test_toml_and_json_load(tmp_path):
    (tmp_path / "a.toml").write_text('[x]\ny = 1\n', encoding="utf-8")
    (tmp_path / "a.json").write_text('{"y": [1, 2]}', encoding="utf-8")
    assert load_toml(tmp_path / "a.toml") == {"x": {"y": 1}}
    assert load_json(tmp_path / "a.json") == {"y": [1, 2]}


def test_missing_folder_and_unreadable_name_the_file(tmp_path):
    e = _err(load_toml, tmp_path / "nope.toml")
    assert "thing" in e.message and "nope.toml" in e.message and "does not exist" in e.message and e.hint == "HINT"
    e = _err(load_toml, tmp_path)
    assert "is a folder" in e.message


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "shard.fifo"
    os.mkfifo(fifo)
    result: list = []
    t = threading.Thread(target=lambda: result.append(_err(read_text, fifo)), daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "reading a FIFO blocked"
    assert "not a regular file (a FIFO)" in result[0].message


def test_dev_zero_is_refused_at_once():
    e = _err(read_text, "/dev/zero")
    assert "/dev/zero is not a regular file (a device)" in e.message


def test_size_bound(tmp_path):
    big = tmp_path / "big.toml"
    big.write_bytes(b"# " + b"x" * 2000 + b"\n")
    e = _err(load_toml, big, max_bytes=1000)
    assert "big.toml" in e.message and "more than" in e.message


def test_not_utf8_names_the_line(tmp_path):
    p = tmp_path / "latin.toml"
    p.write_bytes(b'a = 1\nb = "caf\xe9"\n')
    e = _err(load_toml, p)
    assert "not UTF-8" in e.message and "line 2" in e.message


def test_toml_syntax_error_names_the_line(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("a = 1\nb = \n", encoding="utf-8")
    e = _err(load_toml, p)
    assert "bad.toml is not valid TOML" in e.message and "line 2" in e.message


def test_json_errors(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{\n  "a": 1,\n}', encoding="utf-8")
    e = _err(load_json, p)
    assert "bad.json is not valid JSON" in e.message and "line 3" in e.message
    p.write_text("[1, 2]", encoding="utf-8")
    e = _err(load_json, p)
    assert "is not a JSON object (it holds a list)" in e.message


def test_find_bundled(tmp_path):
    (tmp_path / "demo.toml").write_text("", encoding="utf-8")
    assert find_bundled("demo", tmp_path) == tmp_path / "demo.toml"
    assert find_bundled("demo.toml", tmp_path) == tmp_path / "demo.toml"
    assert find_bundled("sub/demo", tmp_path) is None  # a path is a path, never a bundled name
    assert find_bundled("other", tmp_path) is None


def test_check_keys_did_you_mean():
    allowed = {"requirements", "requirements-files", "constraints", "constraints-files"}
    check_keys({"requirements": []}, allowed, "manifest m.toml [stack]", error=SpecError)
    with pytest.raises(SpecError) as info:
        check_keys({"requirement-files": [], "constrains": [], "zzz": 1}, allowed, "manifest m.toml [stack]",
                   error=SpecError)
    msg = info.value.message
    assert msg.startswith("manifest m.toml [stack]: unknown keys")
    assert "'requirement-files' (did you mean 'requirements-files'?)" in msg
    assert "'constrains' (did you mean 'constraints'?)" in msg
    assert "'zzz'" in msg and "known keys there: constraints" in info.value.hint
    assert did_you_mean("forse", ["force", "module"]) == "force"


def test_get_value_types():
    t = {"script": 7, "gpus": True, "n": 3, "t": 1.5}
    assert get_value(t, "n", (int,), "x.n") == 3
    assert get_value(t, "missing", (str,), "x.missing", default="d") == "d"
    assert get_value(t, "t", (int, float), "x.t") == 1.5
    with pytest.raises(SpecError) as info:
        get_value(t, "script", (str,), "jit[0].script", error=SpecError)
    assert info.value.message == "jit[0].script must be a string, not 7" and 'script = "7"' in info.value.hint
    with pytest.raises(SpecError) as info:
        get_value(t, "gpus", (int,), "doctor.gpus", error=SpecError)
    assert "must be an integer, not True" in info.value.message


# --- every loader goes through here: typos and wrong types are clear errors -------------------------

def test_rule_file_typos_and_types(tmp_path):
    from wheelhouse.doctor.rules import RuleError, load_rules

    rules = tmp_path / "rules"
    rules.mkdir()
    f = rules / "x.toml"
    base = '[[rule]]\nid = "x"\ntitle = "t"\n'
    for body, needle in [
        (base + 'verdit = "warn"\n[[rule.when]]\nenv = "A"\n', "'verdit' (did you mean 'verdict'?)"),
        (base + '[[rule.when]]\npackage = "torch"\nversoin = "<2"\n', "'versoin' (did you mean 'version'?)"),
        (base + '[[rule.when]]\npackage = 5\n', "package must be a string, not 5"),
        ('[[rulez]]\nid = "x"\n', "'rulez' (did you mean 'rule'?)"),
    ]:
        f.write_text(body)
        with pytest.raises(RuleError) as info:
            load_rules([rules])
        assert str(f) in info.value.message and needle in info.value.message, info.value.message


def test_jit_registry_script_7_is_a_clear_error(tmp_path):
    """Before: `script = 7` was an internal error (TypeError joining a path with an int)."""
    from wheelhouse.doctor.checks.jit import JIT_ENV, JitRegistryError, load_jit_probes

    f = tmp_path / "jit.toml"
    for body, needle in [
        ('[[jit]]\nid = "x"\ndistribution = "x"\nscript = 7\n', "jit[0].script must be a string, not 7"),
        ('[[jit]]\nid = "x"\ndistribution = "x"\nscript = "p.py"\nneeds_gpus = false\n',
         "'needs_gpus' (did you mean 'needs_gpu'?)"),
        ('[[jit]]\nid = "x"\ndistribution = [1]\nscript = "p.py"\n', "distribution must be a list of strings"),
    ]:
        f.write_text(body)
        with pytest.raises(JitRegistryError) as info:
            load_jit_probes({JIT_ENV: str(f)})
        assert needle in info.value.message and info.value.hint
    f.write_text('[[jit]]\nid = "x"\ndistribution = "x"\nscript = "p.py"\nneeds_gpu = false\n')
    (probe,) = [p for p in load_jit_probes({JIT_ENV: str(f)}) if p.id == "x"]
    assert probe.script == tmp_path / "p.py" and probe.needs_gpu is False


def test_wheelhouse_records_are_bounded_and_regular(tmp_path):
    from wheelhouse.lock import LockError, WheelhouseNotFound, read_pylock, read_wh_json

    with pytest.raises(WheelhouseNotFound):
        read_wh_json(tmp_path)
    os.mkfifo(tmp_path / "wh.json")
    with pytest.raises(LockError, match="not a regular file"):
        read_wh_json(tmp_path)
    os.symlink("/dev/zero", tmp_path / "pylock.toml")
    with pytest.raises(LockError, match="not a regular file"):
        read_pylock(tmp_path)


def test_target_profiles_and_staged_patch_specs_are_read_through_datafile(tmp_path):
    from wheelhouse.errors import TargetError
    from wheelhouse.stage.writer import StageError, _copy_patches
    from wheelhouse.target import load_target

    os.mkfifo(tmp_path / "t.json")
    with pytest.raises(TargetError, match=r"target file .*t\.json is not a regular file"):
        load_target(tmp_path / "t.json")
    (tmp_path / "l.json").write_text("[1]")
    with pytest.raises(TargetError, match="is not a JSON object"):
        load_target(tmp_path / "l.json")
    os.mkfifo(tmp_path / "spec.toml")
    with pytest.raises(StageError, match=r"patch spec .*spec\.toml is not a regular file"):
        _copy_patches([tmp_path / "spec.toml"], tmp_path / "out")


def test_serve_state_and_fake_gpu_files_are_read_through_datafile(tmp_path):
    from wheelhouse.serve.state import read_state
    from wheelhouse.target.gpu import FAKE_ENV, query_gpu_facts

    assert read_state(tmp_path / "none.json") is None
    os.mkfifo(tmp_path / "serve.json")
    with pytest.raises(UsageError, match="serve state file .* is not a regular file"):
        read_state(tmp_path / "serve.json")
    (tmp_path / "gpus.json").write_text("{not json")
    with pytest.raises(UsageError, match=f"{FAKE_ENV} file .*gpus.json is not valid JSON"):
        query_gpu_facts(environ={FAKE_ENV: str(tmp_path / "gpus.json")})
