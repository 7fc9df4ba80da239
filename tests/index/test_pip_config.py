"""index.pip_config: pip's documented configuration files and variables, read without pip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wheelhouse.index.pip_config import NoIndexConfigured, default_index_url, pip_config_files, read_pip_index_config


def _layout(tmp_path: Path) -> dict:
    home, xdg_dirs, prefix = tmp_path / "home", tmp_path / "xdg-dirs", tmp_path / "venv"
    for d in (home, xdg_dirs, prefix):
        d.mkdir()
    env = {"HOME": str(home), "XDG_CONFIG_DIRS": str(xdg_dirs)}
    return {"home": home, "xdg": xdg_dirs, "prefix": prefix, "env": env}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _read(lay, **env):
    return read_pip_index_config(env={**lay["env"], **env}, prefix=str(lay["prefix"]), home=lay["home"])


def test_nothing_configured_is_a_clear_error(tmp_path, monkeypatch):
    lay = _layout(tmp_path)
    assert _read(lay).index_url is None
    for k, v in lay["env"].items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip would use no index: no stated default either
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    # Not an error yet (a bad requirement or a missing file is reported first), but asking it is.
    from wheelhouse.index import PackageSource

    with pytest.raises(NoIndexConfigured) as exc:
        PackageSource([default_index_url()]).files("anything")
    assert exc.value.code == "no-index" and "--index-url" in exc.value.hint


def test_later_files_override_earlier_ones_and_sections_override_global(tmp_path):
    lay = _layout(tmp_path)
    _write(lay["xdg"] / "pip" / "pip.conf", "[global]\nindex-url = http://global.test/simple\n")
    assert _read(lay).index_url == "http://global.test/simple"
    _write(lay["home"] / ".pip" / "pip.conf", "[global]\nindex_url = http://legacy-user.test/simple\n")
    assert _read(lay).index_url == "http://legacy-user.test/simple"  # index_url is index-url
    _write(lay["home"] / ".config" / "pip" / "pip.conf",
           "[global]\nindex-url = http://user.test/simple\nextra-index-url =\n  http://e1.test/simple\n  http://e2.test/simple\n")
    cfg = _read(lay)
    assert cfg.index_url == "http://user.test/simple"
    assert cfg.extra_index_urls == ("http://e1.test/simple", "http://e2.test/simple")
    # A command section in an EARLIER file still overrides [global] of a later one.
    _write(lay["xdg"] / "pip" / "pip.conf", "[global]\nindex-url = http://global.test/simple\n"
                                            "[download]\nindex-url = http://download.test/simple\n")
    assert _read(lay).index_url == "http://download.test/simple"
    site = _write(lay["prefix"] / "pip.conf", "[download]\nindex-url = http://site.test/simple\n")
    assert _read(lay).index_url == "http://site.test/simple"
    assert _read(lay).source == str(site)


def test_pip_config_file_replaces_user_files_and_devnull_loads_none(tmp_path):
    lay = _layout(tmp_path)
    _write(lay["home"] / ".config" / "pip" / "pip.conf", "[global]\nindex-url = http://user.test/simple\n")
    env_file = _write(tmp_path / "env.conf", "[install]\nextra-index-url = http://extra.test/simple\n")
    cfg = _read(lay, PIP_CONFIG_FILE=str(env_file))
    assert cfg.index_url is None and cfg.extra_index_urls == ("http://extra.test/simple",)
    assert _read(lay, PIP_CONFIG_FILE=os.devnull).extra_index_urls == ()
    assert pip_config_files({**lay["env"], "PIP_CONFIG_FILE": os.devnull}, str(lay["prefix"]), lay["home"]) == []


def test_environment_variables_override_every_file(tmp_path):
    lay = _layout(tmp_path)
    _write(lay["home"] / ".config" / "pip" / "pip.conf", "[global]\nindex-url = http://user.test/simple\n")
    cfg = _read(lay, PIP_INDEX_URL="http://env.test/simple", PIP_EXTRA_INDEX_URL="http://a.test/simple http://b.test/simple")
    assert (cfg.index_url, cfg.extra_index_urls, cfg.source) == (
        "http://env.test/simple", ("http://a.test/simple", "http://b.test/simple"), "PIP_INDEX_URL")


def test_a_broken_file_is_skipped_not_fatal(tmp_path):
    lay = _layout(tmp_path)
    _write(lay["xdg"] / "pip" / "pip.conf", "[global]\nindex-url = http://global.test/simple\n")
    _write(lay["home"] / ".config" / "pip" / "pip.conf", "this is not ini\n[[[")
    assert _read(lay).index_url == "http://global.test/simple"


def test_agrees_with_pip_itself(tmp_path):
    """The same files and variables, read by pip (the host's, run as a program) and by wh."""
    lay = _layout(tmp_path)
    _write(lay["home"] / ".pip" / "pip.conf", "[global]\nindex-url = http://legacy.test/simple\n")
    _write(lay["home"] / ".config" / "pip" / "pip.conf", "[install]\nindex-url = http://user.test/simple\n")
    env = {**os.environ, **lay["env"], "PIP_CONFIG_FILE": str(tmp_path / "absent.conf")}
    env.pop("PIP_INDEX_URL", None)
    env.pop("XDG_CONFIG_HOME", None)
    probe = subprocess.run([sys.executable, "-m", "pip", "config", "list"], env=env, capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("no pip in this interpreter to compare with")
    listed = dict(line.split("=", 1) for line in probe.stdout.splitlines() if "=" in line)
    assert listed.get("install.index-url", "").strip("'") == "http://user.test/simple"
    assert listed.get("global.index-url", "").strip("'") == "http://legacy.test/simple"
    ours = read_pip_index_config(env={k: v for k, v in env.items()}, prefix=sys.prefix, home=lay["home"])
    assert ours.index_url == "http://user.test/simple"


def test_no_pip_internals_in_wheelhouse():
    root = Path(__file__).resolve().parents[2] / "wheelhouse"
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name != "capture.py" and ("pip._internal" in p.read_text() or "pip._vendor" in p.read_text())]
    assert offenders == []


def test_a_source_without_indexes_given_uses_pips_index_and_extra_indexes(tmp_path, monkeypatch):
    from wheelhouse.index import PackageSource

    conf = _write(tmp_path / "pip.conf", "[global]\nindex-url = http://main.test/simple\n"
                                         "extra-index-url = http://extra.test/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    assert PackageSource().index_urls == ("http://main.test/simple/", "http://extra.test/simple/")


def test_with_nothing_configured_the_default_is_the_one_pip_states(tmp_path, monkeypatch):
    """wh carries no registry address: unconfigured, it uses the default pip's own help states."""
    from wheelhouse.index import pip_config

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n[ \"$3\" = download ] && [ \"$4\" = --help ] || exit 2\n"
                    "echo '  -i, --index-url <url>       Base URL of the Python Package Index (default'\n"
                    "echo '                              http://stated.test/simple). This should point'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(pip_config.sys, "executable", str(fake))
    monkeypatch.setattr(pip_config, "_stated_in_source", lambda: None)  # this test's pip is the fake one
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("HOME", str(tmp_path))
    for key in ("PIP_INDEX_URL", "PIP_NO_INDEX", "XDG_CONFIG_DIRS", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(key, raising=False)
    pip_config.pip_stated_default.cache_clear()
    try:
        assert default_index_url() == "http://stated.test/simple"
        monkeypatch.setenv("PIP_NO_INDEX", "yes")  # pip configured with no index: nothing is stated
        assert default_index_url() == pip_config.UNCONFIGURED
    finally:
        pip_config.pip_stated_default.cache_clear()


# ---- the stated default is asked once, then read from wh's cache ---------------------------------------------


def _fake_pip(tmp_path: Path, url: str) -> Path:
    """An interpreter whose ``-m pip download --help`` states ``url`` and counts how often it was asked."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n[ \"$3\" = download ] && [ \"$4\" = --help ] || exit 2\n"
                    f"echo asked >> '{tmp_path / 'asked'}'\n"
                    "echo '  -i, --index-url <url>       Base URL of the Python Package Index (default'\n"
                    f"echo '                              {url}). This should point'\n")
    fake.chmod(0o755)
    return fake


def _asked(tmp_path: Path) -> int:
    f = tmp_path / "asked"
    return len(f.read_text().splitlines()) if f.exists() else 0


@pytest.fixture
def fresh_default(monkeypatch, tmp_path):
    from wheelhouse.index import pip_config

    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no pip3/pip on PATH: only the fake is asked
    # the fake interpreter's pip has no source here to read: it is asked (the tests below count the asks)
    monkeypatch.setattr(pip_config, "_stated_in_source", lambda: None)
    pip_config.pip_stated_default.cache_clear()
    yield pip_config
    pip_config.pip_stated_default.cache_clear()


def test_the_stated_default_costs_one_pip_run_then_comes_from_the_cache(tmp_path, monkeypatch, fresh_default):
    pip_config = fresh_default
    fake = _fake_pip(tmp_path, "http://stated.test/simple")
    monkeypatch.setattr(pip_config.sys, "executable", str(fake))
    cache = tmp_path / "cache"
    assert pip_config.pip_stated_default(cache) == "http://stated.test/simple"
    assert _asked(tmp_path) == 1
    for _ in range(3):  # a new wh process each time: only the file remembers
        pip_config.pip_stated_default.cache_clear()
        assert pip_config.pip_stated_default(cache) == "http://stated.test/simple"
    assert _asked(tmp_path) == 1
    assert (cache / "pip-stated-default.json").is_file()


def test_a_changed_pip_is_asked_again(tmp_path, monkeypatch, fresh_default):
    pip_config = fresh_default
    fake = _fake_pip(tmp_path, "http://old.test/simple")
    monkeypatch.setattr(pip_config.sys, "executable", str(fake))
    cache = tmp_path / "cache"
    assert pip_config.pip_stated_default(cache) == "http://old.test/simple"
    _fake_pip(tmp_path, "http://new.test/simple")  # pip upgraded in place: a new file, a new mtime
    st = fake.stat()
    os.utime(fake, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    pip_config.pip_stated_default.cache_clear()
    assert pip_config.pip_stated_default(cache) == "http://new.test/simple"
    assert _asked(tmp_path) == 2
    # another pip on PATH changes what would be asked, so it is asked again too
    (tmp_path / "empty-bin").mkdir()
    other = tmp_path / "empty-bin" / "pip3"
    other.write_text("#!/bin/sh\nexit 1\n")
    other.chmod(0o755)
    pip_config.pip_stated_default.cache_clear()
    assert pip_config.pip_stated_default(cache) == "http://new.test/simple"
    assert _asked(tmp_path) == 3


@pytest.mark.parametrize("content", ["not json", '{"answers": [{"key": [], "url": "http://x.test/simple"}]}', None])
def test_a_damaged_or_foreign_cache_entry_is_not_trusted(tmp_path, monkeypatch, fresh_default, content):
    pip_config = fresh_default
    fake = _fake_pip(tmp_path, "http://stated.test/simple")
    monkeypatch.setattr(pip_config.sys, "executable", str(fake))
    cache = tmp_path / "cache"
    assert pip_config.pip_stated_default(cache) == "http://stated.test/simple"
    entry = cache / "pip-stated-default.json"
    if content is None:  # the right key, but a value that is no URL (a hand-edited or hostile file)
        data = json.loads(entry.read_text())
        data["answers"][0]["url"] = "file:///etc/passwd"
        content = json.dumps(data)
    entry.write_text(content)
    pip_config.pip_stated_default.cache_clear()
    assert pip_config.pip_stated_default(cache) == "http://stated.test/simple"
    assert _asked(tmp_path) == 2


def test_runs_from_two_interpreters_do_not_evict_each_other_s_answer(tmp_path, monkeypatch, fresh_default):
    """Before: one answer was kept, so alternating interpreters paid a pip start-up on every run."""
    pip_config = fresh_default
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    fakes = {d: _fake_pip(d, f"http://{d.name}.test/simple") for d in (a, b)}
    cache = tmp_path / "cache"
    for _ in range(3):
        for d, fake in fakes.items():
            monkeypatch.setattr(pip_config.sys, "executable", str(fake))
            pip_config.pip_stated_default.cache_clear()
            assert pip_config.pip_stated_default(cache) == f"http://{d.name}.test/simple"
    assert _asked(a) == 1 and _asked(b) == 1


def test_a_pip_that_states_nothing_is_not_cached(tmp_path, monkeypatch, fresh_default):
    pip_config = fresh_default
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho asked >> '{tmp_path / 'asked'}'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(pip_config.sys, "executable", str(fake))
    for _ in range(2):
        pip_config.pip_stated_default.cache_clear()
        assert pip_config.pip_stated_default(tmp_path / "cache") is None
    assert _asked(tmp_path) == 2  # a failure (timeout, broken pip) is never remembered
    assert not (tmp_path / "cache" / "pip-stated-default.json").exists()


def test_the_real_pip_is_asked_once_across_runs(tmp_path, monkeypatch, fresh_default):
    """This interpreter's own pip, run (never imported): the second wh run starts no subprocess."""
    pip_config = fresh_default
    calls = []
    real_run = subprocess.run
    monkeypatch.setattr(pip_config.subprocess, "run", lambda *a, **k: calls.append(a) or real_run(*a, **k))
    first = pip_config.pip_stated_default(tmp_path / "cache")
    assert first and first.startswith(("https://", "http://")) and len(calls) == 1
    pip_config.pip_stated_default.cache_clear()
    assert pip_config.pip_stated_default(tmp_path / "cache") == first
    assert len(calls) == 1


def test_reading_the_default_imports_no_pip(tmp_path):
    code = ("import sys; from wheelhouse.index.pip_config import default_index_url; default_index_url(); "
            "print(sorted(m for m in sys.modules if m == 'pip' or m.startswith('pip.')))")
    env = {**os.environ, "WH_CACHE_DIR": str(tmp_path / "cache"), "PIP_CONFIG_FILE": os.devnull}
    env.pop("PIP_INDEX_URL", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert r.stdout.strip() == "[]"


# --- every setting pip reads for where packages come from (issue 30, finding 5) ------------------------
def test_find_links_and_trusted_host_come_from_files_and_variables_override_them(tmp_path):
    lay = _layout(tmp_path)
    _write(lay["home"] / ".config" / "pip" / "pip.conf",
           "[global]\nfind-links = /srv/wheels\n  /srv/more\ntrusted-host = mirror.test\n"
           "[download]\nextra-index-url = http://dl.test/simple\n")
    cfg = _read(lay)
    assert cfg.find_links == ("/srv/wheels", "/srv/more") and cfg.trusted_hosts == ("mirror.test",)
    assert cfg.extra_index_urls == ("http://dl.test/simple",)
    cfg = _read(lay, PIP_FIND_LINKS="/env/wheels", PIP_TRUSTED_HOST="a.test b.test:8443")
    assert cfg.find_links == ("/env/wheels",) and cfg.trusted_hosts == ("a.test", "b.test:8443")  # replaced, as pip


def _pip_env(tmp_path, conf_text: str, **more) -> dict:
    conf = _write(tmp_path / "conf" / "pip.conf", conf_text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "WH_INDEX"))}
    return {**env, "PIP_CONFIG_FILE": str(conf), "HOME": str(tmp_path / "home"), "NO_COLOR": "1", **more}


def test_wh_stage_uses_every_index_and_find_links_pip_is_configured_with(pyindex, tmp_path):
    """pip.conf's index-url, extra-index-url and find-links are all used, and --json lists each, redacted."""
    from faults import wh_command
    from wheelmaker import make_wheel

    make_wheel(tmp_path / "main", "app", "1.0", requires=["lib", "loc"])
    make_wheel(tmp_path / "extra", "lib", "2.0")
    make_wheel(tmp_path / "links", "loc", "3.0")
    main, extra = pyindex(tmp_path / "main"), pyindex(tmp_path / "extra")
    secret_extra = extra.url.replace("http://", "http://user:s3cr3t@")
    env = _pip_env(tmp_path, f"[global]\nindex-url = {main.url}\nextra-index-url = {secret_extra}\n"
                             f"find-links = {tmp_path / 'links'}\n")
    args = ["stage", "app", "--dry-run", "--json", "--cache-dir", str(tmp_path / "cache"), "--python-version", "3.12",
            "--platform", "manylinux_2_35_x86_64", "--no-bootstrap"]
    r = subprocess.run(wh_command(args), capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {p["name"]: p["version"] for p in data["packages"]} == {"app": "1.0", "lib": "2.0", "loc": "3.0"}
    assert data["indexes"] == [main.url.rstrip("/") + "/", extra.url.rstrip("/") + "/", str(tmp_path / "links")]
    assert "s3cr3t" not in r.stdout + r.stderr

    # PIP_EXTRA_INDEX_URL replaces the file's extra-index-url (pip's precedence): lib is then nowhere.
    other = pyindex(tmp_path / "links")
    r = subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300,
                       env={**env, "PIP_EXTRA_INDEX_URL": other.url})
    assert r.returncode == 1 and "no project named lib" in r.stderr, r.stderr
    assert extra.url.rstrip("/") not in json.loads(r.stdout)["error"]["message"]


def test_a_trusted_host_is_read_over_https_without_a_certificate_it_can_verify(pyindex, tmp_path, monkeypatch):
    """pip's trusted-host: https to that host:port goes on although its certificate is signed by no CA
    wh trusts; any other host is still verified."""
    import ssl

    from pki import make_test_pki
    from wheelhouse.index import PackageSource
    from wheelhouse.index.http import HttpClient
    from wheelmaker import make_wheel

    (tmp_path / "pki").mkdir()
    pki = make_test_pki(tmp_path / "pki", cn="127.0.0.1", san="IP:127.0.0.1")
    make_wheel(tmp_path / "pub", "lib", "1.0")
    idx = pyindex(tmp_path / "pub")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "srv.pem", pki / "srv.key")
    idx._server.socket = ctx.wrap_socket(idx._server.socket, server_side=True)
    url = idx.url.replace("http://", "https://")
    host = url.split("/")[2]
    for var in ("WH_CA_BUNDLE", "PIP_CERT", "REQUESTS_CA_BUNDLE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(_write(tmp_path / "pip.conf", f"[global]\ntrusted-host = {host}\n")))
    monkeypatch.delenv("PIP_TRUSTED_HOST", raising=False)
    assert [f.version for f in PackageSource([url], client=HttpClient()).files("lib")] == ["1.0"]
    with pytest.raises(Exception) as err:
        PackageSource([url], client=HttpClient(trusted_hosts=())).files("lib")
    assert "certificate" in str(err.value).lower() or "ssl" in str(err.value).lower(), str(err.value)


# ---- the stated default read from pip's own source, without starting pip -------------------------------------


def _fake_pip_source(root: Path, url: str, *, option_default: str = "PyPI.simple_url") -> Path:
    """A ``pip`` package whose source states ``url`` as pip's does (models/index.py, cli/cmdoptions.py)."""
    pkg = root / "pip"
    (pkg / "_internal" / "models").mkdir(parents=True)
    (pkg / "_internal" / "cli").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_internal" / "models" / "index.py").write_text(
        "import urllib.parse\n\nclass PackageIndex:\n    def __init__(self, url, file_storage_domain):\n"
        "        self.url = url\n        self.simple_url = self._url_for_path(\"simple\")\n\n"
        "    def _url_for_path(self, path):\n        return urllib.parse.urljoin(self.url, path)\n\n\n"
        f"PyPI = PackageIndex(\"{url}\", file_storage_domain=\"files.test\")\n"
        "TestPyPI = PackageIndex(\"https://test.other.test/\", file_storage_domain=\"x.test\")\n")
    (pkg / "_internal" / "cli" / "cmdoptions.py").write_text(
        "index_url = partial(\n    Option,\n    \"-i\",\n    \"--index-url\",\n    \"--pypi-url\",\n"
        f"    dest=\"index_url\",\n    metavar=\"URL\",\n    default={option_default},\n    help=\"...\",\n)\n")
    return root


@pytest.mark.parametrize("stated", [True, False], ids=["read-from-source", "worded-otherwise-so-asked"])
def test_an_empty_cache_stage_starts_no_pip_when_pips_source_states_the_default(pyindex, tmp_path, monkeypatch,
                                                                                  fresh_default, stated):
    """Before: every run with an empty cache started pip (~0.35 s) to read its help text."""
    import json
    import sys

    from click.testing import CliRunner

    from wheelhouse.cli import cli
    from wheelmaker import make_wheel

    pip_config = fresh_default
    monkeypatch.undo()  # the real source reader (fresh_default turned it off for the tests above)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0")
    idx = pyindex(pub)
    root = _fake_pip_source(tmp_path / "site", idx.url.rstrip("/").rsplit("/", 1)[0] + "/",
                            option_default="PyPI.simple_url" if stated else "\"http://elsewhere.test/simple\"")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(sys.modules, "pip", raising=False)
    fake = _fake_pip(tmp_path, idx.url.rstrip("/"))  # what pip's help would say: the same index
    monkeypatch.setattr(pip_config.sys, "executable", str(fake))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(key, raising=False)
    r = CliRunner().invoke(cli, ["stage", "app", "--dry-run", "--json", "--no-bootstrap", "--cache-dir",
                                 str(tmp_path / "cache"), "--python-version", "3.12"],
                           env={"WH_CACHE_DIR": str(tmp_path / "home")})
    assert r.exit_code == 0, r.output
    assert [p["name"] for p in json.loads(r.stdout)["packages"]] == ["app"]
    assert _asked(tmp_path) == (0 if stated else 1)
