"""fetch.procs under attack: the second download process must never change the answer, lose a
file, leak a process or hang, whatever fails and wherever.

- both shares failing at once: the hash mismatch wins, whichever side had it;
- a full disk in either process stops the other one promptly and is one no-space error;
- the helper killed at each of its checkpoints: the run completes; the parent killed, a re-run completes;
- bytes on the helper's stdout that are not frames (a C library writing to fd 1, a malformed
  frame): the parent downloads the share itself ("redo"), it does not crash or wait for ever;
- Ctrl-C while only the helper is still downloading, SIGTERM of wh: nothing left running;
- two wh runs on one cache, each with its helper (4 processes on the entry locks): all correct;
- a credential in an item's URL: the helper's error is the one-process error, printed redacted.

Run with ``-W error::ResourceWarning``: no pipe of a helper is left unclosed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from file_server import FileServer
from helper_procs import alive, helper_pids, wait_for

import wheelhouse.childproc as childproc
from wheelhouse.errors import HashMismatch, WhError
from wheelhouse.fetch import FetchError, FetchItem, NoSpace, cached_path, fetch_all, procs
from wheelhouse.progress import RecordingReporter

MIB = 1 << 20
SEG = 1 << 20
# Shares (biggest first, each to the lighter share): HERE and S2 downloaded here, THERE and S1 by the helper.
HERE, THERE, S1, S2 = ("here-1.0-py3-none-any.whl", "there-1.0-py3-none-any.whl", "s1-1.0-py3-none-any.whl",
                       "s2-1.0-py3-none-any.whl")
FILES = {
    HERE: os.urandom(6 * MIB),
    THERE: os.urandom(6 * MIB - 4096),
    S1: os.urandom(1_100_000),
    S2: os.urandom(1_200_000),
}
MINE, THEIRS = (HERE, S2), (THERE, S1)

CHILD = """
import json, sys
from pathlib import Path
from wheelhouse.fetch import FetchItem, fetch_all
spec = json.loads(sys.argv[1])
fetch_all([FetchItem(*i) for i in spec["items"]], Path(spec["dest"]), Path(spec["cache"]), jobs=4,
          segment_size=spec["segment"], backoff=0.01)
print("done")
"""


class RatedServer(FileServer):
    """A FileServer with a rate per file (``rates[name]``; others at ``rate``)."""

    def __init__(self, rate=None, rates=None):
        super().__init__(rate=rate)
        self.rates: dict[str, float] = dict(rates or {})

    def _send(self, handler, name, body):
        rate = self.rates.get(name, self.rate)
        piece = self.piece if rate else max(len(body), 1)
        try:
            for pos in range(0, len(body), piece):
                chunk = body[pos : pos + piece]
                with self.lock:
                    self.served[name] = self.served.get(name, 0) + len(chunk)
                handler.wfile.write(chunk)
                if rate:
                    handler.wfile.flush()
                    time.sleep(len(chunk) / rate)
        except OSError:
            pass


@pytest.fixture
def always(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "WH_FAULT", "WH_FAULT_HELPER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(procs.ENV, "always")


def _serve(rate=None, rates=None, auth=None) -> tuple[RatedServer, list[FetchItem]]:
    srv = RatedServer(rate=rate, rates=rates)
    srv.auth = auth
    return srv, [srv.add(name, data) for name, data in FILES.items()]


def _helpers(parent: int | None = None) -> list[int]:
    """Live fetch helper processes whose parent is ``parent`` (default: this process; 0: any)."""
    return helper_pids(b"wheelhouse.fetch.procs", b"hostile_helper", parent=parent, zombies=False)


def _fetch(items, tmp_path, timeout=30.0, dest="dest", **kw):
    """fetch_all in a thread, joined with a timeout (a hang fails the test, not the suite);
    returns (box, seconds) where box has "paths" or "error", "reporter" and "helpers" (pids seen)."""
    box: dict = {"reporter": RecordingReporter(), "helpers": set()}

    def run():
        try:
            box["paths"] = fetch_all(items, tmp_path / dest, tmp_path / "cache", jobs=4, segment_size=SEG,
                                     backoff=0.01, reporter=box["reporter"], **kw)
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    t0 = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    while t.is_alive() and time.monotonic() - t0 < timeout:
        box["helpers"].update(_helpers())
        t.join(0.02)
    took = time.monotonic() - t0
    assert not t.is_alive(), f"fetch_all still running after {timeout} s (hung)"
    return box, took


def _no_leftovers(tmp_path, box):
    """Every helper gone; no unverified file under a final name in dest or the cache."""
    assert wait_for(lambda: not _helpers(), 5), f"helper processes left running: {_helpers()}"
    for pid in box["helpers"]:
        assert not alive(pid), pid
    hashes = {__import__("hashlib").sha256(d).hexdigest(): d for d in FILES.values()}
    for name, data in FILES.items():
        f = tmp_path / "dest" / name
        if f.exists():
            assert f.read_bytes() == data, f"{name} in dest is not the verified file"
    dest = tmp_path / "dest"
    if dest.is_dir():
        assert sorted(p.name for p in dest.iterdir()) == sorted(n for n in FILES if (dest / n).exists()), \
            f"stray files in dest: {list(dest.iterdir())}"
    for sha, data in hashes.items():
        entry = cached_path(tmp_path / "cache", sha)
        if entry.exists():
            assert entry.read_bytes() == data


def _check_placed(tmp_path):
    for name, data in FILES.items():
        assert (tmp_path / "dest" / name).read_bytes() == data, name


def _spec(items, tmp_path, dest="dest"):
    return json.dumps({"items": [(i.url, i.filename, i.sha256, i.size) for i in items],
                       "dest": str(tmp_path / dest), "cache": str(tmp_path / "cache"), "segment": SEG})


def test_the_shares_are_what_these_tests_assume(always):
    from wheelhouse.fetch.session import Session
    from wheelhouse.index.http import HttpClient

    srv, items = _serve()
    srv.close()
    mine, theirs = procs.shares(items, Session(Path("/nonexistent"), HttpClient(), RecordingReporter(), "t"), 4)
    assert {i.filename for i in mine} == set(MINE) and {i.filename for i in theirs} == set(THEIRS)


# --- both sides failing ---------------------------------------------------------------------

@pytest.mark.parametrize("tamper, missing", [(THERE, HERE), (HERE, THERE), (S1, S2)],
                         ids=["mismatch-in-helper+404-here", "mismatch-here+404-in-helper", "small-files"])
def test_a_hash_mismatch_wins_over_an_http_error_on_the_other_side(always, tmp_path, tamper, missing):
    srv, items = _serve()
    srv.tampered[tamper] = os.urandom(len(FILES[tamper]))
    del srv.files[missing]  # 404
    try:
        box, _ = _fetch(items, tmp_path)
    finally:
        srv.close()
    err = box.get("error")
    assert type(err) is HashMismatch, repr(err)
    assert tamper in str(err)
    assert not (tmp_path / "dest" / tamper).exists() and not (tmp_path / "dest" / missing).exists()
    _no_leftovers(tmp_path, box)


def test_both_shares_tampered_is_one_hash_mismatch_and_nothing_unverified_is_left(always, tmp_path):
    srv, items = _serve()
    for name in (HERE, THERE):
        srv.tampered[name] = os.urandom(len(FILES[name]))
    try:
        box, _ = _fetch(items, tmp_path)
    finally:
        srv.close()
    assert type(box.get("error")) is HashMismatch
    for name in (HERE, THERE):
        assert not (tmp_path / "dest" / name).exists()
        assert not cached_path(tmp_path / "cache", srv.add(name, FILES[name]).sha256).exists()
    _no_leftovers(tmp_path, box)


# --- a full disk on one side stops the other --------------------------------------------------

def test_a_full_disk_in_the_helper_stops_this_process_promptly(always, tmp_path, monkeypatch):
    """The helper's disk fills at its first write while this process's big file is on a slow link
    (~10 s to go): one no-space error, at once, not after this share has finished downloading."""
    monkeypatch.setenv("WH_FAULT_HELPER", "fetch.write:enospc")
    srv, items = _serve(rates={HERE: 300_000, S2: 300_000})
    try:
        box, took = _fetch(items, tmp_path)
    finally:
        srv.close()
    err = box.get("error")
    assert isinstance(err, NoSpace) and err.code == "no-space", repr(err)
    assert took < 4, f"the parent went on downloading for {took:.1f} s after the helper's disk was full"
    assert srv.served.get(HERE, 0) < 3 * MIB, srv.served
    assert not (tmp_path / "dest" / HERE).exists() and not (tmp_path / "dest" / THERE).exists()
    _no_leftovers(tmp_path, box)


def test_a_full_disk_here_stops_the_helper_promptly(always, tmp_path, monkeypatch):
    monkeypatch.setenv("WH_FAULT", "fetch.write:enospc")  # this process only (the helper's: WH_FAULT_HELPER)
    srv, items = _serve(rates={THERE: 300_000, S1: 300_000})
    try:
        box, took = _fetch(items, tmp_path)
    finally:
        srv.close()
    err = box.get("error")
    assert isinstance(err, NoSpace) and err.code == "no-space", repr(err)
    assert took < 4, took
    assert srv.served.get(THERE, 0) < 3 * MIB, srv.served
    assert not (tmp_path / "dest" / THERE).exists()
    _no_leftovers(tmp_path, box)


def test_a_full_disk_in_both_processes_at_once_is_one_no_space_error(always, tmp_path, monkeypatch):
    monkeypatch.setenv("WH_FAULT", "fetch.write:enospc")
    monkeypatch.setenv("WH_FAULT_HELPER", "fetch.write:enospc")
    srv, items = _serve(rate=2_000_000)
    try:
        box, took = _fetch(items, tmp_path)
    finally:
        srv.close()
    assert isinstance(box.get("error"), NoSpace), repr(box.get("error"))
    assert took < 4, took
    assert not (tmp_path / "dest").exists() or not list((tmp_path / "dest").iterdir())
    _no_leftovers(tmp_path, box)


def test_a_failure_here_lets_the_helpers_share_finish_into_the_cache_then_is_raised(always, tmp_path):
    """As in one process: the other downloads finish into the cache (a re-run does not repeat them)."""
    srv, items = _serve(rates={THERE: 3_000_000})
    srv.tampered[HERE] = os.urandom(len(FILES[HERE]))
    there = next(it for it in items if it.filename == THERE)
    try:
        box, _ = _fetch(items, tmp_path)
        assert type(box.get("error")) is HashMismatch and HERE in str(box["error"])
        assert cached_path(tmp_path / "cache", there.sha256).read_bytes() == FILES[THERE]
        # ... and, as in one process, nothing more goes to dest once the run is failing.
        assert not (tmp_path / "dest" / THERE).exists()
        _no_leftovers(tmp_path, box)
        served = srv.served[THERE]
        del srv.tampered[HERE]
        again, _ = _fetch(items, tmp_path, dest="again")
    finally:
        srv.close()
    assert "error" not in again
    assert srv.served[THERE] == served  # not downloaded again


def test_a_failure_in_the_helper_lets_this_share_finish_into_the_cache_not_into_dest(always, tmp_path):
    srv, items = _serve(rates={HERE: 3_000_000})
    srv.tampered[THERE] = os.urandom(len(FILES[THERE]))
    here = next(it for it in items if it.filename == HERE)
    try:
        box, _ = _fetch(items, tmp_path)
    finally:
        srv.close()
    assert type(box.get("error")) is HashMismatch and THERE in str(box["error"])
    assert cached_path(tmp_path / "cache", here.sha256).read_bytes() == FILES[HERE]
    assert not (tmp_path / "dest" / HERE).exists()
    _no_leftovers(tmp_path, box)


@pytest.mark.parametrize("where", ["WH_FAULT", "WH_FAULT_HELPER"], ids=["one-process", "in-the-helper"])
def test_a_full_disk_when_a_range_is_split_is_one_no_space_error(always, tmp_path, monkeypatch, where):
    """The split of a lagging range writes the file's new layout: a full disk there was a bare
    OSError out of fetch_all (one process), or a silent redo of the helper's share."""
    monkeypatch.setenv(procs.ENV, "0" if where == "WH_FAULT" else "always")
    monkeypatch.setenv(where, "fetch.range.split:enospc")
    srv, items = _serve(rates={HERE: 3_000_000, THERE: 3_000_000})
    try:
        box, took = _fetch(items, tmp_path)
    finally:
        srv.close()
    err = box.get("error")
    assert isinstance(err, NoSpace) and err.code == "no-space", repr(err)
    assert took < 4, took
    _no_leftovers(tmp_path, box)


def test_a_disk_error_in_the_helper_is_its_fetch_error_raised_here(always, tmp_path, monkeypatch):
    """EIO in the helper is a FetchError there (as it would be here): raised unchanged, nothing left."""
    monkeypatch.setenv("WH_FAULT_HELPER", "fetch.write:eio")
    srv, items = _serve(rate=6_000_000)
    try:
        box, _ = _fetch(items, tmp_path)
    finally:
        srv.close()
    err = box.get("error")
    assert type(err) is FetchError and "Input/output error" in str(err) and err.hint, repr(err)
    assert not (tmp_path / "dest" / THERE).exists() and not (tmp_path / "dest" / S1).exists()
    _no_leftovers(tmp_path, box)


# --- the helper killed at its checkpoints; the parent killed --------------------------------------

@pytest.mark.parametrize("point", ["fetch.write", "fetch.range.recorded", "fetch.range.split", "fetch.place",
                                   "fetch.helper.filed"])
def test_the_helper_killed_at_a_checkpoint_changes_nothing(always, tmp_path, monkeypatch, point):
    monkeypatch.setenv("WH_FAULT_HELPER", f"{point}:kill")
    srv, items = _serve(rates={THERE: 3_000_000})
    try:
        box, _ = _fetch(items, tmp_path)
    finally:
        srv.close()
    assert "error" not in box, box.get("error")
    _check_placed(tmp_path)
    assert not list((tmp_path / "cache" / "partial").iterdir())
    _no_leftovers(tmp_path, box)
    notes = [e[1] for e in box["reporter"].events if e[0] == "note"]
    if point != "fetch.place":  # (parent-only: the helper never passes it)
        assert any("second download process stopped" in n for n in notes), notes
    # The download bar ends at its total: what the helper counted is not counted again where this process
    # resumes it, and a file it filed just before it died is counted (its progress went out first).
    events = box["reporter"].events
    total = next(e[2] for e in events if e[0] == "start" and e[1] == "download")
    assert sum(e[2] for e in events if e[0] == "advance" and e[1] == "download") == total == sum(map(len, FILES.values()))


@pytest.mark.parametrize("point", ["fetch.range.recorded", "fetch.range.split", "fetch.write", "fetch.place"])
def test_wh_killed_at_a_checkpoint_then_a_rerun_completes(always, tmp_path, point):
    srv, items = _serve(rate=2_000_000)
    spec = _spec(items, tmp_path)
    try:
        env = {**os.environ, "WH_FAULT": f"{point}:kill"}
        first = subprocess.run([sys.executable, "-c", CHILD, spec], env=env, capture_output=True, timeout=30)
        assert first.returncode == -signal.SIGKILL, first
        assert wait_for(lambda: not _helpers(0), 10), "a helper outlived the killed wh"
        again = subprocess.run([sys.executable, "-c", CHILD, spec], capture_output=True, text=True, timeout=60)
        assert again.returncode == 0, again.stderr
    finally:
        srv.close()
    _check_placed(tmp_path)
    assert not list((tmp_path / "cache" / "partial").iterdir())


# --- bytes on the pipe that are not frames ------------------------------------------------------

POLLUTERS = {
    # A C library (or a child process) writing to fd 1 before the first frame: a nonsense length.
    "text-on-fd1": "os.write(1, b'hello from a C library\\n')",
    # A length that is small but a body that is no pickle.
    "not-a-pickle": "os.write(1, struct.pack('>Q', 9) + b'\\x80\\x05garbage')",
    # Well-formed frames of the wrong shape.
    "not-a-tuple": "os.write(1, childproc.frame(42))",
    "short-tuple": "os.write(1, childproc.frame(('filed',)))",
    "unknown-key": "os.write(1, childproc.frame(('filed', 'nope', '/etc/passwd')))",
    "bad-end": "os.write(1, childproc.frame(('end', 'err', 'not an exception')))",
    "unknown-end": "os.write(1, childproc.frame(('end', 'fine', None)))",
    # One of its files "filed" under a path that is not its cache entry (placed unhashed: must be refused).
    "foreign-path": "os.write(1, childproc.frame(('filed', cfg['items'][0][2], __file__)))",
}


def _polluted(monkeypatch, tmp_path, code: str, after: float = 0.0):
    """Make the helper a module that runs the real serve() with ``code`` run (on a thread, after
    ``after`` s) writing straight to fd 1."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "hostile_helper.py").write_text(
        "import os, struct, threading, time\n"
        "import wheelhouse.childproc as childproc\n"
        "from wheelhouse.fetch import procs\n"
        "def serve(cfg):\n"
        "    def pollute():\n"
        f"        time.sleep({after})\n"
        f"        {code}\n"
        "    threading.Thread(target=pollute, daemon=True).start()\n"
        "    procs.serve(cfg)\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    monkeypatch.setattr(procs, "spawn", lambda module, cfg: childproc.spawn("hostile_helper", cfg))


@pytest.mark.parametrize("what", list(POLLUTERS))
def test_garbage_on_the_helpers_stdout_means_redo_not_a_crash_or_a_hang(always, tmp_path, monkeypatch, what):
    monkeypatch.setattr(procs, "_SILENT", 2.0)
    monkeypatch.setattr(procs, "_BEAT", 0.2)
    _polluted(monkeypatch, tmp_path, POLLUTERS[what], after=0.2)
    srv, items = _serve(rate=6_000_000)
    try:
        box, took = _fetch(items, tmp_path, timeout=20)
    finally:
        srv.close()
    assert "error" not in box, repr(box.get("error"))
    _check_placed(tmp_path)
    _no_leftovers(tmp_path, box)


def test_print_in_the_helper_goes_to_stderr_not_into_the_frames(always, tmp_path, monkeypatch):
    """print() in the helper while it downloads (a library's chatter) must not touch the frames:
    the helper's share is its own (not redone here)."""
    chatter = "for _ in range(200):\n            print('chatter' * 50); time.sleep(0.005)"
    _polluted(monkeypatch, tmp_path, chatter, after=0.05)
    srv, items = _serve(rate=4_000_000)
    try:
        box, _ = _fetch(items, tmp_path)
    finally:
        srv.close()
    assert "error" not in box, box.get("error")
    _check_placed(tmp_path)
    notes = [e[1] for e in box["reporter"].events if e[0] == "note"]
    assert not any("second download process stopped" in n for n in notes), notes
    assert box["helpers"]
    _no_leftovers(tmp_path, box)


def _fake_helper(monkeypatch, tmp_path, body: str):
    """The helper is a module whose serve(cfg) is ``body`` (it may call procs.serve(cfg))."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "hostile_helper.py").write_text(
        "import os, sys, time\nimport wheelhouse.childproc as childproc\nfrom wheelhouse.fetch import procs\n"
        "def serve(cfg):\n" + "".join("    " + line + "\n" for line in body.splitlines()))
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    monkeypatch.setattr(procs, "spawn", lambda module, cfg: childproc.spawn("hostile_helper", cfg))


@pytest.mark.parametrize("body", [
    "time.sleep(600)",  # up, never says a word: killed after _START_WAIT
    "os.write(1, childproc.frame(('beat',)))\nos.write(1, childproc.frame(('end', 'ok', None)))\ntime.sleep(600)",
    "os.write(1, childproc.frame(('beat',)))\nos._exit(0)",  # exits at once without an end frame
], ids=["silent-from-the-start", "says-ok-files-nothing-ignores-stdin", "exits-without-a-word"])
def test_a_helper_that_misbehaves_costs_nothing_but_time(always, tmp_path, monkeypatch, body):
    monkeypatch.setattr(procs, "_START_WAIT", 1.5)
    monkeypatch.setattr(procs, "_EXIT_WAIT", 1.0)
    _fake_helper(monkeypatch, tmp_path, body)
    srv, items = _serve(rate=6_000_000)
    try:
        box, took = _fetch(items, tmp_path, timeout=20)
    finally:
        srv.close()
    assert "error" not in box, repr(box.get("error"))
    _check_placed(tmp_path)
    assert took < 8, took
    _no_leftovers(tmp_path, box)


# --- signals --------------------------------------------------------------------------------------

def test_ctrl_c_while_only_the_helper_is_downloading(always, tmp_path):
    """This process's share is done and it waits on the helper's slow file: Ctrl-C ends both at once."""
    srv, items = _serve(rates={THERE: 400_000})
    spec = _spec(items, tmp_path)
    try:
        child = subprocess.Popen([sys.executable, "-c", CHILD, spec], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
        helper = wait_for(lambda: _helpers(child.pid), 20)
        assert helper
        # This share's files placed: the parent is in its final wait on the helper.
        assert wait_for(lambda: all((tmp_path / "dest" / n).exists() for n in MINE), 20)
        assert not (tmp_path / "dest" / THERE).exists()
        t0 = time.monotonic()
        os.killpg(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        srv.close()
    assert child.returncode != 0 and b"KeyboardInterrupt" in err and b"done" not in out
    assert took < 3, took
    assert wait_for(lambda: not alive(helper[0]), 5)
    assert not (tmp_path / "dest" / THERE).exists()


@pytest.mark.parametrize("handler", ["default", "as-interrupt"])
def test_sigterm_to_wh_ends_its_helper(always, tmp_path, handler):
    """`kill <wh pid>`: with Python's default SIGTERM wh dies at once (the helper's stdin closes);
    with the CLI's sigterm_as_interrupt it stops as on Ctrl-C. Either way the helper is gone at once."""
    srv, items = _serve(rate=300_000)
    spec = _spec(items, tmp_path)
    code = CHILD if handler == "default" else (
        "from wheelhouse.cli._ui import sigterm_as_interrupt\nwith sigterm_as_interrupt():\n"
        + "".join("    " + line + "\n" for line in CHILD.strip().splitlines()))
    try:
        child = subprocess.Popen([sys.executable, "-c", code, spec], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        helper = wait_for(lambda: _helpers(child.pid), 20)
        assert helper
        time.sleep(0.3)
        t0 = time.monotonic()
        child.terminate()
        out, err = child.communicate(timeout=10)
        took = time.monotonic() - t0
        assert wait_for(lambda: not alive(helper[0]), 5), "the helper outlived a SIGTERMed wh"
    finally:
        srv.close()
    assert b"done" not in out and took < 3, (took, err[-500:])
    if handler == "as-interrupt":
        assert b"KeyboardInterrupt" in err, err[-1000:]


# --- two runs on one cache ---------------------------------------------------------------------------

def test_two_runs_on_one_cache_each_with_its_helper_take_turns(always, tmp_path):
    srv, items = _serve(rate=3_000_000)
    try:
        runs = [subprocess.Popen([sys.executable, "-c", CHILD, _spec(items, tmp_path, dest=f"dest{i}")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
        seen = wait_for(lambda: len(_helpers(runs[0].pid)) + len(_helpers(runs[1].pid)) == 2, 20)
        results = [r.communicate(timeout=60) for r in runs]
    finally:
        for r in runs:
            if r.poll() is None:
                r.kill()
                r.wait()
        srv.close()
    assert seen, "both runs had a helper at once"
    for r, (out, err) in zip(runs, results):
        assert r.returncode == 0, err.decode()[-2000:]
    for i in range(2):
        for name, data in FILES.items():
            assert (tmp_path / f"dest{i}" / name).read_bytes() == data
    total = sum(len(d) for d in FILES.values())
    # Each file downloaded once between the 4 processes (measured: total + 170 kB; a cut range re-sends < 1 MiB).
    assert sum(srv.served.values()) < total + 2 * MIB, (srv.served, total)
    assert not list((tmp_path / "cache" / "partial").iterdir())


# --- credentials --------------------------------------------------------------------------------------

@pytest.mark.parametrize("fail", ["404", "mismatch"])
def test_a_credential_in_a_url_never_reaches_an_error_from_the_helper(always, tmp_path, monkeypatch, fail):
    srv, items = _serve(auth="alice:s3cret-TOKEN")
    items = [FetchItem(i.url.replace("http://", "http://alice:s3cret-TOKEN@"), i.filename, i.sha256, i.size)
             for i in items]
    if fail == "404":
        del srv.files[THERE]
    else:
        srv.tampered[THERE] = os.urandom(len(FILES[THERE]))
    try:
        box, _ = _fetch(items, tmp_path)
        monkeypatch.setenv(procs.ENV, "0")
        alone, _ = _fetch(items, tmp_path / "alone")
    finally:
        srv.close()
    err = box.get("error")
    assert isinstance(err, WhError) and THERE in str(err), repr(err)
    assert type(err) is type(alone.get("error")) and str(err) == str(alone["error"])
    # As the CLI prints it (wheelhouse.cli._ui: message and hint through redact): no secret.
    from wheelhouse.redact import redact

    for text in (redact(err.message), redact(err.hint or "")):
        assert "s3cret" not in text, text
    _no_leftovers(tmp_path, box)


# --- other shapes of input ------------------------------------------------------------------------

def test_files_without_a_published_hash_are_filed_by_the_helper_and_placed(always, tmp_path):
    """No sha256 (a find-links folder): the helper files each under the hash of what arrived; this
    process places them (its check of the helper's 'filed' path must accept those entries)."""
    srv, items = _serve(rate=6_000_000)
    items = [FetchItem(i.url, i.filename, None, i.size) for i in items]
    try:
        box, _ = _fetch(items, tmp_path)
    finally:
        srv.close()
    assert "error" not in box, box.get("error")
    _check_placed(tmp_path)
    assert box["helpers"]
    notes = [e[1] for e in box["reporter"].events if e[0] == "note"]
    assert not any("second download process stopped" in n for n in notes), notes
    _no_leftovers(tmp_path, box)


def test_a_helper_that_dies_at_import_costs_nothing_but_time(always, tmp_path, monkeypatch):
    monkeypatch.setattr(procs, "spawn", lambda module, cfg: childproc.spawn("hostile_helper_missing", cfg))
    srv, items = _serve(rate=6_000_000)
    try:
        box, took = _fetch(items, tmp_path)
    finally:
        srv.close()
    assert "error" not in box, box.get("error")
    _check_placed(tmp_path)
    assert took < 10
    _no_leftovers(tmp_path, box)


def test_progress_counts_each_byte_once_when_the_helper_is_killed_and_its_files_resumed_here(always, tmp_path):
    """The helper counted the bytes it recorded; this process counts a resumed file's kept bytes
    again: the bar went to 114% (2 MiB over 14 MiB) before the helper's counted bytes were credited."""
    from wheelhouse.fetch.ranges import bytes_kept

    srv, items = _serve(rate=1_500_000)
    there = next(it for it in items if it.filename == THERE)
    killed = []

    def killer():
        pid = wait_for(lambda: bytes_kept(tmp_path / "cache", there.sha256) >= 2 * MIB and _helpers(), 20)
        if pid:
            os.kill(pid[0], signal.SIGKILL)
            killed.append(pid[0])

    k = threading.Thread(target=killer)
    k.start()
    try:
        box, _ = _fetch(items, tmp_path)
        k.join(30)
    finally:
        srv.close()
    assert killed and "error" not in box, box.get("error")
    _check_placed(tmp_path)
    advanced = sum(e[2] for e in box["reporter"].events if e[0] == "advance")
    assert advanced == sum(len(d) for d in FILES.values())
    _no_leftovers(tmp_path, box)


def test_many_small_files_through_the_helper(always, tmp_path):
    """300 files of 4-40 kB: hundreds of 'filed' frames and placements from the reader thread."""
    names = {f"p{i}-1.0-py3-none-any.whl": os.urandom(4000 + 120 * i) for i in range(300)}
    srv = RatedServer()
    items = [srv.add(n, d) for n, d in names.items()]
    try:
        box, _ = _fetch(items, tmp_path)
    finally:
        srv.close()
    assert "error" not in box, box.get("error")
    assert box["helpers"]
    for n, d in names.items():
        assert (tmp_path / "dest" / n).read_bytes() == d
    notes = [e[1] for e in box["reporter"].events if e[0] == "note"]
    assert not any("second download process stopped" in n for n in notes), notes
    assert sum(e[2] for e in box["reporter"].events if e[0] == "advance") == sum(map(len, names.values()))
    assert wait_for(lambda: not _helpers(), 5)


@pytest.mark.parametrize("mode", ["always", "0"], ids=["with-helpers", "one-process"])
def test_a_run_killed_while_another_waits_on_its_file_leaves_nothing_behind(always, tmp_path, monkeypatch, mode):
    """Run A's helper holds THERE (ranges, recorded on disk); run B, on the same cache, waits for it.
    A is SIGKILLed (its helper ends): B takes THERE over. It must end with THERE verified, no
    partial files of it left in the cache (each as big as the file: they were, as B's one-stream
    wait downloaded it again from byte 0), and A's recorded bytes not asked for again."""
    from wheelhouse.fetch.ranges import bytes_kept

    monkeypatch.setenv(procs.ENV, mode)
    srv, items = _serve(rates={THERE: 1_000_000})
    there = next(it for it in items if it.filename == THERE)
    try:
        a = subprocess.Popen([sys.executable, "-c", CHILD, _spec(items, tmp_path, dest="destA")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_for(lambda: bytes_kept(tmp_path / "cache", there.sha256) >= 2 * MIB, 20)
        b = subprocess.Popen([sys.executable, "-c", CHILD, _spec(items, tmp_path, dest="destB")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # B is up and waiting: its files other than THERE are placed.
        assert wait_for(lambda: all((tmp_path / "destB" / n).exists() for n in (HERE, S1, S2)), 20)
        kept = bytes_kept(tmp_path / "cache", there.sha256)
        served = srv.served[THERE]
        a.kill()
        a.wait()
        out, err = b.communicate(timeout=60)
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
                p.wait()
        srv.close()
    assert b.returncode == 0, err.decode()[-2000:]
    assert (tmp_path / "destB" / THERE).read_bytes() == FILES[THERE]
    leftovers = list((tmp_path / "cache" / "partial").iterdir())
    assert not leftovers, leftovers
    assert srv.served[THERE] - served <= len(FILES[THERE]) - kept + 2 * MIB, (srv.served[THERE] - served, kept)


@pytest.mark.parametrize("jobs, mode", [(1, "0"), (3, "always")], ids=["one-connection", "jobs3-helper"])
def test_ranges_kept_by_an_earlier_run_are_resumed_with_one_connection(always, tmp_path, monkeypatch, jobs, mode):
    """An earlier run (4 connections) was killed with ranges of the big files recorded. The next run
    has one connection for them (--jobs 1; or --jobs 3, where this process's share gets one and the
    helper two): the kept ranges are resumed, not downloaded again as one stream from byte 0 with
    the ranges' files (as big as the file) left in the cache for good."""
    from wheelhouse.fetch.ranges import bytes_kept

    srv, items = _serve(rate=2_000_000)
    try:
        env = {**os.environ, "WH_FAULT": "fetch.range.recorded:kill", procs.ENV: "0"}
        first = subprocess.run([sys.executable, "-c", CHILD, _spec(items, tmp_path)], env=env, capture_output=True,
                               timeout=30)
        assert first.returncode == -signal.SIGKILL, first
        kept = sum(bytes_kept(tmp_path / "cache", it.sha256) for it in items)
        assert kept > 0
        served = sum(srv.served.values())
        monkeypatch.setenv(procs.ENV, mode)
        paths = fetch_all(items, tmp_path / "dest", tmp_path / "cache", jobs=jobs, segment_size=SEG, backoff=0.01)
    finally:
        srv.close()
    assert len(paths) == 4
    _check_placed(tmp_path)
    leftovers = list((tmp_path / "cache" / "partial").iterdir())
    assert not leftovers, leftovers
    total = sum(len(d) for d in FILES.values())
    assert sum(srv.served.values()) - served <= total - kept + MIB, (sum(srv.served.values()) - served, total, kept)
