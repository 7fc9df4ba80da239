"""GPU facts from ``nvidia-smi``: cards, compute capability, memory, driver, interconnect.

One value type (``Gpu``) for a card seen now and a card a target profile recorded; one query
(the capture script's ``query_nvidia_smi``, which also runs on the box before wh is there).

Used by the doctor and by ``wh serve``'s preflight. No GPU (or no nvidia-smi)
means an empty list, never an error; an nvidia-smi that fails is an ``error`` in its own words, never an
exception. ``WH_DOCTOR_FAKE_GPUS=FILE.json`` replaces
the query with the file's contents -- a test hook, documented in docs/doctor.md#test-hook-fake-gpus
(wh's source repository)::

    {"driver_version": "580.159.04", "cuda_version": "13.0",
     "gpus": [{"index": 0, "name": "NVIDIA L4", "compute_capability": "8.9",
               "memory_total_mib": 23034, "memory_used_mib": 0,
               "processes": [{"pid": 4182, "used_mib": 6144, "name": "python3"}]}],
     "topology": "pcie"}

``CUDA_VISIBLE_DEVICES`` (as indices, by CUDA's rule) limits the live facts to the cards an engine started in that
environment would see, so the doctor, the preflight and the engine count the same cards.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from . import capture

__all__ = ["Gpu", "GpuProcess", "GpuFacts", "gpu_from_json", "facts_from_json", "query_gpus", "query_gpu_facts",
           "visible_gpus", "FAKE_ENV", "VISIBLE_ENV"]

FAKE_ENV = "WH_DOCTOR_FAKE_GPUS"
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a card (``nvidia-smi --query-compute-apps``)."""

    pid: int
    used_mib: int | None = None
    name: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "used_mib": self.used_mib, "name": self.name}


@dataclass(frozen=True)
class Gpu:
    """One card: what nvidia-smi says of it now, or what a target profile recorded."""

    index: int
    name: str
    compute_capability: str | None = None  # "8.9"
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    processes: tuple[GpuProcess, ...] = ()  # live facts only: who holds memory on it now

    @property
    def sm(self) -> str | None:
        """``8.9`` -> ``sm_89``."""
        return "sm_" + self.compute_capability.replace(".", "") if self.compute_capability else None

    @property
    def memory_in_use_mib(self) -> int | None:
        """Memory in use: nvidia-smi's memory.used, else (``[N/A]`` on some cards) what the processes it lists on
        the card hold; None when neither says (unknown, never 0)."""
        if self.memory_used_mib is not None:
            return self.memory_used_mib
        held = [p.used_mib for p in self.processes]
        return sum(held) if held and None not in held else None

    @property
    def memory_free_mib(self) -> int | None:
        if self.memory_total_mib is None or self.memory_used_mib is None:
            return None
        return self.memory_total_mib - self.memory_used_mib

    def to_json(self) -> dict[str, Any]:
        out = {"index": self.index, "name": self.name, "compute_capability": self.compute_capability,
               "memory_total_mib": self.memory_total_mib, "memory_used_mib": self.memory_used_mib}
        if self.processes:
            out["processes"] = [p.to_json() for p in self.processes]
        return out


@dataclass(frozen=True)
class GpuFacts:
    gpus: tuple[Gpu, ...]
    driver_version: str | None = None
    cuda_version: str | None = None  # the highest CUDA the driver supports
    topology: str | None = None  # "nvlink" | "pcie" | None (unknown / one card)
    topology_matrix: str | None = None
    source: str = "nvidia-smi"  # or "fake" or "none"
    error: str | None = None
    visible: str | None = None  # CUDA_VISIBLE_DEVICES when it limited the cards
    total: int | None = None  # cards nvidia-smi lists before that limit

    def to_json(self) -> dict[str, Any]:
        out = {"gpus": [g.to_json() for g in self.gpus], "driver_version": self.driver_version,
               "cuda_version": self.cuda_version, "topology": self.topology, "source": self.source,
               "error": self.error}
        if self.visible is not None:
            out.update(cuda_visible_devices=self.visible, gpus_total=self.total)
        return out


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
        processes=tuple(GpuProcess(int(p["pid"]), _opt_int(p.get("used_mib")), str(p.get("name") or ""))
                        for p in d.get("processes") or () if isinstance(p, Mapping) and _opt_int(p.get("pid")) is not None),
    )


def facts_from_json(data: Mapping[str, Any], source: str = "fake") -> GpuFacts:
    """GpuFacts from the JSON shape shown in the module docstring (also a target profile's gpus)."""
    gpus = tuple(gpu_from_json(g, i) for i, g in enumerate(data.get("gpus") or []))
    return GpuFacts(gpus=gpus, driver_version=data.get("driver_version"), cuda_version=data.get("cuda_version"),
                    topology=data.get("topology"), source=source, error=data.get("error"))


def _topology(smi: str, indices: Sequence[int], timeout: float) -> tuple[str | None, str | None]:
    if len(indices) < 2:
        return None, None
    try:
        proc = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None, None
    out = proc.stdout if proc.returncode == 0 else ""
    if not out:
        return None, None
    # Cells between GPUs: NV# means NVLink; PIX/PXB/PHB/NODE/SYS are PCIe paths.
    rows = {int(r[0][3:]): r[1:] for r in (ln.split() for ln in out.splitlines() if re.match(r"^\s*GPU\d+\s", ln))}
    cells = [rows[i][j] for i in indices if i in rows for j in indices if j != i and j < len(rows[i])]
    topo = "nvlink" if any(c.startswith("NV") for c in cells) else ("pcie" if cells else None)
    return topo, out.strip()


def visible_gpus(gpus: Sequence[Gpu], visible: str | None) -> list[Gpu]:
    """The cards CUDA_VISIBLE_DEVICES leaves an engine: unset, every card; UUIDs or MIG names are not filtered.

    CUDA's rule for the rest: an empty value hides every card, and the list stops at the first entry that is no
    card's index (``-1``, ``none``, an index out of range): ``0,-1,2`` leaves card 0 alone."""
    if visible is None:
        return list(gpus)
    entries = [p.strip() for p in visible.split(",")]
    if any(p.upper().startswith(("GPU-", "MIG-")) for p in entries):
        return list(gpus)
    indices = {g.index for g in gpus}
    wanted: set[int] = set()
    for p in entries:
        if not p.isdigit() or int(p) not in indices:
            break
        wanted.add(int(p))
    return [g for g in gpus if g.index in wanted]


def _limited(facts: GpuFacts, visible: str | None) -> GpuFacts:
    cards = tuple(visible_gpus(facts.gpus, visible))
    if len(cards) == len(facts.gpus):
        return facts
    return dataclasses.replace(facts, gpus=cards, visible=visible, total=len(facts.gpus))


def _processes(smi: str, timeout: float) -> dict[int, tuple[GpuProcess, ...]]:
    """card index -> the processes holding memory on it; {} when nvidia-smi cannot say."""
    def query(what: str) -> list[list[str]]:
        try:
            proc = subprocess.run([smi, f"--query-{what}", "--format=csv,noheader,nounits"], capture_output=True,
                                  text=True, timeout=timeout)
        except (OSError, subprocess.SubprocessError):
            return []
        return [[p.strip() for p in ln.split(",")] for ln in proc.stdout.splitlines()] if proc.returncode == 0 else []

    index = {r[-1]: int(r[0]) for r in query("gpu=index,uuid") if len(r) >= 2 and r[0].isdigit()}
    out: dict[int, list[GpuProcess]] = {}
    for r in query("compute-apps=gpu_uuid,pid,used_memory,process_name"):
        if len(r) >= 4 and r[0] in index and r[1].isdigit():
            out.setdefault(index[r[0]], []).append(GpuProcess(int(r[1]), int(r[2]) if r[2].isdigit() else None, ",".join(r[3:])))
    return {i: tuple(ps) for i, ps in out.items()}


def query_gpu_facts(timeout: float = 20, environ: Mapping[str, str] | None = None) -> GpuFacts:
    """Every GPU fact nvidia-smi gives, for the cards ``CUDA_VISIBLE_DEVICES`` leaves; empty without a GPU."""
    env = os.environ if environ is None else environ
    fake = env.get(FAKE_ENV)
    if fake:
        from wheelhouse.datafile import load_json
        from wheelhouse.errors import UsageError

        return _limited(facts_from_json(load_json(fake, what=f"{FAKE_ENV} file", error=UsageError,
                                                  hint=f"fix or unset {FAKE_ENV}"), source="fake"),
                        env.get(VISIBLE_ENV))
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if not smi:
        return GpuFacts(gpus=(), source="none")
    facts = facts_from_json(capture.query_nvidia_smi(smi, timeout), source="nvidia-smi")
    if facts.error:
        return facts
    held = _processes(smi, timeout) if facts.gpus else {}
    facts = _limited(dataclasses.replace(
        facts, gpus=tuple(dataclasses.replace(g, processes=held.get(g.index, ())) for g in facts.gpus)),
        env.get(VISIBLE_ENV))
    topo, matrix = _topology(smi, [g.index for g in facts.gpus], timeout)
    return dataclasses.replace(facts, topology=topo, topology_matrix=matrix)


def query_gpus(timeout: float = 20, environ: Mapping[str, str] | None = None) -> list[Gpu]:
    """The GPUs nvidia-smi sees that CUDA_VISIBLE_DEVICES leaves (``[]`` when there is none or no nvidia-smi)."""
    return list(query_gpu_facts(timeout, environ).gpus)
