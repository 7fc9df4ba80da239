"""Time the stack check's file digests (``stack:files``): the first run (hash everything) and the re-run (an
unchanged tree: one stat per file against the digest cache), on a synthetic site folder shaped like a serving
image (default: 197 distributions, 49,208 files, as the stock H200 image; ``--mb`` of them in 8 MiB files).

Per round, in order as given then reversed (``_fair.order``), each variant runs in a fresh process:

- ``first jobs=N``: an empty digest cache, every file hashed with N jobs (MB/s says whether hashing scales with
  cores: compare jobs=1 with jobs=2 and more);
- ``rerun jobs=N``: the cache the first run wrote, nothing changed: what a re-run of the doctor pays here
  (reading the RECORDs, the cache, a stat per file);
- with ``--baseline FILE`` (another ``install/digests.py``, e.g. ``git show abbc6ac:wheelhouse/install/digests.py``),
  the same for it: a paired before/after in one run.

Wall seconds, CPU seconds (this process and its hash workers) and the load average; medians and ranges.
The files are in the page cache after they are written (a warm read: CPU-bound, as the doctor's re-runs are;
a cold first read of a real image adds the disk). Usage::

    python bench/bench_stack_files.py [--files 49208] [--dists 197] [--mb 1200] [--jobs 1,2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _fair import load, order  # noqa: E402

_CHILD = r"""
import glob, importlib.util, json, os, sys, time
sys.path.insert(0, sys.argv[1])
site, jobs, module = sys.argv[2], int(sys.argv[3]), sys.argv[4]
if module == "-":
    from wheelhouse.install import digests as D
else:
    import wheelhouse.install.digests  # its package, for the relative imports of the baseline copy
    spec = importlib.util.spec_from_file_location("wheelhouse.install._baseline_digests", module)
    D = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(D)
from wheelhouse.recordfile import read_record
c0, t0 = time.process_time(), time.perf_counter()
rows = []
for info in sorted(glob.glob(os.path.join(site, "*.dist-info"))):
    with open(os.path.join(info, "RECORD"), encoding="utf-8", errors="surrogateescape") as f:
        rows += [(site, rel) for rel, digest, _ in read_record(f.read()) if digest]
d = D.FileDigests(jobs=jobs)
states = d.states(rows)
d.save()
wall = time.perf_counter() - t0
ch = os.times()
print(json.dumps({"wall": wall, "cpu": time.process_time() - c0, "workers_cpu": ch.children_user + ch.children_system,
                  "files": len(rows), "hashed": d.hashed, "bytes": d.hashed_bytes,
                  "missing": sum(s is None for s in states)}))
"""


def build(site: Path, dists: int, files: int, mb: int) -> int:
    """Write ``dists`` distributions with ``files`` files in all (``mb`` MB of them in 8 MiB files); their bytes."""
    rnd = random.Random(1)
    per = max(1, files // dists)
    big = max(1, mb // 8)
    big_every = max(1, files // big) if mb else 0
    total, k = 0, 0
    for i in range(dists):
        name = f"dist{i:03d}"
        info = site / f"{name}-1.0.dist-info"
        info.mkdir(parents=True)
        rows = []
        for j in range(per):
            k += 1
            rel = f"{name}/sub{j % 17}/mod{j}.py" if j % 3 else f"{name}/data/file{j}.dat"
            size = (8 << 20) if big_every and k % big_every == 0 else rnd.randint(200, 6000)
            body = rnd.randbytes(size)
            path = site / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
            total += size
            digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
            rows.append(f"{rel},sha256={digest},{size}")
        rows.append(f"{name}-1.0.dist-info/RECORD,,")
        (info / "RECORD").write_text("\n".join(rows) + "\n")
    return total


def _run(site: Path, jobs: int, module: str, cache: Path) -> dict:
    env = {**os.environ, "WH_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(ROOT), str(site), str(jobs), module],
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=49208)
    ap.add_argument("--dists", type=int, default=197)
    ap.add_argument("--mb", type=int, default=1200, help="MB of the files in 8 MiB files (the rest are small)")
    ap.add_argument("--jobs", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", help="another install/digests.py to time the same way (before/after)")
    ap.add_argument("--keep", help="build the site folder here and keep it (default: a temporary folder)")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="wh-bench-stack-"))
    site = work / "site-packages"
    if not site.is_dir():
        size = build(site, args.dists, args.files, args.mb)
        print(f"built {site}: {args.files} files, {size / 1e6:.0f} MB", flush=True)
    jobs = [int(j) for j in args.jobs.split(",")]
    variants = [(f"{'after' if m == '-' else 'before'} jobs={j}", j, m) for m in ["-", *([args.baseline] if args.baseline
                                                                                      else [])] for j in jobs]
    first: dict[str, list[dict]] = {v[0]: [] for v in variants}
    rerun: dict[str, list[dict]] = {v[0]: [] for v in variants}
    for r in range(args.rounds):
        for name, j, module in [v for n in order([v[0] for v in variants], r) for v in variants if v[0] == n]:
            cache = work / "cache" / name.replace(" ", "_").replace("=", "")
            shutil.rmtree(cache, ignore_errors=True)
            first[name].append(_run(site, j, module, cache))
            rerun[name].append(_run(site, j, module, cache))
            f, a = first[name][-1], rerun[name][-1]
            print(f"round {r + 1} {name:<16} first {f['wall']:6.2f} s ({f['bytes'] / 1e6 / f['wall']:5.0f} MB/s, cpu "
                  f"{f['cpu']:.2f} + workers {f['workers_cpu']:.2f})  rerun {a['wall']:5.2f} s (cpu {a['cpu']:.2f}, "
                  f"hashed {a['hashed']})  {load()}", flush=True)
            assert f["missing"] == 0 and a["hashed"] == 0, (f, a)

    def med(xs: list[float]) -> str:
        return f"{statistics.median(xs):6.2f} ({min(xs):.2f}-{max(xs):.2f})"

    print(f"\nmedians (range) over {args.rounds} rounds, seconds; {os.cpu_count()} CPUs; load at the end {load()}")
    for name, _, _ in variants:
        fs, rs = first[name], rerun[name]
        print(f"{name:<16} first {med([f['wall'] for f in fs])}  {statistics.median(f['bytes'] / 1e6 / f['wall'] for f in fs):5.0f}"
              f" MB/s   rerun {med([x['wall'] for x in rs])}  cpu {med([x['cpu'] for x in rs])}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
