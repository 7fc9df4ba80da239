"""`wh cache info|prune|clean` (issue 32.6) and Ctrl-C's unfinished downloads: what arrived is kept, the
blocks reserved for the rest are given back, and the user is told what was kept and how to remove it.

Through the real `wh` entry point, against wheels served on loopback; the interrupt is a real SIGINT
to a `wh stage` process mid-download."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from wheelhouse.fetch import cached_path
from wheelhouse.fetch.cache import try_entry_lock
from wheelhouse.fetch.ranges import bytes_kept

WH = [sys.executable, "-c", "import sys; from wheelhouse.cli import main; main(sys.argv[1:])"]


def _wh(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*WH, *map(str, args)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_COLOR": "1"}, **kw)


def _disk(folder: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def _kinds(cache: Path) -> dict[str, dict]:
    got = _wh("cache", "info", "--cache-dir", cache, "--json")
    assert got.returncode == 0, got.stderr
    return {k["kind"]: k for k in json.loads(got.stdout)["kinds"]}


def test_cache_info_prune_and_clean_keep_what_a_wheelhouse_or_a_running_stage_needs(pyindex, tmp_path):
    from wheelmaker import make_wheel

    pub = tmp_path / "pub"
    make_wheel(pub, "kept", "1.0", pad_bytes=300_000)
    make_wheel(pub, "gone", "1.0", pad_bytes=200_000)
    idx = pyindex(pub, serve_metadata=True)
    cache = tmp_path / "cache"
    for name in ("kept", "gone"):
        r = _wh("stage", name, "-i", idx.url, "-o", tmp_path / name, "--cache-dir", cache, "--no-bootstrap")
        assert r.returncode == 0, r.stderr
    shutil.rmtree(tmp_path / "gone")  # its wheel is now linked by no wheelhouse
    partial = cache / "partial"
    (partial / ("a" * 64 + ".part")).write_bytes(os.urandom(50_000))  # a killed run's: nobody holds it
    (partial / ("b" * 64 + ".part")).write_bytes(os.urandom(50_000))  # a running stage's: its lock is held
    held = try_entry_lock(cache, "b" * 64)
    try:
        kinds = _kinds(cache)
        assert kinds["wheels"]["files"] == 2 and kinds["wheels"]["bytes"] > 500_000
        assert 300_000 < kinds["wheels"]["shared_bytes"] < kinds["wheels"]["bytes"]  # kept's is shared
        assert kinds["partials"]["files"] == 2 and kinds["pages"]["files"] >= 2 and kinds["metadata"]["files"] >= 1
        text = _wh("cache", "info", "--cache-dir", cache)
        assert "wheels" in text.stdout and "partials" in text.stdout and "shared with wheelhouses" in text.stdout

        from wheelhouse.fetch.cache import cache_in_use

        with cache_in_use(cache):  # a stage is fetching: its wheels have one link until placed
            busy = json.loads(_wh("cache", "prune", "--cache-dir", cache, "--json").stdout)
        assert "wheels" not in busy["removed"] and busy["in_use"]["wheels"] == 1
        pruned = _wh("cache", "prune", "--cache-dir", cache, "--json")
        assert pruned.returncode == 0, pruned.stderr
        data = json.loads(pruned.stdout)
        assert data["removed"]["wheels"]["files"] == 1 and "partials" not in data["removed"]  # (the first prune's)
        assert busy["removed"]["partials"]["files"] == 1 and busy["in_use"]["partials"] == 1
        assert data["in_use"] == {"partials": 1} and data["freed_bytes"] >= 200_000
        kept_wheel = next((tmp_path / "kept" / "wheels").glob("*.whl"))
        assert [p.name for p in (cache / "sha256").rglob("*") if p.is_file()] == [_sha(kept_wheel)]
        assert (partial / ("b" * 64 + ".part")).exists() and not (partial / ("a" * 64 + ".part")).exists()
        assert _kinds(cache)["pages"]["files"] >= 2  # what --offline runs on stays
    finally:
        os.close(held)

    cleaned = _wh("cache", "clean", "--cache-dir", cache, "--kind", "pages")
    assert cleaned.returncode == 0 and "freed" in cleaned.stderr, cleaned.stderr
    assert _kinds(cache)["pages"]["files"] == 0 and _kinds(cache)["wheels"]["files"] == 1
    everything = _wh("cache", "clean", "--cache-dir", cache, "--json")
    assert everything.returncode == 0, everything.stderr
    after = _kinds(cache)
    assert all(after[k]["files"] == 0 for k in ("wheels", "partials", "pages", "metadata"))
    assert kept_wheel.is_file()
    assert _wh("verify", tmp_path / "kept").returncode == 0  # the wheelhouse keeps its own files


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_ctrl_c_during_wh_stage_gives_back_the_preallocated_blocks_and_says_what_it_kept(pyindex, tmp_path):
    """A 72 MB wheel is fetched as two ranges into one preallocated body: Ctrl-C after ~1 MB used to
    leave all 72 MB allocated in partial/. Now only what arrived stays, it is named, and it resumes."""
    from wheelmaker import make_wheel

    wheel = make_wheel(tmp_path / "pub", "big", "1.0", pad_bytes=72_000_000)
    idx = pyindex(tmp_path / "pub", serve_metadata=True)
    idx.rates[wheel.name] = 400_000
    cache = tmp_path / "cache"
    args = ["stage", "big", "-i", idx.url, "-o", str(tmp_path / "out"), "--cache-dir", str(cache), "--no-bootstrap"]
    proc = subprocess.Popen([*WH, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NO_COLOR": "1"})
    key = _sha(wheel)
    received = lambda: bytes_kept(cache, key)  # noqa: E731  (the ranges' record: bytes written)
    end = time.monotonic() + 120
    while received() < 1_000_000 and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    assert (cache / "partial").is_dir() and _disk(cache / "partial") > 60_000_000  # reserved while it runs
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    on_disk = _disk(cache / "partial")
    assert 1_000_000 <= received() < 20_000_000
    assert on_disk < received() + 1_000_000, (on_disk, received())  # what arrived, not the reservation
    assert "kept" in err and "wh cache clean --kind partials" in err and str(cache / "partial") in err, err
    kinds = _kinds(cache)
    assert kinds["partials"]["bytes"] == on_disk
    idx.rates.pop(wheel.name)
    again = _wh(*args)  # the next run resumes what was kept, and the file verifies
    assert again.returncode == 0, again.stderr
    assert cached_path(cache, key).is_file() and not list((cache / "partial").iterdir())


def test_prune_keeps_a_link_cache_entry_while_a_venv_links_it(pyindex, tmp_path):
    """The link cache (`wh install --link-cache`): an entry whose files a venv still links stays; once
    that venv is gone, prune removes it."""
    from wheelmaker import make_wheel

    make_wheel(tmp_path / "pub", "linked", "1.0", modules={"linked/__init__.py": "X = 1\n" * 2000})
    idx = pyindex(tmp_path / "pub", serve_metadata=True)
    cache = tmp_path / "cache"
    house = tmp_path / "house"
    assert _wh("stage", "linked", "-i", idx.url, "-o", house, "--cache-dir", cache, "--no-bootstrap").returncode == 0
    env = {**os.environ, "NO_COLOR": "1", "WH_CACHE_DIR": str(cache)}
    done = subprocess.run([*WH, "install", str(house), "--venv", str(tmp_path / "v1"), "--link-cache"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert _kinds(cache)["link-cache"]["files"] > 0
    kept = json.loads(_wh("cache", "prune", "--cache-dir", cache, "--json").stdout)
    assert "link-cache" not in kept["removed"] and _kinds(cache)["link-cache"]["files"] > 0
    shutil.rmtree(tmp_path / "v1")
    gone = json.loads(_wh("cache", "prune", "--cache-dir", cache, "--json").stdout)
    assert gone["removed"]["link-cache"]["files"] > 0 and _kinds(cache)["link-cache"]["files"] == 0


def test_recorded_dry_runs_are_counted_pruned_after_a_week_and_cleaned(pyindex, tmp_path):
    from wheelmaker import make_wheel

    pub = tmp_path / "pub"
    make_wheel(pub, "small", "1.0")
    idx = pyindex(pub, serve_metadata=True)
    cache = tmp_path / "cache"
    args = ["stage", "small", "-i", idx.url, "--python-version", "3.12", "--platform", "manylinux_2_35_x86_64",
            "--dry-run", "--json", "--no-bootstrap", "--cache-dir", cache]
    assert _wh(*args).returncode == 0  # online: the stored resolution
    assert _wh(*args, "--offline").returncode == 0  # offline, answered from it: recorded
    records = [p for p in (cache / "answers").rglob("*") if p.is_file()]
    assert len(records) == 1 and _kinds(cache)["other"]["files"] >= 2  # the record and the resolution
    assert "answers" not in json.dumps(json.loads(_wh("cache", "prune", "--cache-dir", cache, "--json").stdout))
    assert records[0].is_file()  # a fresh record stays
    week = time.time() - 8 * 86400
    os.utime(records[0], (week, week))
    pruned = json.loads(_wh("cache", "prune", "--cache-dir", cache, "--json").stdout)
    assert not records[0].exists() and pruned["removed"]["other"]["files"] == 1
    assert _wh(*args, "--offline").returncode == 0  # the full path again, recorded again
    assert any((cache / "answers").rglob("*"))
    assert _wh("cache", "clean", "--cache-dir", cache, "--kind", "other").returncode == 0
    assert not (cache / "answers").exists() and not (cache / "resolutions").exists()
