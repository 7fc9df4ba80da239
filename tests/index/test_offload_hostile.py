"""A hostile look at the cold resolve's helper processes (wheelhouse.index.offload).

Each case runs the same resolve twice, helpers off (``WH_INDEX_PROCESS=0``) and every request
through a helper (``always``), against the same misbehaving loopback index, and asks for the
same answer: the same pins or the same error (class, message, hint), and the same number of
requests reaching the index. Then what a user notices when things go wrong around the helpers:
a helper that hangs (SIGSTOP), a wh killed by SIGTERM, two resolves on one cache, a source
reused after its resolution, a Python that cannot be started, ``--json`` output.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from wheelhouse.index import PackageSource
from wheelhouse.index import offload as offload_mod
from wheelhouse.index.http import HttpClient
from wheelhouse.index.metadata import MetadataReader
from wheelhouse.index.offload import Offload, OffloadClosed
from wheelhouse.resolve import resolve
from wheelhouse.resolve.candidates import _TagFilter

sys.path.insert(0, str(Path(__file__).parent))  # the helpers of test_offload.py (same folder)
from test_offload import CP312, ROOT, _children_helpers, _helper_pids, _pins, _publish, _stage_cmd, _wait_gone

MODES = ("0", "always")


def _mine() -> list[int]:
    """Helpers that are this test process's children (never another run's on the same machine)."""
    found = []
    for pid in _helper_pids():
        try:
            if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.append(pid)
        except (OSError, ValueError, IndexError):
            pass
    return found


@pytest.fixture
def index(pyindex, tmp_path):
    folder = tmp_path / "index-files"
    _publish(folder)
    return lambda **knobs: pyindex(folder, **knobs)


def _run(idx, cache: Path, mode: str, monkeypatch, *, retries: int = 0, timeout: float = 60.0):
    """(pins or the error, requests that reached the index, helpers started)."""
    monkeypatch.setenv("WH_INDEX_PROCESS", mode)
    client = HttpClient(cache_dir=cache, retries=retries, backoff=0.01, timeout=timeout)
    source = PackageSource([idx.url], client=client)
    before = sum(idx.hits.values())
    try:
        res = resolve([ROOT], CP312, source, metadata=MetadataReader(client, cache_dir=cache))
    except Exception as exc:  # noqa: BLE001  (the error is the answer compared)
        return ("error", type(exc), str(exc), getattr(exc, "hint", None)), sum(idx.hits.values()) - before, None
    return ("pins", _pins(res)), sum(idx.hits.values()) - before, res.stats


def _both(idx, tmp_path, monkeypatch, arm=lambda: None, **kw):
    out = {}
    for mode in MODES:
        arm()  # the same misbehaviour for each mode
        out[mode] = _run(idx, tmp_path / f"cache-{mode}", mode, monkeypatch, **kw)
    return out


def _same(out, *, offloaded: bool = True):
    (plain, plain_hits, _), (helped, helped_hits, stats) = out["0"], out["always"]
    assert helped == plain
    if plain[0] == "pins":  # after an error, how many prefetches reached the index is a matter of timing
        assert helped_hits == plain_hits, f"requests: {helped_hits} with helpers, {plain_hits} without"
    if offloaded and stats is not None:
        assert stats["offloaded"] >= 1
    leftovers = [p for c in ("cache-0", "cache-always") for p in _tmpfiles(out, c)]
    assert leftovers == []


def _tmpfiles(out, name):
    root = out.get("_root")
    return [] if root is None else [p.name for p in (root / name).rglob("*") if ".tmp" in p.name]


JSON = {"Content-Type": "application/vnd.pypi.simple.v1+json"}


# --- (4) hostile or broken answers: the same as without helpers ----------------------------------------
@pytest.mark.parametrize("case", ["not-json", "huge-page", "500-then-ok", "redirect", "wrong-pep658", "html", "no-ranges"])
def test_a_broken_index_answers_the_same_with_and_without_helpers(index, tmp_path, monkeypatch, case):
    knobs = {"serve_metadata": case == "wrong-pep658"}
    if case == "html":
        knobs["json"] = False
    if case == "no-ranges":
        knobs["ranges"] = False
    idx = index(**knobs)
    page = "/simple/lib3/"
    if case == "huge-page":
        monkeypatch.setenv("WH_MAX_PAGE_MB", "0.05")
    answers = {
        "not-json": [(200, b"{this is not json", JSON)],
        "huge-page": [(200, b"{" + b" " * 200_000 + b"}", JSON)],
        "500-then-ok": [(500, b"oops", {})],
        "redirect": [(302, b"", {"Location": page + "?moved=1"})],
        "wrong-pep658": [],
        "html": [],
        "no-ranges": [],
    }[case]

    def arm():
        idx.scripted.clear()
        if answers:
            idx.script(page, *answers)
        if case == "wrong-pep658":
            idx.script("/files/lib3-2.0-py3-none-any.whl.metadata",
                       *[(200, b"Metadata-Version: 2.1\nName: lib3\nVersion: 2.0\n", {})] * 5)

    out = _both(idx, tmp_path, monkeypatch, arm, retries=1 if case == "500-then-ok" else 0)
    _same(out, offloaded=case not in ("not-json", "huge-page"))
    kind = out["0"][0][0]
    expect_error = case in ("not-json", "huge-page", "wrong-pep658")
    assert kind == ("error" if expect_error else "pins"), out["0"]
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name]


def test_a_stalling_index_fails_the_same_way_with_and_without_helpers(index, tmp_path, monkeypatch):
    idx = index(delay=1.0)
    out = _both(idx, tmp_path, monkeypatch, timeout=0.3)
    _same(out, offloaded=False)
    assert out["0"][0][0] == "error" and "timed out" in out["0"][0][2]


def test_a_cache_that_cannot_be_written_costs_no_extra_request(index, tmp_path, monkeypatch):
    """Every cache write fails (ENOSPC): the helper's page never reaches the cache, and this
    process must not ask the index for it a second time."""
    idx = index()
    monkeypatch.setenv("WH_FAULT", "index.cache-write:enospc")
    monkeypatch.setenv("WH_FAULT_HELPER", "index.cache-write:enospc")
    out = _both(idx, tmp_path, monkeypatch)
    _same(out)
    assert out["0"][0][0] == "pins"


# --- (5) a helper that hangs ----------------------------------------------------------------------
def test_a_stopped_helper_does_not_hang_the_resolve(index, tmp_path, monkeypatch):
    """A helper SIGSTOPped (or wedged) with requests waiting on it: the run notices its silence,
    ends it and does the work here. Before: the waiting request blocked forever."""
    monkeypatch.setattr(offload_mod, "_SILENT", 2.0, raising=False)
    idx = index()
    client = HttpClient(cache_dir=tmp_path / "c", retries=0)
    source = PackageSource([idx.url], client=client)
    off = Offload(client, page_ttl=600, after=0, helpers=1, wait=True)
    try:
        assert off.page(source.index_urls[0], "lib1", _TagFilter(CP312)) is True
        pids = _mine()
        assert pids
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("v", off.page(source.index_urls[0], "lib2", _TagFilter(CP312))),
                             daemon=True)
        start = time.monotonic()
        t.start()
        t.join(30)
        assert not t.is_alive(), "the request waited on a stopped helper for good"
        assert got["v"] is None, "no answer from the helper: the work is done here"
        assert time.monotonic() - start < 15
        # and later requests do not wait on it again
        t0 = time.monotonic()
        assert off.page(source.index_urls[0], "lib3", _TagFilter(CP312)) is None
        assert time.monotonic() - t0 < 1
    finally:
        for pid in _mine():
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        off.close()
    assert _wait_gone(pids) == []


def test_a_stopped_helper_in_a_whole_resolve_gives_the_same_pins(index, tmp_path, monkeypatch):
    """Helpers stopped as soon as they are seen, most often before they said "ready": before,
    the starting thread read their pipe for ever, each ``always`` request waited 30 s for it,
    and close() could not end a helper it had not been told of (left stopped after the run)."""
    monkeypatch.setattr(offload_mod, "_SILENT", 2.0, raising=False)
    monkeypatch.setattr(offload_mod, "_START_WAIT", 2.0)
    idx = index(delay=0.05)
    plain, _, _ = _run(idx, tmp_path / "c0", "0", monkeypatch)
    stopped = []
    finished = threading.Event()

    def stopper():  # every helper of this run, as soon as it is seen
        while not finished.is_set():
            for pid in _children_helpers(os.getpid(), 0.2):
                if pid not in stopped:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            time.sleep(0.005)

    t = threading.Thread(target=stopper, daemon=True)
    t.start()
    start = time.monotonic()
    helped, _, stats = _run(idx, tmp_path / "c1", "always", monkeypatch)
    took = time.monotonic() - start
    finished.set()
    t.join(25)
    left = _wait_gone(stopped, 10)  # still stopped: only this run can have ended them
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
    assert stopped, "a helper was stopped"
    assert helped == plain
    assert left == [], "a stopped helper outlived the resolution"
    assert took < 12, f"the resolve took {took:.1f} s"


# --- (2) nothing left behind ---------------------------------------------------------------------
def test_a_normal_run_leaves_no_zombie_and_no_resource_warning(index, tmp_path, monkeypatch):
    idx = index()
    seen: set[int] = set()
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen.update(_mine())
            time.sleep(0.005)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, _, stats = _run(idx, tmp_path / "c", "always", monkeypatch)
        gc.collect()
    stop.set()
    t.join()
    assert got[0] == "pins" and stats["helpers"] >= 1
    assert seen, "helpers ran"
    # reaped: not even a zombie entry is left in /proc
    assert [p for p in seen if Path(f"/proc/{p}").exists()] == []
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


# --- (5) concurrency, reuse ----------------------------------------------------------------------
def test_two_resolves_on_one_cache_at_once(index, tmp_path, monkeypatch):
    idx = index(delay=0.02)
    plain, _, _ = _run(idx, tmp_path / "c0", "0", monkeypatch)
    monkeypatch.setenv("WH_INDEX_PROCESS", "always")
    results = []

    def one():
        client = HttpClient(cache_dir=tmp_path / "shared", retries=0)
        source = PackageSource([idx.url], client=client)
        results.append(_pins(resolve([ROOT], CP312, source, metadata=MetadataReader(client, cache_dir=tmp_path / "shared"))))

    ts = [threading.Thread(target=one) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert results == [plain[1], plain[1]]
    assert [p.name for p in (tmp_path / "shared").rglob("*") if ".tmp" in p.name] == []
    assert _wait_gone(_mine()) == []


def test_a_source_reused_after_its_resolution_never_remembers_offload_closed(index, tmp_path, monkeypatch):
    """The stage's bootstrap resolve reuses the PackageSource: a page cut by the first run's end
    (OffloadClosed) must be fetched again, not raised from the memo."""
    idx = index()
    client = HttpClient(cache_dir=tmp_path / "c", retries=0)
    source = PackageSource([idx.url], client=client)
    off = Offload(client, page_ttl=600, after=0, helpers=1, wait=True)
    off.close()
    source.offload = off
    with pytest.raises(OffloadClosed):
        source.files("lib3", _TagFilter(CP312))
    source.offload = None
    assert [d.version for d in source.files("lib3", _TagFilter(CP312))]
    # and a whole second resolution on the same source and reader
    monkeypatch.setenv("WH_INDEX_PROCESS", "always")
    reader = MetadataReader(client, cache_dir=tmp_path / "c")
    first = resolve([ROOT], CP312, source, metadata=reader)
    second = resolve([ROOT], CP312, source, metadata=reader)
    assert _pins(first) == _pins(second)
    assert source.offload is None and reader.offload is None


# --- (6) odd surroundings ------------------------------------------------------------------------
def test_a_python_that_cannot_start_leaves_the_work_here(index, tmp_path, monkeypatch):
    idx = index()
    plain, plain_hits, _ = _run(idx, tmp_path / "c0", "0", monkeypatch)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    helped, hits, stats = _run(idx, tmp_path / "c1", "always", monkeypatch)
    assert helped == plain and hits == plain_hits
    assert stats["offloaded"] == 0


def test_json_output_is_not_polluted_by_helpers(index, tmp_path):
    idx = index()
    env = {**os.environ, "WH_INDEX_PROCESS": "always"}
    cmd = [*_stage_cmd(idx, tmp_path / "cache", tmp_path / "out"), "--json"]
    done = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    data = json.loads(done.stdout)
    assert data


def test_an_unpicklable_keep_is_done_here(index, tmp_path):
    """A filter that cannot be pickled (a lambda with a cache_key) is not sent: the page is read here."""
    idx = index()
    client = HttpClient(cache_dir=tmp_path / "c", retries=0)
    source = PackageSource([idx.url], client=client)

    def keep(name):
        return True

    keep.cache_key = "everything"
    off = Offload(client, page_ttl=600, after=0, helpers=1, wait=True)
    try:
        source.offload = off
        files = source.files("lib3", keep)
        assert sorted(d.version for d in files) == ["1.0", "2.0"]
        # the helper is still usable afterwards
        assert off.page(source.index_urls[0], "lib4", _TagFilter(CP312)) is True
    finally:
        source.offload = None
        off.close()


def test_auto_mode_gives_the_same_pins_and_requests(index, tmp_path, monkeypatch):
    """The default: helpers start in the background from the 9th request; requests made here
    meanwhile and those sent to a helper add up to the same count as without helpers."""
    if offload_mod.cpus() < 2:
        pytest.skip("auto starts no helper on one CPU")
    idx = index(delay=0.02)
    plain, plain_hits, _ = _run(idx, tmp_path / "c0", "0", monkeypatch)
    auto, auto_hits, stats = _run(idx, tmp_path / "c1", "auto", monkeypatch)
    assert auto == plain and auto_hits == plain_hits
    assert stats["helpers"] >= 1


def test_ctrl_c_while_requests_wait_on_a_helper(index, tmp_path, monkeypatch):
    """KeyboardInterrupt reaches the resolver's thread while it waits on a helper's answer, at
    once; the helpers end with the resolution and nothing waits on them afterwards."""
    idx = index(delay=0.5)
    monkeypatch.setenv("WH_INDEX_PROCESS", "always")
    client = HttpClient(cache_dir=tmp_path / "c", retries=0)
    source = PackageSource([idx.url], client=client)
    seen = []
    over = threading.Event()

    def interrupt():
        seen.extend(_children_helpers(os.getpid(), 20))
        time.sleep(0.8)  # requests in flight in the helpers, the resolver waiting on one
        if not over.is_set():  # never a stray Ctrl-C into the rest of the session
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            resolve([ROOT], CP312, source, metadata=MetadataReader(client, cache_dir=tmp_path / "c"))
    finally:
        over.set()
    assert seen, "helpers ran"
    assert time.monotonic() - start < 10
    assert _wait_gone(seen) == []
    assert source.offload is None
    assert [p.name for p in (tmp_path / "c").rglob("*") if ".tmp" in p.name] == []
