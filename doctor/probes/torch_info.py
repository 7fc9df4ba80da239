"""What torch says about CUDA: its build's CUDA version, devices, capability.

Stdlib only (it imports torch, which is what it reports on); run by the TARGET
interpreter only when torch is installed.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # where _probe_channel lives (PYTHONSAFEPATH too)
from _probe_channel import Evidence, emit  # noqa: E402 - first: it takes this folder off sys.path again


def main():
    import torch

    rec = {"version": torch.__version__, "cuda": getattr(torch.version, "cuda", None),
           "cuda_available": False, "devices": []}
    try:
        rec["cuda_available"] = bool(torch.cuda.is_available())
        if rec["cuda_available"]:
            for i in range(torch.cuda.device_count()):
                major, minor = torch.cuda.get_device_capability(i)
                rec["devices"].append({"index": i, "name": torch.cuda.get_device_name(i),
                                       "compute_capability": "%d.%d" % (major, minor)})
            rec["arch_list"] = list(torch.cuda.get_arch_list())
    except Exception as exc:  # noqa: BLE001 - an error here is the fact to report
        rec["cuda_error"] = "%s: %s" % (type(exc).__name__, exc)
    rec["deps"] = Evidence().new()  # what the doctor's verdict cache keys this answer by
    emit(rec)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
