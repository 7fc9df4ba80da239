"""A stand-in ``nvidia-smi`` on PATH for a box of several cards: what wh asks it, answered from data.

It answers the queries wh makes (``--query-gpu=...``, ``--query-compute-apps=...``, ``topo -m``, the bare
header) with the cards and processes given, so the doctor, the preflight and ``wh doctor compare`` can be
proven on a machine without a GPU. Unknown arguments get the header, as the real one prints its table.
"""

from __future__ import annotations

import json
import sys
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


_SCRIPT = """#!{python}
import json, sys
data = json.loads({data!r})
args = sys.argv[1:]
def query(prefix, rows):
    fields = next(a for a in args if a.startswith(prefix))[len(prefix):].split(",")
    units = "nounits" in " ".join(args)
    for row in rows:
        print(", ".join(str(row[f]) + ("" if units or not f.startswith(("memory", "used")) else " MiB") for f in fields))
if any(a.startswith("--query-gpu=") for a in args):
    query("--query-gpu=", data["gpus"])
elif any(a.startswith("--query-compute-apps=") for a in args):
    query("--query-compute-apps=", data["apps"])
elif args[:1] == ["topo"]:
    sys.stdout.write(data["topo"])
elif args[:1] == ["-L"]:
    for g in data["gpus"]:
        print(f"GPU {{g['index']}}: {{g['name']}} (UUID: {{g['uuid']}})")
else:
    print(f"| NVIDIA-SMI {{data['driver']}}   Driver Version: {{data['driver']}}   CUDA Version: {{data['cuda']}} |")
"""


def _topo(n: int, link: str) -> str:
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity"
    rows = [f"GPU{i}\t" + "\t".join(" X " if i == j else link for j in range(n)) + "\t0-63\t0" for i in range(n)]
    return "\n".join([head, *rows, "", "Legend:", "  X    = Self", f"  {link} = Connection"]) + "\n"


def write_fake_smi(bin_dir: Path, cards: Sequence[Card], *, apps: Sequence[GpuApp] = (), link: str = "NV18",
                   driver: str = DRIVER, cuda: str = "13.0") -> Path:
    """Write ``bin_dir/nvidia-smi`` answering for ``cards``; returns its path (put ``bin_dir`` first on PATH).

    ``--query-gpu`` and ``--query-compute-apps`` print the fields asked for, in the order asked, as the real one does.
    """
    gpus = [{"index": i, "name": c.name, "compute_cap": c.compute_capability, "memory.total": c.total_mib,
             "memory.used": c.used_mib, "driver_version": driver, "uuid": f"GPU-fake-{i}"} for i, c in enumerate(cards)]
    procs = [{"pid": a.pid, "gpu_uuid": f"GPU-fake-{a.gpu}", "used_memory": a.used_mib, "process_name": a.name}
             for a in apps]
    data = json.dumps({"gpus": gpus, "apps": procs, "topo": _topo(len(cards), link), "driver": driver, "cuda": cuda})
    bin_dir.mkdir(parents=True, exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(_SCRIPT.format(python=sys.executable, data=data))
    smi.chmod(0o755)
    return smi
