"""The probe runner: whatever a probe does (hang, crash, junk output), the doctor gets a verdict and goes on."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from wheelhouse.doctor.probes import ProbeError, run_probe


def script(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / f"{name}.py"
    p.write_text(body)
    return p


def test_marker_records_survive_stray_output(tmp_path):
    s = script(tmp_path, "noisy", 'import sys\nprint("hello from a module", end="")\n'
                                   'sys.stdout.write("\\n@@WH-PROBE@@ {\\"x\\": 1}\\n")\nprint("trailing junk")\n')
    res = run_probe(sys.executable, s, timeout=10)
    assert res.ok and res.data == {"x": 1}
    assert "hello from a module" in res.stdout


def test_segfault_is_named(tmp_path):
    s = script(tmp_path, "crash", "import ctypes\nctypes.string_at(0)\n")
    res = run_probe(sys.executable, s, timeout=10)
    assert not res.ok and res.signal == "SIGSEGV"
    assert res.failure() == "killed by SIGSEGV (signal 11)"


def test_abort_is_named(tmp_path):
    s = script(tmp_path, "abort", "import os\nos.abort()\n")
    res = run_probe(sys.executable, s, timeout=10)
    assert res.signal == "SIGABRT"


def test_hang_is_killed_with_its_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    s = script(tmp_path, "hang", "import subprocess, sys, time\n"
                                 f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                                 f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
                                 "time.sleep(600)\n")
    t0 = time.monotonic()
    res = run_probe(sys.executable, s, timeout=1.5)
    assert res.timed_out and time.monotonic() - t0 < 10
    assert "timed out after 2s" in res.failure(1.5) or "timed out after 1s" in res.failure(1.5)
    child = int(pidfile.read_text())
    for _ in range(50):  # the grandchild got SIGKILL too (own process group)
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            break
        if state in ("Z", "X"):  # dead, waiting for init to reap it
            break
        time.sleep(0.1)
    else:
        pytest.fail("the probe's child outlived the timeout")


def test_missing_interpreter_is_a_probe_error(tmp_path):
    with pytest.raises(ProbeError):
        run_probe(str(tmp_path / "nope"), tmp_path / "x.py")


# ---- a probe never outlives its timeout (issue 11.12), and a hang costs one timeout (issue 10.8) -------


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_dead(pid: int, seconds: float = 5) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _in_thread(fn, limit: float):
    """Run fn in a daemon thread; (finished, result, seconds). A hang fails the test instead of hanging it."""
    import threading

    box = {}
    t0 = time.monotonic()
    t = threading.Thread(target=lambda: box.setdefault("out", fn()), daemon=True)
    t.start()
    t.join(limit)
    return not t.is_alive(), box.get("out"), time.monotonic() - t0


_ESCAPEE = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
            "open({pidfile!r}, 'w').write(str(p.pid))\n"
            "sys.stdout.write('\\n@@WH-PROBE@@ {{\"ok\": true}}\\n'); sys.stdout.flush()\n"
            "{tail}\n")


@pytest.mark.parametrize("tail, timed_out", [("", False), ("time.sleep(600)", True)])
def test_setsid_child_holding_stdout_neither_hangs_the_runner_nor_outlives_it(tmp_path, tail, timed_out):
    pidfile = tmp_path / "escapee.pid"
    s = script(tmp_path, "escape", _ESCAPEE.format(pidfile=str(pidfile), tail=tail))
    finished, res, seconds = _in_thread(lambda: run_probe(sys.executable, s, timeout=3), limit=30)
    child = int(pidfile.read_text())
    try:
        assert finished, "run_probe hung on a pipe held by a setsid grandchild"
        assert seconds < 3 + 4
        assert res.records == ({"ok": True},) and res.timed_out is timed_out
        assert _wait_dead(child), "the setsid grandchild outlived the probe"
    finally:
        if _alive(child):
            os.kill(child, 9)


def test_a_huge_single_line_of_output_is_not_kept(tmp_path):
    s = script(tmp_path, "flood", "import sys\nchunk = 'x' * (1 << 20)\n"
                                  "for _ in range(300):\n    sys.stdout.write(chunk)\n"
                                  "sys.stdout.write('\\n@@WH-PROBE@@ {\"ok\": true}\\n')\n")
    # The peak RSS of this process's own address space (VmHWM), not getrusage's ru_maxrss: that one is kept
    # across exec, so it counted the pytest process this one was forked from (150-167 MiB late in a full run).
    code = ("import re, sys; from wheelhouse.doctor.probes import run_probe\n"
            f"res = run_probe(sys.executable, {str(s)!r}, timeout=60)\n"
            "assert res.ok and res.data == {'ok': True}, res\n"
            "assert len(res.stdout) <= 8000\n"
            "hwm = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read())\n"
            "print(int(hwm.group(1)) // 1024)\n")
    import subprocess

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split()[-1]) < 150  # MiB: 300 MB of one line is read through, not kept


def test_many_concurrent_probes_never_kill_each_other(tmp_path):
    # A probe being started holds copies of every pipe of this process between fork and exec; the escapee
    # sweep must never take it for a holder of another probe's pipe (that was a SIGKILLed probe now and then).
    from wheelhouse.doctor.probes import ProbeSpec, run_probes

    s = script(tmp_path, "quick", "import sys\nsys.stdout.write('\\n@@WH-PROBE@@ {\"ok\": true}\\n')\n")
    specs = [ProbeSpec(f"p{i}", s) for i in range(60)]
    out = run_probes(sys.executable, specs, jobs=12, timeout=60)
    assert {n: r.failure() for n, r in out.items() if not r.ok} == {}
