"""uv as a peer in tests, hermetic: it is given its interpreter and never downloads one, reads no
uv.toml / pyproject configuration of the machine, and reaches nothing but the loopback index a test
passes it. Every uv call in tests goes through ``run_uv`` (tests/test_hermetic_subprocesses.py
checks that)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["uv_binary", "uv_env", "run_uv"]


def uv_binary() -> str | None:
    """The uv next to the test interpreter (the [test] extra installs it), else ``WH_UV``, else PATH."""
    beside = Path(sys.executable).parent / "uv"
    return os.environ.get("WH_UV") or (str(beside) if beside.exists() else None) or shutil.which("uv")


def uv_env(registry: bool = False) -> dict[str, str]:
    """The environment of a hermetic uv: no interpreter downloads, no configuration files, no
    registry (a proxy on a closed loopback port catches any request not aimed at loopback).
    ``registry``: for a registry-marked test, uv's default index is reachable (the machine's proxies stay)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env.update(UV_PYTHON_DOWNLOADS="never", UV_NO_CONFIG="1", UV_PYTHON_PREFERENCE="only-system")
    if registry:
        return env
    env.update(UV_HTTP_RETRIES="0", HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9",
               ALL_PROXY="http://127.0.0.1:9", NO_PROXY="127.0.0.1,localhost,::1")
    for k in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        env.pop(k, None)
    return env


def run_uv(*args: str, python: str | os.PathLike | None = None, timeout: float = 120, registry: bool = False,
           **kw) -> subprocess.CompletedProcess:
    """``uv <args> --no-config`` with ``-p python`` (default: the test interpreter) where the
    command takes one (``pip ...``), in ``uv_env()``; text output captured."""
    uv = uv_binary()
    assert uv, "uv is not installed (pip install uv, or set WH_UV)"
    cmd = [uv, *args, "--no-config"]
    if args and args[0] == "pip" and not {"-p", "--python"} & set(args):
        cmd += ["--python", str(python or sys.executable)]
    return subprocess.run(cmd, env=uv_env(registry), capture_output=True, text=True, timeout=timeout, **kw)
