"""Will this checkpoint split and fit? Read from config.json and safetensors headers only.

A safetensors file starts with an 8-byte little-endian header length and a JSON
header mapping tensor names to dtype, shape and data offsets; nothing else is
read, so a 156 GiB checkpoint is summarised in milliseconds. Routed-expert
tensors (names containing ``.experts.``) are counted apart from dense ones:
with expert offload only the dense part must sit on the GPUs, split by TP,
while the experts must fit in host RAM.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from wheelhouse.datafile import load_json, open_regular
from wheelhouse.errors import UsageError
from .report import CheckResult

__all__ = ["ModelError", "TensorInfo", "ModelSummary", "read_safetensors_header", "summarize_model",
           "tp_results", "fit_results", "EXPERT_PATTERN"]

EXPERT_PATTERN = re.compile(r"(^|\.)experts\.")
_MAX_HEADER = 512 << 20
_TP_KEYS = ("num_attention_heads", "num_key_value_heads", "vocab_size", "moe_intermediate_size")
_MIB = 1 << 20
_GIB = 1 << 30


class ModelError(UsageError):
    code = "bad-model"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def is_expert(self) -> bool:
        return bool(EXPERT_PATTERN.search(self.name))


def read_safetensors_header(path: str | Path) -> list[TensorInfo]:
    """The tensors of one .safetensors file, from its header alone."""
    path = Path(path)
    # Regular files only: a FIFO named *.safetensors would block the doctor, a device never end.
    fh = open_regular(path, what="model shard", error=ModelError, hint="point --model at a folder of real shards")
    try:
        with fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise ModelError(f"{path} is too short to be a safetensors file", hint="re-download the shard")
            (length,) = struct.unpack("<Q", raw)
            if length > _MAX_HEADER:
                raise ModelError(f"{path} claims a {length}-byte header", hint="the file is not safetensors or is corrupt")
            header = json.loads(fh.read(length))
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror}", hint="check the --model folder") from exc
    except ValueError as exc:
        raise ModelError(f"{path} has a header that is not JSON", hint="re-download the shard") from exc
    if not isinstance(header, dict):
        raise ModelError(f"{path} has a header that is not a JSON object", hint="re-download the shard")
    out = []
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = meta["data_offsets"]
            out.append(TensorInfo(name, str(meta["dtype"]), tuple(meta["shape"]), int(end) - int(start)))
        except (KeyError, TypeError, ValueError) as exc:  # the header of a damaged or foreign file
            raise ModelError(f"{path}: tensor {name} lacks a valid dtype, shape or data_offsets",
                             hint="re-download the shard") from exc
    return out


@dataclass(frozen=True)
class ModelSummary:
    path: Path
    config: Mapping[str, Any]
    files: int
    tensors: int
    dense_bytes: int
    expert_bytes: int
    dtypes: Mapping[str, int] = field(default_factory=dict)  # dtype -> bytes

    @property
    def total_bytes(self) -> int:
        return self.dense_bytes + self.expert_bytes

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "files": self.files, "tensors": self.tensors,
                "dense_bytes": self.dense_bytes, "expert_bytes": self.expert_bytes, "dtypes": dict(self.dtypes)}


def summarize_model(model_dir: str | Path) -> ModelSummary:
    """Config plus dense/expert byte counts of every ``*.safetensors`` in ``model_dir``."""
    d = Path(model_dir)
    if not d.is_dir():
        raise ModelError(f"model folder {d} does not exist", hint="pass --model DIR with config.json and *.safetensors")
    config: Mapping[str, Any] = {}
    cfg = d / "config.json"
    if os.path.lexists(cfg):
        config = load_json(cfg, what="model config", error=ModelError, hint="fix or re-download config.json")
    shards = sorted(d.glob("*.safetensors"))
    if not shards and not config:
        raise ModelError(f"{d} has no config.json and no *.safetensors", hint="point --model at the checkpoint folder")
    dense = expert = count = 0
    dtypes: dict[str, int] = {}
    for shard in shards:
        for t in read_safetensors_header(shard):
            count += 1
            dtypes[t.dtype] = dtypes.get(t.dtype, 0) + t.nbytes
            if t.is_expert:
                expert += t.nbytes
            else:
                dense += t.nbytes
    return ModelSummary(d, config, len(shards), count, dense, expert, dtypes)


def _config_value(config: Mapping[str, Any], key: str) -> Any:
    if key in config:
        return config[key]
    for sub in ("text_config", "llm_config", "language_config"):
        if isinstance(config.get(sub), Mapping) and key in config[sub]:
            return config[sub][key]
    return None


def tp_results(config: Mapping[str, Any], tp: int) -> list[CheckResult]:
    """One result per TP-split dimension the config has: fail when ``tp`` does not divide it."""
    out = []
    for key in _TP_KEYS:
        value = _config_value(config, key)
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        ok = value % tp == 0
        out.append(CheckResult(
            f"model:tp-{key.replace('_', '-')}", f"--tp {tp} divides {key}", "ok" if ok else "fail",
            f"{key} = {value}, {value} % {tp} = {value % tp}",
            hint=None if ok else f"pick a tensor-parallel size that divides {value} (e.g. "
                                 + ", ".join(str(n) for n in range(1, 9) if value % n == 0) + ")",
            data={"key": key, "value": value, "tp": tp},
        ))
    return out


def fit_results(summary: ModelSummary, tp: int, free_vram_mib: Sequence[int] | None,
                mem_available: int | None) -> list[CheckResult]:
    """Dense bytes per GPU against free VRAM; expert bytes against host RAM (MemAvailable)."""
    out = []
    dense_per_gpu = summary.dense_bytes / tp
    whole_per_gpu = summary.total_bytes / tp
    if not free_vram_mib:
        out.append(CheckResult("model:fit-dense", "dense weights per GPU fit in free VRAM", "skip",
                               f"no GPU to compare against ({dense_per_gpu / _GIB:.2f} GiB dense per GPU at tp={tp})"))
    else:
        free = min(free_vram_mib[:tp]) * _MIB
        ok = dense_per_gpu <= free
        out.append(CheckResult(
            "model:fit-dense", "dense weights per GPU fit in free VRAM", "ok" if ok else "fail",
            f"dense {summary.dense_bytes / _GIB:.2f} GiB / tp {tp} = {dense_per_gpu / _GIB:.2f} GiB per GPU; "
            f"least free VRAM {free / _GIB:.2f} GiB",
            hint=None if ok else "raise --tp, use more GPUs, or a smaller / more quantised checkpoint",
            data={"dense_bytes": summary.dense_bytes, "per_gpu_bytes": int(dense_per_gpu), "free_bytes": free},
        ))
        if summary.expert_bytes and whole_per_gpu <= free:
            out.append(CheckResult("model:fit-experts", "expert weights fit", "ok",
                                   f"whole model {whole_per_gpu / _GIB:.2f} GiB per GPU fits in VRAM; no offload needed"))
            return out
    if summary.expert_bytes:
        if mem_available is None:
            out.append(CheckResult("model:fit-experts", "expert weights fit in host RAM (offload)", "skip",
                                   "MemAvailable unknown"))
        else:
            ok = summary.expert_bytes <= mem_available
            out.append(CheckResult(
                "model:fit-experts", "expert weights fit in host RAM (offload)", "ok" if ok else "fail",
                f"experts {summary.expert_bytes / _GIB:.2f} GiB; MemAvailable {mem_available / _GIB:.2f} GiB",
                hint=None if ok else "free host memory, or use a box with more RAM: the expert banks live there",
                data={"expert_bytes": summary.expert_bytes, "mem_available": mem_available},
            ))
    return out
