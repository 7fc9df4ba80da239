"""Fetch benchmark (opt-in: downloads >= 1 GB from the package index): `wh stage` vs `pip download`.

Both tools get the SAME fully pinned set (the closure of --roots, resolved once
by wh for the target), start from empty caches, and download for a cp312
manylinux_2_35 x86_64 target. Prints each run, the medians and the ratio
pip/wh (the goal is >= 2x), and whether both fetched the same files.

    python bench/bench_fetch.py                      # default roots: four big NVIDIA CUDA 13 wheels
    python bench/bench_fetch.py --repeat 3 --roots "torch==2.11.*"
    python bench/bench_fetch.py --json > fetch.json

One index for both: $BENCH_INDEX_URL, else pip's configured index, else pip's default;
pip runs --isolated so its config (extra indexes, global constraints) does not change its work.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_ROOTS = ["nvidia-cublas==13.1.*", "nvidia-cudnn-cu13==9.19.*", "nvidia-cufft==12.0.*", "nvidia-cusolver==12.0.*"]
TARGET = ["--python-version", "3.12", "--platform", "manylinux_2_35_x86_64"]
WH = [sys.executable, "-m", "wheelhouse"]


def _index() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from wheelhouse.index import default_index_url

    return os.environ.get("BENCH_INDEX_URL") or default_index_url()


def _pins(roots: list[str], scratch: Path, index: str) -> list[dict]:
    out = subprocess.run(
        [*WH, "stage", *roots, *TARGET, "--index-url", index, "--dry-run", "--json", "--no-bootstrap", "--cache-dir", str(scratch / "resolve-cache")],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout)["packages"]


def _run_wh(pins_file: Path, work: Path, jobs: int, index: str) -> tuple[float, set[str]]:
    out, cache = work / "wh-out", work / "wh-cache"
    t0 = time.perf_counter()
    subprocess.run([*WH, "-q", "stage", "-r", str(pins_file), *TARGET, "--index-url", index, "-o", str(out), "--cache-dir", str(cache),
                    "--no-bootstrap", "--jobs", str(jobs)], check=True)
    dt = time.perf_counter() - t0
    files = {p.name for p in (out / "wheels").iterdir()}
    shutil.rmtree(out)
    shutil.rmtree(cache)
    return dt, files


def _pip_platforms() -> list[str]:
    """Every platform tag a glibc 2.35 x86_64 interpreter accepts. pip's --platform takes the
    tag literally (the reference deployment's trap: manylinux_2_35 alone rejects a manylinux_2_27 wheel), so
    pip is given them all, as wh computes them."""
    from wheelhouse.target import target_from_flags

    out = []
    for p in target_from_flags("3.12", ["manylinux_2_35_x86_64"]).platforms:
        out += ["--platform", p]
    return out


def _run_pip(pins_file: Path, work: Path, index: str) -> tuple[float, set[str]]:
    out = work / "pip-out"
    t0 = time.perf_counter()
    # --isolated: no pip config/env (extra indexes, global constraints), the same single index as wh.
    subprocess.run([sys.executable, "-m", "pip", "--isolated", "download", "-q", "--no-cache-dir",
                    "--disable-pip-version-check", "--index-url", index,
                    "--progress-bar", "off", "--only-binary=:all:", *_pip_platforms(),
                    "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--no-deps",
                    "-r", str(pins_file), "-d", str(out)], check=True)
    dt = time.perf_counter() - t0
    files = {p.name for p in out.iterdir()}
    shutil.rmtree(out)
    return dt, files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--roots", nargs="+", default=DEFAULT_ROOTS, help="requirements whose closure is fetched")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--workdir", default=None, help="scratch folder (needs ~2x the closure size free)")
    ap.add_argument("--json", action="store_true", help="results as JSON on stdout")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="wh-bench-fetch-", dir=args.workdir))
    try:
        index = _index()
        pins = _pins(args.roots, work, index)
        total = sum(p["size"] or 0 for p in pins)
        pins_file = work / "pins.txt"
        pins_file.write_text("".join(f"{p['name']}=={p['version']}\n" for p in pins))
        print(f"closure: {len(pins)} wheels, {total / 1e9:.2f} GB (roots: {' '.join(args.roots)})", file=sys.stderr)
        runs = {"wh": [], "pip": []}
        same = True
        for i in range(args.repeat):
            # Alternate the order so neither tool always gets the warmer network path.
            order = ("wh", "pip") if i % 2 == 0 else ("pip", "wh")
            got = {}
            for tool in order:
                dt, files = _run_wh(pins_file, work, args.jobs, index) if tool == "wh" else _run_pip(pins_file, work, index)
                runs[tool].append(dt)
                got[tool] = files
                print(f"run {i + 1} {tool:3s} {dt:7.1f} s  {total / dt / 1e6:7.1f} MB/s  ({len(files)} files)", file=sys.stderr)
            same = same and got["wh"] == got["pip"]
        med = {k: statistics.median(v) for k, v in runs.items()}
        ratio = med["pip"] / med["wh"]
        print(f"median: wh {med['wh']:.1f} s, pip download {med['pip']:.1f} s; pip/wh = {ratio:.2f}x "
              f"(goal >= 2x); same files: {same}", file=sys.stderr)
        if args.json:
            json.dump({"closure_bytes": total, "wheels": len(pins), "roots": args.roots, "runs": runs, "median": med,
                       "ratio_pip_over_wh": ratio, "same_files": same, "jobs": args.jobs}, sys.stdout, indent=2)
            print()
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
