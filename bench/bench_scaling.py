"""Scaling benchmark (opt-in: uses the package index): resolve and install time as the closure grows, wh vs uv.

Three fully pinned closures, committed under bench/scaling/ (resolved for CPython 3.11 on manylinux x86_64,
the staging host; run this with such an interpreter): ~10 packages (``closure-10.txt``), ~60 and ~200. Each
is staged once into ``--workdir`` (not timed). Then, per round, alternating which tool goes first:

- resolve, cold: ``wh stage -r PINS --dry-run`` and ``uv pip compile PINS``, each with an empty cache, for
  this interpreter, against the same index (every page and every wheel's metadata fetched);
- install, offline, into a fresh venv (made outside the timing; ``sync`` before and after is timed): ``wh
  install HOUSE --venv V`` and ``uv pip install --offline --no-index --find-links HOUSE/wheels`` with an
  empty uv cache (the box never has a warm one). No bytecode for either.

Prints a table of medians and ranges (min-max) and the wh/uv ratios per size, so the growth is visible.

    python bench/bench_scaling.py                       # all three sizes, 3 rounds
    python bench/bench_scaling.py --sizes 10 60 --rounds 5 --json > scaling.json

The index: $BENCH_INDEX_URL, else pip's stated default, named on every command line; both tools with a clean
pip configuration, uv given --python and --no-config (bench/_fair.py; the methodology line is printed with the
table). uv: --uv, else the one beside this interpreter, else on PATH.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fair import clean_env, index_url, methodology, order, uv_flags  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PINS = {n: REPO / "bench" / "scaling" / f"closure-{n}.txt" for n in (10, 60, 200)}
WH = [sys.executable, "-m", "wheelhouse"]


def _uv(explicit: str | None) -> str | None:
    beside = Path(sys.executable).parent / "uv"
    return explicit or (str(beside) if beside.exists() else None) or shutil.which("uv")


def _run(cmd: list[str], **kw) -> float:
    subprocess.run(["sync"], check=False)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    subprocess.run(["sync"], check=False)  # the writes are part of the work
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd[:6])} ...\n{proc.stderr[-1500:]}")
    return dt


def stage_once(n: int, work: Path, index: str) -> Path:
    house = work / f"house-{n}"
    if not (house / "pylock.toml").is_file():
        print(f"[{n}] staging {PINS[n].name} once into {house} ...", file=sys.stderr, flush=True)
        subprocess.run([*WH, "-q", "stage", "-r", str(PINS[n]), "--index-url", index, "-o", str(house),
                        "--cache-dir", str(work / "stage-cache"), "--no-bootstrap"], check=True, env=clean_env())
    return house


def _venv(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def _scratch(work: Path, name: str) -> Path:
    path = work / name
    shutil.rmtree(path, ignore_errors=True)
    return path


def make_tools(n: int, house: Path, work: Path, index: str, uv: str) -> dict:
    pins = PINS[n]
    env = clean_env()

    def wh_resolve() -> float:
        cache = _scratch(work, "wh-resolve-cache")
        return _run([*WH, "-q", "stage", "-r", str(pins), "--index-url", index, "--dry-run", "--json",
                     "--no-bootstrap", "--cache-dir", str(cache)], cwd=work,
                    env={**env, "WH_CACHE_DIR": str(_scratch(work, "wh-home"))})

    def uv_resolve() -> float:
        cache = _scratch(work, "uv-cache")
        return _run([uv, "pip", "compile", str(pins), *uv_flags(sys.executable), "--index-url", index,
                     "--no-header", "-q", "-o", os.devnull], env={**env, "UV_CACHE_DIR": str(cache)}, cwd=work)

    def wh_install() -> float:
        py = _venv(work / "venv-wh")
        return _run([*WH, "-q", "install", str(house), "--venv", str(py.parent.parent), "--no-links"], cwd=work, env=env)

    def uv_install() -> float:
        py = _venv(work / "venv-uv")
        cache = _scratch(work, "uv-cache")
        return _run([uv, "pip", "install", "--offline", "--no-index", "--find-links", str(house / "wheels"),
                     "--no-deps", "-q", *uv_flags(py), "-r", str(pins)],
                    env={**env, "UV_CACHE_DIR": str(cache)}, cwd=work)

    return {"resolve wh": wh_resolve, "resolve uv": uv_resolve, "install wh": wh_install, "install uv": uv_install}


def _stats(ts: list[float]) -> dict:
    return {"median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts), "runs": ts}


def bench_size(n: int, rounds: int, work: Path, index: str, uv: str) -> dict:
    house = stage_once(n, work, index)
    count = sum(1 for line in PINS[n].read_text().splitlines() if line.strip() and not line.startswith("#"))
    size = sum(p.stat().st_size for p in (house / "wheels").glob("*.whl"))
    tools = make_tools(n, house, work, index, uv)
    runs: dict[str, list[float]] = {t: [] for t in tools}
    for i in range(rounds):
        for pair in (("resolve wh", "resolve uv"), ("install wh", "install uv")):
            for tool in order(list(pair), i):
                dt = tools[tool]()
                runs[tool].append(dt)
                print(f"[{n}] round {i + 1} {tool:10s} {dt:6.2f} s", file=sys.stderr, flush=True)
    shutil.rmtree(work / "venv-wh", ignore_errors=True)
    shutil.rmtree(work / "venv-uv", ignore_errors=True)
    stats = {t: _stats(ts) for t, ts in runs.items()}
    return {"size": n, "packages": count, "bytes": size, "tools": stats,
            "resolve_ratio": stats["resolve wh"]["median_s"] / stats["resolve uv"]["median_s"],
            "install_ratio": stats["install wh"]["median_s"] / stats["install uv"]["median_s"]}


def table(results: list[dict]) -> str:
    def cell(s: dict) -> str:
        return f"{s['median_s']:.2f} ({s['min_s']:.2f}-{s['max_s']:.2f})"

    lines = ["| closure | resolve wh | resolve uv | wh/uv | install wh | install uv | wh/uv |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        t = r["tools"]
        lines.append(f"| {r['packages']} packages, {r['bytes'] / 1e6:.0f} MB | {cell(t['resolve wh'])} | "
                     f"{cell(t['resolve uv'])} | {r['resolve_ratio']:.2f}x | {cell(t['install wh'])} | "
                     f"{cell(t['install uv'])} | {r['install_ratio']:.2f}x |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", type=int, choices=sorted(PINS), default=sorted(PINS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--uv", default=None, help="uv executable")
    ap.add_argument("--workdir", default="/work/bench-data/scaling" if Path("/work/bench-data").is_dir() else None,
                    help="where the staged wheelhouses are kept (reused by the next run) and the venvs go")
    ap.add_argument("--json", action="store_true", help="results as JSON on stdout")
    args = ap.parse_args()
    uv = _uv(args.uv)
    if uv is None:
        print("needs uv (--uv PATH)", file=sys.stderr)
        return 2
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="wh-bench-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    index = index_url()
    load = os.getloadavg()
    version = subprocess.run([uv, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores; {version}",
          file=sys.stderr)
    results = [bench_size(n, args.rounds, work, index, uv) for n in args.sizes]
    print(f"\n{methodology(index, peers='uv')}", file=sys.stderr)
    print(f"medians in seconds (min-max), {args.rounds} rounds, cold resolves, empty uv cache:", file=sys.stderr)
    print(table(results), file=sys.stderr)
    if args.json:
        json.dump({"load_at_start": load, "uv": version, "rounds": args.rounds, "sizes": results}, sys.stdout, indent=2)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
