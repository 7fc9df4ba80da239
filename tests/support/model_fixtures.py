"""Tiny fake checkpoints: config.json and real safetensors headers, for the model checks."""

from __future__ import annotations

import json
import struct
from pathlib import Path

_DTYPE_BYTES = {"BF16": 2, "F8_E4M3": 1, "I8": 1, "F32": 4}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]], pad_data: bool = True) -> int:
    """A valid safetensors file: header + zero data. Returns the data size in bytes."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape) in tensors.items():
        n = _DTYPE_BYTES[dtype]
        for s in shape:
            n *= s
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        if pad_data:
            fh.write(b"\0" * offset)
    return offset


def write_model(folder: Path, heads=32, kv_heads=8, vocab=32000, moe=1408, experts=4) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "vocab_size": vocab,
        "moe_intermediate_size": moe, "hidden_size": 64}))
    dense = {"model.embed_tokens.weight": ("BF16", (vocab, 64)),
             "model.layers.0.self_attn.q_proj.weight": ("BF16", (64, 64)),
             "model.layers.0.mlp.shared_experts.up_proj.weight": ("BF16", (64, 64))}
    expert = {f"model.layers.0.mlp.experts.{e}.w{i}.weight": ("I8", (moe, 64)) for e in range(experts) for i in (1, 2, 3)}
    write_safetensors(folder / "model-00001-of-00002.safetensors", dense)
    write_safetensors(folder / "model-00002-of-00002.safetensors", expert, pad_data=False)  # headers are enough
    return folder
