"""Secrets are used, never recorded (issue 11.4).

A loopback index that wants Basic auth; a token planted in ``-i``, ``--extra-index-url``, ``-f``
and a ``name @ URL`` requirement. After `wh stage` (text and --json, success and failures) no
file under the output folder or the cache, and no line on stdout or stderr, holds the token.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_wheel

TOKEN = "s3cr3t-T0KEN-planted-4242"
USER = "alice"


def _wh(*args, env=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", "import sys; from wheelhouse.cli import main; main(sys.argv[1:])", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_COLOR": "1", **(env or {})})


def _with_token(url: str) -> str:
    return url.replace("http://", f"http://{USER}:{TOKEN}@", 1)


def _leaks(proc: subprocess.CompletedProcess, *folders: Path) -> list[str]:
    """Every place the token (or its base64 in an Authorization header) shows up."""
    import base64

    needles = [TOKEN.encode(), base64.b64encode(f"{USER}:{TOKEN}".encode())]
    found = []
    for name, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        if any(n.decode() in text for n in needles):
            found.append(name)
    for folder in folders:
        for p in Path(folder).rglob("*"):
            if p.is_file() and not p.is_symlink():
                data = p.read_bytes()
                if any(n in data for n in needles):
                    found.append(str(p))
    return found


@pytest.fixture
def private_index(pyindex, tmp_path):  # noqa: F811
    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0", requires=["lib>=1"])
    make_wheel(pub, "lib", "1.0")
    make_wheel(pub, "direct", "1.0")
    return pyindex(pub, auth=(USER, TOKEN))


def _stage_args(idx, out, cache, *more):
    return ["stage", "app", f"direct @ {_with_token(idx.file_url('direct-1.0-py3-none-any.whl'))}",
            "-i", _with_token(idx.url), "-f", _with_token(idx.url + "app/"),
            "-o", out, "--cache-dir", cache, "--python-version", f"{sys.version_info[0]}.{sys.version_info[1]}",
            "--no-bootstrap", *more]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_staged_wheelhouse_its_cache_and_output_hold_no_secret(private_index, tmp_path, as_json):
    out, cache = tmp_path / "house", tmp_path / "cache"
    proc = _wh("-v", *_stage_args(private_index, out, cache, *(["--json"] if as_json else [])))
    assert proc.returncode == 0, proc.stderr
    assert (out / "pylock.toml").is_file() and list((out / "wheels").glob("direct-1.0-*.whl"))
    # The credentials were used: every request carried them.
    assert all("Authorization" in headers for _, headers in private_index.log)
    assert _leaks(proc, out, cache) == []
    lock = (out / "pylock.toml").read_text()
    assert "index = " in lock and "127.0.0.1" in lock  # the index is recorded, without who asked
    assert (cache / "sha256").stat().st_mode & 0o077 == 0  # entries are the wheelhouse's inodes (readable
    for p in cache.rglob("*"):                            # like it); their folder keeps them private
        if p.is_file() and (cache / "sha256") not in p.parents:
            assert p.stat().st_mode & 0o077 == 0, (p, oct(p.stat().st_mode))  # owner-only, all the rest
    # A re-stage from a warm cache records nothing either.
    again = _wh(*_stage_args(private_index, out, cache, *(["--json"] if as_json else [])))
    assert again.returncode == 0, again.stderr
    assert _leaks(again, out, cache) == []


def test_failures_print_no_secret(private_index, tmp_path):
    out, cache = tmp_path / "house", tmp_path / "cache"
    idx = private_index
    # 404: a direct URL that does not exist.
    missing = _wh("stage", f"gone @ {_with_token(idx.file_url('gone-1.0-py3-none-any.whl'))}", "-i", _with_token(idx.url),
                  "-o", out, "--cache-dir", cache, "--no-bootstrap")
    assert missing.returncode != 0 and "error" in missing.stderr
    assert _leaks(missing, tmp_path) == []
    # Hash mismatch: the index serves other bytes under the published hash.
    other = make_wheel(tmp_path / "other", "lib", "1.0", modules={"lib/__init__.py": "EVIL = 1\n"})
    idx.tamper("lib-1.0-py3-none-any.whl", other.read_bytes())  # a valid wheel, not the published one
    bad = _wh(*_stage_args(idx, out, cache, "--json"))
    assert bad.returncode == 1 and "sha256" in bad.stderr
    assert _leaks(bad, tmp_path) == []
    # A bad index URL (no scheme) with a token in it: a usage error that names it, without the token.
    typo = _wh("stage", "app", "-i", f"{USER}:{TOKEN}@127.0.0.1/simple", "-o", out, "--cache-dir", cache)
    assert typo.returncode == 2 and "error" in typo.stderr
    assert _leaks(typo, tmp_path) == [] and "***@127.0.0.1/simple" in typo.stderr


def test_wrong_credentials_say_so_without_echoing_them(private_index, tmp_path):
    wrong = "http://alice:WRONG-" + TOKEN[::-1] + "@" + private_index.url.split("://", 1)[1]
    proc = _wh("stage", "app", "-i", wrong, "-o", tmp_path / "h", "--cache-dir", tmp_path / "c", "--no-bootstrap")
    assert proc.returncode != 0 and "401" in proc.stderr
    assert TOKEN[::-1] not in proc.stderr + proc.stdout
    assert not list((tmp_path / "c").rglob("*.body"))  # a 401 page is not cached


@pytest.mark.parametrize("text, want", [
    ("http://alice:TOK@h/simple", "http://***@h/simple"),
    ("x @ https://u:p@w/x.whl", "x @ https://***@w/x.whl"),
    ("git+https://TOKEN@github.com/a/b", "git+https://***@github.com/a/b"),
    ("http://a:p@ss@host/e", "http://***@host/e"),  # a raw @ in the password
    ("index URL 'alice:TOK@127.0.0.1/simple' is bad", "index URL '***@127.0.0.1/simple' is bad"),
    ("https://h/simple and user@example.com", "https://h/simple and user@example.com"),
    ("name @ file:///a@b/x.whl", "name @ file:///a@b/x.whl"),
])
def test_redact_replaces_url_credentials_only(text, want):
    from wheelhouse.redact import redact, redact_data

    assert redact(text) == want
    assert redact_data({"k": [text, (text,)], text: 1}) == {"k": [want, (want,)], want: 1}


HF = "hf_planted-" + TOKEN[::-1]


def test_a_manifest_copied_into_the_wheelhouse_is_redacted_everywhere_it_travels(private_index, tmp_path):
    """Before: WH/manifest.toml was a verbatim copy: the index token (and the serve env's HF_TOKEN) went into
    the wheelhouse, every `wh pack` archive and every pushed OCI layer."""
    from registry import start_registry

    src = tmp_path / "src"
    src.mkdir()
    (src / "stack.toml").write_text(
        '[stack]\nname = "secret-demo"\nrequirements = ["app"]\n'
        f'index-url = "{_with_token(private_index.url)}"\n'
        '[serve]\ncommand = ["ft", "serve", "--model", "{model}", "--api-key", "' + TOKEN + '"]\n'
        f'env = {{ HF_TOKEN = "{HF}", CUDA_VISIBLE_DEVICES = "0" }}\n')
    out, cache = tmp_path / "house", tmp_path / "cache"
    outputs = [_wh("stage", src / "stack.toml", "-o", out, "--cache-dir", cache, "--no-bootstrap",
                   "--python-version", f"{sys.version_info[0]}.{sys.version_info[1]}")]
    assert outputs[0].returncode == 0, outputs[0].stderr
    copied = (out / "manifest.toml").read_text()
    assert TOKEN not in copied and HF not in copied and "***@127.0.0.1" in copied
    import tomllib

    parsed = tomllib.loads(copied)  # still the manifest: same shape, the secrets masked
    assert parsed["serve"]["env"] == {"HF_TOKEN": "***", "CUDA_VISIBLE_DEVICES": "0"}
    assert parsed["serve"]["command"][-2:] == ["--api-key", "***"] and parsed["serve"]["command"][3] == "{model}"
    archive = tmp_path / "carried" / "wh.tar"
    outputs.append(_wh("pack", out, "-o", archive))
    assert outputs[-1].returncode == 0, outputs[-1].stderr
    outputs.append(_wh("verify", out, "--json"))
    assert outputs[-1].returncode == 0, outputs[-1].stderr
    folders = [out, archive.parent]
    try:
        reg = start_registry(tmp_path / "registry")
    except pytest.skip.Exception:
        reg = None  # no docker-registry here: the wheelhouse, the archive and the outputs are still checked
    if reg is not None:
        try:
            outputs.append(_wh("push", out, reg.ref("ml/secret:v1"), "--json"))
            assert outputs[-1].returncode == 0, outputs[-1].stderr
            folders.append(reg.storage)
        finally:
            reg.stop()
    needles = (TOKEN, HF)
    for proc in outputs:
        assert not any(n in proc.stdout + proc.stderr for n in needles), proc.args
    leaked = [str(p) for f in folders for p in Path(f).rglob("*")
              if p.is_file() and not p.is_symlink() and any(n.encode() in p.read_bytes() for n in needles)]
    assert leaked == []


@pytest.mark.parametrize("text, want", [
    ('index-url = "https://u:TOK@h/simple"', 'index-url = "https://***@h/simple"'),
    ('env = { HF_TOKEN = "hf_x", CUDA_VISIBLE_DEVICES = "0" }', 'env = { HF_TOKEN = "***", CUDA_VISIBLE_DEVICES = "0" }'),
    ("\"WH_API_KEY\" = 'k'", "\"WH_API_KEY\" = '***'"),
    ('command = ["ft", "--api-key", "sk-1", "--token=t2"]', 'command = ["ft", "--api-key", "***", "--token=***"]'),
    ('url = "https://h/simple?token=abc&x=1"', 'url = "https://h/simple?token=***&x=1"'),
    ('command = ["ft", "--api-key", "{api_key}"]', 'command = ["ft", "--api-key", "{api_key}"]'),  # a placeholder
    ('"--num-tokens" = "overrides the memory solver"', '"--num-tokens" = "overrides the memory solver"'),
])
def test_redact_config_masks_credentials_and_secret_values(text, want):
    from wheelhouse.redact import redact_config, redact_settings

    assert redact_config(text) == want
    assert redact_settings({"env": {"HF_TOKEN": "x"}, "command": ["--password", "p", "--model", "m"]}) == \
        {"env": {"HF_TOKEN": "***"}, "command": ["--password", "***", "--model", "m"]}
