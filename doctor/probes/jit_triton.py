"""Compile and launch a tiny Triton kernel and check its result.

Stdlib only apart from what it tests (triton, torch); run by the TARGET
interpreter. "Imports" is not "works": Triton compiles through ptxas at run
time, so only a launched kernel proves the toolchain.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # where _probe_channel lives (PYTHONSAFEPATH too)
from _probe_channel import Evidence, emit, error_record  # noqa: E402 - first: it takes this folder off sys.path again


def main():
    import torch
    import triton
    import triton.language as tl

    if not torch.cuda.is_available():
        emit({"skip": "torch sees no CUDA device", "triton": triton.__version__})
        return

    @triton.jit
    def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    n = 4099
    x = torch.arange(n, device="cuda", dtype=torch.float32)
    y = torch.full((n,), 2.0, device="cuda", dtype=torch.float32)
    out = torch.empty_like(x)
    try:
        _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the compiler's output is the evidence
        emit(error_record(exc))
        return
    good = bool(torch.equal(out, x + 2.0))
    # What the doctor's verdict cache keys a pass by: every file loaded, and the ptxas Triton compiles with.
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    emit({"ok": good, "triton": triton.__version__, "device": torch.cuda.get_device_name(0),
           "error": None if good else "kernel ran but the result is wrong", "deps": Evidence([ptxas]).new()})


if __name__ == "__main__":
    main()
