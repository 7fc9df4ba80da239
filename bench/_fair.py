"""What every benchmark gives each tool, so that each does only the work measured (issue 31).

- One index for all, named explicitly on every command line: ``--index-url``, else ``$BENCH_INDEX_URL``, else
  the default pip states, asked once before timing with a throwaway cache (never one a timed run reads).
- A clean pip configuration for every tool: no ``PIP_*`` variables, ``PIP_CONFIG_FILE`` = the null device (no
  pip.conf of the machine, its extra indexes, find-links or constraints, reaches wh, pip or uv).
- uv is given its interpreter (``--python``), reads no uv.toml (``--no-config``) and downloads no CPython
  (``UV_PYTHON_DOWNLOADS=never``); no ``UV_*`` of the caller's leaks in.
- cold = empty caches for every tool in every run (wh's ``--cache-dir`` and home cache, uv's, pip's).
- runs paired, the order alternating round by round (``order``): no tool always gets the warmer path.

``methodology()`` is the line each script prints with its table.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

__all__ = ["index_url", "clean_env", "uv_flags", "order", "methodology", "load"]


def index_url(explicit: str | None = None) -> str:
    """The one index every tool is given (see the module's docstring)."""
    if explicit or os.environ.get("BENCH_INDEX_URL"):
        return explicit or os.environ["BENCH_INDEX_URL"]
    with tempfile.TemporaryDirectory(prefix="wh-bench-index-") as tmp:  # (no cache a timed run reads)
        code = "from wheelhouse.index.pip_config import pip_stated_default as d; print(d() or '')"
        env = {**clean_env(), "WH_CACHE_DIR": tmp}
        url = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                             check=True).stdout.strip()
    if not url:
        raise SystemExit("no index: pass --index-url URL or set BENCH_INDEX_URL")
    return url


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment with a clean pip and uv configuration, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "WH_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", UV_PYTHON_DOWNLOADS="never",
               UV_NO_CONFIG="1", UV_NO_PROGRESS="1", NO_COLOR="1")
    env.update(extra)
    return env


def uv_flags(python: str | os.PathLike) -> list[str]:
    """What a ``uv pip ...`` command is given: its interpreter, and no configuration files."""
    return ["--python", str(python), "--no-config"]


def order(names: list[str], round_: int) -> list[str]:
    """The tools' order in round ``round_`` (0-based): as given, then reversed, and so on."""
    return list(names) if round_ % 2 == 0 else list(names)[::-1]


def load() -> str:
    try:
        return "load average %.2f %.2f %.2f on %d cores" % (*os.getloadavg(), os.cpu_count() or 0)
    except OSError:
        return "load average unknown"


def methodology(index: str | None, *, cold: bool = True, peers: str = "uv, pip") -> str:
    """The line printed with every table: what each tool was given."""
    where = f"index {_redacted(index)} named on every command line" if index else "no index (local files only)"
    return (f"methodology: {where}; clean pip configuration for all (PIP_CONFIG_FILE={os.devnull}, no PIP_*); "
            f"uv: --python, --no-config, UV_PYTHON_DOWNLOADS=never; "
            + ("cold = empty caches for every tool, every run; " if cold else "")
            + f"paired runs, order alternating each round; peers: {peers}; {load()}")


def _redacted(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return url if not parts.password else url.replace(f":{parts.password}@", ":***@")
