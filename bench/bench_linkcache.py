"""One wheelhouse into several fresh venvs in a row, with the extraction cache and without it.

Opt-in (it needs a big wheelhouse: see bench_install.py for staging the issue 14 sets):

    python bench/bench_linkcache.py /work/bench-data/wh-900 --runs 3 --venvs 3

Each round installs the wheelhouse into ``--venvs`` fresh venvs (made outside the timing) with
``--link-cache`` starting from an empty cache, and into as many with ``--no-link-cache``; the
two modes alternate which goes first from round to round. ``sync`` runs before and after every
timing (the writes are part of the install). The first install of the cached mode pays for
populating the cache: the time wh spends adding the entries is measured inside the process too
(CPU of the threads while they link files into the cache, and the summed wall time of those
calls, which overlap the extraction of other wheels; printed as ``populate``), because 2% of an
install is below what medians of a few runs can resolve on a shared machine. Prints each run with its wall and
CPU seconds and the load average, then per position in the row (1st venv, 2nd, ...) the
medians, ranges and the ratio cached / uncached, and the total for the row.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fair import clean_env, methodology  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

# wh's CLI, with the cache-populating calls timed from inside (their threads' CPU, their summed wall time).
_WRAPPER = """
import atexit, sys, threading, time
from wheelhouse.install.wheel import linkcache
_spent = {"cpu": 0.0, "wall": 0.0, "n": 0}
_lock = threading.Lock()
def _timed(real):
    def run(*a, **kw):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return real(*a, **kw)
        finally:
            with _lock:
                _spent["cpu"] += time.thread_time() - c0
                _spent["wall"] += time.perf_counter() - t0
                _spent["n"] += 1
    return run
linkcache.LinkCache.stage = _timed(linkcache.LinkCache.stage)
linkcache.LinkCache.publish = _timed(linkcache.LinkCache.publish)
atexit.register(lambda: _spent["n"] and print(
    f"populate: {_spent['n']} calls, {_spent['wall']:.3f} s wall, {_spent['cpu']:.3f} s cpu", file=sys.stderr))
from wheelhouse.cli import main
main(sys.argv[1:])
"""


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _venv(path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)


def _row(house: Path, mode: str, n: int, work: Path, r: int, out: dict) -> None:
    cache = work / f"cache-{r}-{mode}"
    env = clean_env(WH_CACHE_DIR=str(cache), WH_LINK_CACHE="1" if mode == "cache" else "0")
    venvs = [work / f"venv-{r}-{mode}-{i}" for i in range(n)]
    for v in venvs:
        _venv(v)
    for i, v in enumerate(venvs):
        cmd = [sys.executable, "-c", _WRAPPER, "-q", "install", str(house), "--venv", str(v), "--no-links"]
        subprocess.run(["sync"])
        t, c = time.perf_counter(), _cpu()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        subprocess.run(["sync"])
        dt, dc = time.perf_counter() - t, _cpu() - c
        if proc.returncode != 0:
            print(f"  {mode} venv {i + 1}: FAILED ({proc.returncode}): {proc.stderr[-500:]}", flush=True)
            continue
        pop = re.search(r"populate: .*", proc.stderr)
        out.setdefault((mode, i), []).append((dt, dc))
        if pop and i == 0 and mode == "cache":
            m = re.search(r"([\d.]+) s wall, ([\d.]+) s cpu", pop.group(0))
            out.setdefault("populate", []).append((float(m.group(1)), float(m.group(2))))
        print(f"  run {r + 1} {mode:<8} venv {i + 1}  {dt:7.2f} s  cpu {dc:6.2f} s  load {_load()}"
              + (f"  [{pop.group(0)}]" if pop else ""), flush=True)
    for v in venvs:
        shutil.rmtree(v, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheelhouse", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--venvs", type=int, default=3)
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (same filesystem as the cache)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="wh-bench-linkcache-", dir=args.work))
    print(f"wheelhouse {args.wheelhouse}; {args.runs} rounds of {args.venvs} venvs per mode; load {_load()}",
          flush=True)
    out: dict = {}
    try:
        for r in range(args.runs):
            for mode in (("cache", "off") if r % 2 == 0 else ("off", "cache")):
                _row(args.wheelhouse, mode, args.venvs, work, r, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{methodology(None, cold=False, peers='the same installs without the cache')}")
    print(f"medians (range), seconds; load at the end {_load()}")
    print("| venv | wall, cache | wall, no cache | ratio | CPU, cache | CPU, no cache | ratio |")
    print("|---|---|---|---|---|---|---|")
    totals = {"cache": [], "off": []}
    for i in range(args.venvs):
        a, b = out.get(("cache", i), []), out.get(("off", i), [])
        if not a or not b:
            continue
        wa, wb = [x[0] for x in a], [x[0] for x in b]
        ca, cb = [x[1] for x in a], [x[1] for x in b]
        print(f"| {i + 1} | {_med(wa)} | {_med(wb)} | {statistics.median(wa) / statistics.median(wb):.2f}x "
              f"| {_med(ca)} | {_med(cb)} | {statistics.median(ca) / statistics.median(cb):.2f}x |")
    for mode in totals:
        runs = [sum(out[(mode, i)][r][0] for i in range(args.venvs)) for r in range(args.runs)
                if all(len(out.get((mode, i), [])) > r for i in range(args.venvs))]
        totals[mode] = runs
    if totals["cache"] and totals["off"]:
        print(f"row of {args.venvs}: cache {_med(totals['cache'])}, no cache {_med(totals['off'])}, "
              f"{statistics.median(totals['cache']) / statistics.median(totals['off']):.2f}x")
    if out.get("populate"):
        w, c = [x[0] for x in out["populate"]], [x[1] for x in out["populate"]]
        print(f"populating the cache on the first install: {_med(w)} s wall, {_med(c)} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
