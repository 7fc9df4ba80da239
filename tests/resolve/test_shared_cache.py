"""One cache, many runs: real `wh stage --dry-run` processes against a loopback index.

Cold, warm and offline runs give the same pins; two processes resolving at once into the same empty
cache both succeed with the same pins and leave a cache an offline run can use whole; a cache whose
every page entry was cut short (a power cut: entries are not fsynced) is a miss, never fewer
candidates, and is fetched again."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from wheelmaker import make_wheel

TARGET = ["--python-version", "3.12", "--platform", "manylinux_2_35_x86_64"]


@pytest.fixture
def published(tmp_path):
    d = tmp_path / "pub"
    make_wheel(d, "app", "1.0", requires=["lib>=1", "util", 'old; python_version < "3.12"'])
    make_wheel(d, "app", "2.0", requires=["lib>=2", "util<2"])
    for v in ("1.0", "2.0", "3.0"):
        make_wheel(d, "lib", v, requires=["util>=1"])
    make_wheel(d, "lib", "2.5", tags="cp312-cp312-manylinux_2_17_x86_64", requires=["util"])
    make_wheel(d, "lib", "4.0", tags="cp313-cp313-manylinux_2_17_x86_64")  # not for the target
    for v in ("1.0", "1.5", "2.0"):
        make_wheel(d, "util", v)
    make_wheel(d, "old", "1.0")
    return d


def _cmd(idx_url, cache, *more):
    return [sys.executable, "-c", "import sys; from wheelhouse.cli import main; main(sys.argv[1:])",
            "stage", "app", "--dry-run", "--json", "--no-bootstrap", "--index-url", idx_url, "--cache-dir", str(cache),
            *TARGET, *more]


def _pins(proc) -> dict[str, str]:
    assert proc.returncode == 0, proc.stderr
    return {p["name"]: p["filename"] for p in json.loads(proc.stdout)["packages"]}


def _run(idx_url, cache, *more):
    return _pins(subprocess.run(_cmd(idx_url, cache, *more), capture_output=True, text=True, timeout=300))


EXPECTED = {"app": "app-2.0-py3-none-any.whl", "lib": "lib-3.0-py3-none-any.whl", "util": "util-1.5-py3-none-any.whl"}


@pytest.mark.parametrize("serve_metadata", [True, False], ids=["pep658", "ranges"])
def test_cold_warm_refresh_and_offline_runs_give_the_same_pins(pyindex, published, tmp_path, serve_metadata):
    idx = pyindex(published, serve_metadata=serve_metadata)
    cache = tmp_path / "cache"
    cold = _run(idx.url, cache)
    assert cold == EXPECTED
    pages = idx.page_requests()
    assert _run(idx.url, cache) == cold and idx.page_requests() == pages  # warm: fresh pages, no request
    assert _run(idx.url, cache, "--refresh") == cold
    idx.stop()
    assert _run(idx.url, cache, "--offline") == cold


def test_two_processes_resolving_at_once_share_the_cache(pyindex, published, tmp_path):
    idx = pyindex(published, serve_metadata=False)
    cache = tmp_path / "cache"
    procs = [subprocess.Popen(_cmd(idx.url, cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        results.append(_pins(subprocess.CompletedProcess(p.args, p.returncode, out, err)))
    assert results == [EXPECTED] * 3
    assert not [p for p in cache.rglob("*.tmp")], list(cache.rglob("*.tmp"))  # no temp file left behind
    idx.stop()
    assert _run(idx.url, cache, "--offline") == EXPECTED  # what they left is whole


def test_a_cache_cut_short_everywhere_is_fetched_again_never_fewer_candidates(pyindex, published, tmp_path):
    idx = pyindex(published, serve_metadata=False)
    cache = tmp_path / "cache"
    assert _run(idx.url, cache) == EXPECTED
    pages = sorted((cache / "http").glob("*.page"))
    metas = sorted((cache / "metadata").glob("*.meta"))
    assert len(pages) >= 3 and len(metas) >= 3  # one file per page, one per wheel's metadata
    for f in [*pages, *metas]:  # every entry loses its tail, as after a power cut mid-write
        raw = f.read_bytes()
        f.write_bytes(raw[: max(1, len(raw) - 7)])
    before = idx.page_requests()
    proc = subprocess.run(_cmd(idx.url, cache, "--offline"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "is not in the cache" in proc.stderr  # offline: a miss, named
    assert _run(idx.url, cache) == EXPECTED  # online: fetched again, same answer
    assert idx.page_requests() >= before + len(pages)
    idx.stop()
    assert _run(idx.url, cache, "--offline") == EXPECTED
