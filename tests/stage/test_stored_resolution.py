"""The stored resolution (wheelhouse.stage.stored), end to end through `wh stage`: a real index on 127.0.0.1,
real wheels, the CLI.

A stage whose inputs and index pages are unchanged is answered from the resolution stored by the run
before, without resolvelib; its --json output is the resolved run's. A new upload, another input, or a
damaged store means a full resolve, never a wrong answer nor a crash."""

from __future__ import annotations

import json
import socket

import pytest
from click.testing import CliRunner

from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_app_and_lib, make_wheel
from wheelhouse.cli import cli

TARGET = ["--python-version", "3.12", "--platform", "manylinux_2_35_x86_64"]
STORED = "from the stored resolution"


@pytest.fixture
def wheels(tmp_path):
    return make_app_and_lib(tmp_path / "pub")


@pytest.fixture
def resolves(monkeypatch):
    """Counts the runs of resolvelib's search."""
    import resolvelib

    calls = []
    real = resolvelib.Resolver.resolve

    def counted(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(resolvelib.Resolver, "resolve", counted)
    return calls


def _dry(idx_url, cache, *more):
    r = CliRunner().invoke(cli, ["stage", "app", "--dry-run", "--json", "--no-bootstrap", "--index-url", idx_url,
                                 "--cache-dir", str(cache), *TARGET, *more], env={"PIP_CONFIG_FILE": "/dev/null"})
    assert r.exit_code == 0, r.output
    return r


def _pins(r) -> dict[str, str]:
    return {p["name"]: p["version"] for p in json.loads(r.stdout)["packages"]}


def test_an_unchanged_stage_is_answered_from_the_stored_resolution_offline(pyindex, wheels, tmp_path, monkeypatch,
                                                                           resolves):
    idx = pyindex(wheels, serve_metadata=True)
    cache = tmp_path / "cache"
    first = _dry(idx.url, cache)
    assert len(resolves) == 1 and STORED not in first.stderr
    idx.stop()
    monkeypatch.setattr(socket.socket, "connect", lambda self, a: pytest.fail(f"offline run connected to {a}"))
    again = _dry(idx.url, cache, "--offline")
    assert len(resolves) == 1, "resolvelib ran again"
    assert again.stdout == first.stdout  # --json identical
    assert "2 packages from the stored resolution" in again.stderr


def test_a_fresh_cache_answers_online_too_and_verbose_always_resolves(pyindex, wheels, tmp_path, resolves):
    idx = pyindex(wheels, serve_metadata=True)
    cache = tmp_path / "cache"
    first = _dry(idx.url, cache)
    assert _dry(idx.url, cache).stdout == first.stdout and len(resolves) == 1  # pages fresh: no search
    explained = _dry(idx.url, cache, "-v")  # -v explains each pin: that is the search's own account
    assert len(resolves) == 2 and STORED not in explained.stderr


def test_a_new_upload_invalidates_it(pyindex, wheels, tmp_path, resolves):
    idx = pyindex(wheels, serve_metadata=True, validators="both")
    cache = tmp_path / "cache"
    assert _pins(_dry(idx.url, cache))["lib"] == "2.0"
    make_wheel(wheels, "lib", "2.1", tags="cp312-cp312-manylinux_2_17_x86_64")
    idx.add(wheels)
    r = _dry(idx.url, cache, "--refresh")  # the page is revalidated: it changed
    assert _pins(r)["lib"] == "2.1" and len(resolves) == 2 and STORED not in r.stderr
    # and the new answer is the one stored now
    assert _pins(_dry(idx.url, cache, "--offline"))["lib"] == "2.1" and len(resolves) == 2


def test_a_changed_input_invalidates_it(pyindex, wheels, tmp_path, resolves):
    idx = pyindex(wheels, serve_metadata=True)
    cache = tmp_path / "cache"
    _dry(idx.url, cache)
    r = CliRunner().invoke(cli, ["stage", "app", "lib<2", "--dry-run", "--json", "--no-bootstrap", "--index-url",
                                 idx.url, "--cache-dir", str(cache), *TARGET],
                           env={"PIP_CONFIG_FILE": "/dev/null"})
    assert r.exit_code == 0, r.output
    assert _pins(r)["lib"] == "1.0" and STORED not in r.stderr and len(resolves) == 2  # one more requirement
    r = _dry(idx.url, cache, "--python-version", "3.11")  # another target
    assert STORED not in r.stderr and len(resolves) == 3


@pytest.mark.parametrize("damage", ["torn", "edited", "garbage", "wrong-types"])
def test_a_damaged_store_is_ignored(pyindex, wheels, tmp_path, resolves, damage):
    idx = pyindex(wheels, serve_metadata=True)
    cache = tmp_path / "cache"
    first = _dry(idx.url, cache)
    [stored] = (cache / "resolutions").iterdir()
    raw = stored.read_bytes()
    head, _, body = raw.partition(b"\n")
    if damage == "torn":
        stored.write_bytes(raw[: len(raw) // 2])
    elif damage == "edited":  # a pin changed by hand, the checksum left as it was
        stored.write_bytes(head + b"\n" + body.replace(b'"version":"2.0"', b'"version":"9.9"'))
    elif damage == "garbage":
        stored.write_bytes(b"\x00\xff not a stored resolution")
    else:  # a consistent checksum over content of the wrong shape (a hostile or buggy writer)
        import hashlib

        data = json.loads(body)
        data["resolution"]["pins"][0]["parents"] = 7
        body = json.dumps(data).encode()
        from wheelhouse.stage.stored import FORMAT

        stored.write_bytes(f"wh-stored-resolution {FORMAT} ".encode() + hashlib.sha256(body).hexdigest().encode() + b"\n"
                           + body)
    r = _dry(idx.url, cache, "--offline")
    assert r.stdout == first.stdout and len(resolves) == 2 and STORED not in r.stderr


# What a stage answered from its stored resolution never calls: the search, the network layers, the
# checks of the wheelhouse writer. Loading them is most of such a run's time (start-up), so they are not loaded.
NOT_LOADED = ("resolvelib", "urllib3", "ssl", "http.client", "email", "wheelhouse.resolve.resolver",
              "wheelhouse.resolve.provider", "wheelhouse.lock.records", "wheelhouse.fetch", "wheelhouse.stage.bootstrap",
              "rich",  # (rich: stderr is not a terminal here, notes are plain lines)
              # nor what only a miss, a manifest or a wheelhouse written needs: packaging's requirement and marker
              # parsers (the request is a plain name), the TOML and pylock readers, the wheelhouse writer and lock
              # package, the resolver's candidate finder, the page parsers, zipfile, socket, configparser
              "packaging.requirements", "packaging.markers", "packaging.specifiers", "tomllib", "packaging.pylock",
              "wheelhouse.manifest.model", "wheelhouse.stage.writer", "wheelhouse.lock", "wheelhouse.resolve.candidates",
              "wheelhouse.index.pages", "zipfile", "socket", "configparser")


@pytest.mark.parametrize("shape", ["dry-run", "dry-run-json", "stage"])
def test_a_stored_answer_loads_neither_the_search_nor_the_network(pyindex, wheels, tmp_path, shape):
    """Through the real entry point (`python -m wheelhouse`, a process of its own): every module the run
    imported is listed by `-X importtime`."""
    import os
    import subprocess
    import sys

    idx = pyindex(wheels, serve_metadata=True)
    cache = tmp_path / "cache"
    first = _dry(idx.url, cache)
    if shape == "stage":  # the wheels downloaded once (into the cache), so that an offline stage can write
        r = CliRunner().invoke(cli, ["stage", "app", "--no-bootstrap", "--index-url", idx.url, "--cache-dir", str(cache),
                                     "-o", str(tmp_path / "first"), *TARGET], env={"PIP_CONFIG_FILE": "/dev/null"})
        assert r.exit_code == 0, r.output
    idx.stop()
    more = {"dry-run": ["--dry-run"], "dry-run-json": ["--dry-run", "--json"], "stage": ["-o", str(tmp_path / "wh")]}[shape]
    env = {**os.environ, "PIP_CONFIG_FILE": "/dev/null", "WH_CACHE_DIR": str(tmp_path / "home")}
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "wheelhouse", "stage", "app", "--no-bootstrap",
                        "--offline", "--index-url", idx.url, "--cache-dir", str(cache), *TARGET, *more],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert STORED in r.stderr
    if shape == "dry-run-json":
        assert r.stdout == first.stdout
    loaded = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    # writing a wheelhouse needs its writer (and may draw progress): there, only the search is never loaded
    never = NOT_LOADED if shape != "stage" else ("resolvelib", "wheelhouse.resolve.resolver", "wheelhouse.resolve.provider")
    if shape == "stage":
        assert (tmp_path / "wh" / "pylock.toml").is_file()
    assert not sorted(m for m in loaded if m in never or any(m.startswith(n + ".") for n in never))


def _stage(idx_url, cache, *args, env=None):
    r = CliRunner().invoke(cli, ["stage", *args, "--dry-run", "--json", "--no-bootstrap", "--index-url", idx_url,
                                 "--cache-dir", str(cache), *TARGET], env={"PIP_CONFIG_FILE": "/dev/null", **(env or {})})
    assert r.exit_code == 0, r.output
    return r


def test_a_changed_constraints_file_misses(pyindex, wheels, tmp_path, resolves):
    idx = pyindex(wheels, serve_metadata=True)
    cache, cons = tmp_path / "cache", tmp_path / "constraints.txt"
    cons.write_text("lib>=1\n")
    assert _pins(_stage(idx.url, cache, "app", "-c", str(cons)))["lib"] == "2.0"
    assert STORED in _stage(idx.url, cache, "app", "-c", str(cons), "--offline").stderr and len(resolves) == 1
    cons.write_text("lib<2\n")  # the same file, edited
    r = _stage(idx.url, cache, "app", "-c", str(cons))
    assert _pins(r)["lib"] == "1.0" and STORED not in r.stderr and len(resolves) == 2


def test_another_index_configuration_misses(pyindex, wheels, tmp_path, resolves):
    """An index added on the command line, or by pip's configuration (a pip.conf's extra-index-url), is
    another input: the stored answer read other pages."""
    idx = pyindex(wheels, serve_metadata=True)
    other = tmp_path / "other"
    make_wheel(other, "lib", "3.0", tags="cp312-cp312-manylinux_2_17_x86_64")
    extra = pyindex(other, serve_metadata=True)
    cache = tmp_path / "cache"
    _stage(idx.url, cache, "app")
    r = _stage(idx.url, cache, "app", "--extra-index-url", extra.url)
    assert STORED not in r.stderr and len(resolves) == 2
    third = tmp_path / "third"
    make_wheel(third, "lib", "3.1", tags="cp312-cp312-manylinux_2_17_x86_64")
    configured = pyindex(third, serve_metadata=True)
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nextra-index-url = {configured.url}\n")
    r = _stage(idx.url, cache, "app", env={"PIP_CONFIG_FILE": str(conf)})
    assert STORED not in r.stderr and len(resolves) == 3
    assert configured.url.rstrip("/") in [u.rstrip("/") for u in json.loads(r.stdout)["indexes"]]
    conf.write_text("[global]\n")  # the same file, its extra index taken out: the first answer again, from its store
    r = _stage(idx.url, cache, "app", "--offline", env={"PIP_CONFIG_FILE": str(conf)})
    assert STORED in r.stderr and len(resolves) == 3


def test_a_cached_page_changed_since_misses_offline(pyindex, wheels, tmp_path, resolves):
    """Another run refreshed a page the stored answer read (here: a stage of lib alone, after an upload): offline,
    the stored answer of app no longer matches the cache and app is resolved again from the cache."""
    idx = pyindex(wheels, serve_metadata=True, validators="both")
    cache = tmp_path / "cache"
    assert _pins(_stage(idx.url, cache, "app"))["lib"] == "2.0"
    make_wheel(wheels, "lib", "2.1", tags="cp312-cp312-manylinux_2_17_x86_64")
    idx.add(wheels)
    _stage(idx.url, cache, "lib", "--refresh")  # lib's page in the cache is the new one now
    idx.stop()
    r = _stage(idx.url, cache, "app", "--offline")
    assert _pins(r)["lib"] == "2.1" and STORED not in r.stderr and len(resolves) == 3


@pytest.mark.parametrize("upload", [False, True])
def test_an_expired_page_is_revalidated_and_a_change_misses(pyindex, wheels, tmp_path, resolves, upload):
    """Online, a page older than its freshness lifetime is asked again (a conditional request): unchanged (304),
    the stored answer stands; changed, it is resolved again."""
    import os
    import time

    idx = pyindex(wheels, serve_metadata=True, validators="both")
    cache = tmp_path / "cache"
    _stage(idx.url, cache, "app")
    if upload:
        make_wheel(wheels, "lib", "2.1", tags="cp312-cp312-manylinux_2_17_x86_64")
        idx.add(wheels)
    assert STORED in _stage(idx.url, cache, "app").stderr  # still fresh: no request, the stored answer
    old = time.time() - 7200  # every cached page two hours old: past the lifetime
    for entry in (cache / "http").glob("*.page"):
        os.utime(entry, (old, old))
    r = _stage(idx.url, cache, "app")
    assert (STORED in r.stderr) is (not upload) and len(resolves) == 1 + upload
    assert _pins(r)["lib"] == ("2.1" if upload else "2.0")


def test_a_page_past_its_lifetime_is_revalidated(pyindex, wheels, tmp_path, monkeypatch,
                                                                              resolves):
    """Nothing touched the cached page, but two hours have passed: online, the page is asked again (here it
    changed: a new upload), never taken as it is."""
    import types

    import wheelhouse.index.http.cache as cache_mod

    idx = pyindex(wheels, serve_metadata=True, validators="both")
    cache = tmp_path / "cache"
    _dry(idx.url, cache)
    make_wheel(wheels, "lib", "2.1", tags="cp312-cp312-manylinux_2_17_x86_64")
    idx.add(wheels)
    real = cache_mod.time.time
    monkeypatch.setattr(cache_mod, "time", types.SimpleNamespace(time=lambda: real() + 7200))
    r = _dry(idx.url, cache)
    assert _pins(r)["lib"] == "2.1" and STORED not in r.stderr and len(resolves) == 2
