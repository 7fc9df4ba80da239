"""Early downloads benchmark: ``wh stage`` with and without them (``WH_EARLY_FETCH``), beside pip and uv,
on a made-up index served on 127.0.0.1 with a remote index's latency. Needs no network: for a
many-core machine without one (the offline H200 box), where the overlap has idle CPUs to use.

The index is the tests' (tests/support/index_fixtures: PEP 691 pages, PEP 658 metadata, ranges).
Every request is answered ``--latency`` s late (default 0.04) and each connection's bodies are sent at
``--rate`` MB/s (default 100). The stack: ``app`` needs ``--big`` wheels of ``--size`` MB each (a
torch-sized dependency, found at once) and a tree of small projects ``--depth`` levels deep with
``--fanout`` children each (what keeps a real resolver reading pages and metadata one level after the
other). Each project has 5 versions.

Each round, in alternating order, from empty caches:

- ``wh early``: ``wh stage app`` with ``WH_EARLY_FETCH=always``;
- ``wh plain``: the same with ``WH_EARLY_FETCH=0``;
- ``pip``: ``pip download app --only-binary :all: --platform ... --python-version 3.12``;
- ``uv``: ``uv pip install --target`` (downloads and unpacks; ``--uv PATH``, else ``uv`` on PATH, else left out).

Prints each run (with the load average), medians, ranges and the ratios to ``wh plain``, pip and uv.

    python bench/bench_early.py --rounds 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))

TARGET = ["--python-version", "3.12", "--platform", "manylinux_2_35_x86_64"]


def _make(folder: Path, big: int, size: int, depth: int, fanout: int) -> list[str]:
    from wheelmaker import make_wheel

    names: list[str] = []
    level = ["t0"]
    tree: dict[str, list[str]] = {}
    for d in range(1, depth + 1):
        nxt = []
        for parent in level:
            kids = [f"{parent}x{i}" for i in range(fanout)] if d < depth else []
            tree[parent] = kids
            nxt += kids
        level = nxt
    bigs = [f"big{i}" for i in range(big)]
    for v in range(1, 6):
        make_wheel(folder, "app", f"1.{v}", requires=[*bigs, "t0"])
        for name, kids in tree.items():
            make_wheel(folder, name, f"1.{v}", requires=kids)
            names.append(name)
    for b in bigs:
        make_wheel(folder, b, "1.0", pad_bytes=size << 20)
    return bigs


def _timed(cmd: list[str], env: dict) -> float:
    began = time.perf_counter()
    run = subprocess.run(cmd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - began
    if run.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed:\n{run.stderr[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency", type=float, default=0.04)
    ap.add_argument("--rate", type=int, default=100, help="MB/s per connection")
    ap.add_argument("--big", type=int, default=4)
    ap.add_argument("--size", type=int, default=200, help="MB per big wheel")
    ap.add_argument("--depth", type=int, default=5)
    ap.add_argument("--fanout", type=int, default=3)
    ap.add_argument("--uv", default=shutil.which("uv"))
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()

    import socketserver

    from index_fixtures import _pyindex

    # (a client that cuts a range or ends its transfers resets the connection: not an error to print)
    socketserver.BaseServer.handle_error = lambda self, request, address: None

    work = Path(tempfile.mkdtemp(prefix="wh-bench-early-", dir=args.workdir))
    made = time.perf_counter()
    bigs = _make(work / "pub", args.big, args.size, args.depth, args.fanout)
    start = _pyindex()
    idx = next(start)(work / "pub", serve_metadata=True)
    idx.delay = args.latency
    for name in idx.files:
        idx.rates[name] = args.rate << 20
    print(f"index: {len(idx.files)} files, {sum(map(len, idx.files.values())) >> 20} MB, {len(bigs)} big; made in "
          f"{time.perf_counter() - made:.1f} s; latency {args.latency * 1000:.0f} ms, {args.rate} MB/s per connection; "
          f"{os.cpu_count()} CPUs", flush=True)

    base = {k: v for k, v in os.environ.items() if k not in ("WH_EARLY_FETCH", "PIP_INDEX_URL")}
    base["PYTHONPATH"] = str(REPO)
    wh = [sys.executable, "-m", "wheelhouse", "stage", "app", "--index-url", idx.url, *TARGET, "--no-bootstrap", "-q"]
    tools = {
        "wh early": lambda d: _timed([*wh, "--cache-dir", str(d / "c"), "-o", str(d / "o")],
                                     {**base, "WH_EARLY_FETCH": "always"}),
        "wh plain": lambda d: _timed([*wh, "--cache-dir", str(d / "c"), "-o", str(d / "o")],
                                     {**base, "WH_EARLY_FETCH": "0"}),
        "pip": lambda d: _timed([sys.executable, "-m", "pip", "download", "app", "-d", str(d / "o"), "--index-url",
                                 idx.url, "--only-binary", ":all:", *TARGET, "--no-cache-dir", "-q",
                                 "--disable-pip-version-check"], base),
    }
    if args.uv:
        tools["uv"] = lambda d: _timed([args.uv, "pip", "install", "app", "--target", str(d / "o"), "--index-url",
                                        idx.url, "--python-version", "3.12", "--python-platform",
                                        "x86_64-manylinux_2_35", "--cache-dir", str(d / "c"), "-q"], base)
    times: dict[str, list[float]] = {t: [] for t in tools}
    names = list(tools)
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            d = work / "run"
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
            subprocess.run(["sync"])
            took = tools[name](d)
            times[name].append(took)
            print(f"round {r + 1} {name:9s} {took:6.2f} s  load {os.getloadavg()[0]:.2f}", flush=True)
    print()
    med = {n: statistics.median(v) for n, v in times.items()}
    for n, v in times.items():
        print(f"{n:9s} median {med[n]:6.2f} s  range {min(v):.2f}-{max(v):.2f}  "
              + "  ".join(f"{med[n] / med[o]:.2f}x {o}" for o in names if o != n))
    idx.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
