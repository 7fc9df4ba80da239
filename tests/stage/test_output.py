"""The -o folder of `wh stage`: what wh did not write is kept, a symlink is followed, one run at a
time (a second waits), and a run killed between the two renames of the swap is recovered.

Real `wh stage` processes against a real index on 127.0.0.1; kills are real SIGKILLs at named
points (tests/support/faults.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from faults import run_with_fault, wh_command
from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_wheel, sha256_file
from wheelhouse.lock import read_pylock
from wheelhouse.lock.output import hold_output

PLATFORM = ["--python-version", "3.12", "--platform", "manylinux_2_35_x86_64", "--no-bootstrap"]


@pytest.fixture
def index(pyindex, tmp_path):
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["lib>=1"], modules={"app/__init__.py": "import lib\n"})
    make_wheel(d, "app", "2.0", requires=["lib>=1"], modules={"app/__init__.py": "import lib\n"})
    make_wheel(d, "lib", "1.0", modules={"lib/__init__.py": "V = 1\n"})
    return pyindex(d)


def _args(index, out, *reqs, cache):
    return ["stage", *(reqs or ("app==1.0",)), "-o", str(out), "--index-url", index.url, "--cache-dir", str(cache),
            *PLATFORM]


def wh(args, **kw):
    kw.setdefault("timeout", 300)
    return subprocess.run(wh_command(args), capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300", **kw.pop("env", {})}, **kw)


def _verifies(out: Path) -> set[str]:
    """The lock's wheels are all there with their hashes; returns the pinned names==versions."""
    lock = read_pylock(out)
    for f in lock.files:
        assert sha256_file(out / f.path) == f.sha256, f.path
    return {f"{f.name}=={f.version}" for f in lock.files}


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".wh-new-" in p.name or ".wh-old-" in p.name
                  or p.name.endswith(".whlock"))


def _user_files(out: Path) -> None:
    (out / "NOTES.md").write_text("my notes\n")
    (out / "dataset-metadata.json").write_text('{"id": "me/wheelhouse"}\n')
    (out / "logs").mkdir()
    (out / "logs" / "run.txt").write_text("my log\n")


def _assert_user_files(out: Path) -> None:
    assert (out / "NOTES.md").read_text() == "my notes\n"
    assert (out / "dataset-metadata.json").read_text() == '{"id": "me/wheelhouse"}\n'
    assert (out / "logs" / "run.txt").read_text() == "my log\n"


# --- ownership: only what wh wrote is replaced or removed ------------------------------------------

def test_restage_keeps_what_wh_did_not_write(index, tmp_path):
    out, cache = tmp_path / "wh", tmp_path / "cache"
    assert wh(_args(index, out, cache=cache)).returncode == 0
    _user_files(out)
    proc = wh(_args(index, out, "app==2.0", cache=cache))
    assert proc.returncode == 0, proc.stderr
    _assert_user_files(out)
    assert _verifies(out) == {"app==2.0", "lib==1.0"}
    owned = json.loads((out / "wh.json").read_text())["owned"]
    assert "NOTES.md" not in owned and "wheels" in owned and "pylock.toml" in owned
    assert not _leftovers(tmp_path)


def test_folder_with_someone_elses_wh_json_is_refused_untouched(index, tmp_path):
    """A project folder that merely contains a file named wh.json is not a wheelhouse."""
    src = tmp_path / "project"
    src.mkdir()
    (src / "wh.json").write_text('{"name": "my tool config"}\n')
    (src / "main.py").write_text("print('hello')\n")
    (src / "wheels").mkdir()
    (src / "wheels" / "keep.txt").write_text("mine\n")
    before = sorted(str(p.relative_to(src)) for p in src.rglob("*"))
    proc = wh(_args(index, src, cache=tmp_path / "cache"))
    assert proc.returncode == 2
    assert "not a wheelhouse" in proc.stderr and "hint:" in proc.stderr
    assert sorted(str(p.relative_to(src)) for p in src.rglob("*")) == before
    assert (src / "main.py").read_text() == "print('hello')\n"
    assert all(index.bytes_served(f) == 0 for f in index.files)


def test_a_file_at_a_name_wh_writes_is_refused_before_work(index, tmp_path):
    out, cache = tmp_path / "wh", tmp_path / "cache"
    assert wh(_args(index, out, cache=cache)).returncode == 0
    meta = json.loads((out / "wh.json").read_text())
    meta["owned"] = [p for p in meta["owned"] if p != "capture_target.py"]  # as if the user had put it there
    (out / "wh.json").write_text(json.dumps(meta))
    (out / "capture_target.py").write_text("# mine\n")
    proc = wh(_args(index, out, "app==2.0", cache=cache))
    assert proc.returncode == 2 and "capture_target.py" in proc.stderr and "hint:" in proc.stderr
    assert (out / "capture_target.py").read_text() == "# mine\n"
    assert _verifies(out) == {"app==1.0", "lib==1.0"}


def test_a_users_file_at_a_name_this_run_does_not_write_is_kept(index, tmp_path):
    """manifest.toml is wh's only when a manifest is staged; the user's own stack file beside is kept."""
    out, cache = tmp_path / "wh", tmp_path / "cache"
    assert wh(_args(index, out, cache=cache)).returncode == 0
    (out / "manifest.toml").write_text("# my stack\n")
    proc = wh(_args(index, out, "app==2.0", cache=cache))
    assert proc.returncode == 0, proc.stderr
    assert (out / "manifest.toml").read_text() == "# my stack\n"
    assert _verifies(out) == {"app==2.0", "lib==1.0"}


def test_output_symlink_is_followed_and_stays_a_link(index, tmp_path):
    real = tmp_path / "disk" / "wheelhouse"
    real.parent.mkdir()
    link = tmp_path / "wh"
    link.symlink_to(real)  # dangling until the first stage
    cache = tmp_path / "cache"
    for req in ("app==1.0", "app==2.0"):
        proc = wh(_args(index, link, req, cache=cache))
        assert proc.returncode == 0, proc.stderr
        assert link.is_symlink() and os.readlink(link) == str(real)
        assert real.is_dir() and not real.is_symlink()
    assert _verifies(link) == {"app==2.0", "lib==1.0"}
    assert not _leftovers(tmp_path) and not _leftovers(real.parent)


@pytest.mark.skipif(not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat("/tmp").st_dev,
                    reason="needs /dev/shm on another filesystem than /tmp")
def test_output_symlink_to_another_filesystem_never_fails_with_exdev(index, tmp_path):
    import shutil
    import tempfile

    other = Path(tempfile.mkdtemp(prefix="wh-test-", dir="/dev/shm"))
    try:
        link = tmp_path / "wh"
        link.symlink_to(other / "wheelhouse")
        for req in ("app==1.0", "app==2.0"):  # the second one swaps: every rename stays on /dev/shm
            proc = wh(_args(index, link, req, cache=tmp_path / "cache"))
            assert proc.returncode == 0, proc.stderr
        assert link.is_symlink() and _verifies(link) == {"app==2.0", "lib==1.0"}
        assert not _leftovers(other) and not _leftovers(tmp_path)
    finally:
        shutil.rmtree(other, ignore_errors=True)


# --- one run at a time ------------------------------------------------------------------------------

def test_second_run_waits_for_the_first_and_gives_up_after_its_timeout(index, tmp_path):
    out, cache = tmp_path / "wh", tmp_path / "cache"
    with hold_output(out.absolute()):
        proc = wh([*_args(index, out, cache=cache), "--lock-timeout", "1"])
    assert proc.returncode == 1
    assert f"waiting for another wh stage on {out}" in proc.stderr
    assert "error:" in proc.stderr and "--lock-timeout" in proc.stderr
    assert not out.exists()

    # Released while it waits: it goes on and stages. Released once it says it waits (not after a fixed time:
    # on a busy machine its start-up alone can outlast one), and held 1.5 s more.
    with hold_output(out.absolute()):
        proc = subprocess.Popen(wh_command([*_args(index, out, cache=cache), "--lock-timeout", "60"]),
                                stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300"})
        said = ""
        while "waiting for another wh stage" not in said and proc.poll() is None:
            said += proc.stderr.readline()
        time.sleep(1.5)
        assert not out.exists() and proc.poll() is None  # still waiting while held
    rest = proc.communicate(timeout=300)[1]
    assert proc.returncode == 0, said + rest
    assert "waiting for another wh stage" in said
    assert _verifies(out) == {"app==1.0", "lib==1.0"}
    assert not _leftovers(tmp_path)


def test_two_concurrent_stages_into_one_output_both_succeed_and_the_result_verifies(index, tmp_path):
    out, cache = tmp_path / "wh", tmp_path / "cache"
    procs = [subprocess.Popen(wh_command(_args(index, out, req, cache=cache)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for req in ("app==1.0", "app==2.0")]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert [rc for rc, _ in results] == [0, 0], results
    assert _verifies(out) in ({"app==1.0", "lib==1.0"}, {"app==2.0", "lib==1.0"})
    assert not _leftovers(tmp_path)


# --- kill -9 inside the swap ----------------------------------------------------------------------

def test_kill_between_the_two_renames_is_recovered_by_the_next_run(index, tmp_path):
    out, cache = tmp_path / "wh", tmp_path / "cache"
    assert wh(_args(index, out, cache=cache)).returncode == 0
    _user_files(out)
    proc = run_with_fault(_args(index, out, "app==2.0", cache=cache), "stage.swap.between-renames")
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists() and _leftovers(tmp_path)  # what a crash there leaves: the bug this guards

    proc = wh(["stage", "--dry-run", "app==2.0", "-o", str(out), "--index-url", index.url, *PLATFORM])
    assert proc.returncode == 0  # a dry run writes nothing, recovers nothing
    proc = wh(_args(index, out, "app==2.0", cache=cache))
    assert proc.returncode == 0, proc.stderr
    assert "finished an interrupted swap" in proc.stderr
    _assert_user_files(out)
    assert _verifies(out) == {"app==2.0", "lib==1.0"}
    assert not _leftovers(tmp_path)


def test_kill_after_the_users_files_moved_puts_them_back(index, tmp_path):
    """Killed before the first rename: the old wheelhouse stays, and the user's files return to it."""
    out, cache = tmp_path / "wh", tmp_path / "cache"
    assert wh(_args(index, out, cache=cache)).returncode == 0
    _user_files(out)
    proc = run_with_fault(_args(index, out, "app==2.0", cache=cache), "stage.swap.adopted")
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "NOTES.md").exists()  # moved into the new tree when the kill came

    proc = wh(_args(index, out, "app==2.0", cache=cache))  # any later run recovers first
    assert proc.returncode == 0, proc.stderr
    assert "removed" in proc.stderr and "interrupted run" in proc.stderr
    _assert_user_files(out)
    assert _verifies(out) == {"app==2.0", "lib==1.0"}
    assert not _leftovers(tmp_path)


def test_kill_between_renames_with_an_incomplete_new_tree_puts_the_old_wheelhouse_back(index, tmp_path):
    """No complete new tree to finish the swap with: the next run, even one that then fails,
    restores the previous wheelhouse and removes the leftovers."""
    out, cache = tmp_path / "wh", tmp_path / "cache"
    assert wh(_args(index, out, cache=cache)).returncode == 0
    assert run_with_fault(_args(index, out, "app==2.0", cache=cache),
                          "stage.swap.between-renames").returncode == -signal.SIGKILL
    for new in tmp_path.glob(".wh.wh-new-*"):
        (new / "wh.json").unlink()  # as if the new tree had not been finished
    proc = wh(_args(index, out, "no-such-project", cache=cache))
    assert proc.returncode != 0 and "no-such-project" in proc.stderr
    assert "put the previous wheelhouse back" in proc.stderr
    assert _verifies(out) == {"app==1.0", "lib==1.0"}
    assert not _leftovers(tmp_path)
