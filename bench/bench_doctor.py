"""Time a full `wh doctor` on an environment of ~150+ distributions, every extension module loaded.

Builds a venv on the spot: 120 small pure-Python wheels (each requiring the one
before it, so the deps check has work) plus 36 extension packages compiled with
gcc, each with a top-level extension and a lazily loaded ``pkg.sub._lazy`` one
(real .so files, all loaded for real), installs them, then times, in the same run:

- ``wh doctor`` (all checks, default --jobs = cores) through ``run_doctor``;
- ``pip check`` on the same venv (metadata only: imports nothing) as a floor;
- a naive loop: one ``python -c "import X"`` per extension module, sequentially;
- the doctor again with one package whose import hangs, with ``--hang-timeout``.

Goals on a 2-core machine (issue 14): the doctor within 5 s; with one hanging import,
within the timeout + 10 s (a hang costs one timeout). The full doctor runs ``--rounds``
times (median and range printed). Usage::

    python bench/bench_doctor.py [--pure 120] [--native 36] [--rounds 3] [--hang-timeout 20] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
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


GOAL_S = 5.0  # the full doctor on ~150+ distributions, on this 2-core machine


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pure", type=int, default=120)
    ap.add_argument("--native", type=int, default=36)
    ap.add_argument("--rounds", type=int, default=3, help="full doctor runs (median and range printed)")
    ap.add_argument("--hang-timeout", type=float, default=20, help="--timeout for the run with a hanging import")
    ap.add_argument("--keep", type=Path, help="build here and keep it (default: a temp dir)")
    args = ap.parse_args()
    if not have_toolchain():
        print("needs gcc and Python.h", file=sys.stderr)
        return 2
    from wheelhouse.doctor import run_doctor

    with tempfile.TemporaryDirectory(prefix="wh-bench-doctor-") as tmp:
        base = args.keep or Path(tmp)
        t_build, (wheels, natives) = timed(lambda: build(base / "src", args.pure, args.native))
        py = make_venv(base / "venv", with_pip=False)
        install(py, wheels)
        load = os.getloadavg()
        cache = base / "digest-cache"  # the stack:files digest cache of this venv (a foreign site: wh's user cache)
        os.environ["WH_CACHE_DIR"] = str(cache)
        docs = [timed(lambda: run_doctor(str(py))) for _ in range(max(1, args.rounds))]
        times = [t for t, _ in docs]
        t_doc, report = statistics.median(times), docs[-1][1]
        first_files, last_files = docs[0][1].get("stack:files"), report.get("stack:files")
        # the doctor's native check and the naive loop it is compared with: paired rounds, order alternating
        natives_t, naive_t = [], []
        ndist = report.facts["distributions"]
        nnative = sum(1 for r in report.results if r.group == "native")
        nloaded = sum(len(r.data.get("modules", ())) for r in report.results if r.group == "native")
        bad = [r.id for r in report.results if r.verdict in ("fail", "error")]
        t_pip, proc = timed(lambda: subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "check"],
                                                    capture_output=True, text=True, env=clean_env()))
        pip_note = "" if proc.returncode == 0 else f" (pip check exit {proc.returncode}: {proc.stdout.strip()[:80]})"

        def naive():
            for m in natives:
                subprocess.run([str(py), "-c", f"import {m}"], check=True, capture_output=True)

        pair = {"native": (lambda: run_doctor(str(py), checks=["native"]), natives_t), "naive": (naive, naive_t)}
        for i in range(max(1, args.rounds)):
            for name in order(list(pair), i):
                run, into = pair[name]
                into.append(timed(run)[0])
        t_native, t_naive = statistics.median(natives_t), statistics.median(naive_t)
        install(py, [hanging_wheel(base / "src")])
        t_hang, hang_report = timed(lambda: run_doctor(str(py), timeout=args.hang_timeout))
        hung = hang_report.get("native:hangpkg")
        print(f"environment: {ndist} distributions, {len(natives) // 2} gcc-built native packages "
              f"(built in {t_build:.1f}s); {os.cpu_count()} cores")
        print(f"load average before the runs: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        print(methodology(None, cold=False, peers="pip check, one `python -c import X` per module"))
        print(f"wh doctor (all checks; {nnative} native distributions, {nloaded} top-level names and extension "
              f"modules loaded): median {t_doc:.2f}s of {len(times)} ({min(times):.2f}-{max(times):.2f}) "
              f"{'OK' if t_doc <= GOAL_S else f'OVER the {GOAL_S:g} s goal'}")
        if first_files is not None and last_files is not None:
            print(f"first run (digest cache empty): {times[0]:.2f}s, stack:files hashed {first_files.data['hashed']} "
                  f"file(s), {first_files.data['hashed_bytes'] / 2**20:.1f} MiB in {first_files.seconds:.2f}s; "
                  f"re-run with nothing changed: {statistics.median(times[1:] or times):.2f}s, stack:files hashed "
                  f"{last_files.data['hashed']} of {last_files.data['files']} in {last_files.seconds:.2f}s")
        print(f"pip check (imports nothing): {t_pip:.2f}s{pip_note} -> doctor/pip-check = {t_doc / t_pip:.1f}x")
        print(f"wh doctor --check native alone: {t_native:.2f}s; naive sequential `python -c import X` per "
              f"extension module: {t_naive:.2f}s -> naive/doctor = {t_naive / max(t_native, 1e-9):.1f}x")
        hang_ok = t_hang < args.hang_timeout + 10 and hung is not None and hung.verdict == "fail"
        print(f"wh doctor with one hanging import, --timeout {args.hang_timeout:.0f}: {t_hang:.2f}s "
              f"({hung.verdict if hung else 'no verdict'}) {'OK' if hang_ok else 'OVER timeout + 10 s'}")
        if bad:
            print("unexpected failures: " + ", ".join(bad))
        slow = sorted(report.results, key=lambda r: -r.seconds)[:3]
        print("slowest checks: " + ", ".join(f"{r.id} {r.seconds:.2f}s" for r in slow))
        return 0 if t_doc <= GOAL_S and not bad and hang_ok else 1


if __name__ == "__main__":
    sys.exit(main())
