"""manifest: parse_manifest is pure and refuses unknown keys with a did-you-mean; load_manifest reads, bounded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wheelhouse.manifest import MANIFEST_KEYS, ManifestError, load_manifest, parse_manifest, read_requirement_files


def _wh(*args, cwd, timeout=60):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")} | {"NO_COLOR": "1", "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("text, where, typo, guess", [
    ('[stack]\nrequirement-files = ["r.txt"]\n', "[stack]", "requirement-files", "requirements-files"),
    ('[stack]\nrequirements = ["a"]\nconstrains = ["a<2"]\n', "[stack]", "constrains", "constraints"),
    ('[doctor]\ngpu = 4\n', "[doctor]", "gpu", "gpus"),
    ('[[drop]]\ndistribution = "x"\nforse = true\n', "[[drop]] #1", "forse", "force"),
    ('[[toolchain]]\npackages = ["a", "b"]\nexceptons = ["c"]\n', "[[toolchain]] #1", "exceptons", "exceptions"),
    ('[serve]\ncommand = ["x"]\ntimout = 5\n', "[serve]", "timout", "timeout"),
    ('[engine]\nrecipie = "x.toml"\n', "[engine]", "recipie", "recipe"),
    ('[stak]\nrequirements = ["a"]\n', "manifest", "stak", "stack"),
])
def test_unknown_key_in_a_known_section_is_refused_with_a_guess(tmp_path, text, where, typo, guess):
    m = tmp_path / "m.toml"
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, m)
    msg = info.value.message
    assert msg.startswith(f"{m}: {where}: unknown ") and f"{typo!r} (did you mean {guess!r}?)" in msg
    assert guess in info.value.hint


def test_stage_with_a_typo_exits_2_and_writes_nothing(tmp_path):
    """Before: `requirement-files` was ignored and the stage exited 0 without the requirements."""
    (tmp_path / "r.txt").write_text("alpha\n")
    (tmp_path / "m.toml").write_text('[stack]\nrequirements = ["beta"]\nrequirement-files = ["r.txt"]\n')
    p = _wh("stage", "m.toml", "-o", "out", "--python-version", "3.12", "--platform", "manylinux_2_35_x86_64",
            "--no-bootstrap", "--index-url", (tmp_path / "noindex").as_uri(), cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert "error: " in p.stderr and "'requirement-files' (did you mean 'requirements-files'?)" in p.stderr
    assert "hint: " in p.stderr and not (tmp_path / "out").exists()


def test_parse_is_pure_and_load_reads_the_files(tmp_path, monkeypatch):
    (tmp_path / "r.txt").write_text("alpha==1\n")
    (tmp_path / "c.txt").write_text("beta<2\n")
    text = '[stack]\nrequirements = ["x"]\nrequirements-files = ["r.txt"]\nconstraints-files = ["c.txt"]\n'
    (tmp_path / "m.toml").write_text(text)
    monkeypatch.chdir("/")
    parsed = parse_manifest(text, tmp_path / "m.toml")  # reads nothing: the files could be missing
    assert parsed.requirements == ("x",) and parsed.requirement_files == (tmp_path / "r.txt",)
    assert parsed.constraint_files == (tmp_path / "c.txt",) and not parsed.files_read
    full = read_requirement_files(parsed)
    assert full.requirements == ("x", "alpha==1") and full.constraints == ("beta<2",)
    assert read_requirement_files(full) is full  # read once
    assert load_manifest(tmp_path / "m.toml") == full


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo"])
def test_requirements_file_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    """Before: /dev/zero was read until the kernel killed wh; a FIFO blocked it."""
    target = kind
    if kind == "fifo":
        os.mkfifo(tmp_path / "r.fifo")
        target = "r.fifo"
    (tmp_path / "m.toml").write_text(f'[stack]\nrequirements-files = ["{target}"]\n')
    p = _wh("stage", "m.toml", "--dry-run", "--python-version", "3.12", "--platform", "manylinux_2_35_x86_64",
            "--no-bootstrap", cwd=tmp_path, timeout=30)
    assert p.returncode == 2, p.stderr
    assert "is not a regular file" in p.stderr and "stack.requirements-files" in p.stderr
    assert "hint: " in p.stderr and "Traceback" not in p.stderr


def test_load_errors_name_the_manifest(tmp_path):
    with pytest.raises(ManifestError, match=r"manifest .*nope\.toml does not exist") as info:
        load_manifest(tmp_path / "nope.toml")
    assert "bundled name" in info.value.hint
    (tmp_path / "bad.toml").write_text("[stack\n")
    with pytest.raises(ManifestError, match=r"bad\.toml is not valid TOML: .*line 1"):
        load_manifest(tmp_path / "bad.toml")


def test_every_bundled_manifest_parses_and_the_docstring_lists_every_key():
    import wheelhouse.manifest.parse as mod  # the format, every key, is parse_manifest's module docstring
    from wheelhouse.resources import manifests_dir

    for f in sorted(Path(manifests_dir()).glob("*.toml")):
        assert load_manifest(f).name
    doc = mod.__doc__
    for section, keys in MANIFEST_KEYS.items():
        for k in keys:
            assert f"{k} =" in doc or f"{k}=" in doc, (section, k)


def test_on_the_box_the_doctor_does_not_need_the_requirements_files(tmp_path):
    """The requirements files stay on the networked host; `wh doctor --manifest` reads only the manifest."""
    (tmp_path / "m.toml").write_text('[stack]\nrequirements-files = ["not-carried.txt"]\n[doctor]\ngpus = 0\n')
    m = load_manifest(tmp_path / "m.toml", read_files=False)
    assert m.requirement_files == (tmp_path / "not-carried.txt",) and not m.files_read
    with pytest.raises(ManifestError, match="not-carried.txt does not exist"):
        load_manifest(tmp_path / "m.toml")
    p = _wh("doctor", "--manifest", "m.toml", "--check", "gpu:expected", cwd=tmp_path)
    assert "not-carried.txt" not in p.stderr and p.returncode in (0, 1), p.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-5"])
def test_serve_timeout_must_be_a_finite_number_of_seconds(tmp_path, value):
    # TOML has nan and inf; a readiness wait bounded by nan never ends (every comparison with it is false).
    with pytest.raises(ManifestError) as info:
        parse_manifest(f'[serve]\ncommand = ["x"]\ntimeout = {value}\n', tmp_path / "m.toml")
    assert "serve.timeout must be a finite number of seconds above 0" in info.value.message
    assert parse_manifest('[serve]\ncommand = ["x"]\ntimeout = 90\n', tmp_path / "m.toml").serve.timeout == 90.0
