"""Model checks from tiny fake checkpoints: config.json and real safetensors headers written here."""

from __future__ import annotations

import json
import struct

import pytest

from model_fixtures import write_model, write_safetensors
from wheelhouse.doctor.modelfit import ModelError, fit_results, read_safetensors_header, summarize_model, tp_results


def test_header_is_read_without_the_data(tmp_path):
    size = write_safetensors(tmp_path / "a.safetensors", {"x": ("BF16", (3, 5)), "layer.experts.0.w": ("I8", (7,))},
                             pad_data=False)
    tensors = {t.name: t for t in read_safetensors_header(tmp_path / "a.safetensors")}
    assert size == 3 * 5 * 2 + 7
    assert tensors["x"].nbytes == 30 and tensors["x"].shape == (3, 5) and not tensors["x"].is_expert
    assert tensors["layer.experts.0.w"].is_expert


def test_summary_splits_dense_and_expert_bytes(tmp_path):
    m = write_model(tmp_path / "m", vocab=1000, moe=100, experts=4)
    s = summarize_model(m)
    assert s.expert_bytes == 4 * 3 * 100 * 64
    # shared_experts are dense: always active, they stay on the GPU.
    assert s.dense_bytes == (1000 * 64 + 64 * 64 + 64 * 64) * 2
    assert s.files == 2 and s.tensors == 3 + 12


def test_tp_divides_heads_kv_heads_vocab_and_moe_size(tmp_path):
    cfg = json.loads((write_model(tmp_path / "m", heads=32, kv_heads=8, vocab=32001, moe=1408) / "config.json").read_text())
    res = {r.id: r for r in tp_results(cfg, 4)}
    assert res["model:tp-num-attention-heads"].verdict == "ok"
    assert res["model:tp-num-key-value-heads"].verdict == "ok"
    assert res["model:tp-vocab-size"].verdict == "fail" and "32001 % 4 = 1" in res["model:tp-vocab-size"].evidence
    assert res["model:tp-moe-intermediate-size"].verdict == "ok"
    assert {r.id: r.verdict for r in tp_results(cfg, 3)}["model:tp-num-attention-heads"] == "fail"


def test_fit_dense_per_gpu_vs_vram_and_experts_vs_host_ram(tmp_path):
    s = summarize_model(write_model(tmp_path / "m", vocab=8192, moe=4096, experts=8))
    dense_mib = s.dense_bytes / 2**20
    # Dense part fits on 2 GPUs, the whole model does not: experts must fit host RAM.
    free = [int(dense_mib / 2) + 1] * 2
    res = {r.id: r for r in fit_results(s, 2, free, mem_available=s.expert_bytes + 1)}
    assert res["model:fit-dense"].verdict == "ok" and res["model:fit-experts"].verdict == "ok"
    res = {r.id: r for r in fit_results(s, 2, free, mem_available=s.expert_bytes - 1)}
    assert res["model:fit-experts"].verdict == "fail" and "MemAvailable" in res["model:fit-experts"].evidence
    res = {r.id: r for r in fit_results(s, 1, free, mem_available=None)}
    assert res["model:fit-dense"].verdict == "fail" and res["model:fit-dense"].hint
    # No GPU: the VRAM side skips, it is not guessed.
    assert {r.id: r.verdict for r in fit_results(s, 1, [], 10**12)}["model:fit-dense"] == "skip"


def test_bad_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        summarize_model(tmp_path / "nope")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.safetensors").write_bytes(struct.pack("<Q", 4) + b"{no]")
    with pytest.raises(ModelError, match="not JSON"):
        summarize_model(tmp_path / "bad")


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_shard_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    """Before: a FIFO named *.safetensors blocked the doctor (open waits for a writer)."""
    import os
    import threading

    write_model(tmp_path)
    shard = tmp_path / "model-00002-of-00002.safetensors"
    shard.unlink()
    os.mkfifo(shard) if kind == "fifo" else shard.mkdir()
    caught: list = []

    def run():
        try:
            summarize_model(tmp_path)
        except ModelError as exc:
            caught.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "summarize_model blocked on the shard"
    [exc] = caught
    assert str(shard) in exc.message and ("not a regular file" in exc.message or "is a folder" in exc.message)
    assert exc.hint


def test_a_config_that_is_a_fifo_is_refused(tmp_path):
    import os

    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(ModelError, match="config.json is not a regular file"):
        summarize_model(tmp_path)
