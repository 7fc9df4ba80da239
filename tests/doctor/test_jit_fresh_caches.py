"""A JIT probe compiles for real: a library's own kernel cache never answers it (issue 28).

Triton keeps compiled kernels in ``TRITON_CACHE_DIR``, flashinfer in its workspace, torch's extensions in
``TORCH_EXTENSIONS_DIR``, and each answers a second compile of the same kernel from there. A probe answered
from such a cache passes with a broken compiler, and the engine's first new kernel dies mid-request (the
seed's ptxas ``Unsupported .version``). ``cachejit`` here is such a library: a kernel found in
``$TRITON_CACHE_DIR`` is loaded, else ``$CC`` compiles it and stores it there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broken_packages import have_toolchain, install_wheel, make_venv
from wheelmaker import make_wheel

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc")

_LIB = r'''
import os, subprocess

def kernel():
    """The kernel's object file: from the cache when there, else compiled with $CC and kept."""
    cache = os.environ.get("TRITON_CACHE_DIR") or os.path.expanduser("~/.cachejit")
    os.makedirs(cache, exist_ok=True)
    obj = os.path.join(cache, "k.o")
    if os.path.exists(obj):
        return 0, "cached"
    src = os.path.join(cache, "k.c")
    with open(src, "w") as fh:
        fh.write("int k(int x) { return x + 1; }\n")
    proc = subprocess.run([os.environ.get("CC", "gcc"), "-c", src, "-o", obj], capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr
'''

# Prints where it compiled, and names what its pass depends on (the verdict cache's key): the compiler, and, as
# Triton's process does with the launcher it compiled and loaded, the kernel it compiled into the cache folder.
_PROBE = r'''
import json, os, shutil, sys
import cachejit
rc, out = cachejit.kernel()
cc = shutil.which(os.environ.get("CC", "gcc"))
def ident(p):
    st = os.stat(p)
    return [p, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
built = os.path.join(os.environ["TRITON_CACHE_DIR"], "k.o")
rec = {"ok": rc == 0, "error": None if rc == 0 else "the compiler exited %d" % rc, "compiler_output": out,
       "cache": os.environ.get("TRITON_CACHE_DIR"),
       "deps": [ident(cc)] + ([ident(built), ident(os.path.dirname(built))] if rc == 0 else [])}
sys.stdout.write("\n@@WH-PROBE@@ " + json.dumps(rec) + "\n")
'''


@pytest.fixture()
def setup(tmp_path):
    py = make_venv(tmp_path / "venv")
    install_wheel(py, make_wheel(tmp_path / "wheels", "cachejit", "1.0", modules={"cachejit/__init__.py": _LIB}))
    reg = tmp_path / "registry"
    reg.mkdir()
    (reg / "probe_cachejit.py").write_text(_PROBE)
    (reg / "jit.toml").write_text('[[jit]]\nid = "cachejit"\ndistribution = "cachejit"\n'
                                  'script = "probe_cachejit.py"\nneeds_gpu = false\n')
    broken = tmp_path / "bin" / "broken-cc"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'ptxas fatal   : Unsupported .version 9.0' >&2\nexit 1\n")
    broken.chmod(0o755)
    user_cache = tmp_path / "user-cache"
    scratch = tmp_path / "wh-cache"  # the fresh folders go under wh's cache folder: a noexec /tmp loads nothing
    env = {**os.environ, "WH_DOCTOR_JIT_PROBES": str(reg / "jit.toml"), "TRITON_CACHE_DIR": str(user_cache),
           "WH_CACHE_DIR": str(scratch), "COLUMNS": "250"}
    return py, env, broken, user_cache, scratch


def _doctor(py: Path, env: dict) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check",
                           "jit:cachejit", "--json"], capture_output=True, text=True, env=env, timeout=300)
    report = json.loads(proc.stdout)
    return proc.returncode, next(r for r in report["results"] if r["id"] == "jit:cachejit")


def test_a_kernel_cached_by_the_library_does_not_hide_a_broken_compiler(setup):
    py, env, broken, user_cache, scratch = setup
    # The engine compiled its kernel once with a good compiler: the library's cache holds it.
    subprocess.run([str(py), "-c", "import cachejit; assert cachejit.kernel() == (0, '')"], env=env, check=True)
    assert (user_cache / "k.o").is_file()
    # Then the compiler broke. The cached kernel still loads; the engine's next new kernel will not compile.
    rc, r = _doctor(py, {**env, "CC": str(broken)})
    assert (rc, r["verdict"]) == (1, "fail"), r
    assert "Unsupported .version" in r["evidence"]
    assert sorted(p.name for p in user_cache.iterdir()) == ["k.c", "k.o"]  # the user's cache is left alone
    assert list((scratch / "jit-scratch").iterdir()) == []  # the probe's own folders are gone


def test_a_pass_compiled_in_a_fresh_folder_is_reused_while_the_compiler_is_unchanged(setup):
    py, env, _, user_cache, scratch = setup
    # A killed doctor's leftover from two days ago goes; a folder of a doctor running beside this one stays.
    old, running = scratch / "jit-scratch" / "jit-killed", scratch / "jit-scratch" / "jit-running"
    for folder in (old, running):
        (folder / "jit-triton").mkdir(parents=True)
    os.utime(old, (time.time() - 2 * 86400,) * 2)
    rc, first = _doctor(py, env)
    assert (rc, first["verdict"]) == (0, "ok"), first
    assert "reused_since" not in first["data"]
    assert not user_cache.exists()  # it compiled elsewhere, not into the user's cache
    assert f"cache={scratch / 'jit-scratch'}" in first["evidence"], first["evidence"]
    rc, again = _doctor(py, env)  # the folder made for the run is not part of the verdict's key
    assert (rc, again["verdict"]) == (0, "ok") and again["data"].get("reused_since"), again
    assert list((scratch / "jit-scratch").iterdir()) == [running]
