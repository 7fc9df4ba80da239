"""Run one small flashinfer op (RMSNorm) on the GPU and compare it with torch.

Stdlib only apart from what it tests; run by the TARGET interpreter. flashinfer
JIT-compiles kernels through nvcc at first use, so a compile error surfaces here
instead of mid-generation.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # where _probe_channel lives (PYTHONSAFEPATH too)
from _probe_channel import Evidence, emit, error_record  # noqa: E402 - first: it takes this folder off sys.path again


def main():
    import torch

    if not torch.cuda.is_available():
        emit({"skip": "torch sees no CUDA device"})
        return
    import flashinfer

    x = torch.randn(4, 256, device="cuda", dtype=torch.float16)
    w = torch.ones(256, device="cuda", dtype=torch.float16)
    try:
        got = flashinfer.norm.rmsnorm(x, w, eps=1e-6)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the compiler's output is the evidence
        emit(error_record(exc))
        return
    ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).half()
    good = bool(torch.allclose(got, ref, atol=2e-2, rtol=2e-2))
    # What the doctor's verdict cache keys a pass by: every file loaded, each nvcc flashinfer may compile with
    # (CUDA_HOME's, torch's idea of it, the first on PATH; one not there is named as absent: one appearing is a
    # change), and the host compiler and ninja its build runs.
    rec = {"ok": good, "flashinfer": getattr(flashinfer, "__version__", None),
           "error": None if good else "rmsnorm ran but disagrees with torch"}
    try:
        homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), _torch_cuda_home()]
        tools = [os.path.join(h, "bin", "nvcc") for h in homes if isinstance(h, str) and h]
        tools += [_which(t) for t in ("nvcc", os.environ.get("CXX") or "c++", "ninja")]
        rec["deps"] = Evidence([p for p in dict.fromkeys(tools) if p]).new()
    except Exception:  # noqa: BLE001 - no evidence: the verdict is executed again next run, never a failure
        pass
    emit(rec)


def _torch_cuda_home():
    try:
        from torch.utils.cpp_extension import CUDA_HOME
    except Exception:  # noqa: BLE001 - a torch without it: flashinfer finds nvcc by the other ways
        return None
    return CUDA_HOME


def _which(name):
    import shutil

    return shutil.which(name)


if __name__ == "__main__":
    main()
