"""Fetch benchmark (opt-in: downloads ~2.4 GB from the package index): wh's downloads vs the plain-HTTP floor.

Two pinned sets, each resolved once by wh for a cp312 manylinux_2_35 x86_64 target:

- ``nvidia``: four big NVIDIA CUDA 13 wheels and their closure (7 wheels, ~1.5 GB);
- ``serving``: the closure of bench/requirements.txt (~70 wheels, ~0.9 GB), the install benchmark's set;
- ``pins`` (with ``--pins FILE``): a fully pinned requirements file staged as it is, for this host (no target
  flags: the file was written for one), e.g. /work/bench-data/pins-900.txt, the 71-wheel set of issue 31's
  stage goal: ``wh stage -r FILE -o OUT --no-bootstrap --cache-dir FRESH`` against curl of the same URLs.

Each round, in alternating order, from empty caches and after ``sync``:

- ``wh fetch``: the stage's download step alone (``wheelhouse.fetch.fetch_all``, the code ``wh stage`` runs,
  8 jobs, big wheels as parallel ranges, every file verified, then hardlinked from the cache into the
  wheelhouse);
- ``wh stage``: the whole ``wh stage -r PINS`` (index pages and metadata, then the downloads);
- ``curl whole``: one curl, 8 whole files at a time (``--parallel --parallel-max 8``, HTTP/1.1);
- ``curl ranged``: one curl, every file cut into 8 ranges, 8 ranges at a time (parts left unjoined);
- ``pip download`` with ``--pip`` (slow; off by default);
- ``wh restage`` with ``--only "wh restage"``: the same ``wh stage`` again into its ``-o`` with its caches warm
  (the first, cold run untimed), what a restage costs.

The floor is the faster curl. Prints each run (with the CPU seconds its processes used and the load
average), medians, ranges (min-max), MB/s and the ratios
wh fetch / floor and wh stage / floor (goal: <= 1.0), and ``wh stage - wh fetch``: the time the stage spends
before and around its downloads (index pages, metadata, writing the lock).

    python bench/bench_fetch.py                         # both sets, 3 rounds
    python bench/bench_fetch.py --sets nvidia --rounds 5 --json > fetch.json
    git archive HEAD~3 wheelhouse | tar -x -C /tmp/before
    python bench/bench_fetch.py --only "wh fetch" --baseline /tmp/before --rounds 3   # before/after, same rounds
    python bench/bench_fetch.py --sets pins --pins /work/bench-data/pins-900.txt --only "wh stage" --rounds 5

One index for all, named on every command line: $BENCH_INDEX_URL, else pip's stated default; every tool with a
clean pip configuration and empty caches each run (bench/_fair.py; the methodology line is printed with the
table). Note what each row times: ``wh fetch`` is the download step inside the process, the curls whole
commands; ``wh stage`` (resolve + download + write) / curl is the whole command's ratio. Scratch space (about
3x the set) goes under --workdir (default /work/bench-data/fetch when it exists, else the temp folder).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fair import clean_env, index_url, methodology, order  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SETS = {
    "nvidia": ["nvidia-cublas==13.1.*", "nvidia-cudnn-cu13==9.19.*", "nvidia-cufft==12.0.*", "nvidia-cusolver==12.0.*"],
    "serving": ["-r", str(REPO / "bench" / "requirements.txt")],
}
TARGET = ["--python-version", "3.12", "--platform", "manylinux_2_35_x86_64"]
WH = [sys.executable, "-m", "wheelhouse"]
JOBS = 8

# The stage's own download step, timed inside the process (interpreter start-up excluded).
_FETCH = """
import json, sys, time
from pathlib import Path
from wheelhouse.fetch import FetchItem, fetch_all
pins = json.load(open(sys.argv[1]))
items = [FetchItem(p["url"], p["filename"], p["sha256"], p["size"]) for p in pins]
t = time.perf_counter()
fetch_all(items, Path(sys.argv[2]), cache=Path(sys.argv[3]), jobs=int(sys.argv[4]))
print(time.perf_counter() - t)
"""


def _target(name: str) -> list[str]:
    return [] if name == "pins" else TARGET  # a pins file is staged for the host it was written for


def _pins(name: str, scratch: Path, index: str) -> list[dict]:
    out = subprocess.run([*WH, "stage", *SETS[name], *_target(name), "--index-url", index, "--dry-run", "--json",
                          "--no-bootstrap", "--cache-dir", str(scratch / "resolve-cache")],
                         capture_output=True, text=True, check=True, env=clean_env(WH_CACHE_DIR=str(scratch / "home")))
    return json.loads(out.stdout)["packages"]


def _fresh(*paths: Path) -> None:
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)
    subprocess.run(["sync"], check=False)


CPU: dict[str, list[float]] = {}  # tool -> user+system CPU seconds of each run (the child processes')
_last_cpu = [0.0]


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _timed(cmd: list[str], **kw) -> float:
    c0, t0 = _children_cpu(), time.perf_counter()
    kw.setdefault("env", clean_env())
    subprocess.run(cmd, check=True, **kw)
    dt = time.perf_counter() - t0
    _last_cpu[0] = _children_cpu() - c0
    return dt


def run_wh_fetch(pins_json: Path, work: Path, index: str, tree: Path = REPO) -> float:
    """``tree``: the source tree whose ``wheelhouse`` runs (``--baseline``: an older commit's)."""
    out, cache = work / "fetch-out", work / "fetch-cache"
    _fresh(out, cache)
    c0 = _children_cpu()
    r = subprocess.run([sys.executable, "-c", _FETCH, str(pins_json), str(out), str(cache), str(JOBS)],
                       capture_output=True, text=True, check=True, cwd=tree, env=clean_env())
    _last_cpu[0] = _children_cpu() - c0
    _fresh(out, cache)
    return float(r.stdout.strip().splitlines()[-1])


def _stage_cmd(pins_txt: Path, work: Path, index: str, tree: Path | None, target, name: str):
    out, cache = work / f"{name}-out", work / f"{name}-cache"
    _fresh(out, cache, work / f"{name}-home")
    env = clean_env(WH_CACHE_DIR=str(work / f"{name}-home"), **({"PYTHONPATH": str(tree)} if tree else {}))
    return [*WH, "-q", "stage", "-r", str(pins_txt), *target, "--index-url", index, "-o", str(out),
            "--cache-dir", str(cache), "--no-bootstrap", "--jobs", str(JOBS)], env, (out, cache, work / f"{name}-home")


def run_wh_stage(pins_txt: Path, work: Path, index: str, tree: Path | None = None, target=TARGET) -> float:
    """``tree``: the source tree whose ``wheelhouse`` runs (``--baseline``), else the installed one."""
    cmd, env, paths = _stage_cmd(pins_txt, work, index, tree, target, "stage")
    dt = _timed(cmd, cwd=work, env=env)
    _fresh(*paths)
    return dt


def run_wh_restage(pins_txt: Path, work: Path, index: str, tree: Path | None = None, target=TARGET) -> float:
    """The same ``wh stage`` again into its ``-o``, its caches warm (the first run untimed): a restage."""
    cmd, env, paths = _stage_cmd(pins_txt, work, index, tree, target, "restage")
    subprocess.run(cmd, check=True, cwd=work, env=env)
    dt = _timed(cmd, cwd=work, env=env)
    _fresh(*paths)
    return dt


def _curl(config: str, work: Path) -> float:
    out = work / "curl-out"
    _fresh(out)
    out.mkdir()
    cfg = work / "curl.cfg"
    cfg.write_text(config.removeprefix("next\n"))
    with open(work / "curl.err", "wb") as err:  # curl's parallel progress meter ignores --silent
        try:
            dt = _timed(["curl", "--parallel", "--parallel-max", str(JOBS), "-K", str(cfg)], cwd=out, stderr=err)
        except subprocess.CalledProcessError:
            sys.stderr.write((work / "curl.err").read_text(errors="replace")[-2000:])
            raise
    _fresh(out)
    return dt


# Each transfer its own group (curl's `next`): range and output then belong to that URL alone.
_EACH = "next\nhttp1.1\nsilent\nshow-error\nfail\n"


def run_curl_whole(pins: list[dict], work: Path) -> float:
    return _curl("".join(f'{_EACH}url = "{p["url"]}"\noutput = "{p["filename"]}"\n' for p in pins), work)


def run_curl_ranged(pins: list[dict], work: Path) -> float:
    lines = []
    for p in pins:
        size, step = p["size"], -(-p["size"] // JOBS)
        for i, start in enumerate(range(0, size, step)):
            lines.append(f'{_EACH}url = "{p["url"]}"\nrange = "{start}-{min(start + step, size) - 1}"\n'
                         f'output = "{p["filename"]}.part{i}"\n')
    return _curl("".join(lines), work)


def run_pip(pins_txt: Path, work: Path, index: str) -> float:
    sys.path.insert(0, str(REPO))
    from wheelhouse.target import target_from_flags

    out = work / "pip-out"
    _fresh(out)
    platforms = [a for p in target_from_flags("3.12", ["manylinux_2_35_x86_64"]).platforms for a in ("--platform", p)]
    dt = _timed([sys.executable, "-m", "pip", "--isolated", "download", "-q", "--no-cache-dir",
                 "--disable-pip-version-check", "--index-url", index, "--progress-bar", "off", "--only-binary=:all:",
                 *platforms, "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--no-deps",
                 "-r", str(pins_txt), "-d", str(out)])
    _fresh(out)
    return dt


def _summary(runs: dict[str, list[float]], total: int) -> dict:
    out = {}
    for tool, ts in runs.items():
        med = statistics.median(ts)
        out[tool] = {"median_s": med, "min_s": min(ts), "max_s": max(ts), "mb_per_s": total / med / 1e6, "runs": ts}
    return out


def bench_set(name: str, rounds: int, work: Path, index: str, with_pip: bool,
              only: list[str] | None = None, baseline: Path | None = None) -> dict:
    pins = _pins(name, work, index)
    total = sum(p["size"] or 0 for p in pins)
    pins_json, pins_txt = work / f"{name}.json", work / f"{name}.txt"
    pins_json.write_text(json.dumps(pins))
    if name == "pins":  # staged as given (its --hash lines too)
        pins_txt.write_text(Path(SETS[name][1]).read_text())
    else:
        pins_txt.write_text("".join(f"{p['name']}=={p['version']}\n" for p in pins))
    target = _target(name)
    print(f"[{name}] {len(pins)} wheels, {total / 1e6:.0f} MB", file=sys.stderr)
    tools = {
        "wh fetch": lambda: run_wh_fetch(pins_json, work, index),
        "wh stage": lambda: run_wh_stage(pins_txt, work, index, target=target),
        "curl whole": lambda: run_curl_whole(pins, work),
        "curl ranged": lambda: run_curl_ranged(pins, work),
    }
    if only and "wh restage" in only:  # opt-in: each run is a whole cold stage first
        tools["wh restage"] = lambda: run_wh_restage(pins_txt, work, index, target=target)
    if baseline is not None:
        tools["wh fetch before"] = lambda: run_wh_fetch(pins_json, work, index, baseline)
        tools["wh stage before"] = lambda: run_wh_stage(pins_txt, work, index, baseline, target)
        if "wh restage" in tools:
            tools["wh restage before"] = lambda: run_wh_restage(pins_txt, work, index, baseline, target)
    if with_pip:
        tools["pip download"] = lambda: run_pip(pins_txt, work, index)
    if only:
        keep = {*only, "curl whole", "curl ranged"}
        if baseline is not None:  # the baseline of each wh tool asked for
            keep |= {f"{t} before" for t in only}
        tools = {t: f for t, f in tools.items() if t in keep}  # the floor (and a baseline) always run
    runs: dict[str, list[float]] = {t: [] for t in tools}
    cpu: dict[str, list[float]] = {t: [] for t in tools}
    names = list(tools)
    for i in range(rounds):
        for tool in order(names, i):  # alternate: no tool always gets the warmer path
            dt = tools[tool]()
            runs[tool].append(dt)
            cpu[tool].append(_last_cpu[0])
            print(f"[{name}] round {i + 1} {tool:15s} {dt:6.2f} s {total / dt / 1e6:7.1f} MB/s  "
                  f"cpu {_last_cpu[0]:5.2f} s  load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    summary = _summary(runs, total)
    for tool, ts in cpu.items():
        summary[tool]["cpu_median_s"] = statistics.median(ts)
    floor_tool = min(("curl whole", "curl ranged"), key=lambda t: summary[t]["median_s"])
    floor = summary[floor_tool]["median_s"]
    result = {"set": name, "wheels": len(pins), "bytes": total, "tools": summary, "floor": floor_tool}
    for tool in ("wh fetch", "wh stage", "wh fetch before", "wh stage before"):
        if tool in summary:
            result[f"ratio_{tool.replace(' ', '_')}_over_floor"] = summary[tool]["median_s"] / floor
    if "wh stage" in summary and "wh fetch" in summary:
        result["stage_minus_fetch_s"] = summary["wh stage"]["median_s"] - summary["wh fetch"]["median_s"]
    print(methodology(index, peers="curl (8 whole files / 8 ranges at a time)" + (", pip" if with_pip else ""))
          + "; wh's bytecode compiled before timing", file=sys.stderr)
    print(f"[{name}] {len(pins)} wheels / {total / 1e6:.0f} MB, medians (min-max):", file=sys.stderr)
    for tool, s in summary.items():
        print(f"  {tool:15s} {s['median_s']:6.2f} s ({s['min_s']:.2f}-{s['max_s']:.2f})  {s['mb_per_s']:6.1f} MB/s"
              f"  cpu {s['cpu_median_s']:5.2f} s", file=sys.stderr)
    ratios = ", ".join(f"{k.removeprefix('ratio_').removesuffix('_over_floor').replace('_', ' ')} / floor = {v:.2f}x"
                       for k, v in result.items() if k.startswith("ratio_"))
    if "wh restage" in summary and "wh restage before" in summary:
        result["wh_restage_over_before"] = summary["wh restage"]["median_s"] / summary["wh restage before"]["median_s"]
        ratios += f"; wh restage / wh restage before = {result['wh_restage_over_before']:.2f}x"
    if "wh stage" in summary:  # issue 31's stage goal names the plain 8-way curl of whole files
        result["wh_stage_over_curl_whole"] = summary["wh stage"]["median_s"] / summary["curl whole"]["median_s"]
        ratios += f", wh stage / curl whole = {result['wh_stage_over_curl_whole']:.2f}x"
    print(f"  floor = {floor_tool}; {ratios} (goal: wh fetch <= 1.0, wh stage <= 1.5)"
          + (f"; stage - fetch = {result['stage_minus_fetch_s']:.2f} s" if "stage_minus_fetch_s" in result else ""),
          file=sys.stderr)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", choices=[*sorted(SETS), "pins"], default=["nvidia", "serving"])
    ap.add_argument("--pins", type=Path, metavar="FILE", help="the `pins` set: a fully pinned requirements file")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pip", action="store_true", help="time pip download too (slow)")
    ap.add_argument("--workdir", default="/work/bench-data/fetch" if Path("/work/bench-data").is_dir() else None)
    ap.add_argument("--json", action="store_true", help="results as JSON on stdout")
    ap.add_argument("--only", nargs="+", metavar="TOOL",
                    help="time only these wh tools ('wh fetch', 'wh stage', 'wh restage', and with --baseline their "
                         "'before'); "
                         "the curl floor always runs")
    ap.add_argument("--baseline", type=Path, metavar="TREE",
                    help="also time 'wh fetch before' and 'wh stage before': the wheelhouse package under TREE "
                         "(e.g. `git archive OLD wheelhouse | tar -x -C TREE`), in the same alternating rounds")
    args = ap.parse_args()
    if "pins" in args.sets:
        if args.pins is None or not args.pins.is_file():
            ap.error("--sets pins needs --pins FILE (a fully pinned requirements file)")
        SETS["pins"] = ["-r", str(args.pins.resolve())]
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="wh-bench-fetch-", dir=args.workdir))
    try:
        index = index_url()
        # wh as installed: bytecode compiled (pip compiles a wheel's modules when it installs it); from a checkout
        # under PYTHONDONTWRITEBYTECODE every run would compile wh's source again (~0.85 s of CPU per stage).
        for tree in (REPO, *([args.baseline] if args.baseline else [])):
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(tree) / "wheelhouse")], check=True,
                           capture_output=True)
        load = os.getloadavg()
        print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores",
              file=sys.stderr)
        results = [bench_set(name, args.rounds, work, index, args.pip, args.only, args.baseline) for name in args.sets]
        if args.json:
            json.dump({"jobs": JOBS, "load_at_start": load, "sets": results}, sys.stdout, indent=2)
            print()
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
