"""Which libcuda the dynamic loader really gives this interpreter, and is it a stub?

Stdlib only; run by the TARGET interpreter. Reports the loader's search order
(LD_LIBRARY_PATH entries and the ldconfig cache), every libcuda.so* found on
LD_LIBRARY_PATH, then dlopens ``libcuda.so.1`` with ctypes, reads
/proc/self/maps for the file actually mapped and calls cuDriverGetVersion and
cuInit: the toolkit's stub answers CUDA_ERROR_STUB_LIBRARY (34).
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # where _probe_channel lives (PYTHONSAFEPATH too)
from _probe_channel import emit  # noqa: E402 - first: it takes this folder off sys.path again

import ctypes  # noqa: E402

CUDA_ERROR_STUB_LIBRARY = 34


def _describe(path):
    info = {"path": path}
    try:
        real = os.path.realpath(path)
        info["realpath"] = real
        info["size"] = os.path.getsize(real)
    except OSError as exc:
        info["error"] = str(exc)
        return info
    low = real.lower() + " " + path.lower()
    info["in_stubs_dir"] = "/stubs/" in low or low.endswith("/stubs")
    info["in_compat_dir"] = "/compat/" in low
    return info


def _ldconfig():
    for exe in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        entries = []
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("libcuda.so") and "=>" in line:
                entries.append(line.split("=>", 1)[1].strip())
        return entries
    return None


def main():
    ld = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    on_path = []
    for d in ld:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for n in names:
            if n.startswith("libcuda.so"):
                on_path.append(_describe(os.path.join(d, n)))
    rec = {
        "ld_library_path": ld,
        "stub_dirs_on_ld_library_path": [d for d in ld if os.path.basename(os.path.normpath(d)) == "stubs"],
        "libcuda_on_ld_library_path": on_path,
        "ldconfig": _ldconfig(),
        "loaded": None,
        "dlopen_error": None,
    }
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        rec["dlopen_error"] = str(exc)
        emit(rec)
        return
    mapped = None
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 6 and os.path.basename(parts[5]).startswith("libcuda.so"):
                    mapped = parts[5]
                    break
    except OSError:
        pass
    loaded = _describe(mapped) if mapped else {"path": None}
    version = ctypes.c_int(0)
    try:
        loaded["cuDriverGetVersion"] = lib.cuDriverGetVersion(ctypes.byref(version))
        loaded["driver_cuda_version"] = version.value
    except AttributeError:
        loaded["cuDriverGetVersion"] = None
    try:
        loaded["cuInit"] = lib.cuInit(0)
    except AttributeError:
        loaded["cuInit"] = None
    loaded["is_stub"] = bool(loaded.get("in_stubs_dir")) or CUDA_ERROR_STUB_LIBRARY in (
        loaded.get("cuInit"), loaded.get("cuDriverGetVersion"))
    rec["loaded"] = loaded
    emit(rec)


if __name__ == "__main__":
    main()
