"""Time `wh doctor --json` re-runs with nothing changed on a venv shaped like the box's stock image (default: 197
distributions, 49,644 RECORD rows, 1.4 GB, written directly with ``bench_stack_files.build``), this checkout against
another commit's ``wheelhouse/`` (``--baseline``), paired: per round both, in order as given then reversed.

Each variant has its own warm caches (two runs first: digests, verdicts, byte code). Per run: wall seconds, and the
CPU of wh's own process (its threads; not the probes or hash workers it starts, which run in other processes).
The verdicts of the two variants' last runs are compared (evidence aside the "N hashed this run" count). Usage::

    python bench/bench_doctor_rerun.py --baseline 317b41c [--rounds 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _fair import load, order  # noqa: E402
from bench_stack_files import build  # noqa: E402

# wh's own process: run its CLI, then print this process's CPU (all its threads, none of its children).
_CHILD = r"""
import atexit, resource, runpy, sys, time
t0 = time.perf_counter()
def done():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    sys.stderr.write("WH_SELF %.3f %.3f\n" % (time.perf_counter() - t0, ru.ru_utime + ru.ru_stime))
atexit.register(done)
sys.argv = ["wh", *sys.argv[1:]]
runpy.run_module("wheelhouse", run_name="__main__", alter_sys=True)
"""


def make_venv(folder: Path, dists: int, files: int, mb: int) -> Path:
    """A venv whose site-packages holds ``dists`` distributions (METADATA with requirements, INSTALLER pip,
    RECORD); its python."""
    py = folder / "bin" / "python"
    if py.exists():
        return py
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next(folder.glob("lib/python*/site-packages"))
    size = build(site, dists, files, mb)
    for info in site.glob("dist*.dist-info"):
        name = info.name.split("-")[0]
        own = {"METADATA": metadata(name), "INSTALLER": "pip\n", "top_level.txt": name + "\n"}
        for file, text in own.items():
            (info / file).write_text(text)
        with open(info / "RECORD", "a") as fh:
            fh.writelines(f"{info.name}/{file},,\n" for file in own)
    print(f"built {folder}: {dists} distributions, {files} files, {size / 1e6:.0f} MB", flush=True)
    return py


def metadata(name: str) -> str:
    """METADATA with requirements as a real stack has them (the deps check judges them): a few distributions
    before it, one with a marker that applies nowhere, one behind an extra."""
    i = int(name[4:])
    reqs = [f"dist{j:03d}>=1.0" for j in range(max(0, i - 3), i)]
    reqs += [f'dist{i:03d}-missing; python_version < "3"', f'dist{(i + 1) % 197:03d}[x]; extra == "test"']
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in reqs)


def run(tree: Path, py: Path, cache: Path) -> tuple[float, float, dict]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # byte code, as installed
    env.update(PYTHONPATH=str(tree), WH_CACHE_DIR=str(cache))
    proc = subprocess.run([sys.executable, "-c", _CHILD, "doctor", "--python", str(py), "--json"], env=env,
                          capture_output=True, text=True, cwd=tempfile.gettempdir())
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("WH_SELF ")][-1].split()
    return float(line[1]), float(line[2]), json.loads(proc.stdout)


def verdicts(report: dict) -> list:
    return [(r["id"], r["verdict"], re.sub(r"\d+ hashed this run", "N hashed this run", r["evidence"]))
            for r in report["results"]] + [(d["name"], d["files_sha256"]) for d in report["facts"]["installed"]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dists", type=int, default=197)
    ap.add_argument("--files", type=int, default=49644)
    ap.add_argument("--mb", type=int, default=1400, help="MB of the files in 8 MiB files (the rest are small)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", help="a commit whose wheelhouse/ and doctor/ are timed the same way")
    ap.add_argument("--keep", help="build the venv and caches here and keep them (default: a temporary folder)")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="wh-bench-doctor-rerun-"))
    py = make_venv(work / "venv", args.dists, args.files, args.mb)
    # Both variants run from a copy of their wheelhouse/ and doctor/ on PYTHONPATH (which the probes inherit):
    # the checkout's own folder would add its wh.egg-info to the distributions the target interpreter sees.
    here = work / "this-checkout"
    shutil.rmtree(here, ignore_errors=True)
    for part in ("wheelhouse", "doctor"):
        shutil.copytree(ROOT / part, here / part, ignore=shutil.ignore_patterns("__pycache__"))
    trees = {"this checkout": here}
    if args.baseline:
        base = work / f"baseline-{args.baseline}"
        if not base.is_dir():
            base.mkdir(parents=True)
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline, "wheelhouse", "doctor"],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        trees[f"baseline {args.baseline}"] = base
    caches = {name: work / "cache" / re.sub(r"\W+", "_", name) for name in trees}
    last = {}
    for name, tree in trees.items():  # warm: digests hashed, verdicts stored, byte code written
        for _ in range(2):
            run(tree, py, caches[name])
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    for r in range(args.rounds):
        for name in order(list(trees), r):
            wall, cpu, last[name] = run(trees[name], py, caches[name])
            times[name].append((wall, cpu))
            print(f"round {r + 1} {name:<24} wall {wall:5.2f} s  wh CPU {cpu:5.2f} s  {load()}", flush=True)

    def med(xs: list[float]) -> str:
        return f"{statistics.median(xs):5.2f} s ({min(xs):.2f}-{max(xs):.2f})"

    print(f"\nre-run, nothing changed: medians (range) over {args.rounds} paired rounds; {load()}")
    for name in trees:
        print(f"{name:<24} wall {med([w for w, _ in times[name]])}  wh CPU {med([c for _, c in times[name]])}")
    if len(trees) == 2:
        mine, base = (times[name] for name in trees)
        for what, i in (("wall", 0), ("wh CPU", 1)):
            ratios = [m[i] / b[i] for m, b in zip(mine, base)]
            print(f"{what}: this checkout / baseline, per pair: median {statistics.median(ratios):.2f}x "
                  f"({min(ratios):.2f}-{max(ratios):.2f})")
        a, b = (verdicts(rep) for rep in last.values())
        print("verdicts and files_sha256: " + ("identical" if a == b else f"DIFFER: {[x for x in a if x not in b]}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
