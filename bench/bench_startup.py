"""Start-up benchmark: how long ``wh --version``, ``wh --help`` and a subcommand's ``--help`` take, against the
interpreter's own start-up.

    python bench/bench_startup.py [--wh PATH]... [--regular VENV] [--runs 41]

Times each command ``--runs`` times (interleaved, the order reversed every other round, so a burst of load on a
shared machine hits all alike) and prints the median and the range (fastest-slowest) with the load average
before and after, and the median CPU time (user+sys) of each, which a loaded machine inflates far less. Each console script is labelled with the install it belongs to: an editable (dev) install's
script pays for its import finder at every start (site imports it, ~14 ms here), a regular ``pip install .``,
what users get, does not. ``--regular VENV`` makes that regular install of this checkout in VENV (a fresh venv,
the checkout's wheel installed by pip) and measures its script too. Goals: ``--version`` / ``--help`` under 50 ms (issue 14),
``wh stage --help`` / ``wh doctor --help`` <= 0.1 s by median (issue 31).
``python -X importtime -m wheelhouse.cli stage --help`` shows what is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fair import methodology, order  # noqa: E402


REPO = Path(__file__).resolve().parent.parent


def install_kind(python: Path) -> str:
    """"editable" or "regular": how wh is installed for this interpreter (its direct_url.json, PEP 610)."""
    code = ("import importlib.metadata as m, json; t = m.distribution('wh').read_text('direct_url.json'); "
            "print(json.dumps(json.loads(t) if t else {}))")
    out = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, check=True).stdout
    return "editable" if json.loads(out).get("dir_info", {}).get("editable") else "regular"


def make_regular(venv: Path) -> Path:
    """A fresh venv with this checkout installed as users get it (a built wheel, what ``pip install .`` installs;
    built by wh's own builder, which leaves no ``build/`` folder in the checkout); its wh script."""
    import tempfile

    sys.path.insert(0, str(REPO))
    from wheelhouse.stage.bootstrap import build_from_checkout

    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    with tempfile.TemporaryDirectory(prefix="wh-bench-wheel-") as cache:
        wheel = build_from_checkout(REPO, Path(cache))
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], check=True)
    return venv / "bin" / "wh"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wh", action="append", help="a wh console script (repeatable; default: the one beside python)")
    ap.add_argument("--regular", type=Path, metavar="VENV", help="make a regular install of this checkout there")
    ap.add_argument("--runs", type=int, default=41)
    args = ap.parse_args()
    whs = args.wh or ([] if args.regular else [str(Path(sys.executable).parent / "wh")])
    if args.regular:
        whs.append(str(make_regular(args.regular)))
    cmds: dict[str, list[str]] = {}
    for wh in whs:
        py = Path(wh).parent / "python"
        label = f"({install_kind(py)} install) {wh}"
        cmds[f"{py} -c pass"] = [str(py), "-c", "pass"]
        cmds[f"{label} --version"] = [wh, "--version"]
        cmds[f"{label} --help"] = [wh, "--help"]
        for sub in ("stage", "doctor"):  # a subcommand's start-up (goal of issue 31: <= 0.1 s)
            cmds[f"{label} {sub} --help"] = [wh, sub, "--help"]
    cmds[f"{sys.executable} -S -c pass (no site)"] = [sys.executable, "-S", "-c", "pass"]
    uv = Path(sys.executable).parent / "uv"
    if uv.exists() or shutil.which("uv"):
        cmds["uv --version"] = [str(uv) if uv.exists() else "uv", "--version"]
    times: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}  # user+sys of the process: what load inflates least
    before = os.getloadavg()
    for i in range(args.runs):
        for name in order(list(cmds), i):  # interleaved, the order reversed every other round
            t = time.perf_counter()
            proc = subprocess.Popen(cmds[name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, status, usage = os.wait4(proc.pid, 0)
            times[name].append(time.perf_counter() - t)
            cpu[name].append(usage.ru_utime + usage.ru_stime)
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode != 0:
                raise SystemExit(f"{name}: exit {proc.returncode}")
    after = os.getloadavg()
    print(methodology(None, cold=False, peers="python -c pass, uv --version"))
    print(f"{args.runs} runs each, interleaved; load average (1, 5, 15 min) {' '.join(f'{x:.2f}' for x in before)} "
          f"before, {' '.join(f'{x:.2f}' for x in after)} after, on {os.cpu_count()} cores; COLUMNS "
          f"{os.environ.get('COLUMNS', 'unset')} (off a terminal click renders at 80 columns)")
    for name, ts in times.items():
        print(f"  {statistics.median(ts) * 1e3:6.1f} ms median ({min(ts) * 1e3:6.1f}-{max(ts) * 1e3:6.1f} ms), "
              f"CPU {statistics.median(cpu[name]) * 1e3:5.1f} ms median  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
