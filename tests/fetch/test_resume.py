"""fetch: every byte received survives a kill (issue 11.14), and Ctrl-C stops at once (11.16).

Real processes against a slow loopback server: a download is SIGKILLed again and again, each
time after the server sent more, and must keep what it had every time; `wh stage` given SIGINT
mid-download must exit within seconds, keeping the partial file for the next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from file_server import serve_files

from wheelhouse.fetch import FetchItem, cached_path
from wheelhouse.fetch.ranges import bytes_kept

CHILD = """
import json, sys
from pathlib import Path
from wheelhouse.fetch import FetchItem, fetch_all
spec = json.loads(sys.argv[1])
fetch_all([FetchItem(**spec["item"])], Path(spec["dest"]), Path(spec["cache"]), jobs=spec["jobs"],
          segment_size=spec["segment"], backoff=0.01)
"""


def _on_disk(cache: Path) -> int:
    """Bytes kept for the next run: a one-stream partial's size, or a ranged download's record."""
    folder = cache / "partial"
    keys = {p.name.split(".part")[0] for p in folder.iterdir() if ".part" in p.name} if folder.exists() else set()
    return sum(bytes_kept(cache, key) for key in keys)


def _wait_for(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("jobs, segment", [(1, None), (4, 256 * 1024)], ids=["one-stream", "ranges"])
def test_repeated_kills_keep_every_byte_received(tmp_path, jobs, segment):
    data = os.urandom(3_000_000)
    name = "slow-1.0-py3-none-any.whl"
    srv = serve_files({name: data}, rate=400_000)  # per connection: 4 ranges make 1.6 MB/s
    try:
        item = FetchItem(srv.url(name), name, hashlib.sha256(data).hexdigest(), len(data))
        cache = tmp_path / "cache"
        arg = json.dumps({"item": item.__dict__, "dest": str(tmp_path / "dest"), "cache": str(cache),
                          "jobs": jobs, "segment": segment})
        kept, kills = [0], 0
        while kills < 30:
            child = subprocess.Popen([sys.executable, "-c", CHILD, arg], stderr=subprocess.PIPE)
            # Kill it once this run has written 400 kB more (every kill costs at most what was in
            # flight: bytes the server sent that the process had not read yet).
            if not _wait_for(lambda: child.poll() is not None or _on_disk(cache) >= kept[-1] + 400_000, 60):
                child.kill()
                child.communicate()
                pytest.fail("the child made no progress in 60 s")
            if child.poll() is not None:
                _, err = child.communicate()
                assert child.returncode == 0, err
                break
            child.send_signal(signal.SIGKILL)
            child.communicate()
            kills += 1
            kept.append(_on_disk(cache))
            assert kept[-1] >= kept[-2] + 400_000, f"round {kills}: the bytes written were not kept ({kept})"
        assert kills >= 3, "the download finished before it could be interrupted: make the server slower"
        assert (tmp_path / "dest" / name).read_bytes() == data
        assert cached_path(cache, item.sha256).is_file()
        # Nothing that reached the disk was asked for again: only what was in flight at each kill
        # (a checkpoint every 16 MiB, as before, re-fetched all 400 kB of every round).
        assert srv.served[name] - len(data) <= kills * 250_000, (srv.served[name], kills)
    finally:
        srv.close()


def test_ctrl_c_during_wh_stage_stops_at_once_and_keeps_the_partial(pyindex, tmp_path):
    from wheelmaker import make_wheel

    wheel = make_wheel(tmp_path / "pub", "app", "1.0", pad_bytes=12_000_000)
    srv = serve_files({wheel.name: wheel.read_bytes()}, rate=300_000)
    try:
        idx = pyindex(tmp_path / "empty")
        cache = tmp_path / "cache"
        cmd = [sys.executable, "-c", "import sys; from wheelhouse.cli import main; main(sys.argv[1:])",
               "stage", f"app @ {srv.url(wheel.name)}", "-i", idx.url, "-o", str(tmp_path / "out"),
               "--cache-dir", str(cache), "--no-bootstrap"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "NO_COLOR": "1"})
        # Wait until the body is flowing (the metadata tail read is done, the download runs).
        assert _wait_for(lambda: srv.served.get(wheel.name, 0) > 600_000 or proc.poll() is not None, 120)
        assert proc.poll() is None, proc.communicate()
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
        assert took < 3, f"took {took:.1f} s to stop"
        assert proc.returncode == 130 and "interrupted" in err, err
        assert _on_disk(cache) > 300_000  # the bytes received are kept for the next run
        assert not (tmp_path / "out").exists()
    finally:
        srv.close()



def test_a_fetch_killed_mid_range_resumes_each_range_where_its_record_says(tmp_path):
    """SIGKILL (WH_FAULT) right after a range recorded a block: the next run asks every range for
    the rest from its recorded byte, never re-asks a recorded byte, and the body verifies."""
    from wheelhouse.faults import ENV

    data = os.urandom(3_000_000)
    name = "mid-1.0-py3-none-any.whl"
    srv = serve_files({name: data}, rate=2_000_000)
    try:
        item = FetchItem(srv.url(name), name, hashlib.sha256(data).hexdigest(), len(data))
        cache, dest = tmp_path / "cache", tmp_path / "dest"
        arg = json.dumps({"item": item.__dict__, "dest": str(dest), "cache": str(cache), "jobs": 4,
                          "segment": 256 * 1024})
        killed = subprocess.run([sys.executable, "-c", CHILD, arg], capture_output=True, text=True, timeout=120,
                                env={**os.environ, ENV: "fetch.range.recorded:kill"})
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert not dest.exists() and not cached_path(cache, item.sha256).exists()
        part = cache / "partial" / f"{item.sha256}.part"
        segments = json.loads(part.with_name(part.name + ".json").read_text())["segments"]
        raw = part.with_name(part.name + ".have").read_bytes()
        have = [int.from_bytes(raw[8 * i: 8 * i + 8], "little") for i in range(len(segments))]
        assert sum(have) > 0 and sum(have) == _on_disk(cache)
        body = part.with_name(part.name + ".body").read_bytes()
        for (a, _b), h in zip(segments, have):
            assert body[a:a + h] == data[a:a + h]  # every recorded byte is the right byte
        before = len(srv.ranges)
        again = subprocess.run([sys.executable, "-c", CHILD, arg], capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert (dest / name).read_bytes() == data
        # Each range asked for exactly what its record lacked: nothing recorded is fetched twice.
        asked = {r.split("bytes=")[1] for r in srv.ranges[before:]}
        assert asked == {f"{a + h}-{b - 1}" for (a, b), h in zip(segments, have) if h < b - a}
        assert not list((cache / "partial").iterdir())
    finally:
        srv.close()
