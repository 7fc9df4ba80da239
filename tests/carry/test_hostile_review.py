"""Hostile review of carrying: inputs a careless copy or an attacker would make, each a false green before.

The wheelhouse is the real small one of tests/support/carry_fixtures.py; each test changes a copy
and runs the real CLI.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from carry_fixtures import staged_wheelhouse
from faults import wh_command
from wheelmaker import make_wheel


def wh(*args, cwd=None):
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture
def house(tmp_path, pyindex):
    return staged_wheelhouse(tmp_path, pyindex)


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_a_file_in_bootstrap_that_its_lock_does_not_list_fails_verify(house, kind):
    # The bootstrap command is `pip install --no-index --find-links bootstrap/ wh`: pip takes the highest
    # version it finds there, lock or not, so a stray wh 99 (or an sdist) would be what the box runs.
    if kind == "wheel":
        stray = make_wheel(house / "bootstrap", "wh", "99.0", modules={"evil/__init__.py": ""}).name
    else:
        stray = "wh-99.0.tar.gz"
        (house / "bootstrap" / stray).write_bytes(b"\x1f\x8b not really")
    r = wh("verify", house, "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert data["ok"] is False
    assert any(f"bootstrap/{stray}" in p for p in data["problems"]), data["problems"]


def _leftovers(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(("wh-unpacked-", "wh-pulled-")))


def test_an_unpacked_copy_left_by_a_killed_run_is_removed_by_the_next(house, tmp_path):
    # kill -9 skips every cleanup: each killed `wh install ARCHIVE` left a whole copy of the wheelhouse
    # (gigabytes on a real box) in TMPDIR, forever. The next run removes those whose owner is gone, and
    # never one a live run is using.
    import os
    import signal

    archive = tmp_path / "out" / "wh.tar"
    assert wh("pack", house, "-o", archive).returncode == 0
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    killed = subprocess.run(wh_command(["install", archive, "--venv", tmp_path / "v"]), capture_output=True,
                            text=True, timeout=300, env={**env, "WH_FAULT": "carry.unpacked"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(_leftovers(tmp)) == 1
    r = subprocess.run(wh_command(["verify", archive]), capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _leftovers(tmp) == [], _leftovers(tmp)


def test_a_folder_a_live_run_holds_is_not_swept(house, tmp_path):
    import os

    archive = tmp_path / "out" / "wh.tar"
    assert wh("pack", house, "-o", archive).returncode == 0
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    holder = subprocess.Popen(
        [wh_command([])[0], "-c", "import sys, contextlib; from wheelhouse.carry import materialize\n"
         "with contextlib.ExitStack() as held:\n"
         f"    materialize([{str(archive)!r}], held); print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "ready"
        held = _leftovers(tmp)
        assert len(held) == 1
        r = subprocess.run(wh_command(["verify", archive]), capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert _leftovers(tmp) == held  # still the live run's
    finally:
        holder.communicate("", timeout=60)
    assert _leftovers(tmp) == []


def test_a_locked_wheel_that_does_not_install_on_the_wheelhouses_target_fails_verify(house):
    # e.g. an engine wheel built by the staging host's own Python (cp3X+1) for a cp3X target: lock, sizes
    # and hashes all agree, and verify said ok; the box's `wh install` then refused it.
    import dataclasses
    import hashlib
    import sys

    from wheelhouse.lock import LockedFile, read_pylock, write_pylock

    other = f"cp{sys.version_info[0]}{sys.version_info[1] + 1}"
    wheel = make_wheel(house / "wheels", "engine", "1.0", tags=f"{other}-{other}-linux_x86_64",
                       modules={"engine/__init__.py": ""})
    lock = read_pylock(house)
    entry = LockedFile(name="engine", version="1.0", filename=wheel.name, path=f"wheels/{wheel.name}",
                       sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(), size=wheel.stat().st_size)
    write_pylock(house, dataclasses.replace(lock, files=(*lock.files, entry)))
    meta = json.loads((house / "wh.json").read_text())
    meta["count"] += 1
    meta["total_size"] += wheel.stat().st_size
    (house / "wh.json").write_text(json.dumps(meta))
    simple = house / "simple" / "engine"  # pip's pages list it too, as a stage writes them
    simple.mkdir()
    (simple / "index.html").write_text(f'<a href="../../wheels/{wheel.name}#sha256={entry.sha256}">{wheel.name}</a>\n')
    r = wh("verify", house, "--json")
    data = json.loads(r.stdout)
    assert r.returncode == 1, data
    assert any(wheel.name in p and "target" in p for p in data["problems"]), data["problems"]
    # what the box would have said only after the copy: the install refuses it too
    assert wh("install", house, "--venv", house.parent / "venv").returncode != 0


def test_a_folder_where_a_simple_page_should_be_is_a_problem_not_a_crash(house, tmp_path):
    # A tar may hold a folder `simple/app/index.html/` (folders are allowed members): verify read it as a page
    # and died with an internal error (exit 3), losing the --json verdict; pack and install died the same way.
    page = house / "simple" / "app" / "index.html"
    page.unlink()
    page.mkdir()
    r = wh("verify", house, "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert any("simple/app/index.html" in p for p in data["problems"]), data["problems"]
    r = wh("install", house, "--venv", tmp_path / "v")
    assert r.returncode == 1 and "internal error" not in r.stderr, r.stderr


def test_simple_as_a_file_is_a_problem(house):
    # wh.json owns simple/ (pip's --index-url fallback reads its pages): a file of that name passed as "there".
    import shutil

    shutil.rmtree(house / "simple")
    (house / "simple").write_text("not the pages\n")
    r = wh("verify", house, "--json")
    assert r.returncode == 1, r.stdout
    assert any(p.startswith("simple") and "folder" in p for p in json.loads(r.stdout)["problems"]), r.stdout


def test_a_root_member_that_is_a_file_is_refused_not_a_crash(tmp_path):
    # `wheelhouse` itself as a file, then `wheelhouse/wh.json`: the unpacker made the file, then could not
    # make the folder, and died with an internal error (exit 3, no --json verdict).
    from carry_fixtures import TarMember, write_tar

    archive = write_tar(tmp_path / "bad.tar", [TarMember("wheelhouse", b"x"), TarMember("wheelhouse/wh.json", b"{}")])
    r = wh("verify", archive, "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    assert any("'wheelhouse'" in p for p in json.loads(r.stdout)["problems"]), r.stdout


def test_a_write_that_fails_while_unpacking_is_named_not_an_internal_error(house, tmp_path):
    # A full TMPDIR (here: a file-size limit, EFBIG, which the kernel raises as a full disk's ENOSPC would)
    # while an archive is unpacked: verify and install died with "internal error" (exit 3); now the
    # failure is named with where it was writing, verify still prints its --json verdict, and nothing stays.
    import os
    import resource

    archive = tmp_path / "out" / "wh.tar"
    assert wh("pack", house, "-o", archive).returncode == 0
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}

    def small():
        resource.setrlimit(resource.RLIMIT_FSIZE, (30_000, 30_000))  # below the 60 KB wheel of lib

    for args in (["verify", archive, "--json"], ["install", archive, "--venv", tmp_path / "v"]):
        r = subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300, env=env, preexec_fn=small)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert "internal error" not in r.stderr and "could not unpack" in r.stdout + r.stderr, r.stderr
        if "--json" in args:
            assert json.loads(r.stdout)["ok"] is False
        assert _leftovers(tmp) == []


@pytest.mark.parametrize("name", ["x.tar.part-0001", "x.tar.sha256"])
def test_pack_refuses_an_output_name_that_verify_would_read_as_a_part_or_a_sidecar(house, tmp_path, name):
    # `wh pack -o x.tar.part-0001` wrote an archive that `wh verify`/`wh install` then took for part 1 of x.tar
    # (sidecar missing); `-o x.sha256` one they read as a sidecar. Refused before anything is written.
    r = wh("pack", house, "-o", tmp_path / name)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "-o" in r.stderr and "hint:" in r.stderr
    assert list(tmp_path.glob("x.*")) == []


def test_pulling_again_into_the_same_wheelhouse_with_patches_updates_it(house, tmp_path):
    # A second `wh pull REF -o DIR` (the update path: only what changed is fetched) was refused whenever the
    # wheelhouse had patches: wh.json owns patches/fix/fix.toml, not the folder, and -o's pre-check looked at
    # top-level names only ("holds patches, which wh did not write"). The user's own file still stays.
    pytest.importorskip("oras", reason="the oci extra (oras-py) is not installed")
    from registry import start_registry

    reg = start_registry(tmp_path / "registry")
    try:
        ref = reg.ref("wh/hostile:v1")
        assert wh("push", house, ref).returncode == 0
        out = tmp_path / "pulled"
        first = wh("pull", ref, "-o", out)
        assert first.returncode == 0, first.stderr
        (out / "patches" / "MINE.txt").write_text("the user's\n")
        again = wh("pull", ref, "-o", out, "--json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)  # the pull's report
        assert (out / "patches" / "MINE.txt").read_text() == "the user's\n"
        assert wh("verify", out).returncode == 0
    finally:
        reg.stop()


def test_push_refuses_a_link_out_of_the_wheelhouse_as_pack_does(house, tmp_path):
    # `wh pack` refuses a symbolic link to a file outside the wheelhouse; `wh push` followed it and uploaded
    # the file it points at (a credentials file, say) as a blob of the artifact.
    pytest.importorskip("oras", reason="the oci extra (oras-py) is not installed")
    from registry import start_registry

    secret = tmp_path / "secret.txt"
    secret.write_text("token=hunter2\n")
    (house / "wheels" / "leak.whl").symlink_to(secret)
    reg = start_registry(tmp_path / "registry")
    try:
        r = wh("push", house, reg.ref("wh/leak:v1"))
        assert r.returncode == 2, r.stdout + r.stderr
        assert "leak.whl" in r.stderr and "link" in r.stderr
        assert reg.blob_uploads() == 0
    finally:
        reg.stop()


def test_pull_refuses_a_bootstrap_wheel_its_lock_does_not_list(house, tmp_path):
    # The artifact's bootstrap/ had a wh 99 beside the locked wh: pull verified each blob's digest, named it,
    # and said ok; `pip install --find-links bootstrap/ wh` on the box then installed wh 99.
    pytest.importorskip("oras", reason="the oci extra (oras-py) is not installed")
    from registry import start_registry

    make_wheel(house / "bootstrap", "wh", "99.0", modules={"evil/__init__.py": ""})
    reg = start_registry(tmp_path / "registry")
    try:
        ref = reg.ref("wh/stray:v1")
        assert wh("push", house, ref).returncode == 0
        out = tmp_path / "pulled"
        r = wh("pull", ref, "-o", out)
        assert r.returncode != 0 and "wh-99.0-py3-none-any.whl" in r.stderr, r.stdout + r.stderr
        assert "internal error" not in r.stderr
        assert not out.exists()
    finally:
        reg.stop()


def test_a_damaged_wh_json_is_a_problem_in_the_json_verdict_not_bad_input(house):
    # A truncated copy of wh.json (the wheelhouse is there, its record damaged) made `wh verify --json` print
    # nothing on stdout and exit 2 as if no wheelhouse had been named; `... --json | jq .ok` had nothing to read.
    (house / "wh.json").write_text('{"schema": "wh-wheelhouse/1", "name": "carry-de')
    r = wh("verify", house, "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert data["ok"] is False and any("wh.json" in p for p in data["problems"]), data
    assert wh("verify", house.parent / "no-such-folder", "--json").returncode == 2  # still bad input


def test_text_output_shows_a_lone_surrogate_escaped_instead_of_crashing(tmp_path, pyindex):
    """Before: `wh verify` (text) on a wh.json holding a lone surrogate exited 3 mid-report (UnicodeEncodeError)."""
    import json as _json
    import os as _os
    import subprocess as _sp
    import sys as _sys

    from carry_fixtures import staged_wheelhouse

    house = staged_wheelhouse(tmp_path, pyindex)
    meta = _json.loads((house / "wh.json").read_text())
    meta["name"] = "stack-\udc80"
    (house / "wh.json").write_text(_json.dumps(meta))  # json writes it as the escape \udc80
    env = {k: v for k, v in _os.environ.items() if not k.startswith("WH_")} | {"NO_COLOR": "1", "PYTHONIOENCODING": "utf-8"}
    r = _sp.run([_sys.executable, "-m", "wheelhouse", "verify", str(house)], capture_output=True, env=env)
    out = (r.stdout + r.stderr).decode("utf-8", "replace")
    assert r.returncode in (0, 1), out
    assert "internal error" not in out
