"""A stand-in ``nvidia-smi`` on PATH for a box of several cards: what wh asks it, answered from data.

It answers the queries wh makes (``--query-gpu=...``, ``--query-compute-apps=...``, ``topo -m``, the bare
header) with the cards and processes given, so the doctor, the preflight and ``wh doctor compare`` can be
proven on a machine without a GPU. Unknown arguments get the header, as the real one prints its table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

__all__ = ["Card", "GpuApp", "write_fake_smi", "h200s"]

DRIVER = "580.159.04"


@dataclass(frozen=True)
class Card:
    name: str = "NVIDIA H200"
    compute_capability: str = "9.0"
    total_mib: int = 143771
    used_mib: int = 0


@dataclass(frozen=True)
class GpuApp:
    """A process holding memory on card ``gpu``."""

    pid: int
    gpu: int
    used_mib: int
    name: str = "python3"


def h200s(n: int) -> list[Card]:
    return [Card() for _ in range(n)]


def _topo(n: int, link: str) -> str:
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity"
    rows = [f"GPU{i}\t" + "\t".join(" X " if i == j else link for j in range(n)) + "\t0-63\t0" for i in range(n)]
    return "\n".join([head, *rows, "", "Legend:", "  X    = Self", f"  {link} = Connection"]) + "\n"


def write_fake_smi(bin_dir: Path, cards: Sequence[Card], *, apps: Sequence[GpuApp] = (), link: str = "NV18",
                   driver: str = DRIVER, cuda: str = "13.0") -> Path:
    """Write ``bin_dir/nvidia-smi`` answering for ``cards``; returns its path (put ``bin_dir`` first on PATH)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    gpus = "".join(f"{i}, {c.name}, {c.compute_capability}, {c.total_mib}, {c.used_mib}, {driver}, GPU-fake-{i}\n"
                   for i, c in enumerate(cards))
    procs = "".join(f"GPU-fake-{a.gpu}, {a.pid}, {a.used_mib}, {a.name}\n" for a in apps)
    script = f"""#!/bin/sh
case "$1" in
  --query-gpu=*) printf '%s' '{gpus}' ;;
  --query-compute-apps=*) printf '%s' '{procs}' ;;
  topo) printf '%s' '{_topo(len(cards), link)}' ;;
  *) printf '| NVIDIA-SMI {driver}   Driver Version: {driver}   CUDA Version: {cuda} |\\n' ;;
esac
"""
    smi = bin_dir / "nvidia-smi"
    smi.write_text(script)
    smi.chmod(0o755)
    return smi
