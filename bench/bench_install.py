"""Install the same wheelhouse(s) into fresh venvs with wh, pip and uv, and time the parallel-unzip floor.

Opt-in (it needs big wheelhouses; staging them needs the package registry). The sets of issue 14,
staged once from pinned requirements (put them outside the repository):

    wh stage -r bench/requirements.txt --dry-run --format requirements -o /work/bench-data/pins-900.txt
    wh stage -r /work/bench-data/pins-900.txt -o /work/bench-data/wh-900 --no-bootstrap  # 71 wheels, ~850 MB
    printf 'nvidia-cudnn-cu12\nnvidia-cublas-cu12\nnvidia-nccl-cu12\nnvidia-cusparse-cu12\ntriton\nnumpy\n' > req-2g.txt
    wh stage -r req-2g.txt -o /work/bench-data/wh-2g --no-bootstrap                     # 8 wheels, ~2.4 GB
    python bench/bench_install.py /work/bench-data/wh-900 /work/bench-data/wh-2g --runs 3 [--uv PATH] [--bytecode]

``--bytecode`` first runs `wh bytecode` (timed: the staging host's one-time cost) on a hardlinked copy
of each wheelhouse; "wh --compile" then writes those .pyc files, "wh --compile --recompile" compiles on
the box as before.

Every run gets a fresh venv (made outside the timing) and, for uv, an empty cache
(UV_CACHE_DIR in a fresh temp folder: the box never has a warm cache); with ``--warm``, also
"wh --link-cache (warm)" against "uv (warm cache)": each one's cache filled by one untimed
install before the rounds and kept between them (issue 31: within 3x of uv's warm install); and, for
reference, "uv --require-hashes" (the lock's sha256 of every wheel in its requirements: the check wh
always makes, which plain "uv" does not); every tool a clean pip
configuration, uv its interpreter (``--python``) and ``--no-config`` (bench/_fair.py; the
methodology line is printed with the tables). Tools are
alternated within each round (each round starts with the next tool). ``sync`` runs
before every timing; each run is timed twice: until the command returns (what a user
waits for) and until the ``sync`` after it returns too (the dirty pages written out:
a tool that returns early but leaves more to write pays it there). wh runs with the
fastest inflater importable (``pip install 'wh[fast]'``) and, when that is not the
standard zlib, once more with ``WH_INFLATE=zlib``. Prints each run with its user and
system CPU seconds and the load, then per wheelhouse the median, the range and the
ratio to uv of every tool in both timings, the goals of issue 14, and the load average
before and after (the machine may be shared: read the numbers with it).

Reading the system time: on ext4, creating ~14k files right after a large tree was
deleted (the previous run's venv) makes the kernel's inode allocator search
(``recently_deleted``/``find_inode_bit`` in ``perf``): the same install's system time
ranged 3.6-12 s between identical runs on the 2-core staging host. The effect follows
the disk's recent history, not the tool, so compare tools only over many alternating
rounds (``--runs``, default 5), look at the system-time column, and prefer medians.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _fair import clean_env, methodology, uv_flags  # noqa: E402
from wheelhouse.inflate import available  # noqa: E402
from wheelhouse.lock import read_pylock  # noqa: E402


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def _site(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def _tools(house: Path, uv: str | None, reqs: Path, cores: int, wh_jobs: list[int], warm: Path | None = None) -> dict:
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
    def wh_stdlib(py, env):  # a tool may set variables in the env its command runs with
        env["WH_INFLATE"] = "zlib"
        return wh(py)

    if available()[0] != "zlib":
        tools["wh (stdlib zlib)"] = wh_stdlib
    if "bytecode" in (house / "wh.json").read_text():  # packs from `wh bytecode`: also time compiling on the box
        tools["wh --compile --recompile"] = lambda py, env: wh(py, ["--compile", "--recompile"])
    for j in wh_jobs:
        tools[f"wh -j {j}"] = lambda py, env, j=j: wh(py, ["--jobs", str(j)])
    if uv:
        base = [uv, "pip", "install", "--offline", "--no-index", "--find-links", str(wheels), "--no-deps", "-q"]
        tools["uv"] = lambda py, env: base + [*uv_flags(py), "-r", str(reqs)]
        tools["uv --compile-bytecode"] = lambda py, env: base + ["--compile-bytecode", *uv_flags(py), "-r", str(reqs)]
        # The check wh always makes (every wheel's sha256 against the lock's), asked of uv too: a reference row.
        hashed = reqs.with_name(f"hashed-{reqs.name}")
        tools[UV_HASHES] = lambda py, env: base + ["--require-hashes", *uv_flags(py), "-r", str(hashed)]
    if warm is not None:  # each tool's cache filled once before the rounds (``_fill``), kept between them
        def wh_warm(py, env):
            env["WH_CACHE_DIR"] = str(warm / "wh")
            return wh(py, ["--link-cache"])

        tools[WH_WARM] = wh_warm
        if uv:
            def uv_warm(py, env):
                env["UV_CACHE_DIR"] = str(warm / "uv")
                return base + [*uv_flags(py), "-r", str(reqs)]

            tools[UV_WARM] = uv_warm
    return tools


WH_WARM, UV_WARM, UV_HASHES = "wh --link-cache (warm)", "uv (warm cache)", "uv --require-hashes"


def _fill(tools: dict, work: Path) -> None:
    """One untimed install per warm tool into a throwaway venv: its cache holds every wheel afterwards."""
    for name in (WH_WARM, UV_WARM):
        if name in tools:
            venv = work / "venv-fill"
            py = _venv(venv)
            env = clean_env()
            proc = subprocess.run(tools[name](py, env), env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"filling the cache of {name} failed: {proc.stderr[-500:]}")
            shutil.rmtree(venv, ignore_errors=True)


def _cpu() -> tuple[float, float]:
    """User and system CPU seconds of the finished children: less at the mercy of a shared machine than wall
    time (the system part carries ext4's inode-allocation swings, see the module docstring)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime, r.ru_stime


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _with_bytecode(house: Path, work: Path) -> Path:
    """A copy of ``house`` (hardlinks: same wheels) to which `wh bytecode` added packs, timed: what the staging
    host pays once so that `wh install --compile` writes .pyc files instead of compiling them."""
    copy = work / f"{house.name}-bytecode"
    subprocess.run(["cp", "-al", str(house), str(copy)], check=True)
    (u0, s0), t = _cpu(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "bytecode", str(copy), "--json"], capture_output=True,
                          text=True)
    took, (u1, s1) = time.perf_counter() - t, _cpu()
    if proc.returncode != 0:
        raise SystemExit(f"wh bytecode {copy} failed: {proc.stderr[-500:]}")
    import json
    got = json.loads(proc.stdout)
    print(f"\nwh bytecode (on the staging host, once): {got['files']} modules of {got['wheels']} wheels in "
          f"{took:.1f} s (user {u1 - u0:.1f} s, sys {s1 - s0:.1f} s), packs {got['size'] / 1e6:.1f} MB; "
          f"load {_load()}", flush=True)
    return copy


def _bench(house: Path, args, work: Path) -> dict[str, dict[str, list[float]]]:
    """``{tool: {"returned": [...], "synced": [...], "user": [...], "sys": [...]}}`` for one wheelhouse."""
    if args.bytecode and "bytecode" not in (house / "wh.json").read_text():
        house = _with_bytecode(house, work)
    lock = read_pylock(house)
    size = sum(f.size or 0 for f in lock.files)
    print(f"\nwheelhouse: {house}: {len(lock.files)} wheels, {size / 1e6:.0f} MB; load {_load()}", flush=True)
    reqs = work / f"reqs-{house.name}.txt"
    reqs.write_text("".join(f"{f.name}=={f.version}\n" for f in lock.files))
    reqs.with_name(f"hashed-{reqs.name}").write_text(
        "".join(f"{f.name}=={f.version} --hash=sha256:{f.sha256}\n" for f in lock.files))
    warm = work / f"warm-{house.name}" if args.warm else None
    tools = _tools(house, args.uv, reqs, os.cpu_count() or 2, args.wh_jobs, warm)
    if args.only:
        tools = {k: v for k, v in tools.items() if k in args.only}
    if warm is not None:
        _fill(tools, work)
    res: dict[str, dict[str, list[float]]] = {k: {"returned": [], "synced": [], "user": [], "sys": []} for k in tools}
    names = list(tools)
    for r in range(args.runs):
        order = names[r % len(names):] + names[: r % len(names)]  # alternate who goes first
        for name in order:
            venv = work / f"venv-{r}-{names.index(name)}"
            py = _venv(venv)
            env = clean_env(UV_CACHE_DIR=str(work / f"uvcache-{r}-{names.index(name)}"),
                            WH_CACHE_DIR=str(work / f"whcache-{r}-{names.index(name)}"))
            cold = (env["UV_CACHE_DIR"], env["WH_CACHE_DIR"])  # removed after the run (a warm tool's are kept)
            cmd = tools[name](py, env)
            subprocess.run(["sync"])
            (u0, s0), t = _cpu(), time.perf_counter()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            returned = time.perf_counter() - t
            (u1, s1) = _cpu()  # before sync's own CPU
            subprocess.run(["sync"])  # the writes are part of the install
            synced = time.perf_counter() - t
            if proc.returncode != 0:
                print(f"  {name}: FAILED ({proc.returncode}): {proc.stderr[-500:]}", flush=True)
            else:
                for key, value in (("returned", returned), ("synced", synced), ("user", u1 - u0), ("sys", s1 - s0)):
                    res[name][key].append(value)
                print(f"  run {r + 1} {name:<26} returned {returned:7.2f} s  +sync {synced:7.2f} s  "
                      f"user {u1 - u0:6.2f} s  sys {s1 - s0:6.2f} s  load {_load()}", flush=True)
            shutil.rmtree(venv, ignore_errors=True)
            for folder in cold:
                shutil.rmtree(folder, ignore_errors=True)
    return res


def _report(house: Path, res: dict[str, dict[str, list[float]]]) -> None:
    med = {k: {m: statistics.median(v[m]) for m in v} for k, v in res.items() if v["returned"]}

    def ref_of(k: str) -> str:
        if k == WH_WARM:
            return UV_WARM
        compiles = ("--compile" in k and "--no-compile" not in k) or k.startswith("pip (default")
        return "uv --compile-bytecode" if compiles else "uv"

    def rel(k: str, m: str) -> str:
        ref = ref_of(k)
        return f"{med[k][m] / med[ref][m]:.2f}x" if ref in med else "  -  "

    print(f"\n{methodology(None, peers='uv, pip, parallel unzip')}")
    print(f"{house}: medians over {max((len(v['returned']) for v in res.values()), default=0)} rounds "
          "(range), ratio to uv (to uv --compile-bytecode for the compiling tools):")
    print(f"  {'tool':<26} {'returned':>22} {'ratio':>6}  {'returned+sync':>22} {'ratio':>6}  "
          f"{'user':>6} {'sys':>6} {'cpu ratio':>9}")
    for k in sorted(med, key=lambda k: med[k]["returned"]):
        r, sy = res[k]["returned"], res[k]["synced"]
        cpu = med[k]["user"] + med[k]["sys"]
        ref = ref_of(k)
        crel = f"{cpu / (med[ref]['user'] + med[ref]['sys']):.2f}x" if ref in med else "-"
        print(f"  {k:<26} {med[k]['returned']:7.2f} ({min(r):6.2f}-{max(r):6.2f}) {rel(k, 'returned'):>6}  "
              f"{med[k]['synced']:7.2f} ({min(sy):6.2f}-{max(sy):6.2f}) {rel(k, 'synced'):>6}  "
              f"{med[k]['user']:6.2f} {med[k]['sys']:6.2f} {crel:>9}")

    def ratio(a: str, b: str, m: str = "returned") -> str:
        return f"{med[a][m] / med[b][m]:.2f}x" if a in med and b in med else "n/a"

    print("goals (issue 14), returned / returned+sync:")
    print(f"  wh / uv (no bytecode)            {ratio('wh', 'uv')} / {ratio('wh', 'uv', 'synced')}   goal <= 0.90x")
    print(f"  wh --compile / uv --compile-bc   {ratio('wh --compile', 'uv --compile-bytecode')} / "
          f"{ratio('wh --compile', 'uv --compile-bytecode', 'synced')}   goal <= 0.80x")
    if "wh --compile --recompile" in med:
        print("  (wh --compile above wrote the bytecode `wh bytecode` made at stage time; compiled on the box:)")
        print(f"  wh --compile --recompile / uv    {ratio('wh --compile --recompile', 'uv --compile-bytecode')} / "
              f"{ratio('wh --compile --recompile', 'uv --compile-bytecode', 'synced')}")
    print(f"  wh / uv --require-hashes         {ratio('wh', UV_HASHES)} / {ratio('wh', UV_HASHES, 'synced')}"
          "   (uv checking every wheel's sha256 too, as wh does)")
    print(f"  wh --link-cache warm / uv warm  {ratio(WH_WARM, UV_WARM)} / {ratio(WH_WARM, UV_WARM, 'synced')}"
          "   goal <= 3x (issue 31)")
    print(f"  wh / unzip floor                 {ratio('wh', 'unzip floor')} / {ratio('wh', 'unzip floor', 'synced')}")
    print(f"  wh / pip --no-compile            {ratio('wh', 'pip --no-compile')}")
    print(f"  wh (stdlib zlib) / uv            {ratio('wh (stdlib zlib)', 'uv')}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wheelhouse", type=Path, nargs="+")
    ap.add_argument("--runs", type=int, default=5, help="alternating rounds (default 5; see the note on ext4)")
    ap.add_argument("--uv", default=shutil.which("uv"), help="uv executable (default: on PATH)")
    ap.add_argument("--only", action="append", help="run only these tools (repeatable)")
    ap.add_argument("--wh-jobs", type=int, action="append", default=[],
                    help="also time wh with this many workers (repeatable: a sweep)")
    ap.add_argument("--bytecode", action="store_true",
                    help="also give each wheelhouse stage-time bytecode (`wh bytecode`, on a hardlinked copy) and time "
                         "`wh install --compile` writing it beside `--compile --recompile` (compiling on the box)")
    ap.add_argument("--warm", action="store_true",
                    help=f"also time {WH_WARM!r} and {UV_WARM!r}: each tool's cache filled once before the rounds "
                         "(untimed) and kept between them; every run still gets a fresh venv")
    ap.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()), help="where the venvs go")
    args = ap.parse_args(argv)
    print(f"{os.cpu_count()} cores; wh inflates with {available()[0]}; uv: {args.uv or 'not found (skipped)'}; "
          f"load {_load()}", flush=True)
    if not args.scratch.is_dir():
        ap.error(f"--scratch {args.scratch}: not a folder; create it, or leave --scratch out for the temporary folder")
    if args.uv and not shutil.which(args.uv):
        ap.error(f"--uv {args.uv}: no such executable; give uv's path, or leave --uv out to use the uv on PATH")
    work = Path(tempfile.mkdtemp(prefix="wh-bench-", dir=args.scratch))
    results = {}
    try:
        for house in args.wheelhouse:
            results[house] = _bench(house, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for house, res in results.items():
        _report(house, res)
    print(f"\nload average at the end: {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
