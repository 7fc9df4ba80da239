"""Install the same wheelhouse into fresh venvs with wh, pip and uv, and time the parallel-unzip floor.

Opt-in (it needs a big wheelhouse; staging one needs the package registry):

    wh stage -r bench/requirements.txt -o /work/bench-data/wh --no-bootstrap     # once, >= 60 wheels, >= 800 MB
    python bench/bench_install.py /work/bench-data/wh --runs 3 [--uv PATH]

Every run gets a fresh venv (made outside the timing) and, for uv, an empty cache
(UV_CACHE_DIR in a fresh temp folder: the box never has a warm cache). Tools are
alternated within each round and ``sync`` runs before every timing so one run's
pending writes do not land on the next. Prints medians and the ratios the
install issue sets as goals.
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
sys.path.insert(0, str(REPO))

from wheelhouse.lock import read_pylock  # noqa: E402


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def _site(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def _tools(house: Path, uv: str | None, reqs: Path, cores: int) -> dict:
    wheels = house / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]

    def wh(py, extra=()):
        return [sys.executable, "-m", "wheelhouse", "-q", "install", str(house), "--venv", str(Path(py).parent.parent),
                "--no-links", *extra]

    tools = {
        "wh": lambda py, env: wh(py),
        "wh --compile": lambda py, env: wh(py, ["--compile"]),
        "pip (default, compiles)": lambda py, env: pip + ["--python", str(py), "install", "-q", "--no-index",
                                                          "--find-links", str(wheels), "--no-deps", "-r", str(reqs)],
        "pip --no-compile": lambda py, env: pip + ["--python", str(py), "install", "-q", "--no-index", "--no-compile",
                                                   "--find-links", str(wheels), "--no-deps", "-r", str(reqs)],
        "unzip floor": lambda py, env: ["sh", "-c", f"ls {wheels}/*.whl | xargs -P {cores} -n 1 unzip -q -o -d "
                                                    f"{_site(py)}"],
    }
    if uv:
        base = [uv, "pip", "install", "--offline", "--no-index", "--find-links", str(wheels), "--no-deps", "-q"]
        tools["uv"] = lambda py, env: base + ["--python", str(py), "-r", str(reqs)]
        tools["uv --compile-bytecode"] = lambda py, env: base + ["--compile-bytecode", "--python", str(py), "-r",
                                                                 str(reqs)]
    return tools


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wheelhouse", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--uv", default=shutil.which("uv"), help="uv executable (default: on PATH)")
    ap.add_argument("--only", action="append", help="run only these tools (repeatable)")
    ap.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()), help="where the venvs go")
    args = ap.parse_args(argv)
    lock = read_pylock(args.wheelhouse)
    size = sum(f.size or 0 for f in lock.files)
    print(f"wheelhouse: {args.wheelhouse}: {len(lock.files)} wheels, {size / 1e6:.0f} MB; "
          f"{os.cpu_count()} cores; uv: {args.uv or 'not found (skipped)'}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="wh-bench-", dir=args.scratch))
    reqs = work / "reqs.txt"
    reqs.write_text("".join(f"{f.name}=={f.version}\n" for f in lock.files))
    tools = _tools(args.wheelhouse, args.uv, reqs, os.cpu_count() or 2)
    if args.only:
        tools = {k: v for k, v in tools.items() if k in args.only}
    times: dict[str, list[float]] = {k: [] for k in tools}
    names = list(tools)
    try:
        for r in range(args.runs):
            order = names[r % len(names):] + names[: r % len(names)]  # alternate who goes first
            for name in order:
                venv = work / f"venv-{r}-{names.index(name)}"
                py = _venv(venv)
                env = dict(os.environ, UV_CACHE_DIR=str(work / f"uvcache-{r}-{names.index(name)}"),
                           UV_NO_PROGRESS="1")
                cmd = tools[name](py, env)
                subprocess.run(["sync"])
                t = time.perf_counter()
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
                subprocess.run(["sync"])  # the writes are part of the install
                dt = time.perf_counter() - t
                if proc.returncode != 0:
                    print(f"  {name}: FAILED ({proc.returncode}): {proc.stderr[-500:]}", flush=True)
                else:
                    times[name].append(dt)
                    print(f"  run {r + 1} {name:<26} {dt:7.2f} s", flush=True)
                shutil.rmtree(venv, ignore_errors=True)
                shutil.rmtree(env["UV_CACHE_DIR"], ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items() if v}
    print("\nmedian seconds:")
    for k, v in sorted(med.items(), key=lambda kv: kv[1]):
        print(f"  {k:<26} {v:7.2f}")

    def ratio(a: str, b: str) -> str:
        return f"{med[a] / med[b]:.2f}x" if a in med and b in med else "n/a"

    print("\ngoals:")
    print(f"  wh / uv (no bytecode)            {ratio('wh', 'uv')}   goal <= 1.00x")
    print(f"  wh / unzip floor                 {ratio('wh', 'unzip floor')}   goal <= 1.15x")
    print(f"  wh --compile / uv --compile-bc   {ratio('wh --compile', 'uv --compile-bytecode')}   goal < 1.00x")
    print(f"  pip default / wh                 {ratio('pip (default, compiles)', 'wh')}   goal >= 4x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
