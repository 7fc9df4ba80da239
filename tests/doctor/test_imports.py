"""Batched imports: every failure confirmed alone, a hang costs one timeout (direct tests of doctor/imports.py)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from wheelhouse.doctor.imports import import_modules, plan_batches


def _pkg(root: Path, name: str, body: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(body)


def test_batched_imports_isolate_crashes_and_failures(tmp_path):
    root = tmp_path / "mods"
    _pkg(root, "good_a", "X = 1\n")
    _pkg(root, "good_b", "X = 2\n")
    _pkg(root, "crasher", "import ctypes\nctypes.string_at(0)\n")
    _pkg(root, "raiser", "raise ImportError('nope: broken on purpose')\n")
    # Fails only when another module poisoned the process first: the solo re-run must clear it.
    _pkg(root, "poison", "import builtins\nbuiltins.WH_POISON = True\n")
    _pkg(root, "victim", "import builtins\nif getattr(builtins, 'WH_POISON', False):\n    raise RuntimeError('poisoned')\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    mods = ["good_a", "poison", "victim", "crasher", "raiser", "good_b", "not_installed_anywhere"]
    out = import_modules(sys.executable, mods, jobs=1, timeout=10, env=env)
    assert list(out) == mods
    assert out["good_a"].ok and out["good_b"].ok and out["poison"].ok
    assert out["victim"].ok and out["victim"].isolated  # failed in the batch, passed alone: ok
    assert not out["crasher"].ok and out["crasher"].isolated and "SIGSEGV" in out["crasher"].crash
    assert out["crasher"].found is None  # it never got to report; the crash is the evidence
    assert not out["raiser"].ok and out["raiser"].found and out["raiser"].error_type == "ImportError"
    assert out["not_installed_anywhere"].found is False and out["not_installed_anywhere"].error_type == "ModuleNotFoundError"


def test_hanging_import_times_out_per_module_not_per_batch(tmp_path):
    root = tmp_path / "mods"
    _pkg(root, "slowish", "import time\ntime.sleep(0.8)\n")
    _pkg(root, "slowish2", "import time\ntime.sleep(0.8)\n")
    _pkg(root, "stuck", "import time\ntime.sleep(600)\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    t0 = time.monotonic()
    out = import_modules(sys.executable, ["slowish", "slowish2", "stuck"], jobs=1, timeout=1.5, env=env)
    assert out["slowish"].ok and out["slowish2"].ok  # 1.6 s in one batch, but each under 1.5 s
    assert not out["stuck"].ok and "timed out" in out["stuck"].crash and out["stuck"].isolated
    assert time.monotonic() - t0 < 15


def test_a_hang_inside_a_batch_costs_one_timeout(tmp_path):
    root = tmp_path / "mods"
    _pkg(root, "early", "X = 1\n")
    _pkg(root, "stuck", "import time\ntime.sleep(600)\n")
    _pkg(root, "late", "X = 2\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    t0 = time.monotonic()
    out = import_modules(sys.executable, ["early", "stuck", "late"], jobs=1, timeout=8, env=env)
    seconds = time.monotonic() - t0
    assert out["early"].ok and out["late"].ok
    assert not out["stuck"].ok and out["stuck"].isolated and "timed out after 8s" in out["stuck"].crash
    assert seconds < 8 + 6  # the batch gave up on it after a short grace; only the solo run waits the timeout


def test_a_module_file_is_imported_by_its_name_only_where_find_spec_resolves_that_name_to_it(tmp_path):
    root = tmp_path / "mods"
    _pkg(root, "pkg", "X = 1\n")
    (root / "pkg" / "sub.py").write_text("raise ImportError('imported after all')\n")
    (root / "pkg" / "missing_dep.py").write_text("import wh_no_such_module_xyz\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = import_modules(sys.executable, ["pkg.sub", "pkg.missing_dep"], jobs=1, timeout=10, env=env,
                         files={"pkg.sub": str(root / "pkg" / "_sub.so"),
                                "pkg.missing_dep": str(root / "pkg" / "missing_dep.py")})
    sub = out["pkg.sub"]  # the name resolves to another file: not imported, and said why
    assert sub.ok and sub.covered == f"find_spec('pkg.sub') resolves to {root / 'pkg' / 'sub.py'}, not this file"
    dep = out["pkg.missing_dep"]  # the name resolves to this file: imported, and what is missing is named
    assert not dep.ok and dep.covered is None and dep.missing == "wh_no_such_module_xyz"


def test_a_module_entered_first_in_a_circular_import_is_imported_through_its_sibling(tmp_path):
    # scipy.linalg._matfuncs_sqrtm_triu imports _matfuncs_sqrtm, which imports it back: first, it fails.
    root = tmp_path / "mods"
    _pkg(root, "cyc", "")
    (root / "cyc" / "_m.py").write_text("class SqrtmError(Exception):\n    pass\nfrom ._x import within_block_loop\n")
    (root / "cyc" / "_x.py").write_text("from ._m import SqrtmError\ndef within_block_loop():\n    return SqrtmError\n")
    # A cycle that fails from either end stays a failure.
    (root / "cyc" / "_p.py").write_text("from ._q import B\nA = 1\n")
    (root / "cyc" / "_q.py").write_text("from ._p import A\nB = 2\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = import_modules(sys.executable, ["cyc._x", "cyc._p"], jobs=1, timeout=10, env=env)
    assert out["cyc._x"].ok and out["cyc._x"].via == "cyc._m"
    p = out["cyc._p"]
    assert not p.ok and p.via is None and "partially initialized module 'cyc._p'" in p.error


def test_a_slow_import_past_the_grace_is_not_thrown_away_by_its_batch(tmp_path, monkeypatch):
    """torch takes ~8 s on the H200 image: its batch keeps it (one run alone starts beside it, for a hang's sake),
    and the modules after it are not re-batched to import it again."""
    import wheelhouse.doctor.imports as imports

    monkeypatch.setattr(imports, "BATCH_GRACE", 0.5)
    root = tmp_path / "mods"
    log = tmp_path / "imported.log"
    _pkg(root, "heavy", f"import time\nopen({str(log)!r}, 'a').write('x')\ntime.sleep(1.5)\n")
    for sub in ("a", "b", "c"):
        (root / "heavy" / f"{sub}.py").write_text("X = 1\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = import_modules(sys.executable, ["heavy.a", "heavy.b", "heavy.c"], jobs=1, timeout=20, env=env)
    assert all(o.ok for o in out.values())
    assert len(log.read_text()) == 2  # the batch, and the run alone beside it: not once more per module after it


def test_a_package_estimated_heavy_is_not_imported_a_second_time_alone_within_its_estimate(tmp_path, monkeypatch):
    """torch on the box's cold disk: its run alone, started at the short grace, read the same cold files as its
    batch (32 s -> 29 s without it). An import estimated to take longer gets its estimate; a light one the grace."""
    import wheelhouse.doctor.imports as imports

    monkeypatch.setattr(imports, "BATCH_GRACE", 0.5)
    root = tmp_path / "mods"
    log = tmp_path / "imported.log"
    _pkg(root, "heavy", f"import time\nopen({str(log)!r}, 'a').write('x')\ntime.sleep(1.5)\n")
    _pkg(root, "light", f"import time\nopen({str(log)!r}, 'a').write('y')\ntime.sleep(1.5)\n")
    for top in ("heavy", "light"):
        (root / top / "a.py").write_text("X = 1\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = import_modules(sys.executable, ["heavy", "heavy.a", "light", "light.a"], jobs=2, timeout=20, env=env,
                         estimates=lambda: ({"heavy": 10.0, "light": 0.1}, {}))
    assert all(o.ok for o in out.values())
    assert sorted(log.read_text()) == ["x", "y", "y"]  # heavy once (its batch), light twice (batch and alone)


def test_modules_under_a_package_wait_for_its_verdict_alone(tmp_path):
    """A package that failed only among others (poisoned) gets its modules loaded; one that fails alone gets none
    loaded (they would fail the same way, or hang again), and its own failure is the verdict."""
    root = tmp_path / "mods"
    _pkg(root, "poison", "import builtins\nbuiltins.WH_POISON = True\n")
    _pkg(root, "victim", "import builtins\nif getattr(builtins, 'WH_POISON', False):\n    raise RuntimeError('poisoned')\n")
    (root / "victim" / "sub.py").write_text("X = 1\n")
    _pkg(root, "broken", "raise ImportError('broken on purpose')\n")
    (root / "broken" / "sub.py").write_text("X = 1\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = import_modules(sys.executable, ["poison", "victim", "broken", "victim.sub", "broken.sub"], jobs=1,
                         timeout=10, env=env, estimates=lambda: ({"poison": 5.0}, {}))  # the heaviest goes first: poison, then victim
    assert out["victim"].ok and out["victim"].isolated and out["victim.sub"].ok
    assert not out["broken"].ok and "broken.sub" not in out


def test_a_hanging_package_costs_one_timeout_not_one_per_module_under_it(tmp_path):
    root = tmp_path / "mods"
    _pkg(root, "hangs", "import time\ntime.sleep(600)\n")
    for sub in ("a", "b", "c"):
        (root / "hangs" / f"{sub}.py").write_text("X = 1\n")
    _pkg(root, "fine", "X = 1\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    t0 = time.monotonic()
    out = import_modules(sys.executable, ["hangs", "fine", "hangs.a", "hangs.b", "hangs.c"], jobs=1, timeout=6,
                         env=env)
    seconds = time.monotonic() - t0
    assert out["fine"].ok and not out["hangs"].ok and "timed out" in out["hangs"].crash
    assert not any(m in out for m in ("hangs.a", "hangs.b", "hangs.c"))  # not loaded: their package hangs
    assert seconds < 6 + 4 + 5  # one timeout, the grace, and room for a loaded machine; not one per module


def test_the_import_queue_starts_the_heaviest_package_first_and_packs_the_light_ones():
    """One worker drew twice the CPU of the other when batches were split by module count: now the queue is
    ordered by the estimated cost (installed bytes), heaviest first, and light packages are packed together."""
    mods = ["torch", "torch._C", *[f"light{i}" for i in range(12)], "mid", "mid._ext"]
    costs = {"torch": 15.0, "mid": 2.0}
    batches = plan_batches(mods, 2, costs)
    assert batches[0] == ["torch", "torch._C"]  # alone, first: the other worker takes everything else meanwhile
    rest = [m for b in batches[1:] for m in b]
    assert sorted(rest) == sorted(["mid", "mid._ext", *[f"light{i}" for i in range(12)]])
    # the light ones and mid (2 s) packed, at most 8 packages to an interpreter start: not thirteen starts, and no
    # one batch of everything an estimate from bytes called light (the run's tail)
    assert len(batches) == 3 and all(len({m.split(".")[0] for m in b}) <= 8 for b in batches)
    many = plan_batches([*mods, *[f"pkg{i}" for i in range(30)]], 2, {**costs, **{f"pkg{i}": 1.0 for i in range(30)}})
    assert many[0] == ["torch", "torch._C"] and len(many) >= 4  # more batches than workers: taken as each frees up
    one = plan_batches(mods, 1, costs)
    assert len(one) == 1 and sorted(one[0]) == sorted(mods)  # one worker: one batch (nothing to balance)


def _installed(site, specs):
    """The doctor's view of installed distributions (what the import estimates read): each spec is (name, RECORD
    rows as (path, size), Requires-Dist), its RECORD written under ``site``."""
    from types import SimpleNamespace

    from wheelhouse.doctor.checks.context import Distribution

    by = {}
    for name, files, *requires in specs:
        info = site / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "RECORD").write_text("".join(f"{rel},,{size}\n" for rel, size in files))
        d = Distribution(name=name, version="1.0", location=str(site), dist_info=str(info), top_level=(),
                         extension_modules=0, extension_top_level=(), requires=tuple(*requires))
        by[d.key] = d
    return SimpleNamespace(distributions=by, dist=lambda n: by.get(n.lower().replace("_", "-")))


def test_an_import_that_imports_a_heavy_requirement_is_estimated_heavy_and_a_bare_namespace_light(tmp_path):
    """torchvision's import is torch's first: packed with light packages as its own bytes said, it was the box's
    tail (a batch of 9.6 s). Its estimate now carries the heaviest distribution it requires; a namespace folder
    (nvidia/, 3 GB of libraries nothing imports) costs nothing."""
    from wheelhouse.doctor.checks.native import import_estimates

    costs, _ = import_estimates(_installed(tmp_path, [
        ("torch", [("torch/__init__.py", 1000), ("torch/lib/libtorch_cuda.so", 1_500_000_000)]),
        ("torchvision", [("torchvision/__init__.py", 1000), ("torchvision/_C.so", 5_000_000)],
         ["torch==2.11", "pillow", "scipy; extra == 'docs'"]),
        ("scipy", [("scipy/__init__.py", 1000), ("scipy/big.so", 900_000_000)]),
        ("pillow", [("PIL/__init__.py", 1000), ("PIL/_imaging.so", 5_000_000)]),
        ("nvidia-cublas", [("nvidia/cublas/lib/libcublasLt.so.13", 700_000_000)])]))
    assert costs["torchvision"] > costs["torch"] >= 14  # torch first, then its own bytes
    assert costs["torchvision"] < costs["scipy"] + costs["torch"]  # an extra's requirement is not counted
    assert costs["PIL"] < 1 and costs["nvidia"] == 0


def test_packages_whose_import_is_mostly_another_one_share_its_worker(tmp_path):
    """torch, functorch, torchvision and torchaudio in four workers imported torch four times at once (the box's
    first wave: torchvision 8.7-10.9 s); as one family, one worker imports torch once, then the rest."""
    from wheelhouse.doctor.checks.native import import_estimates

    _, families = import_estimates(_installed(tmp_path, [
        ("torch", [("torch/__init__.py", 1000), ("torch/lib/libtorch_cuda.so", 1_500_000_000),
                   ("functorch/__init__.py", 1000)]),
        ("torchvision", [("torchvision/__init__.py", 1000), ("torchvision/_C.so", 5_000_000)], ["torch"]),
        ("vast", [("vast/__init__.py", 1000), ("vast/core.so", 2_000_000_000)], ["torch"]),
        ("numpy", [("numpy/__init__.py", 1000), ("numpy/core.so", 30_000_000)])]))
    assert families == {"torchvision": "torch", "functorch": "torch"}  # vast outweighs torch: its own batch
    mods = ["torch", "torch._C", "functorch", "torchvision", "torchvision._C", "numpy", "numpy.core", "vast"]
    costs = {"torch": 15.0, "functorch": 15.0, "torchvision": 15.5, "vast": 35.0, "numpy": 0.3}
    batches = plan_batches(mods, 4, costs, families)
    torch = next(b for b in batches if "torch" in b)
    assert torch[0] == "torch" and set(torch) == {"torch", "torch._C", "functorch", "torchvision", "torchvision._C"}
    assert ["vast"] in batches and all(b.count("torch") <= 1 for b in batches)
    assert sorted(m for b in batches for m in b) == sorted(mods)  # every module once
    # A family's batch is at most about twice its root's import: a member past that pays the root's import again
    # in a batch of its own (vLLM and its kind, each mostly torch, are not all imported by one worker in a row).
    bound = plan_batches(["t", "v", "big1", "big2"], 4, {"t": 10, "v": 10.5, "big1": 16, "big2": 17},
                         {"v": "t", "big1": "t", "big2": "t"})
    assert sorted(map(sorted, bound)) == [["big1", "t", "v"], ["big2"]]


def test_a_run_alone_that_raced_its_batch_over_a_first_import_cache_is_run_again(tmp_path, monkeypatch):
    """The first import writes a cache as it goes (half, a pause, the rest); every later import reads it. Past the
    grace, the run alone beside the batch read the half-written file and failed, and that answer stood: a false
    red that `wh drop` acted on. The batch then imported it: one more run alone, after the batch, decides."""
    import wheelhouse.doctor.imports as imports

    monkeypatch.setattr(imports, "BATCH_GRACE", 0.5)
    root = tmp_path / "mods"
    cache = tmp_path / "cache.json"
    _pkg(root, "slowcache", f"import json, os, time\nPATH = {str(cache)!r}\n"
                            "if os.path.exists(PATH):\n    TABLE = json.load(open(PATH))\n"
                            "else:\n    with open(PATH, 'w') as fh:\n        fh.write('[1, ')\n        fh.flush()\n"
                            "        time.sleep(2)\n        fh.write('2]')\n    TABLE = [1, 2]\n")
    _pkg(root, "filler", "X = 1\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = import_modules(sys.executable, ["slowcache", "filler"], jobs=1, timeout=20, env=env)
    assert out["slowcache"].ok, out["slowcache"]
    assert out["filler"].ok


def test_a_run_alone_that_fails_as_its_batch_does_stays_a_failure(tmp_path, monkeypatch):
    import wheelhouse.doctor.imports as imports

    monkeypatch.setattr(imports, "BATCH_GRACE", 0.5)
    root = tmp_path / "mods"
    _pkg(root, "slowbroken", "import time\ntime.sleep(1.5)\nraise RuntimeError('broken after a while')\n")
    _pkg(root, "filler", "X = 1\n")
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = import_modules(sys.executable, ["slowbroken", "filler"], jobs=1, timeout=20, env=env)
    assert not out["slowbroken"].ok and out["slowbroken"].isolated
    assert "broken after a while" in out["slowbroken"].error
