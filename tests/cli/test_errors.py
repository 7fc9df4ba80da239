"""Bad input, every command: one `error:` line, a `hint:` line, exit 2 (bad input), no traceback, nothing left behind."""

from __future__ import annotations

import os

import pytest

from wheelhouse.cli import main


@pytest.fixture
def wh(capsys, monkeypatch, tmp_path):
    """Run `wh ARGS` in this process; return (exit code, stdout, stderr)."""
    for var in [v for v in os.environ if v.startswith("WH_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("WH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "400")  # one logical line stays one printed line

    def run(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exc:
            main([str(a) for a in args])
        out, err = capsys.readouterr()
        return exc.value.code, out, err

    return run


def assert_usage_error(result, *needles: str, code: int = 2) -> str:
    """The product rule: `error: ...` (one line), then `hint: ...`, the exit code, no traceback."""
    rc, _out, err = result
    assert rc == code, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    errors = [i for i, ln in enumerate(lines) if ln.startswith("error: ")]
    assert len(errors) == 1, err
    assert lines[-1].startswith("hint: ") and len(lines[-1]) > len("hint: "), err
    for n in needles:
        assert n in err, (n, err)
    return err


# --- click's own usage errors -------------------------------------------------------------------

@pytest.mark.parametrize("args, needle", [
    (["nosuchcommand"], "No such command"),
    (["stage", "--nosuch"], "No such option"),
    (["build"], "Missing argument"),
    (["install", "--installer", "foo"], "'foo' is not one of"),
    (["stage", "x", "-o", "o", "--jobs", "0"], "--jobs"),
    (["target", "show", "--platform", "manylinux_2_35_x86_64"], "--python-version and --platform go together"),
])
def test_click_usage_errors_read_like_wh_errors(wh, args, needle):
    err = assert_usage_error(wh(*args), needle)
    assert "Usage:" not in err
    assert "--help`" in err.splitlines()[-1]


def test_a_group_without_subcommand_still_prints_its_help(wh):
    rc, _out, err = wh("patch")
    assert rc == 2 and "apply" in err and "revert" in err


# --- manifests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, needle", [
    ("toolchain = 5\n", "toolchain must be an array of tables"),
    ('toolchain = ["x"]\n', "toolchain must be an array of tables"),
    ('[drop]\ndistribution = "x"\n', "drop must be an array of tables"),
    ('[doctor]\ngpus = "four"\n', "doctor.gpus must be an integer"),
    ('[serve]\ncommand = ["x"]\ntimeout = "abc"\n', "serve.timeout must be a number"),
    ('[serve]\ncommand = ["x"]\nenv = "abc"\n', "serve.env must be a table"),
    ('[serve]\ncommand = "x \\"open"\n', "serve.command cannot be split"),
    ('[stack]\nrequirements = ["rich"]\nindex-url = 5\n', "stack.index-url must be a string"),
    ('[engine]\nrecipe = 5\n', "engine.recipe must be a string"),
    ('[[toolchain]]\npackages = ["a", "b"]\nexact = "yes"\n', "toolchain[0].exact must be true or false"),
    ('[stack]\nrequirements = ["rich"]\n[target]\npython-version = 3.12\n', 'python-version = "3.12"'),
    ('[stack]\nrequirements = ["rich"]\n[target]\npython-version = "3.12"\nplatforms = "manylinux_2_35_x86_64"\n',
     "target.platforms must be a list of strings"),
])
def test_manifest_with_wrong_types_is_a_usage_error(wh, tmp_path, text, needle):
    m = tmp_path / "m.toml"
    m.write_text(text)
    assert_usage_error(wh("stage", m, "--dry-run"), needle)


def test_manifest_serve_timeout_of_nan_is_a_usage_error(wh, tmp_path):
    """TOML has nan: a readiness wait bounded by it never ends (every comparison with nan is false)."""
    m = tmp_path / "m.toml"
    m.write_text('[serve]\ncommand = ["/bin/sleep", "30"]\nurl = "http://127.0.0.1:9"\ntimeout = nan\n')
    assert_usage_error(wh("serve", m, "--no-preflight"), "serve.timeout must be a finite number of seconds above 0, not nan")


def test_manifest_hint_keeps_its_brackets(wh, tmp_path):
    """[[toolchain]] in a hint is text, not rich markup that swallows it."""
    m = tmp_path / "m.toml"
    m.write_text("toolchain = 5\n")
    err = assert_usage_error(wh("stage", m, "--dry-run"))
    assert "[[toolchain]]" in err


def test_manifest_that_is_a_folder_or_not_utf8(wh, tmp_path):
    (tmp_path / "dir.toml").mkdir()
    assert_usage_error(wh("stage", tmp_path / "dir.toml", "--dry-run"), "is a folder")
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe[stack]\n")
    assert_usage_error(wh("stage", tmp_path / "bin.toml", "--dry-run"), "not UTF-8")


# --- stage ----------------------------------------------------------------------------------------

_FLAGS = ["--python-version", "3.12", "--platform", "manylinux_2_35_x86_64", "--no-bootstrap"]


def test_stage_invalid_requirement_is_one_line_plus_the_caret(wh, tmp_path):
    rc, _out, err = wh("stage", "foo===", "-o", tmp_path / "out", *_FLAGS)
    assert rc == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: requirement 'foo===' is not a valid requirement")
    assert lines[-1].startswith("hint: ")
    assert not (tmp_path / "out").exists()


def test_stage_a_folder_as_requirement_says_folder(wh, tmp_path):
    assert_usage_error(wh("stage", tmp_path, "-o", tmp_path / "out", *_FLAGS), "is a folder, not a wheel file")


def _unwritable_folder():
    """A folder no one (root included) can create entries in: sysfs's root."""
    import tempfile

    try:
        os.rmdir(tempfile.mkdtemp(dir="/sys"))
    except OSError:
        return "/sys"
    pytest.skip("/sys is writable here")


def _local_index(tmp_path, wheel_factory):
    wheel_factory("alpha", "1.0", requires=["beta"])
    wheel_factory("beta", "2.0")
    empty = tmp_path / "empty-index"
    empty.mkdir()
    return ["-f", wheel_factory.folder, "--index-url", empty.as_uri(), *_FLAGS]


def test_stage_output_in_an_unwritable_folder_fails_before_resolving(wh, tmp_path, wheel_factory):
    src = _local_index(tmp_path, wheel_factory)
    err = assert_usage_error(wh("stage", "alpha", *src, "-o", f"{_unwritable_folder()}/out"), "cannot write in /sys")
    assert "resolving" not in err


def test_stage_output_under_a_file(wh, tmp_path, wheel_factory):
    src = _local_index(tmp_path, wheel_factory)
    (tmp_path / "afile").write_text("")
    assert_usage_error(wh("stage", "alpha", *src, "-o", tmp_path / "afile" / "out"), "is a file")


def test_stage_that_fails_leaves_no_new_parent_folders(wh, tmp_path, wheel_factory):
    src = _local_index(tmp_path, wheel_factory)
    rc, _out, err = wh("stage", "nosuchproject", *src, "-o", tmp_path / "new" / "deeper" / "out",
                       "--cache-dir", tmp_path / "cache")
    assert rc == 1 and "no project named nosuchproject" in err and "Traceback" not in err
    assert not (tmp_path / "new").exists()


def test_stage_unusable_cache_dir_is_bad_input(wh, tmp_path, wheel_factory):
    src = _local_index(tmp_path, wheel_factory)
    (tmp_path / "afile").write_text("")
    assert_usage_error(wh("stage", "alpha", *src, "-o", tmp_path / "out", "--cache-dir", tmp_path / "afile" / "c"),
                       "cache folder")
    assert not (tmp_path / "out").exists()


# --- target ---------------------------------------------------------------------------------------

def test_target_capture_into_an_unwritable_folder(wh):
    assert_usage_error(wh("target", "capture", "--no-gpus", "-o", f"{_unwritable_folder()}/t.json"), "cannot write it")


@pytest.fixture
def good_profile():
    from wheelhouse.target.capture import capture

    return capture(include_gpus=False)


@pytest.mark.parametrize("change, needle", [
    (lambda d: d.__setitem__("compatible_tags", "cp312-cp312-linux_x86_64"), "compatible_tags must be a list"),
    (lambda d: d.__setitem__("compatible_tags", ["x"]), "compatible_tags must be a list of wheel tags"),
    (lambda d: d.__setitem__("marker_environment", [1, 2]), "marker_environment must be an object"),
    (lambda d: d["marker_environment"].pop("python_version"), "marker_environment lacks python_version"),
    (lambda d: d.__setitem__("libc", {"name": "glibc"}), "libc must be an object"),
    (lambda d: d.__setitem__("libc", {"name": "glibc", "version": "abc"}), "libc must be an object"),
    (lambda d: d.__setitem__("gpus", ["x"]), "gpus must be a list of objects"),
    (lambda d: d.__setitem__("gpus", 5), "gpus must be a list of objects"),
    (lambda d: d.__setitem__("platforms", "manylinux"), "platforms must be a list of strings"),
    (lambda d: d.__setitem__("python_version", 3.12), "python_version must be a string"),
    (lambda d: d.pop("compatible_tags"), "lacks marker_environment or compatible_tags"),
])
def test_malformed_target_profile_names_the_file_and_the_key(wh, tmp_path, good_profile, change, needle):
    import json

    change(good_profile)
    f = tmp_path / "box.json"
    f.write_text(json.dumps(good_profile))
    assert_usage_error(wh("target", "show", "--target", f), f"target file {f}", needle)


# --- install --------------------------------------------------------------------------------------

@pytest.fixture
def wheelhouse(wh, tmp_path, wheel_factory):
    """A two-wheel wheelhouse for the running interpreter, staged from a local folder."""
    wheel_factory("alpha", "1.0", requires=["beta"])
    wheel_factory("beta", "2.0")
    empty = tmp_path / "empty-index"
    empty.mkdir()
    out = tmp_path / "wheelhouse"
    rc, _o, err = wh("stage", "alpha", "-f", wheel_factory.folder, "--index-url", empty.as_uri(), "--no-bootstrap",
                     "-o", out, "--cache-dir", tmp_path / "cache")
    assert rc == 0, err
    return out


def test_install_a_file_instead_of_a_wheelhouse(wh, tmp_path):
    (tmp_path / "afile").write_text("")
    assert_usage_error(wh("install", tmp_path / "afile", "--venv", tmp_path / "v"), "is a file, not a wheelhouse folder")
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize("name, text, needle", [
    ("wh.json", "[]", "is not a JSON object"),
    ("pylock.toml", 'lock-version = "1.0"\npackages = 5\n', "packages must be an array of tables"),
    ("pylock.toml", 'lock-version = "1.0"\n[[packages]]\nversion = "1"\nwheels = [{name = "a.whl", hashes = {sha256 = "ab"}}]\n',
     "packages[0] needs a name"),
    ("pylock.toml", 'lock-version = "1.0"\n[[packages]]\nname = "a"\nversion = "1"\nwheels = ["x"]\n',
     "wheels must be a list of tables"),
    ("pylock.toml", 'lock-version = "1.0"\n[[packages]]\nname = "a"\nversion = "1"\nwheels = [{name = "a.whl", hashes = "ab"}]\n',
     "has no sha256"),
])
def test_install_malformed_wheelhouse_files(wh, tmp_path, wheelhouse, name, text, needle):
    (wheelhouse / name).write_text(text)
    assert_usage_error(wh("install", wheelhouse, "--venv", tmp_path / "v"), needle)
    assert not (tmp_path / "v").exists()


def test_install_wheelhouse_target_of_the_wrong_shape(wh, tmp_path, wheelhouse):
    import json

    meta = json.loads((wheelhouse / "wh.json").read_text())
    meta["target"]["gpus"] = 5
    (wheelhouse / "wh.json").write_text(json.dumps(meta))
    assert_usage_error(wh("install", wheelhouse, "--venv", tmp_path / "v"), "wh.json target: gpus")
    assert not (tmp_path / "v").exists()


def test_install_python_that_is_a_bare_name_not_on_path(wh, tmp_path, wheelhouse):
    assert_usage_error(wh("install", wheelhouse, "--venv", tmp_path / "v", "--python", "no-such-python-3"),
                       "is not on PATH")
    assert not (tmp_path / "v").exists()


def test_install_venv_that_fails_half_way_leaves_nothing(wh, tmp_path, wheelhouse):
    """`python -m venv` that dies after creating folders: no half venv that the next run takes for a finished one."""
    import sys

    fake = tmp_path / "fakepy"
    fake.write_text('#!/bin/sh\nif [ "$1" = "-m" ]; then for last; do :; done; mkdir -p "$last/bin"; '
                    f'echo "venv: boom" >&2; exit 1; fi\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    err = assert_usage_error(wh("install", wheelhouse, "--venv", tmp_path / "v", "--python", fake),
                             "could not create a venv", "venv: boom")
    assert "is writable" in err
    assert not (tmp_path / "v").exists()
    (tmp_path / "empty").mkdir()
    assert_usage_error(wh("install", wheelhouse, "--venv", tmp_path / "empty", "--python", fake))
    assert list((tmp_path / "empty").iterdir()) == []


# --- links, env -----------------------------------------------------------------------------------

@pytest.mark.parametrize("flags", [("--check", "--fix"), ("--fix", "--undo"), ("--check", "--undo")])
def test_links_modes_are_exclusive(wh, tmp_path, flags):
    assert_usage_error(wh("links", *flags, "--path", tmp_path), "are exclusive")


@pytest.mark.parametrize("record", ["[1]", '{"changes": 5}', '{"changes": [{"action": "rm", "path": "/", "target": null, "reason": ""}]}',
                                    '{"changes": [{"path": "x"}]}'])
def test_links_record_of_the_wrong_shape_is_named(wh, tmp_path, record):
    (tmp_path / ".wh").mkdir()
    (tmp_path / ".wh" / "links.json").write_text(record)
    for mode in ("--undo", "--check"):
        assert_usage_error(wh("links", mode, "--path", tmp_path), "is not a wh links record", "links.json", code=1)


def test_env_python_that_prints_other_json(wh, tmp_path):
    fake = tmp_path / "jsonpy"
    fake.write_text('#!/bin/sh\necho "[1]"\n')
    fake.chmod(0o755)
    assert_usage_error(wh("env", "--python", fake), "not wh's probe answer")


# --- doctor ---------------------------------------------------------------------------------------

def test_doctor_unknown_check_is_bad_input_before_any_probe(wh):
    err = assert_usage_error(wh("doctor", "--check", "native", "--check", "nosuchcheck"), "--check nosuchcheck: no such check")
    assert "gathering facts" not in err


@pytest.mark.parametrize("pattern", ["native", "native:numpy", "nat", "rule:", "gpu:devices", "model:tp-heads"])
def test_doctor_known_check_patterns_pass_the_check(pattern):
    from wheelhouse.doctor.run import _check_patterns

    _check_patterns([pattern], {}, "--check")


def test_doctor_manifest_check_typo_is_named(wh, tmp_path):
    m = tmp_path / "m.toml"
    m.write_text('[doctor]\nchecks = ["natve"]\n')
    assert_usage_error(wh("doctor", "--manifest", m), "doctor.checks natve: no such check")


def test_doctor_python_missing_is_exit_2_as_everywhere(wh, tmp_path):
    assert_usage_error(wh("doctor", "--python", tmp_path / "nope"), "does not exist", code=2)


def test_doctor_tp_without_model_and_missing_model(wh, tmp_path):
    assert_usage_error(wh("doctor", "--tp", "2"), "--tp needs --model")
    assert_usage_error(wh("doctor", "--model", tmp_path / "nope", "--check", "platform"), "does not exist")


def test_doctor_unwritable_junit_fails_before_the_checks(wh):
    err = assert_usage_error(wh("doctor", "--check", "platform", "--junit", f"{_unwritable_folder()}/j.xml"),
                             "--junit", "cannot write")
    assert "gathering facts" not in err


def _shard(folder, header: bytes):
    import struct

    folder.mkdir(exist_ok=True)
    (folder / "m.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)


@pytest.mark.parametrize("header, needle", [
    (b"[1, 2]", "not a JSON object"),
    (b'{"a": {"dtype": "F16"}}', "tensor a lacks"),
    (b'{"a": 5}', "tensor a lacks"),
    (b'{"a": {"dtype": "F16", "shape": [2], "data_offsets": ["x", 4]}}', "tensor a lacks"),
])
def test_doctor_model_with_a_damaged_safetensors_header(wh, tmp_path, header, needle):
    _shard(tmp_path / "model", header)
    assert_usage_error(wh("doctor", "--model", tmp_path / "model", "--tp", "2", "--check", "model"), needle)


def test_doctor_model_config_that_is_not_an_object(wh, tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("[1]")
    assert_usage_error(wh("doctor", "--model", tmp_path / "model", "--tp", "2", "--check", "model"),
                       "config.json is not a JSON object")


# --- drop -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, needle", [
    (["--list", "--restore", "x"], "--restore and --list are exclusive"),
    (["--dry-run", "--list"], "--dry-run applies to dropping"),
    (["--dry-run", "--restore", "x"], "--dry-run applies to dropping"),
])
def test_drop_conflicting_flags(wh, args, needle):
    assert_usage_error(wh("drop", *args), needle)


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory):
    import subprocess
    import sys

    from wheelhouse.target.interpreter import inspect_interpreter

    path = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python", inspect_interpreter(path / "bin" / "python").platlib


@pytest.mark.parametrize("record", ["[1]", '{"dropped": 5}', '{"dropped": [{"version": "1"}]}'])
def test_drop_record_of_the_wrong_shape_is_named(wh, bare_venv, record):
    from pathlib import Path

    python, platlib = bare_venv
    f = Path(platlib) / ".wh" / "dropped.json"
    f.parent.mkdir(exist_ok=True)
    f.write_text(record)
    try:
        assert_usage_error(wh("drop", "--list", "--python", python), "is not a wh drop record", code=1)
        assert_usage_error(wh("drop", "--restore", "x", "--python", python), "is not a wh drop record", code=1)
    finally:
        f.unlink()


def test_drop_restore_from_a_wheelhouse_that_is_gone(wh, bare_venv, tmp_path):
    import json
    from pathlib import Path

    python, platlib = bare_venv
    f = Path(platlib) / ".wh" / "dropped.json"
    f.parent.mkdir(exist_ok=True)
    f.write_text(json.dumps({"dropped": [{"name": "alpha", "wheelhouse": str(tmp_path / "gone")}]}))
    try:
        assert_usage_error(wh("drop", "--restore", "alpha", "--python", python), "is no longer there",
                           "--only alpha")
    finally:
        f.unlink()


# --- build ----------------------------------------------------------------------------------------

_RECIPE = '[engine]\nname = "x"\nrepo = "{repo}"\ncommit = "{commit}"\n'
_SHA = "c066b38e1c9981c8c8adb0efb328049fe87aa8c0"


@pytest.mark.parametrize("extra, needle", [
    ("fetch = 5\n", "fetch must be a list of refs"),
    ("backport = 5\n", "backport must be an array of tables"),
    ("build = 5\n", "build must be a table"),
    ('[engine.build]\nno-build-isolation = "no"\n', "no-build-isolation must be true or false"),
    ('[engine.build]\nsubdirectory = "../.."\n', "must be a path inside the repository"),
    ("[engine.build]\nenv = {A = {b = 1}}\n", "env must be a table of strings"),
])
def test_build_recipe_with_wrong_types(wh, tmp_path, extra, needle):
    r = tmp_path / "r.toml"
    r.write_text(_RECIPE.format(repo=tmp_path, commit=_SHA) + extra)
    assert_usage_error(wh("build", r, "-o", tmp_path / "out", "--cache-dir", tmp_path / "cache"), needle)
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_build_recipe_whose_repo_path_does_not_exist(wh, tmp_path):
    r = tmp_path / "r.toml"
    r.write_text(_RECIPE.format(repo="no-such-clone", commit=_SHA))
    assert_usage_error(wh("build", r, "-o", tmp_path / "out", "--cache-dir", tmp_path / "cache"),
                       f"repo {tmp_path / 'no-such-clone'} does not exist")
    assert not (tmp_path / "out").exists()
    assert not list((tmp_path / "cache").glob("mirrors/*"))


def test_build_unreachable_repo_leaves_no_empty_mirror(wh, tmp_path):
    r = tmp_path / "r.toml"
    r.write_text(_RECIPE.format(repo="https://127.0.0.1:9/x.git", commit=_SHA))
    assert_usage_error(wh("build", r, "-o", tmp_path / "out", "--cache-dir", tmp_path / "cache"),
                       "fetching https://127.0.0.1:9/x.git failed", code=1)
    assert not list((tmp_path / "cache").glob("mirrors/*"))
    assert not (tmp_path / "out").exists()


def test_build_tree_without_pyproject_leaves_no_wheelhouse(wh, tmp_path):
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f").write_text("x")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    r = tmp_path / "r.toml"
    r.write_text(_RECIPE.format(repo=repo, commit=sha))
    assert_usage_error(wh("build", r, "-o", tmp_path / "out", "--cache-dir", tmp_path / "cache"),
                       "neither pyproject.toml nor setup.py")
    assert not (tmp_path / "out").exists()


def test_build_unwritable_output_or_cache_fails_before_fetching(wh, tmp_path):
    r = tmp_path / "r.toml"
    r.write_text(_RECIPE.format(repo="https://127.0.0.1:9/x.git", commit=_SHA))
    ro = _unwritable_folder()
    assert_usage_error(wh("build", r, "-o", f"{ro}/out", "--cache-dir", tmp_path / "cache"), "-o /sys/out: cannot write")
    assert_usage_error(wh("build", r, "-o", tmp_path / "out", "--cache-dir", f"{ro}/c"), "--cache-dir /sys/c: cannot write")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_build_unknown_recipe_lists_only_recipes(wh):
    err = assert_usage_error(wh("build", "no-such-recipe"), "does not exist")
    hint = err.strip().splitlines()[-1]
    assert "freetoken-pr70" in hint and "fp8-rowwise" not in hint


# --- patch ----------------------------------------------------------------------------------------

def _spec(tmp_path, extra: str = "", **over) -> "os.PathLike":
    import hashlib

    (tmp_path / "payload.py").write_text("print(1)\n")
    sha = hashlib.sha256(b"print(1)\n").hexdigest()
    keys = {"name": '"p"', "distribution": '"nosuchdist"', "file": '"x/y.py"', "payload": '"payload.py"',
            "before-sha256": f'"{"a" * 64}"', "payload-sha256": f'"{sha}"', **over}
    spec = tmp_path / "spec.toml"
    spec.write_text("[patch]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()) + extra)
    return spec


@pytest.mark.parametrize("extra, over, needle", [
    ("when = 5\n", {}, "[patch] when must be a table"),
    ("verify = 5\n", {}, "[patch] verify must be a table"),
    ("[patch.when]\nsm = {a = 1}\n", {}, "sm must be a compute capability"),
    ('[patch.verify]\ncall = "a:b"\ntimeout = "x"\n', {}, "timeout must be a number of seconds"),
    ('[patch.verify]\ncall = "a:b"\nenv = 5\n', {}, "env must be a table"),
    ("", {"before-sha256": "5"}, "before-sha256 must be a sha256 or a list"),
    ("", {"file": '"../../etc/passwd"'}, "must be a path inside the distribution"),
])
def test_patch_spec_with_wrong_types(wh, tmp_path, extra, over, needle):
    spec = _spec(tmp_path, extra, **over)
    for cmd in ("apply", "verify", "revert"):
        assert_usage_error(wh("patch", cmd, spec), needle)


def test_patch_spec_that_is_a_folder_or_not_utf8(wh, tmp_path):
    (tmp_path / "dir.toml").mkdir()
    assert_usage_error(wh("patch", "apply", tmp_path / "dir.toml"), "is a folder")
    (tmp_path / "bin.toml").write_bytes(b"\xff")
    assert_usage_error(wh("patch", "apply", tmp_path / "bin.toml"), "patch spec", "is not UTF-8")


@pytest.mark.parametrize("cmd", ["apply", "verify", "revert"])
def test_patch_with_a_python_that_cannot_run(wh, tmp_path, cmd):
    assert_usage_error(wh("patch", cmd, _spec(tmp_path), "--python", tmp_path / "nope"), "cannot run interpreter")


def test_patch_apply_distribution_not_installed(wh, tmp_path, bare_venv):
    python, _ = bare_venv
    assert_usage_error(wh("patch", "apply", _spec(tmp_path), "--python", python), "nosuchdist is not installed",
                       "wh install", code=1)


def test_patch_provenance_ignores_a_damaged_wh_json(wh, tmp_path, bare_venv):
    """Hashes left out of a spec come from the wheelhouse's wh.json; a damaged one gives none, not a crash."""
    python, _ = bare_venv
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "payload.py").write_text("print(1)\n")
    spec = patches / "s.toml"
    spec.write_text('[patch]\nname = "p"\ndistribution = "nosuchdist"\nfile = "x.py"\npayload = "payload.py"\n')
    for body in ("[1]", '{"engine": {"artifacts": [5]}}', '{"engine": [1]}'):
        (tmp_path / "wh.json").write_text(body)
        assert_usage_error(wh("patch", "apply", spec, "--python", python), "is not installed", code=1)


# --- serve, stop, smoke ---------------------------------------------------------------------------

@pytest.mark.parametrize("args, needle", [
    (["--url", "notaurl"], "is not an http(s) URL"),
    (["--timeout", "-1"], "--timeout"),
    (["--interval", "0"], "--interval"),
    (["--grace", "-1"], "--grace"),
    (["--attempt-timeout", "0"], "--attempt-timeout"),
    (["--timeout", "nan"], "Invalid value for '--timeout': 'nan' is not a finite number"),
    (["--interval", "nan"], "Invalid value for '--interval': 'nan' is not a finite number"),
    (["--attempt-timeout", "nan"], "Invalid value for '--attempt-timeout': 'nan' is not a finite number"),
    (["--grace", "nan"], "Invalid value for '--grace': 'nan' is not a finite number"),
    (["--timeout", "inf"], "Invalid value for '--timeout': 'inf' is not a finite number"),
    (["--gpus", "-1"], "--gpus"),
    (["--max-used-mib", "-1"], "--max-used-mib"),
])
def test_serve_bad_option_values_start_nothing(wh, tmp_path, args, needle):
    err = assert_usage_error(wh("serve", *args, "--no-preflight", "--", "/bin/sleep", "30"), needle)
    assert "starting:" not in err
    assert not (tmp_path / "state").exists()


def test_serve_unwritable_log_or_state_starts_nothing(wh, tmp_path, monkeypatch):
    ro = _unwritable_folder()
    err = assert_usage_error(wh("serve", "--log", f"{ro}/x.log", "--no-preflight", "--", "/bin/sleep", "30"), "--log")
    assert "starting:" not in err
    monkeypatch.setenv("WH_STATE_DIR", f"{ro}/state")
    err = assert_usage_error(wh("serve", "--no-preflight", "--", "/bin/sleep", "30"), "log file", "WH_STATE_DIR")
    assert "starting:" not in err


def test_serve_without_a_command(wh):
    assert_usage_error(wh("serve", "--no-preflight"), "no engine command given")


def test_stop_with_nothing_running(wh):
    assert_usage_error(wh("stop"), "no detached engine is recorded", code=1)


@pytest.mark.parametrize("args, needle, code", [
    (["--url", "http://127.0.0.1:9"], "cannot reach http://127.0.0.1:9/v1/models", 1),
    (["--url", "notaurl"], "is not an http(s) URL", 2),
    (["--url", "http://127.0.0.1:9", "--max-tokens", "0"], "--max-tokens", 2),
    (["--url", "http://127.0.0.1:9", "--timeout", "0"], "--timeout", 2),
    (["--url", "http://127.0.0.1:9", "--timeout", "nan"], "Invalid value for '--timeout': 'nan' is not a finite number", 2),
])
def test_smoke_errors(wh, args, needle, code):
    assert_usage_error(wh("smoke", *args), needle, code=code)


@pytest.mark.parametrize("args", [
    ["doctor", "--timeout", "nan"],
    ["stage", "alpha", "-o", "OUT", "--lock-timeout", "nan"],
    ["build", "no-such-recipe", "--lock-timeout", "inf"],
])
def test_float_options_refuse_nan_and_inf(wh, tmp_path, args):
    """click's FloatRange lets nan through (every comparison with it is false): one option type refuses it everywhere."""
    args = [str(tmp_path / "o") if a == "OUT" else a for a in args]
    assert_usage_error(wh(*args), f"Invalid value for '{args[-2]}': '{args[-1]}' is not a finite number")


@pytest.mark.parametrize("flag", ["-r", "-c"])
def test_stage_requirement_files_that_cannot_be_read_name_their_flag(wh, tmp_path, flag):
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe")
    assert_usage_error(wh("stage", "alpha", flag, tmp_path / "bin.txt", "-o", tmp_path / "o"), f"{flag} {tmp_path}", "not UTF-8")
    assert_usage_error(wh("stage", "alpha", flag, tmp_path / "nope.txt", "-o", tmp_path / "o"), f"{flag} {tmp_path}",
                       "does not exist")


def test_manifest_requirements_file_not_utf8(wh, tmp_path):
    (tmp_path / "req.txt").write_bytes(b"\xff\xfe")
    m = tmp_path / "m.toml"
    m.write_text('[stack]\nrequirements-files = ["req.txt"]\n')
    assert_usage_error(wh("stage", m, "--dry-run"), "req.txt is not UTF-8")


def test_stage_manifest_patch_spec_missing_is_found_before_resolving(wh, tmp_path):
    m = tmp_path / "m.toml"
    m.write_text('[stack]\nrequirements = ["alpha"]\n[[patch]]\nspec = "nope.toml"\n')
    err = assert_usage_error(wh("stage", m, "-o", tmp_path / "out", "--no-bootstrap"), "nope.toml does not exist")
    assert "resolving" not in err and not (tmp_path / "out").exists()


def test_doctor_wheelhouse_target_of_the_wrong_shape(wh, tmp_path, wheelhouse):
    import json

    meta = json.loads((wheelhouse / "wh.json").read_text())
    for target, needle in ((5, "target must be an object"), ({**meta["target"], "gpus": 5}, "target: gpus must be")):
        (wheelhouse / "wh.json").write_text(json.dumps({**meta, "target": target}))
        assert_usage_error(wh("doctor", "--wheelhouse", wheelhouse, "--check", "platform"), f"--wheelhouse {wheelhouse}",
                           needle)


@pytest.mark.parametrize("state", ["[1]", '{"wheelhouses": 5, "packages": 5}', '{"packages": {"a": 5}}'])
def test_a_damaged_install_state_reads_as_none(tmp_path, state):
    """Like unreadable JSON always did: the state is wh's own record, the next install rewrites it."""
    from wheelhouse.install.state import read_install_state, state_path

    state_path(tmp_path).parent.mkdir()
    state_path(tmp_path).write_text(state)
    assert read_install_state(tmp_path) == {"schema": "wh-installed/2", "wheelhouses": [], "sources": {},
                                            "packages": {}, "installed_at": None}


@pytest.mark.parametrize("body, needle", [
    (b'[rule]\nid = "x"\n', "rule must be an array of tables"),
    (b'[[rule]]\nid = "x"\ntitle = "t"\nwhen = 5\n', "when must be an array of tables"),
    (b"\xff", "cannot be read"),
])
def test_doctor_extra_rule_file_of_the_wrong_shape(wh, tmp_path, monkeypatch, body, needle):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "x.toml").write_bytes(body)
    monkeypatch.setenv("WH_DOCTOR_RULES", str(tmp_path / "rules"))
    assert_usage_error(wh("doctor", "--list-checks"), "x.toml", needle)


def test_serve_manifest_url_that_is_not_a_url_names_the_manifest(wh, tmp_path):
    m = tmp_path / "m.toml"
    m.write_text('[serve]\ncommand = ["/bin/sleep", "30"]\nurl = "nope"\n')
    err = assert_usage_error(wh("serve", m, "--no-preflight"), "serve.url 'nope'")
    assert "starting:" not in err


@pytest.mark.parametrize("flag", ["--index-url", "--extra-index-url"])
def test_stage_index_that_is_not_a_url_is_bad_input_before_resolving(wh, tmp_path, flag):
    err = assert_usage_error(wh("stage", "alpha", flag, "notaurl", "-o", tmp_path / "out", "--no-bootstrap"),
                             "index URL 'notaurl' is not an http(s):// or file:// URL")
    assert "resolving" not in err and not (tmp_path / "out").exists()


def _bad_recipe():
    from wheelhouse.engine.recipe import parse_recipe
    parse_recipe({"engine": {"name": "x"}})


def _bad_patch_spec():
    from wheelhouse.patch.spec import parse_patch_spec
    parse_patch_spec({"patch": {"name": "x"}})


def _bad_jit_registry(tmp_path):
    from wheelhouse.doctor.checks.jit import JIT_ENV, load_jit_probes
    (tmp_path / "jit.toml").write_text('[[jit]]\nid = "x"\n')
    load_jit_probes({JIT_ENV: str(tmp_path / "jit.toml")})


def _github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings (lowercase, punctuation dropped, spaces to hyphens)."""
    import re

    anchors = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            anchors.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("call, command, page", [
    (lambda tmp: _bad_recipe(), "wh build", "docs/manifest.md#engine-recipes"),
    (lambda tmp: _bad_patch_spec(), "wh patch", "docs/manifest.md#patch-specs"),
    (_bad_jit_registry, "wh doctor", "docs/doctor.md#jit-probe-registry"),
])
def test_format_hints_point_at_help_and_a_manual_page_that_exists(tmp_path, call, command, page):
    # docs/ is not in the installed wheel: a hint names the command's --help (which the user has) and the
    # manual page in wh's source repository; that page and its anchor must exist, so the hint cannot rot.
    from pathlib import Path

    from wheelhouse.errors import WhError

    with pytest.raises(WhError) as exc:
        call(tmp_path)
    hint = exc.value.hint
    assert f"`{command} --help`" in hint and f"{page} in wh's source repository" in hint
    assert "README" not in hint
    path, anchor = page.split("#")
    doc = Path(__file__).resolve().parents[2] / path
    assert doc.is_file(), f"{path} named by the hint does not exist"
    assert anchor in _github_anchors(doc.read_text(encoding="utf-8")), f"{path} has no heading for #{anchor}"


@pytest.mark.parametrize("text", ["foo-", "foo==1.", "foo==", "foo==1..2", "fo o", ".foo"])
def test_stage_a_near_plain_requirement_is_still_refused(wh, tmp_path, text):
    """A plain name (or name==release) is accepted without packaging's parser; whatever is not quite that
    goes to the parser and is refused like any invalid requirement."""
    rc, _out, err = wh("stage", text, "-o", tmp_path / "out", *_FLAGS)
    assert rc == 2 and "is not a valid requirement" in err.splitlines()[0], err
    assert not (tmp_path / "out").exists()


def test_the_plain_requirements_accepted_without_the_parser_are_valid_pep_508():
    from packaging.requirements import Requirement

    from wheelhouse.stage.pipeline import _PLAIN

    for text in ["a", "A1", "vllm", "apache-airflow", "zope.interface", "foo_bar", "vllm==0.33.0", "x==1", "a.b-c_d==10.2.3"]:
        assert _PLAIN.fullmatch(text), text
        r = Requirement(text)
        assert str(r) == text and not r.marker and not r.extras and not r.url
