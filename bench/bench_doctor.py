"""Time `wh doctor` (first run and re-run) against one `python -c "import X"` per top-level module.

Environments, each timed in the same run, paired and alternating (``_fair.order``):

- a synthetic venv built on the spot: 120 small pure-Python wheels (each requiring the one before it, so the
  deps check has work) plus 36 extension packages compiled with gcc, each with a top-level extension and a
  lazily loaded ``pkg.sub._lazy`` one (real .so files, all loaded for real);
- every ``--venv PATH`` given, e.g. the venv of ``bench/requirements.txt`` (71 real wheels)::

      wh install WHEELHOUSE --venv /tmp/req-venv    (its .wh/ digests: the first run hashes nothing wh wrote)

Per round and environment: ``wh doctor --json`` as a user runs it (a subprocess: wh's start-up counts) with
empty caches (the stack check's digests and the verdict cache: the first run), then again with nothing
changed (the re-run: what the caches save), and the naive loop: one ``python -c "import X"`` per top-level
module of every installed distribution, sequentially. Medians and ranges of ``--rounds`` rounds.
Then, on the synthetic venv, the doctor with one package whose import hangs, ``--timeout --hang-timeout``:
a hang costs one timeout.

Goals (issue 28): on this machine the doctor <= 5 s and >= 3x faster than the naive loop on the
71-wheel venv; with one hanging import, <= the timeout + 10 s. Usage::

    python bench/bench_doctor.py [--venv DIR ...] [--pure 120] [--native 36] [--rounds 3] [--hang-timeout 20]
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from broken_packages import _ext, _tags, have_toolchain, make_venv, site_packages  # noqa: E402
from wheelmaker import make_wheel  # noqa: E402
from _fair import clean_env, methodology, order  # noqa: E402

import sysconfig  # noqa: E402
import zipfile  # noqa: E402


def build(folder: Path, pure: int, native: int) -> tuple[list[Path], list[str]]:
    build_dir = folder / "build"
    build_dir.mkdir(parents=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    core = _ext(build_dir, "_core")  # gcc: PyInit__core, valid as <pkg>._core in every package
    lazy = _ext(build_dir, "_lazy")  # loaded only on use: <pkg>.sub._lazy
    wheels, natives = [], []
    for i in range(pure):
        name = f"purepkg{i:03d}"
        body = "".join(f"def f{j}(x):\n    return x + {j}\n" for j in range(20))
        wheels.append(make_wheel(folder / "wheels", name, "1.0", requires=[f"purepkg{i - 1:03d}>=1"] if i else [],
                                 modules={f"{name}/__init__.py": body, f"{name}/util.py": body}))
    for i in range(native):
        name = f"natpkg{i:03d}"
        natives += [f"{name}._core", f"{name}.sub._lazy"]
        wheels.append(make_wheel(folder / "wheels", name, "1.0", tags=_tags(),
                                 modules={f"{name}/__init__.py": "from ._core import answer\nimport json, decimal\n",
                                          f"{name}/sub/__init__.py": ""},
                                 files={f"{name}/_core{suffix}": core, f"{name}/sub/_lazy{suffix}": lazy}))
    return wheels, natives


GOAL_S = 5.0  # the doctor, on this 2-core machine
GOAL_RATIO = 3.0  # naive loop / doctor


def hanging_wheel(folder: Path) -> Path:
    """A native package whose import never returns."""
    core = _ext(folder / "build", "_core")
    return make_wheel(folder / "wheels", "hangpkg", "1.0", tags=_tags(),
                      modules={"hangpkg/__init__.py": "from ._core import answer\nimport time\ntime.sleep(3600)\n"},
                      files={f"hangpkg/_core{sysconfig.get_config_var('EXT_SUFFIX')}": core})


def install(py: Path, wheels: list[Path]) -> None:
    site = site_packages(py)
    for w in wheels:
        with zipfile.ZipFile(w) as zf:
            zf.extractall(site)


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def doctor_cli(py: Path, cache: Path, *extra: str) -> tuple[float, dict]:
    """``wh doctor --json`` as a user runs it; the digest and verdict caches in ``cache``."""
    env = clean_env(WH_CACHE_DIR=str(cache))
    t, proc = timed(lambda: subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py),
                                            "--json", *extra], capture_output=True, text=True, env=env, cwd=ROOT))
    if proc.returncode not in (0, 1):
        raise SystemExit(f"wh doctor --python {py} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return t, json.loads(proc.stdout)


def top_level_modules(py: Path) -> list[str]:
    """Every top-level module name the installed distributions provide (importlib.metadata's view)."""
    code = ("import importlib.metadata as m, json; print(json.dumps(sorted(n for n in m.packages_distributions() "
            "if n.isidentifier())))")
    return json.loads(subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True).stdout)


def naive_loop(py: Path, modules: list[str]) -> None:
    for m in modules:
        subprocess.run([str(py), "-c", f"import {m}"], capture_output=True)


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} s ({min(xs):.2f}-{max(xs):.2f})"


def installed_state(py: Path, work: Path, label: str) -> tuple[Path, Path] | None:
    """A copy of the site folder's ``.wh/`` as ``wh install`` left it (its digests, its records), without the
    doctor's verdict store: what each first run starts from. None where wh never installed there."""
    own = site_packages(py) / ".wh"
    if not own.is_dir():
        return None
    snap = work / f"wh-state-{label}"
    shutil.rmtree(snap, ignore_errors=True)
    shutil.copytree(own, snap)
    (snap / "verdicts.json").unlink(missing_ok=True)
    return own, snap


def measure(label: str, py: Path, work: Path, rounds: int) -> dict:
    """Paired rounds: (doctor first run, then its re-run) and the naive loop, order alternating."""
    mods = top_level_modules(py)
    first, again, naive, reused, executed, reports, first_reports = [], [], [], [], [], [], []
    state = installed_state(py, work, label)

    def doctor_pair(i: int) -> None:
        cache = work / f"cache-{label}-{i}"
        shutil.rmtree(cache, ignore_errors=True)
        if state is not None:  # a venv wh installed keeps the doctor's stores in <site>/.wh: back to the install's
            shutil.rmtree(state[0])
            shutil.copytree(state[1], state[0])
        t, rep1 = doctor_cli(py, cache)
        first.append(t)
        first_reports.append(rep1)
        t, rep = doctor_cli(py, cache)
        again.append(t)
        native = [r for r in rep["results"] if r["group"] == "native"]
        reused.append(sum(len(r["data"].get("reused") or ()) for r in native))
        executed.append(sum(len(r["data"].get("executed") or ()) for r in native))
        reports.append(rep)

    pair = {"doctor": doctor_pair, "naive": lambda i: naive.append(timed(lambda: naive_loop(py, mods))[0])}
    for i in range(rounds):
        for name in order(list(pair), i):
            pair[name](i)
    rep = reports[-1]
    return {"label": label, "dists": rep["facts"]["distributions"], "modules": len(mods), "first": first,
            "again": again, "naive": naive, "reused": reused[-1], "executed": executed[-1],
            "bad": [r["id"] for r in rep["results"] if r["verdict"] in ("fail", "error")],
            "slowest": sorted(rep["results"], key=lambda r: -r["seconds"])[:3],
            "slowest_first": sorted(first_reports[-1]["results"], key=lambda r: -r["seconds"])[:5]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", type=Path, action="append", default=[], help="another venv to time (repeatable)")
    ap.add_argument("--pure", type=int, default=120)
    ap.add_argument("--native", type=int, default=36)
    ap.add_argument("--rounds", type=int, default=3, help="paired rounds (median and range printed)")
    ap.add_argument("--hang-timeout", type=float, default=20, help="--timeout for the run with a hanging import")
    ap.add_argument("--keep", type=Path, help="build here and keep it (default: a temp dir)")
    args = ap.parse_args()
    if not have_toolchain():
        print("needs gcc and Python.h", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="wh-bench-doctor-") as tmp:
        base = args.keep or Path(tmp)
        t_build, (wheels, _natives) = timed(lambda: build(base / "src", args.pure, args.native))
        py = make_venv(base / "venv", with_pip=False)
        install(py, wheels)
        load = os.getloadavg()
        rows = [measure("synthetic", py, base, max(1, args.rounds))]
        for i, venv in enumerate(args.venv):
            rows.append(measure(f"venv{i}", venv / "bin" / "python", base, max(1, args.rounds)))
        load_after = os.getloadavg()
        install(py, [hanging_wheel(base / "src")])
        t_hang, hang_report = doctor_cli(py, base / "cache-hang", "--timeout", f"{args.hang_timeout:g}",
                                         "--check", "native")
        hung = next((r for r in hang_report["results"] if r["id"] == "native:hangpkg"), None)
        print(f"synthetic: {args.pure} pure + {args.native} gcc-built native packages (built in {t_build:.1f}s); "
              f"{os.cpu_count()} cores; load average {load[0]:.2f} before, {load_after[0]:.2f} after the rounds")
        print(methodology(None, cold=False, peers="one `python -c import X` per top-level module, sequential"))
        print("first run: the digest and verdict caches as `wh install` left them (a venv wh installed: its "
              "<site>/.wh/ restored, without verdicts.json; else empty); PYTHONDONTWRITEBYTECODE="
              f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '(unset)')} for the doctor and the loop alike")
        print("| environment | wh doctor, first run (empty caches) | wh doctor, re-run (unchanged) | naive loop "
              "| loop / first | loop / re-run | goal <= 5 s and >= 3x |")
        print("|---|---|---|---|---|---|---|")
        ok = True
        for r in rows:
            f, a, n = (statistics.median(r[k]) for k in ("first", "again", "naive"))
            met = [x <= GOAL_S and n / x >= GOAL_RATIO for x in (f, a)]
            ok = ok and met[1] and not r["bad"]
            name = "synthetic" if r["label"] == "synthetic" else str(args.venv[int(r["label"][4:])])
            print(f"| {name}: {r['dists']} distributions | {_med(r['first'])} | {_med(r['again'])} "
                  f"({r['reused']} import verdicts reused, {r['executed']} executed) | {_med(r['naive'])} "
                  f"({r['modules']} imports) | {n / f:.2f}x | {n / a:.2f}x | first {'yes' if met[0] else 'no'}, "
                  f"re-run {'yes' if met[1] else 'no'} |")
        for r in rows:
            if r["bad"]:
                print(f"{r['label']}: fail/error verdicts: {', '.join(r['bad'][:8])}")
            print(f"{r['label']}: slowest checks of the first run: "
                  + ", ".join(f"{x['id']} {x['seconds']:.2f}s" for x in r["slowest_first"]))
            print(f"{r['label']}: slowest checks of the re-run: "
                  + ", ".join(f"{x['id']} {x['seconds']:.2f}s" for x in r["slowest"]))
        hang_ok = t_hang < args.hang_timeout + 10 and hung is not None and hung["verdict"] == "fail"
        print(f"wh doctor --check native with one hanging import, --timeout {args.hang_timeout:g}: {t_hang:.2f}s "
              f"({hung['verdict'] if hung else 'no verdict'}) {'OK' if hang_ok else 'OVER timeout + 10 s'}")
        return 0 if ok and hang_ok else 1


if __name__ == "__main__":
    sys.exit(main())
