"""`wh stage --offline` and `--refresh` end to end: a real index on 127.0.0.1, real wheels, the CLI.

Offline, every index page and every metadata file comes from the cache whatever its age: the
index is stopped and any connection attempt fails the test. A cold cache fails naming what is
missing and writes nothing; --refresh revalidates every page (304s, counted by the index)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from click.testing import CliRunner

from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_wheel
from wheelhouse.cli import cli
from wheelhouse.index import NotCached, PackageSource
from wheelhouse.index.http import HttpClient

TARGET = ["--python-version", "3.12", "--platform", "manylinux_2_35_x86_64"]


@pytest.fixture
def wheels(tmp_path):
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["lib>=1", 'old; python_version < "3.12"'])
    make_wheel(d, "lib", "1.0")
    make_wheel(d, "lib", "2.0", tags="cp312-cp312-manylinux_2_17_x86_64")
    make_wheel(d, "lib", "3.0", tags="cp313-cp313-manylinux_2_17_x86_64")  # not for the target
    make_wheel(d, "old", "1.0")
    return d


def _wh(*args, env=None):
    return CliRunner().invoke(cli, ["stage", *args], env=env)


def _pins(result) -> dict[str, str]:
    assert result.exit_code == 0, result.output
    return {p["name"]: p["filename"] for p in json.loads(result.stdout)["packages"]}


def _dry(idx_url, cache, *more, env=None):
    return _wh("app", "--dry-run", "--json", "--no-bootstrap", "--index-url", idx_url, "--cache-dir", str(cache),
               *TARGET, *more, env=env)


@pytest.fixture
def no_sockets(monkeypatch):
    def refuse(self, address):
        pytest.fail(f"an offline run opened a connection to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


@pytest.mark.parametrize("serve_metadata", [True, False], ids=["pep658", "ranges"])
def test_offline_gives_the_online_pins_with_the_index_stopped(pyindex, wheels, tmp_path, monkeypatch, serve_metadata):
    idx = pyindex(wheels, serve_metadata=serve_metadata)
    cache = tmp_path / "cache"
    online = _pins(_dry(idx.url, cache))
    assert online == {"app": "app-1.0-py3-none-any.whl", "lib": "lib-2.0-cp312-cp312-manylinux_2_17_x86_64.whl"}
    idx.stop()
    monkeypatch.setattr(socket.socket, "connect", lambda self, a: pytest.fail(f"offline run connected to {a}"))
    assert _pins(_dry(idx.url, cache, "--offline")) == online
    assert _pins(_dry(idx.url, cache, env={"WH_OFFLINE": "1"})) == online  # the environment variable too


def test_offline_with_a_cold_cache_names_the_missing_page_and_writes_nothing(wheels, tmp_path, no_sockets):
    out = tmp_path / "wh"
    r = _wh("app", "-o", str(out), "--no-bootstrap", "--index-url", "http://127.0.0.1:9/simple/",
            "--cache-dir", str(tmp_path / "cache"), *TARGET, "--offline")
    assert isinstance(r.exception, NotCached), r.output
    assert r.exception.message == "offline: the index page of app (http://127.0.0.1:9/simple/app/) is not in the cache"
    assert "without --offline" in r.exception.hint  # run once online to fill the cache
    assert not out.exists()


def test_the_offline_miss_is_one_error_line_a_hint_and_exit_1(tmp_path):
    out = tmp_path / "wh"
    proc = subprocess.run([sys.executable, "-c", "import sys; from wheelhouse.cli import main; main(sys.argv[1:])",
                           "stage", "app", "-o", str(out), "--no-bootstrap", "--index-url", "http://127.0.0.1:9/simple/",
                           "--cache-dir", str(tmp_path / "cache"), *TARGET, "--offline"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "offline: the index page of app (http://127.0.0.1:9/simple/app/) is not in the cache" in proc.stderr
    assert "hint:" in proc.stderr and "--offline" in proc.stderr.split("hint:", 1)[1]
    assert not out.exists() and proc.stdout == ""


def test_offline_names_missing_metadata(pyindex, wheels, tmp_path, monkeypatch):
    idx = pyindex(wheels, serve_metadata=True)
    cache = tmp_path / "cache"
    # The pages are cached (as a run that read them would leave them), the metadata is not.
    src = PackageSource([idx.url], client=HttpClient(cache_dir=cache))
    src.files("app")
    src.files("lib")
    idx.stop()
    monkeypatch.setattr(socket.socket, "connect", lambda self, a: pytest.fail(f"offline run connected to {a}"))
    r = _dry(idx.url, cache, "--offline")
    assert isinstance(r.exception, NotCached), r.output
    assert r.exception.message == "offline: the metadata of app-1.0-py3-none-any.whl is not in the cache"


def test_refresh_revalidates_every_page_with_conditional_requests(pyindex, wheels, tmp_path):
    idx = pyindex(wheels, serve_metadata=True, validators="both")
    cache = tmp_path / "cache"
    online = _pins(_dry(idx.url, cache))
    pages = idx.page_requests()
    assert pages == 2  # app and lib (old's marker is false for 3.12)
    assert _pins(_dry(idx.url, cache)) == online and idx.page_requests() == pages  # fresh: no request
    assert _pins(_dry(idx.url, cache, "--refresh")) == online
    assert idx.page_requests() == 2 * pages and sum(idx.not_modified.values()) == pages
    # a page that changed is seen at once by --refresh, however fresh its entry
    make_wheel(wheels, "lib", "2.1", tags="cp312-cp312-manylinux_2_17_x86_64")
    idx.add(wheels)
    assert _pins(_dry(idx.url, cache, "--refresh"))["lib"] == "lib-2.1-cp312-cp312-manylinux_2_17_x86_64.whl"


def test_offline_wins_over_refresh(pyindex, wheels, tmp_path, monkeypatch):
    idx = pyindex(wheels, serve_metadata=True)
    cache = tmp_path / "cache"
    online = _pins(_dry(idx.url, cache))
    idx.stop()
    monkeypatch.setattr(socket.socket, "connect", lambda self, a: pytest.fail(f"offline run connected to {a}"))
    assert _pins(_dry(idx.url, cache, "--offline", "--refresh")) == online  # nothing to revalidate against


def test_a_full_offline_stage_from_a_warm_cache(pyindex, wheels, tmp_path, monkeypatch):
    idx = pyindex(wheels, serve_metadata=True)
    cache = tmp_path / "cache"
    args = ["app", "--no-bootstrap", "--index-url", idx.url, "--cache-dir", str(cache), *TARGET]
    assert _wh(*args, "-o", str(tmp_path / "one")).exit_code == 0
    idx.stop()
    monkeypatch.setattr(socket.socket, "connect", lambda self, a: pytest.fail(f"offline run connected to {a}"))
    r = _wh(*args, "-o", str(tmp_path / "two"), "--offline")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "one" / "pylock.toml").read_text() == (tmp_path / "two" / "pylock.toml").read_text()


def test_offline_with_pages_cached_but_a_wheel_not_names_the_wheel_and_writes_nothing(pyindex, wheels, tmp_path,
                                                                                     monkeypatch):
    idx = pyindex(wheels, serve_metadata=True)
    cache = tmp_path / "cache"
    _pins(_dry(idx.url, cache))  # pages and metadata cached, no wheel downloaded
    idx.stop()
    monkeypatch.setattr(socket.socket, "connect", lambda self, a: pytest.fail(f"offline run connected to {a}"))
    out = tmp_path / "wh"
    r = _wh("app", "--no-bootstrap", "--index-url", idx.url, "--cache-dir", str(cache), *TARGET, "-o", str(out),
            "--offline")
    assert isinstance(r.exception, NotCached), r.output
    assert r.exception.message.startswith("offline: ") and ".whl is not in the cache" in r.exception.message
    assert not out.exists()
