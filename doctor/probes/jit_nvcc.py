"""Compile a tiny .cu with the given nvcc and, where a GPU exists, run it.

``python jit_nvcc.py NVCC [--run]``. Stdlib only. The compiler's own output is
reported verbatim: a ptxas "Unsupported .version" is the evidence a user needs.
"""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # where _probe_channel lives (PYTHONSAFEPATH too)
from _probe_channel import emit  # noqa: E402 - first: it takes this folder off sys.path again


SOURCE = r"""
#include <cstdio>
__global__ void add_one(int *v) { v[threadIdx.x] += 1; }
int main() {
  int host[32], *dev;
  for (int i = 0; i < 32; ++i) host[i] = i;
  if (cudaMalloc(&dev, sizeof host) != cudaSuccess) { printf("cudaMalloc failed\n"); return 2; }
  cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice);
  add_one<<<1, 32>>>(dev);
  cudaError_t err = cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) { printf("%s\n", cudaGetErrorString(err)); return 3; }
  for (int i = 0; i < 32; ++i) if (host[i] != i + 1) { printf("wrong result at %d\n", i); return 4; }
  printf("WH-NVCC-OK\n");
  return 0;
}
"""


def main(argv):
    nvcc = argv[0]
    run = "--run" in argv[1:]
    with tempfile.TemporaryDirectory(prefix="wh-nvcc-") as tmp:
        src = os.path.join(tmp, "probe.cu")
        exe = os.path.join(tmp, "probe")
        with open(src, "w") as fh:
            fh.write(SOURCE)
        # With a GPU, build for it (-arch=native) so the run exercises this card's SASS, not a PTX fallback.
        cmd = [nvcc] + (["-arch=native"] if run else []) + ["-o", exe, src]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        rec = {"command": " ".join(cmd), "compiled": proc.returncode == 0, "compile_returncode": proc.returncode,
               "compiler_output": (proc.stdout + proc.stderr)[-4000:], "ran": False}
        if proc.returncode == 0 and run:
            r = subprocess.run([exe], capture_output=True, text=True, timeout=60)
            rec["ran"] = True
            rec["run_returncode"] = r.returncode
            rec["run_output"] = (r.stdout + r.stderr)[-2000:]
            rec["run_ok"] = r.returncode == 0 and "WH-NVCC-OK" in r.stdout
    emit(rec)


if __name__ == "__main__":
    main(sys.argv[1:])
