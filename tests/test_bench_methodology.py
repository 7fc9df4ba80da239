"""The benchmarks time each peer doing only the measured work (issue 31): uv is given its interpreter, reads no
configuration and downloads no CPython; every tool gets the same index and a clean pip configuration; a cold wh
run has its home cache empty too (nothing seeded from pip before the timing)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import _fair  # noqa: E402
import bench_resolve  # noqa: E402


def _args(**kw):
    return argparse.Namespace(python_version="3.12", platform="manylinux_2_35_x86_64", index_url="http://127.0.0.1:9/simple",
                              **kw)


def test_uv_is_given_its_interpreter_no_configuration_and_the_same_index_as_wh(tmp_path):
    a = _args()
    uv = bench_resolve.uv_cmd("uv", tmp_path / "r.in", a, tmp_path / "uvc")
    wh = bench_resolve.wh_cmd("vllm", a, tmp_path / "whc")
    assert uv[uv.index("--python") + 1] == sys.executable and "--no-config" in uv
    assert uv[uv.index("--index-url") + 1] == wh[wh.index("--index-url") + 1] == a.index_url


def test_a_cold_wh_run_has_its_home_cache_beside_its_cache_dir(tmp_path):
    wh = bench_resolve.wh_cmd("vllm", _args(), tmp_path / "whc-0")
    assert f"WH_CACHE_DIR={tmp_path / 'whc-0'}-home" in wh


def test_every_tool_runs_with_a_clean_pip_and_uv_configuration(monkeypatch):
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///elsewhere")
    monkeypatch.setenv("UV_INDEX_URL", "http://elsewhere/simple")
    env = _fair.clean_env()
    assert env["PIP_CONFIG_FILE"] == os.devnull and env["UV_PYTHON_DOWNLOADS"] == "never" and env["UV_NO_CONFIG"] == "1"
    assert "PIP_EXTRA_INDEX_URL" not in env and "UV_INDEX_URL" not in env


def test_runs_alternate_and_the_methodology_says_what_each_tool_was_given():
    tools = ["wh", "uv"]
    assert _fair.order(tools, 0) == tools and _fair.order(tools, 1) == tools[::-1]
    line = _fair.methodology("http://user:secret@127.0.0.1:9/simple")
    assert line.startswith("methodology: ") and "--no-config" in line and "UV_PYTHON_DOWNLOADS=never" in line
    assert "secret" not in line
