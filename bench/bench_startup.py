"""Start-up benchmark: how long ``wh --version`` and ``wh --help`` take, against the interpreter's own start-up.

    python bench/bench_startup.py [--wh PATH]... [--runs 41]

Times each command ``--runs`` times (interleaved, so a burst of load on a shared machine hits all alike) and
prints the median and the fastest run. Give ``--wh`` once per console script to compare: an editable install's
script pays for its import finder at every start (site imports it, ~15 ms here), a regular install's does not.
Goal (issue 14): under 50 ms. ``python -X importtime -m wheelhouse.cli --version`` shows what is imported.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fair import methodology, order  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wh", action="append", help="a wh console script (repeatable; default: the one beside python)")
    ap.add_argument("--runs", type=int, default=41)
    args = ap.parse_args()
    whs = args.wh or [str(Path(sys.executable).parent / "wh")]
    cmds: dict[str, list[str]] = {}
    for wh in whs:
        py = Path(wh).parent / "python"
        cmds[f"{py} -c pass"] = [str(py), "-c", "pass"]
        cmds[f"{wh} --version"] = [wh, "--version"]
        cmds[f"{wh} --help"] = [wh, "--help"]
        for sub in ("stage", "doctor"):  # a subcommand's start-up (goal of issue 31: <= 0.1 s)
            cmds[f"{wh} {sub} --help"] = [wh, sub, "--help"]
    cmds[f"{sys.executable} -S -c pass (no site)"] = [sys.executable, "-S", "-c", "pass"]
    uv = Path(sys.executable).parent / "uv"
    if uv.exists() or shutil.which("uv"):
        cmds["uv --version"] = [str(uv) if uv.exists() else "uv", "--version"]
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for i in range(args.runs):
        for name in order(list(cmds), i):  # interleaved, the order reversed every other round
            cmd = cmds[name]
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            times[name].append(time.perf_counter() - t)
    load = os.getloadavg()
    print(methodology(None, cold=False, peers="python -c pass, uv --version"))
    print(f"{args.runs} runs each, interleaved; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"on {os.cpu_count()} cores")
    for name, ts in times.items():
        print(f"  {statistics.median(ts) * 1e3:6.1f} ms median, {min(ts) * 1e3:6.1f} ms fastest  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
