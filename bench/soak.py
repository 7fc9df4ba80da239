"""Soak: rounds of `wh stage` (a small loopback index) and `wh install`, each SIGKILLed at a random moment.

Not part of the test run (it takes minutes). Every round re-stages one output folder with
the other of two versions of a small stack (so every install is an upgrade or a downgrade,
with a ~600-file wheel for kills to land inside extraction), kills the stage or the install
(the whole process group, SIGKILL) at a random moment with probability --kill-rate, and then
checks what a user would:

- the wheelhouse verifies (every file of pylock.toml has its sha256), at once or after a re-run of a
  killed stage (a stage that exits non-zero is counted as a "stage error", not judged further);
- the venv equals the lock (the right versions, every RECORD file with its bytes, no journal),
  either at once (the kill came too late) or after the next plain `wh install` ("repaired");
- before that repair, rolling back the killed install's journal gives back exactly the tree the
  venv had before that install ("exact rollbacks"; not judged in rounds that start a fresh venv).
  Anything else is a corruption and is printed.

    python bench/soak.py [--rounds 50] [--seed 1] [--kill-rate 0.8] [--keep DIR]

Prints one line per round and a summary: rounds, kills, repairs, corruptions.

``--drop``: rounds of `wh drop` and `wh drop --restore` instead, on a venv holding a broken ``raiser``
(a gcc-built extension that loads, an ``__init__`` that raises; 300 modules, so kills land inside the
uninstall), each SIGKILLed at a fault point of the drop or the install transaction (or at a random moment)
with probability --kill-rate. After every kill, `wh drop --list` must say what is true: raiser installed
and not recorded, or gone and recorded (then `--restore` must bring it back). Gone and not recorded is a
"lost record"; a half-installed raiser, an unreadable record or a restore that fails is a corruption.

    python bench/soak.py --drop [--rounds 50] [--seed 1]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "support"))

from faults import wh_command  # noqa: E402
from index_fixtures import _pyindex  # noqa: E402
from nvidia_fixtures import tree_listing  # noqa: E402
from venv_check import lock_problems  # noqa: E402
from wheelmaker import make_wheel  # noqa: E402

from wheelhouse.install.transaction import recover  # noqa: E402
from wheelhouse.lock import read_pylock  # noqa: E402

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def _publish(folder: Path) -> None:
    """Two versions of a stack: app -> core, lib, big (big: ~600 modules and a 4 MB blob)."""
    for v in ("1.0", "2.0"):
        make_wheel(folder, "app", v, requires=[f"core=={v}", f"lib=={v}", f"big=={v}"],
                   modules={"app/__init__.py": f"V = '{v}'\n"}, entry_points={"console_scripts": {"app": "app:main"}})
        make_wheel(folder, "core", v, modules={"core/__init__.py": f"V = '{v}'\n", "shared/common.py": f"S = '{v}'\n"})
        make_wheel(folder, "lib", v, modules={f"lib/m{i}.py": f"X = '{v}'\n" * 20 for i in range(40)},
                   files={f"lib-{v}.data/data/share/lib/{v}.txt": v})
        make_wheel(folder, "big", v, modules={f"big/p{i // 60}/m{i}.py": f"Y = '{v}'\n" * 40 for i in range(600)},
                   files={"big/blob.bin": os.urandom(4 << 20)})


def _run(args, kill_after: float | None, env=None) -> tuple[int | None, bool]:
    """Run ``wh args``; SIGKILL its process group after ``kill_after`` s. Returns (exit code, killed)."""
    proc = subprocess.Popen(wh_command(args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    if kill_after is not None:
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None, True
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        print(f"    wh {' '.join(map(str, args[:2]))} exit {proc.returncode}: {err.strip().splitlines()[-2:]}")
    return proc.returncode, False


def _tree(venv: Path) -> list[tuple]:
    """The venv's tree, without the backups a run killed after its commit leaves in .wh/txn (or an older
    wh's .wh/trash): the next run sweeps them, and they are no part of what the environment imports."""
    return [e for e in tree_listing(venv) if "/.wh/txn" not in f"/{e[0]}" and "/.wh/trash" not in f"/{e[0]}"]


def _wheelhouse_problems(out: Path) -> list[str]:
    try:
        files = read_pylock(out).files
    except Exception as exc:  # noqa: BLE001 -- any unreadable lock is a finding
        return [f"pylock.toml: {exc}"]
    bad = []
    for f in files:
        p = out / f.path
        if not p.is_file():
            bad.append(f"{f.filename}: missing")
        elif hashlib.sha256(p.read_bytes()).hexdigest() != f.sha256:
            bad.append(f"{f.filename}: other bytes")
    return bad


_DROP_POINTS = ("drop.recorded", "install.journal-written", "install.backed-up", "install.committed",
                "drop.uninstalled", None)  # None: a random moment
_RESTORE_POINTS = ("install.journal-written", "install.backed-up", "install.before-commit", "install.committed",
                   "drop.restored", None)


def _run_fault(args, point: str | None, kill_after: float) -> tuple[int | None, bool]:
    """Run ``wh args`` killed at fault ``point`` (WH_FAULT), or after ``kill_after`` s when ``point`` is None."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    if point is not None:
        proc = subprocess.run(wh_command(args), capture_output=True, text=True, env={**env, "WH_FAULT": point},
                              timeout=600)
        return proc.returncode, proc.returncode == -signal.SIGKILL
    return _run(args, kill_after, env=env)


def _drop_state(site: Path, python: Path) -> tuple[str, str]:
    """("installed" | "recorded" | "lost" | "corrupt", detail) after `wh drop --list` reconciled the record."""
    listed = subprocess.run(wh_command(["drop", "--python", python, "--list", "--json"]), capture_output=True,
                            text=True, timeout=300)
    if listed.returncode != 0:
        return "corrupt", f"drop --list exit {listed.returncode}: {listed.stderr.strip().splitlines()[-1:]}"
    import json

    names = [e.get("name") for e in json.loads(listed.stdout)]
    infos = list(site.glob("raiser-*.dist-info"))
    if infos:
        problems = [rel for rel in (line.split(",")[0] for line in (infos[0] / "RECORD").read_text().splitlines())
                    if rel and not (site / rel).exists()]
        if problems:
            return "corrupt", f"raiser half-installed: {problems[:3]}"
        return ("installed", "") if not names else ("corrupt", f"installed and still recorded: {names}")
    if (site / "raiser").exists() and any((site / "raiser").rglob("*.py")):
        return "corrupt", "raiser's files without its .dist-info"
    return ("recorded", "") if names == ["raiser"] else ("lost", f"gone, record lists {names}")


def drop_soak(a, rng: random.Random, work: Path) -> dict[str, int]:
    from broken_packages import make_venv
    from repair_fixtures import raiser_house

    house = raiser_house(work, modules=300)
    venv = work / "venv"
    make_venv(venv)
    python, site = venv / "bin" / "python", venv / "lib" / PY / "site-packages"
    rc, _ = _run(["install", house, "--venv", venv, "--no-links"], None)
    assert rc == 0, "the first install failed"
    counts = {"rounds": 0, "drop kills": 0, "restore kills": 0, "restores": 0, "lost records": 0, "corruptions": 0}
    drop_time = restore_time = 2.0
    for r in range(a.rounds):
        counts["rounds"] += 1
        what = []
        for cmd, points, key in ((["drop", "--python", python], _DROP_POINTS, "drop"),
                                 (["drop", "--python", python, "--restore", "raiser"], _RESTORE_POINTS, "restore")):
            state, detail = _drop_state(site, python)
            if (key == "drop") != (state == "installed"):  # a drop needs raiser there, a restore needs it recorded
                if state not in ("installed", "recorded"):
                    break
                continue
            point = rng.choice(points) if rng.random() < a.kill_rate else "none"
            t0 = time.monotonic()
            if point == "none":
                rc, killed = _run(cmd, None)
            else:
                rc, killed = _run_fault(cmd, point, rng.uniform(0, drop_time if key == "drop" else restore_time))
            if not killed:
                elapsed = time.monotonic() - t0
                drop_time, restore_time = (elapsed, restore_time) if key == "drop" else (drop_time, elapsed)
            if killed:
                counts[f"{key} kills"] += 1
            state, detail = _drop_state(site, python)
            what.append(f"{key}{' killed at ' + (point or 'a random moment') if killed else ''}: {state}")
            if state == "lost":
                counts["lost records"] += 1
                print(f"round {r}: LOST: {detail}")
                break
            if state == "corrupt":
                counts["corruptions"] += 1
                print(f"round {r}: CORRUPT: {detail}")
                break
        state, detail = _drop_state(site, python)
        if state == "recorded":  # back to the start: raiser installed, nothing recorded
            rc, _ = _run(["drop", "--python", python, "--restore", "raiser"], None)
            state, detail = _drop_state(site, python)
            if rc == 0 and state == "installed":
                counts["restores"] += 1
            else:
                counts["corruptions"] += 1
                print(f"round {r}: restore failed (exit {rc}): {state} {detail}")
                break
        print(f"round {r}: {'; '.join(what)}", flush=True)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kill-rate", type=float, default=0.8)
    ap.add_argument("--keep", type=Path, help="work here and keep it (default: a temp folder, removed)")
    ap.add_argument("--drop", action="store_true", help="kill `wh drop` and `wh drop --restore` instead")
    a = ap.parse_args(argv)
    rng = random.Random(a.seed)
    work = a.keep or Path(tempfile.mkdtemp(prefix="wh-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    if a.drop:
        try:
            counts = drop_soak(a, rng, work)
        finally:
            if a.keep is None:
                shutil.rmtree(work, ignore_errors=True)
        print("summary: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        return 1 if counts["corruptions"] or counts["lost records"] else 0
    # A stage killed mid-download drops its connections: the index's "Broken pipe" tracebacks are expected.
    ThreadingHTTPServer.handle_error = lambda self, request, client_address: None
    gen = _pyindex()
    start = next(gen)
    counts = {"rounds": 0, "kills": 0, "stage kills": 0, "install kills": 0, "exact rollbacks": 0, "repairs": 0,
              "stage errors": 0, "corruptions": 0}
    try:
        _publish(work / "pub")
        idx = start(work / "pub")
        out, venv, cache = work / "wh", work / "venv", work / "cache"
        stage_time = install_time = None
        for r in range(a.rounds):
            counts["rounds"] += 1
            version = "1.0" if r % 2 == 0 else "2.0"
            stage = ["stage", f"app=={version}", "-i", idx.url, "-o", out, "--no-bootstrap", "--cache-dir", cache]
            what = []
            # -- stage, maybe killed
            kill = stage_time is not None and rng.random() < a.kill_rate / 2
            t0 = time.monotonic()
            rc, killed = _run(stage, rng.uniform(0, stage_time) if kill else None)
            stage_time = stage_time or (time.monotonic() - t0)
            if killed:
                counts["kills"] += 1
                counts["stage kills"] += 1
                what.append("stage killed")
                rc, _ = _run(stage, None)
            if rc != 0:  # a refusal or a crash of stage, said so: not a silent corruption, but counted
                counts["stage errors"] += 1
                print(f"round {r}: stage exit {rc}")
                continue
            bad = _wheelhouse_problems(out)
            if bad:
                counts["corruptions"] += 1
                print(f"round {r}: wheelhouse corrupt: {bad[:3]}")
                continue
            # -- install, maybe killed; a fresh venv every tenth round
            if r % 10 == 9:
                shutil.rmtree(venv, ignore_errors=True)
            before = _tree(venv) if venv.exists() else None
            install = ["install", out, "--venv", venv, "--no-links"]
            kill = install_time is not None and rng.random() < a.kill_rate
            t0 = time.monotonic()
            rc, killed = _run(install, rng.uniform(0, install_time * 1.2) if kill else None)
            if not killed:
                install_time = install_time or (time.monotonic() - t0)
            site = venv / "lib" / PY / "site-packages"
            python = venv / "bin" / "python"
            problems = lock_problems(python, site, out) if python.exists() else ["no venv"]
            if killed:
                counts["kills"] += 1
                counts["install kills"] += 1
                what.append("install killed" + (", already complete" if not problems else ""))
            if problems:
                if not killed:
                    counts["corruptions"] += 1
                    print(f"round {r}: install exit {rc} and the venv differs from the lock: {problems[:3]}")
                    continue
                if before is not None and site.is_dir():
                    recover(site)
                    after = _tree(venv)
                    if after != before:
                        counts["corruptions"] += 1
                        print(f"round {r}: the rollback did not give back the previous tree: only before "
                              f"{sorted(set(before) - set(after))[:4]}, only after {sorted(set(after) - set(before))[:4]}")
                        continue
                    counts["exact rollbacks"] += 1
                    what.append("rolled back exactly")
                rc, _ = _run(install, None)
                problems = lock_problems(python, site, out) if python.exists() else ["no venv"]
                if rc == 0 and not problems:
                    counts["repairs"] += 1
                    what.append("repaired by the next run")
                else:
                    counts["corruptions"] += 1
                    print(f"round {r}: NOT repaired (exit {rc}): {problems[:3]}")
                    continue
            print(f"round {r}: app {version}: {', '.join(what) or 'no kill'}: venv equals the lock", flush=True)
    finally:
        next(gen, None)
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print("summary: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 1 if counts["corruptions"] or counts["stage errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
