"""GPU facts from ``nvidia-smi``: cards, compute capability, memory, driver, interconnect.

One value type (``Gpu``) for a card seen now and a card a target profile recorded; one query
(the capture script's ``query_nvidia_smi``, which also runs on the box before wh is there).

Used by the doctor and by ``wh serve``'s preflight. No GPU (or no nvidia-smi)
means an empty list, never an error. ``WH_DOCTOR_FAKE_GPUS=FILE.json`` replaces
the query with the file's contents -- a test hook, documented in docs/doctor.md#test-hook-fake-gpus
(wh's source repository)::

    {"driver_version": "580.159.04", "cuda_version": "13.0",
     "gpus": [{"index": 0, "name": "NVIDIA L4", "compute_capability": "8.9",
               "memory_total_mib": 23034, "memory_used_mib": 0}],
     "topology": "pcie"}
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Mapping

from . import capture

__all__ = ["Gpu", "GpuFacts", "gpu_from_json", "facts_from_json", "query_gpus", "query_gpu_facts", "FAKE_ENV"]

FAKE_ENV = "WH_DOCTOR_FAKE_GPUS"


@dataclass(frozen=True)
class Gpu:
    """One card: what nvidia-smi says of it now, or what a target profile recorded."""

    index: int
    name: str
    compute_capability: str | None = None  # "8.9"
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None

    @property
    def sm(self) -> str | None:
        """``8.9`` -> ``sm_89``."""
        return "sm_" + self.compute_capability.replace(".", "") if self.compute_capability else None

    @property
    def memory_free_mib(self) -> int | None:
        if self.memory_total_mib is None or self.memory_used_mib is None:
            return None
        return self.memory_total_mib - self.memory_used_mib

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "compute_capability": self.compute_capability,
                "memory_total_mib": self.memory_total_mib, "memory_used_mib": self.memory_used_mib}


@dataclass(frozen=True)
class GpuFacts:
    gpus: tuple[Gpu, ...]
    driver_version: str | None = None
    cuda_version: str | None = None  # the highest CUDA the driver supports
    topology: str | None = None  # "nvlink" | "pcie" | None (unknown / one card)
    topology_matrix: str | None = None
    source: str = "nvidia-smi"  # or "fake" or "none"
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"gpus": [g.to_json() for g in self.gpus], "driver_version": self.driver_version,
                "cuda_version": self.cuda_version, "topology": self.topology, "source": self.source,
                "error": self.error}


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def gpu_from_json(d: Mapping[str, Any], position: int) -> Gpu:
    """A Gpu from its JSON shape (nvidia-smi facts, a target profile's ``gpus``); ``position`` when it has no index."""
    index = d.get("index")
    if isinstance(index, str) and index.isdigit():
        index = int(index)
    return Gpu(
        index=index if isinstance(index, int) and not isinstance(index, bool) else position,
        name=str(d.get("name") or "GPU"),
        compute_capability=str(d["compute_capability"]) if d.get("compute_capability") not in (None, "") else None,
        memory_total_mib=_opt_int(d.get("memory_total_mib")),
        memory_used_mib=_opt_int(d.get("memory_used_mib")),
    )


def facts_from_json(data: Mapping[str, Any], source: str = "fake") -> GpuFacts:
    """GpuFacts from the JSON shape shown in the module docstring (also a target profile's gpus)."""
    gpus = tuple(gpu_from_json(g, i) for i, g in enumerate(data.get("gpus") or []))
    return GpuFacts(gpus=gpus, driver_version=data.get("driver_version"), cuda_version=data.get("cuda_version"),
                    topology=data.get("topology"), source=source, error=data.get("error"))


def _topology(smi: str, count: int, timeout: float) -> tuple[str | None, str | None]:
    if count < 2:
        return None, None
    try:
        proc = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None, None
    out = proc.stdout if proc.returncode == 0 else ""
    if not out:
        return None, None
    # Cells between GPUs: NV# means NVLink; PIX/PXB/PHB/NODE/SYS are PCIe paths.
    rows = [ln.split() for ln in out.splitlines() if re.match(r"^\s*GPU\d+\s", ln)]
    cells = [c for r in rows for c in r[1:count + 1]]
    topo = "nvlink" if any(c.startswith("NV") for c in cells) else ("pcie" if cells else None)
    return topo, out.strip()


def query_gpu_facts(timeout: float = 20, environ: Mapping[str, str] | None = None) -> GpuFacts:
    """Every GPU fact nvidia-smi gives; an empty GpuFacts without a GPU."""
    env = os.environ if environ is None else environ
    fake = env.get(FAKE_ENV)
    if fake:
        from wheelhouse.datafile import load_json
        from wheelhouse.errors import UsageError

        return facts_from_json(load_json(fake, what=f"{FAKE_ENV} file", error=UsageError, hint=f"fix or unset {FAKE_ENV}"),
                               source="fake")
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if not smi:
        return GpuFacts(gpus=(), source="none")
    facts = facts_from_json(capture.query_nvidia_smi(smi, timeout), source="nvidia-smi")
    if facts.error:
        return facts
    topo, matrix = _topology(smi, len(facts.gpus), timeout)
    return GpuFacts(gpus=facts.gpus, driver_version=facts.driver_version, cuda_version=facts.cuda_version,
                    topology=topo, topology_matrix=matrix)


def query_gpus(timeout: float = 20) -> list[Gpu]:
    """The GPUs nvidia-smi sees (``[]`` when there is none or no nvidia-smi)."""
    return list(query_gpu_facts(timeout).gpus)
