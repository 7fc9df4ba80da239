"""Resolution benchmark: wh vs uv vs pip on real closures, in one run (opt-in: uses the registry).

    python bench/bench_resolve.py                      # vllm, sglang, jupyterlab, apache-airflow; cp312 manylinux_2_35 x86_64
    python bench/bench_resolve.py --runs 5 --requirement 'torch==2.11.0' --requirement jupyterlab
    python bench/bench_resolve.py --json bench-resolve.json
    python bench/bench_resolve.py --runs 3 --skip-pip --modes cold   # cold only: wall and CPU vs uv

For each tool, in alternating runs (wh, uv, pip, wh, uv, ...; the machine's load hits them alike):
``--runs`` cold runs (each with a fresh, empty cache), then ``--runs`` runs of each warm mode on
the cache of the last cold run: ``warm`` (nothing changed: pages younger than their freshness
lifetime are used as they are), ``refresh`` (``--refresh``: every page revalidated, with
conditional requests where the index sends validators) and ``offline`` (``--offline``: the cache
alone, like ``uv pip compile --offline``; pip has neither mode). Prints per mode the medians, the
ranges (min-max), wh's ratio to uv and to pip, and whether wh's pins equal uv's (and pip's) in
every mode. wh runs through its CLI (``wh stage --dry-run --json
--no-bootstrap``). uv is installed with pip into a temporary venv unless ``--uv`` or ``$WH_UV``
names one; pip is the newest, upgraded in that venv. pip runs ``--isolated``, with every manylinux
tag up to ``--platform`` (pip takes ``--platform`` literally).

What each tool is given (bench/_fair.py, printed with the table): the same index on every command
line, a clean pip configuration, uv its interpreter (``--python``), ``--no-config`` and no
interpreter downloads; each cold run empty caches for all (wh's home cache too: nothing is asked of
pip, or seeded, before the timing). wh runs as installed: its modules' bytecode is compiled once
before the timing (``compileall``, as pip does when it installs a wheel); from a checkout under
``PYTHONDONTWRITEBYTECODE`` every run would otherwise compile wh's source again.

Goals: pins identical to uv's in every mode; cold <= 1.0x uv; offline warm <= 2x uv (issue 30).
"""

from __future__ import annotations

import argparse
import json
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

from packaging.utils import canonicalize_name

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fair import clean_env, index_url, methodology, order, uv_flags  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _run(cmd: list[str], env: dict | None = None, timeout: float = 1800) -> tuple[float, subprocess.CompletedProcess]:
    """Wall seconds and the finished process; its CPU seconds (user + sys) in ``_run.cpu``."""
    t0, c0 = time.perf_counter(), _children_cpu()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(**(env or {})), timeout=timeout)
    elapsed = time.perf_counter() - t0
    _run.cpu = _children_cpu() - c0
    if proc.returncode != 0:
        sys.stderr.write(f"$ {' '.join(cmd)}\n{proc.stderr[-4000:]}\n")
        raise SystemExit(f"benchmark command failed (exit {proc.returncode}): {cmd[0]}")
    return elapsed, proc


def _tools_venv(work: Path, uv_given: str | None) -> tuple[str, str]:
    """A temp venv with the current pip (and uv unless given): (uv, python whose pip to time)."""
    venv = work / "tools-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip", *([] if uv_given else ["uv"])], check=True,
                   env=clean_env())
    return uv_given or str(venv / "bin" / "uv"), py


def _newest_if_missing(requirement: str, index_url: str | None) -> str:
    """vllm==X: keep it if X exists on the index, else use the newest release and say so."""
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^;\s]+)", requirement.strip())
    if not m:
        return requirement
    sys.path.insert(0, str(REPO))
    from packaging.version import Version

    from wheelhouse.index import PackageSource

    src = PackageSource([index_url] if index_url else None)
    versions = sorted({Version(f.version) for f in src.files(m.group(1)) if f.is_wheel and not f.yanked})
    if not versions:
        raise SystemExit(f"{m.group(1)} has no wheels on the index")
    if Version(m.group(2)) in versions:
        return requirement
    newest = f"{m.group(1)}=={versions[-1]}"
    print(f"note: {requirement} does not exist on the index; benchmarking {newest} instead", file=sys.stderr)
    return newest


# --- the three tools -----------------------------------------------------------------------------
def wh_cmd(req: str, a, cache: Path, mode: str = "cold") -> list[str]:
    # WH_CACHE_DIR beside --cache-dir: a cold run has wh's home cache empty too
    wh = shutil.which("wh", path=str(Path(sys.executable).parent)) or "wh"
    cmd = ["env", f"WH_CACHE_DIR={cache}-home", wh, "stage", req, "--python-version", a.python_version,
           "--platform", a.platform, "--dry-run", "--json", "--no-bootstrap", "--cache-dir", str(cache),
           "--index-url", a.index_url]
    return cmd + {"refresh": ["--refresh"], "offline": ["--offline"]}.get(mode, [])


def wh_pins(proc) -> dict[str, str]:
    data = json.loads(proc.stdout)
    return {canonicalize_name(p["name"]): p["version"] for p in data["packages"]}


# uv gets its interpreter (uv_flags: --python, the same as -p) and --no-config; clean_env() sets
# UV_PYTHON_DOWNLOADS=never: it never searches for or downloads a CPython while timed.
def uv_cmd(uv: str, req_file: Path, a, cache: Path, mode: str = "cold") -> list[str]:
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(.+)", a.platform)
    plat = f"{m.group(3)}-manylinux_{m.group(1)}_{m.group(2)}" if m else a.platform
    cmd = [uv, "pip", "compile", str(req_file), *uv_flags(sys.executable), "--python-platform", plat,
           "--python-version", a.python_version, "--cache-dir", str(cache), "--no-header", "--no-annotate", "--quiet",
           "--no-python-downloads", "--index-url", a.index_url]
    return cmd + {"refresh": ["--refresh"], "offline": ["--offline"]}.get(mode, [])


def uv_pins(proc) -> dict[str, str]:
    return {canonicalize_name(n): v for n, v in re.findall(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==(\S+)", proc.stdout, re.M)}


def _platforms(platform: str) -> list[str]:
    """manylinux_2_35_x86_64 -> it and every older manylinux tag: pip takes --platform literally."""
    sys.path.insert(0, str(REPO))
    from wheelhouse.target.capture import expand_platform

    return [p for p in expand_platform(platform) if p.startswith(("manylinux", "musllinux"))] or [platform]


def pip_cmd(pip_python: str, req: str, a, cache: Path, mode: str = "cold") -> list[str]:
    # --target: older pips refuse --platform without it; with --dry-run nothing is written there.
    plats = [x for p in _platforms(a.platform) for x in ("--platform", p)]
    cmd = [pip_python, "-m", "pip", "--isolated", "install", "--dry-run", "--quiet", "--report", "-", "--ignore-installed",
           "--only-binary=:all:", *plats, "--python-version", a.python_version,
           "--target", str(cache / "target"), "--disable-pip-version-check", "--cache-dir", str(cache), req,
           "--index-url", a.index_url]
    return cmd


def pip_pins(proc) -> dict[str, str]:
    data = json.loads(proc.stdout)
    return {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in data["install"]}


# The baseline wh's CLI, with nothing from the working directory on sys.path (see main()).
_RUN_BASELINE = ("import runpy, sys; sys.path.pop(0); import wheelhouse; "
                 "assert wheelhouse.__file__.startswith(sys.path[0]), wheelhouse.__file__; "
                 "sys.argv[0] = 'wh'; runpy.run_module('wheelhouse', run_name='__main__', alter_sys=True)")


# --- measuring -----------------------------------------------------------------------------------
MODES = ("cold", "warm", "refresh", "offline")
GOALS = {"cold": 1.0, "offline": 2.0}  # wh/uv (issue 30)


def measure(tools: dict, modes: dict[str, tuple[str, ...]], runs: int, work: Path, only: tuple[str, ...] = MODES) -> dict:
    """tools: name -> (make_cmd(cache, mode), parse); modes: tool -> the modes it has. Runs alternate
    between the tools; each warm mode reuses the tool's last cold cache. CPU seconds (user + sys)
    of each run are kept under "cpu" (mode -> list)."""
    results = {name: {m: [] for m in modes[name] if m in only} | {"pins": {}, "cpu": {}} for name in tools}
    caches: dict[str, Path] = {}
    for mode in (m for m in MODES if m in only):
        for i in range(runs):
            for name in order(list(tools), i):  # paired, alternating who goes first
                make_cmd, parse = tools[name]
                if mode not in modes[name]:
                    continue
                cache = work / f"{name}-cold-{i}" if mode == "cold" else caches[name]
                t, proc = _run(make_cmd(cache, mode))
                if mode == "cold":
                    caches[name] = cache
                results[name][mode].append(t)
                results[name]["cpu"].setdefault(mode, []).append(_run.cpu)
                pins = parse(proc)
                results[name]["pins"].setdefault(mode, pins)
                print(f"  {name:4} {mode:8} #{i + 1}: {t:6.2f}s  cpu {_run.cpu:5.2f}s  ({len(pins)} pins)", file=sys.stderr)
    return results


def diff(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return [f"{k}: {a.get(k)} vs {b.get(k)}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _load() -> str:
    try:
        return "load average %.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "load average unknown"


def report(results: dict, runs: int, method: str = "") -> tuple[dict, list[str]]:
    """Print the table; returns the ratios and the pin differences from uv (all modes)."""
    print(f"\n{method}")
    print(f"{'mode':9}{'tool':6}{'median':>9}{'range':>17}{'wh/tool':>9}{'cpu':>8}{'wh/tool':>9}")
    ratios: dict[str, float] = {}
    for mode in MODES:
        wh = results["wh"].get(mode)
        for name, r in results.items():
            times = r.get(mode)
            if not times or mode not in r["cpu"]:
                continue
            med = statistics.median(times)
            ratio = statistics.median(wh) / med if wh else float("nan")
            if name == "uv":
                ratios[mode] = ratio
            shown = "" if name == "wh" else f"{ratio:8.2f}x"
            cpu = statistics.median(r["cpu"][mode])
            cpu_ratio = "" if name == "wh" else f"{statistics.median(results['wh']['cpu'][mode]) / cpu:8.2f}x"
            print(f"{mode:9}{name:6}{med:8.2f}s{min(times):8.2f}-{max(times):6.2f}s {shown:9}{cpu:7.2f}s {cpu_ratio}")
    goals = ", ".join(f"{m} {ratios[m]:.2f}x (goal <= {g}x)" for m, g in GOALS.items() if m in ratios)
    print(f"\nwh/uv: {goals}; warm {ratios.get('warm', float('nan')):.2f}x, refresh {ratios.get('refresh', float('nan')):.2f}x"
          f"  ({runs} runs each, {_load()})")
    differences = []
    for mode, pins in results["wh"]["pins"].items():
        d = diff(pins, results["uv"]["pins"].get(mode, results["uv"]["pins"]["cold"]))
        differences += [f"{mode}: {line}" for line in d]
    print(f"pins equal to uv's in every mode: {'yes' if not differences else 'NO'} ({len(results['wh']['pins']['cold'])} packages)")
    for line in differences[:20]:
        print(f"  wh vs uv  {line}")
    if "pip" in results:
        pip_diff = diff(results["wh"]["pins"]["cold"], results["pip"]["pins"]["cold"])
        print(f"pins equal to pip's: {'yes' if not pip_diff else 'no'}")
        for line in pip_diff[:20]:
            print(f"  wh vs pip {line}")
    return ratios, differences


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requirement", action="append", help="a closure to resolve (repeat for several; default: "
                   "vllm==0.33.0, sglang, jupyterlab, apache-airflow)")
    p.add_argument("--python-version", default="3.12")
    p.add_argument("--platform", default="manylinux_2_35_x86_64")
    p.add_argument("--index-url", default=None, help="the one index of every tool (default: $BENCH_INDEX_URL, else pip's stated default)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--uv", default=os.environ.get("WH_UV"))
    p.add_argument("--skip-pip", action="store_true")
    p.add_argument("--wh-baseline", type=Path, metavar="DIR",
                   help="also time another wh: DIR holds its wheelhouse/ package (e.g. `git archive REV wheelhouse | tar -x -C DIR`); "
                        "shown as 'base', in the same alternating runs")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)} (cold always runs)")
    p.add_argument("--json", type=Path, help="also write the numbers here")
    a = p.parse_args(argv)
    if a.uv and not shutil.which(a.uv):
        p.error(f"--uv {a.uv}: no such executable; give uv's path, or leave --uv out to install uv into a temporary venv")

    a.index_url = index_url(a.index_url)
    # wh as installed: bytecode compiled (pip compiles a wheel's modules when it installs it)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "wheelhouse")], check=True, capture_output=True)
    method = methodology(a.index_url, peers="uv" if a.skip_pip else "uv, pip") + "; wh's bytecode compiled before timing"
    failed = False
    summaries = []
    for requirement in a.requirement or ["vllm==0.33.0", "sglang", "jupyterlab", "apache-airflow"]:
        summary = _bench_one(_newest_if_missing(requirement, a.index_url), a, method)
        failed |= not summary["pins_equal_uv"]
        summaries.append(summary)
    if a.json:
        a.json.write_text(json.dumps(summaries, indent=2))
    return 1 if failed else 0


def _bench_one(req: str, a, method: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="wh-bench-") as tmp:
        work = Path(tmp)
        uv, pip_python = _tools_venv(work, a.uv)
        uv_version = subprocess.run([uv, "--version"], capture_output=True, text=True).stdout.strip()
        pip_version = subprocess.run([pip_python, "-m", "pip", "--version"], capture_output=True, text=True).stdout.split(" from ")[0]
        print(f"{uv_version}; {pip_version}", file=sys.stderr)
        req_file = work / "requirements.in"
        req_file.write_text(req + "\n")
        print(f"resolving {req} for cp{a.python_version.replace('.', '')} {a.platform}; {a.runs} runs of each mode "
              f"({', '.join(MODES)})", file=sys.stderr)
        tools = {"wh": (lambda c, m: wh_cmd(req, a, c, m), wh_pins),
                 "uv": (lambda c, m: uv_cmd(uv, req_file, a, c, m), uv_pins)}
        modes = {"wh": MODES, "uv": MODES}
        if a.wh_baseline:
            # -S: no .pth files, so this interpreter's editable wh cannot shadow the baseline's package;
            # and not `-m`, which puts the working directory first on sys.path: run from a checkout,
            # the "baseline" was that checkout's wh (the first entry, the directory, is dropped here).
            import sysconfig

            base = ["env", f"PYTHONPATH={a.wh_baseline.resolve()}{os.pathsep}{sysconfig.get_paths()['purelib']}",
                    sys.executable, "-S", "-c", _RUN_BASELINE]

            def base_cmd(c, m):
                cmd = wh_cmd(req, a, c, m)  # env WH_CACHE_DIR=... wh stage ...
                return [*cmd[:2], *base, *cmd[3:]]

            tools["base"] = (base_cmd, wh_pins)
            modes["base"] = MODES
        if not a.skip_pip:
            tools["pip"] = (lambda c, m: pip_cmd(pip_python, req, a, c, m), pip_pins)
            modes["pip"] = ("cold", "warm")
        only = tuple(dict.fromkeys(["cold", *(m.strip() for m in a.modes.split(",") if m.strip() in MODES)]))
        results = measure(tools, modes, a.runs, work, only)

    print(f"\n== {req}")
    ratios, differences = report(results, a.runs, method)
    return {
        "requirement": req, "python_version": a.python_version, "platform": a.platform, "runs": a.runs,
        "uv_version": uv_version, "pip_version": pip_version, "load": _load(), "methodology": method,
        "tools": {name: {mode: {"times": times, "median": statistics.median(times), "min": min(times), "max": max(times)}
                         for mode, times in r.items() if mode not in ("pins", "cpu") and times}
                  | {"cpu": {mode: {"times": c, "median": statistics.median(c)} for mode, c in r["cpu"].items()},
                     "count": len(r["pins"]["cold"])}
                  for name, r in results.items()},
        "wh_uv_ratios": ratios, "pins_equal_uv": not differences, "pin_differences_uv": differences,
    }


if __name__ == "__main__":
    raise SystemExit(main())
