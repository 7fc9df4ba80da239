"""The resolver against the real package index, compared with uv in the same run (opt-in: -m registry)."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from faults import wh_command
from uv_tool import run_uv, uv_binary


@pytest.mark.registry
@pytest.mark.skipif(uv_binary() is None, reason="uv is not installed (pip install uv, or set WH_UV)")
def test_vllm_with_numpy_below_2_finishes_with_uvs_pins(tmp_path):
    """vllm + numpy<2 for cp312 / manylinux_2_35 x86_64: wh once gave up after 20000 rounds (uv: vllm 0.14.0,
    torch 2.9.1, numpy 1.26.4, ~180 pins), then settled an older mistral-common than uv."""
    t0 = time.monotonic()
    wh = subprocess.run(wh_command(["stage", "vllm", "numpy<2", "--python-version", "3.12", "--platform",
                                    "manylinux_2_35_x86_64", "--dry-run", "--cache-dir", str(tmp_path / "c")]),
                        capture_output=True, text=True, timeout=600)
    wh_s = time.monotonic() - t0
    assert wh.returncode == 0, wh.stderr
    (tmp_path / "req.in").write_text("vllm\nnumpy<2\n")
    t0 = time.monotonic()
    uv = run_uv("pip", "compile", str(tmp_path / "req.in"), "--python-platform", "x86_64-manylinux_2_35",
                "--python-version", "3.12", "--no-header", "--no-annotate", "--quiet",
                "--cache-dir", str(tmp_path / "uv-cache"), timeout=600, registry=True)
    uv_s = time.monotonic() - t0
    assert uv.returncode == 0, uv.stderr
    pins = lambda text: dict(re.findall(r"^([a-z0-9\-_.]+)==(\S+)", text, re.M))  # noqa: E731
    ours, theirs = pins(wh.stdout), pins(uv.stdout)
    assert int(ours["numpy"].split(".")[0]) < 2
    assert ours == theirs, {k: (ours.get(k), theirs.get(k)) for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k)}
    print(f"cold caches: wh {wh_s:.1f} s, uv {uv_s:.1f} s; {len(ours)} pins: vllm {ours['vllm']}, torch {ours['torch']}, "
          f"numpy {ours['numpy']}")
