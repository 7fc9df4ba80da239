"""`wh doctor --strict`: which warnings it counts (issue 28, the README's CI gate).

A warning whose every cause is optional by design and absent on this host (a plugin or backend that
doctor/*.toml names optional, a lazily loaded module its distribution does without) is reported but not
counted: stock torch CUDA wheels on a host without RDMA or MPI must pass `--strict`. Any other warning (a
plugin nothing says its package does without, the GPU driver's library missing) is counted: exit 2.
Real gcc-built shared objects in wheels, installed into real venvs, through the real `wh` entry point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from broken_packages import _ext, _tags, have_toolchain, install_wheel, make_venv
from wheelmaker import make_wheel

pytestmark = pytest.mark.skipif(not have_toolchain(), reason="needs gcc and Python.h")

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


def _gcc(*args: str) -> None:
    subprocess.run(["gcc", *args], check=True, capture_output=True)


def _gone(build: Path, soname: str) -> list[str]:
    """Linker arguments for a library named ``soname`` that is then deleted (the host lacks it)."""
    (build / "gone").mkdir(exist_ok=True)
    src = build / f"{soname}.c"
    src.write_text("int whgone_value(void) { return 7; }\n")
    lib = build / "gone" / soname
    _gcc("-shared", "-fPIC", str(src), "-o", str(lib), f"-Wl,-soname,{soname}")
    return [f"-L{lib.parent}", "-Wl,--no-as-needed", f"-l:{soname}"]


def _plugin(build: Path, name: str, *link: str) -> bytes:
    src = build / f"{name}.c"
    src.write_text("int plugin_init(void) { return 0; }\n")
    out = build / name
    _gcc("-shared", "-fPIC", str(src), "-o", str(out), f"-Wl,-soname,{name}", *link)
    return out.read_bytes()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("strict")
    build = folder / "build"
    build.mkdir()
    rdma = _gone(build, "librdmacm.so.1") + _gone(build, "libibverbs.so.1")
    mpi = _gone(build, "libmpi.so.40")
    tbb = _gone(build, "libtbb.so.12")
    plain = _gone(build, "libgone2.so")
    objects = {
        "tbbpool": _ext(build, "tbbpool", "WH_NEEDLIB", extra=tbb),
        "cufile": _plugin(build, "libcufile.so.0"),
        "cufile_rdma": _plugin(build, "libcufile_rdma.so.1", *rdma),
        "bootstrap_mpi": _plugin(build, "nvshmem_bootstrap_mpi.so.3", *mpi),
        "plain": _plugin(build, "libplain.so", *plain),
    }
    for lib in (build / "gone").iterdir():
        lib.unlink()
    return {
        # nvidia-cufile's layout: libcufile_rdma.so.1, dlopened by libcufile when RDMA is configured.
        "nvidia-cufile": make_wheel(folder, "nvidia-cufile", "1.15.1.6", tags=_tags(), files={
            "nvidia/cu13/lib/libcufile.so.0": objects["cufile"],
            "nvidia/cu13/lib/libcufile_rdma.so.1": objects["cufile_rdma"]}),
        # NVSHMEM's MPI bootstrap plugin, loaded by name when NVSHMEM_BOOTSTRAP=MPI.
        "nvidia-nvshmem-cu13": make_wheel(folder, "nvidia-nvshmem-cu13", "3.4.5", tags=_tags(), files={
            "nvidia/nvshmem/lib/nvshmem_bootstrap_mpi.so.3": objects["bootstrap_mpi"]}),
        # numba's TBB pool: a lazily loaded extension module (native:) needing libtbb.so.12 (sharedlibs:).
        "numba": make_wheel(folder, "numba", "0.61.0", tags=_tags(), modules={"numba/__init__.py": ""},
                            files={f"numba/np/ufunc/tbbpool{SUFFIX}": objects["tbbpool"]}),
        # A library nothing links and no data names: loaded on demand, maybe on the serving path.
        "plainlib": make_wheel(folder, "plainlib", "1.0", tags=_tags(), modules={"plainlib/__init__.py": ""},
                               files={"plainlib/lib/libplain.so": objects["plain"]}),
    }


def _venv(where: Path, wheels: dict[str, Path], names: list[str]) -> Path:
    py = make_venv(where / "venv")
    for n in names:
        install_wheel(py, wheels[n])
    return py


def _doctor(py: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "wheelhouse", "doctor", "--python", str(py), "--check", "sharedlibs",
                           "--check", "native", *args], capture_output=True, text=True, env=env, timeout=300)


BY_DESIGN = ["nvidia-cufile", "nvidia-nvshmem-cu13", "numba"]


def test_strict_passes_when_every_warning_is_optional_by_design(tmp_path, wheels):
    # Before: `wh doctor --strict` exited 2 on every torch CUDA install without RDMA/MPI.
    py = _venv(tmp_path, wheels, BY_DESIGN)
    junit = tmp_path / "doctor.xml"
    proc = _doctor(py, "--strict", "--junit", str(junit))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 warn (4 optional by design, not counted by --strict)" in proc.stdout
    # the human report says it on each such warning's line (from ``strict``, whatever the check)
    said = [line.split(":")[0] for line in proc.stdout.splitlines() if "(not counted by --strict) (hint:" in line]
    assert sorted(said) == ["WARN  native", "WARN  sharedlibs", "WARN  sharedlibs", "WARN  sharedlibs"], proc.stdout
    report = json.loads(_doctor(py, "--strict", "--json").stdout)
    assert report["exit_code"] == 0
    warns = {r["id"]: r for r in report["results"] if r["verdict"] == "warn"}
    assert set(warns) == {"sharedlibs:nvidia-cufile", "sharedlibs:nvidia-nvshmem-cu13", "sharedlibs:numba",
                          "native:numba"}
    assert all(r["strict"] is False for r in warns.values())
    assert ("nvidia/cu13/lib/libcufile_rdma.so.1 needs librdmacm.so.1, libibverbs.so.1: not found -- optional: "
            "cuFile's RDMA plugin") in warns["sharedlibs:nvidia-cufile"]["evidence"]
    assert ("nvidia/nvshmem/lib/nvshmem_bootstrap_mpi.so.3 needs libmpi.so.40: not found -- optional: an NVSHMEM "
            "bootstrap or transport plugin") in warns["sharedlibs:nvidia-nvshmem-cu13"]["evidence"]
    for r in warns.values():
        assert any(line.startswith("optional by design: ") for line in r["evidence"].splitlines())
    assert "[warn, not counted by --strict]" in junit.read_text()


def test_strict_counts_any_other_warning(tmp_path, wheels):
    py = _venv(tmp_path, wheels, [*BY_DESIGN, "plainlib"])
    proc = _doctor(py, "--strict")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "5 warn (4 optional by design, not counted by --strict)" in proc.stdout
    (plain,) = [line for line in proc.stdout.splitlines() if line.startswith("WARN  sharedlibs:plainlib")]
    assert "not counted" not in plain and proc.stdout.count("(not counted by --strict)") == 4
    assert _doctor(py).returncode == 0  # without --strict a warning never fails
    report = json.loads(_doctor(py, "--strict", "--json").stdout)
    assert report["exit_code"] == 2
    (counted,) = [r for r in report["results"] if r["verdict"] == "warn" and r["strict"]]
    assert counted["id"] == "sharedlibs:plainlib"
    assert "plainlib/lib/libplain.so needs libgone2.so: not found -- loaded on demand" in counted["evidence"]
    assert "optional by design" not in counted["evidence"]
