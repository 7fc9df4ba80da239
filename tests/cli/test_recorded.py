"""A repeated ``wh stage --dry-run --offline`` answered from its record (wheelhouse.cli._recorded), end to end:
a real index on 127.0.0.1, real wheels, wh run as a process.

The record's answer is the full path's byte for byte (stdout, stderr, exit code), loads no click; any input
changed since (a requirement, an option, the index, a cached page, the record itself) is the full path's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_app_and_lib, make_wheel

TARGET = ["--python-version", "3.12", "--platform", "manylinux_2_35_x86_64"]
# Runs wh's entry point and says, in $PROBE, whether click was loaded: which path answered.
_RUN = """
import os, sys
from wheelhouse.cli import main
try:
    main(sys.argv[1:])
finally:
    open(os.environ["PROBE"], "w").write("full" if "click" in sys.modules else "recorded")
"""


@pytest.fixture
def wheels(tmp_path):
    return make_app_and_lib(tmp_path / "pub")


@pytest.fixture
def wh(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "WH_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, HOME=str(tmp_path / "home"), NO_COLOR="1")
    cache = tmp_path / "cache"

    def run(url, *args, full=False, reqs=("app",), **more_env):
        probe = tmp_path / "probe"
        e = dict(env, PROBE=str(probe), **more_env, **({"WH_NO_RECORDED": "1"} if full else {}))
        cmd = [sys.executable, "-c", _RUN, "stage", *reqs, "--dry-run", "--json", "--no-bootstrap", "--index-url",
               url, "--cache-dir", str(cache), *TARGET, *args]
        p = subprocess.run(cmd, env=e, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        return p, probe.read_text()

    run.cache = cache
    return run


def _answer(p):
    return p.returncode, p.stdout, p.stderr


def _pins(p) -> dict[str, str]:
    return {x["name"]: x["version"] for x in json.loads(p.stdout)["packages"]}


def test_a_repeated_offline_dry_run_is_answered_from_its_record_as_the_full_path_answers(pyindex, wheels, wh):
    idx = pyindex(wheels, serve_metadata=True)
    wh(idx.url)  # resolved, stored
    idx.stop()
    recorded_by, how = wh(idx.url, "--offline")
    assert how == "full" and "from the stored resolution" in recorded_by.stderr
    again, how = wh(idx.url, "--offline")
    assert how == "recorded"  # click, packaging, the stage: none loaded
    full, how = wh(idx.url, "--offline", full=True)
    assert how == "full"
    assert _answer(again) == _answer(full) == _answer(recorded_by)
    assert again.returncode == 0 and _pins(again) == {"app": "1.0", "lib": "2.0"}


@pytest.mark.parametrize("change", ["requirement", "option", "index", "environment"])
def test_another_command_line_or_environment_is_never_answered_from_a_record(pyindex, wheels, wh, change):
    idx = pyindex(wheels, serve_metadata=True)
    wh(idx.url)
    wh(idx.url, "lib==1.0", reqs=("app",))  # lib 1.0's resolution stored too
    wh(idx.url, "--pre")
    wh(idx.url, reqs=("app", "lib==1.0"))
    assert wh(idx.url, "--offline")[1] == "full" and wh(idx.url, "--offline")[1] == "recorded"
    url = idx.url
    other = {"requirement": dict(reqs=("app", "lib==1.0")), "option": dict(), "index": dict(),
             "environment": dict(WH_JOBS="3")}[change]
    args = ["--offline"] + (["--pre"] if change == "option" else [])
    if change == "index":
        url = url.rstrip("/") + "//"  # another spelling: another command line (and a resolve that fails offline)
    wh(url, *args, full=True, **other)  # a resolve it stores would change the next run's notes
    full = wh(url, *args, full=True, **other)[0]
    p, how = wh(url, *args, **other)
    assert how == "full" and _answer(p) == _answer(full)


def test_a_cached_page_changed_since_the_record_is_read_again(pyindex, wheels, wh):
    idx = pyindex(wheels, serve_metadata=True)
    wh(idx.url)
    assert wh(idx.url, "--offline")[1] == "full" and wh(idx.url, "--offline")[1] == "recorded"
    make_wheel(wheels, "lib", "2.1", tags="cp312-cp312-manylinux_2_17_x86_64")
    idx.add(wheels)
    wh(idx.url, "--refresh")  # lib's cached page is the new one now
    p, how = wh(idx.url, "--offline")
    assert how == "full" and _pins(p)["lib"] == "2.1"
    assert wh(idx.url, "--offline")[1] == "recorded" and _pins(wh(idx.url, "--offline")[0])["lib"] == "2.1"


def test_a_manifest_stage_is_not_recorded_and_its_edit_is_read(pyindex, wheels, wh, tmp_path):
    idx = pyindex(wheels, serve_metadata=True)
    manifest = tmp_path / "stack.toml"
    one, two = ('[stack]\nname = "t"\nrequirements = ["app"]\n',
                '[stack]\nname = "t"\nrequirements = ["app", "lib==1.0"]\n')
    manifest.write_text(one)
    wh(idx.url, reqs=(str(manifest),))
    manifest.write_text(two)
    wh(idx.url, reqs=(str(manifest),))
    for text, lib in ((one, "2.0"), (two, "1.0")):
        manifest.write_text(text)
        for _ in range(2):
            p, how = wh(idx.url, "--offline", reqs=(str(manifest),))
            assert how == "full" and _pins(p)["lib"] == lib


def test_a_torn_or_foreign_record_is_the_full_paths_answer(pyindex, wheels, wh):
    idx = pyindex(wheels, serve_metadata=True)
    wh(idx.url)
    assert wh(idx.url, "--offline")[1] == "full"
    [record] = (wh.cache / "answers").iterdir()
    for damage in (b"", record.read_bytes()[:-7], b"wh-recorded-answer 1 0\n\x00junk",
                   record.read_bytes().replace(b"lib", b"lob")):
        record.write_bytes(damage)
        p, how = wh(idx.url, "--offline")
        assert how == "full" and _answer(p) == _answer(wh(idx.url, "--offline", full=True)[0])
    assert wh(idx.url, "--offline")[1] == "recorded"  # the full path wrote it afresh


def test_wh_code_edited_since_the_record_is_the_full_paths(pyindex, wheels, wh, tmp_path):
    """An edited checkout never answers from an older code's record (here: a copy of wh, one module touched)."""
    import shutil

    import wheelhouse

    copy = tmp_path / "src"
    shutil.copytree(Path(wheelhouse.__file__).parent, copy / "wheelhouse",
                    ignore=shutil.ignore_patterns("__pycache__"))
    idx = pyindex(wheels, serve_metadata=True)
    wh(idx.url, PYTHONPATH=str(copy))
    assert wh(idx.url, "--offline", PYTHONPATH=str(copy))[1] == "full"
    assert wh(idx.url, "--offline", PYTHONPATH=str(copy))[1] == "recorded"
    module = copy / "wheelhouse" / "stage" / "delta.py"
    module.write_text(module.read_text() + "\n")
    assert wh(idx.url, "--offline", PYTHONPATH=str(copy))[1] == "full"
