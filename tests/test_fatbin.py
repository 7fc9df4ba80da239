"""CUDA fatbin reading: real nvcc-built shared objects, checked against cuobjdump where it is present."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

from cuda_fixtures import KERNEL_CU, build_kernel_so, cuobjdump, cuobjdump_images, nvcc
from wheelhouse.elf import read_elf
from wheelhouse.fatbin import DeviceCode, FatbinEntry, device_code, kernel_gaps, parse_fatbin, sm_number

needs_nvcc = pytest.mark.skipif(nvcc() is None, reason="needs nvcc")

VARIANTS = {
    # file: (gencodes, expected names)
    "sm90.so": (("arch=compute_90,code=sm_90",), ("sm_90",)),
    "ptx80.so": (("arch=compute_80,code=compute_80",), ("compute_80",)),
    "multi.so": (("arch=compute_90a,code=sm_90a", "arch=compute_80,code=compute_80", "arch=compute_100f,code=sm_100f"),
                 ("sm_90a", "sm_100f", "compute_80")),
    "sass_and_ptx89.so": (("arch=compute_89,code=[sm_89,compute_89]",), ("sm_89", "compute_89")),
}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> dict[str, Path]:
    if nvcc() is None:
        pytest.skip("needs nvcc")
    folder = tmp_path_factory.mktemp("kernels")
    out = {name: build_kernel_so(folder, name, *gencodes) for name, (gencodes, _) in VARIANTS.items()}
    # Three compilation units in one library: three fatbin containers in one section, one compressed.
    objs = []
    for i, (gencode, flags) in enumerate([("arch=compute_90,code=sm_90", ()),
                                          ("arch=compute_80,code=[sm_80,compute_80]", ()),
                                          ("arch=compute_75,code=sm_75", ("-Xfatbin", "-compress-all"))]):
        src = folder / f"unit{i}.cu"
        src.write_text(f"__global__ void k{i}(int *x) {{ x[0] = {i}; }}\n"
                       f"extern \"C\" void launch{i}(int *x) {{ k{i}<<<1, 1>>>(x); }}\n")
        obj = folder / f"unit{i}.o"
        subprocess.run([nvcc(), "-c", "-Xcompiler", "-fPIC", *flags, "-gencode", gencode, str(src), "-o", str(obj)],
                       check=True, capture_output=True)
        objs.append(str(obj))
    subprocess.run(["gcc", "-shared", *objs, "-o", str(folder / "units.so")], check=True, capture_output=True)
    out["units.so"] = folder / "units.so"
    # Relocatable device code (-rdc) compiled for sm_89 and sm_90, device-linked for sm_90 only (as nvshmem
    # and libtorch_nvshmem are): __nv_relfatbin holds both, .nv_fatbin what the runtime loads.
    src = folder / "rdc.cu"
    src.write_text(KERNEL_CU)
    run = [nvcc(), "-Xcompiler", "-fPIC"]
    subprocess.run([*run, "-c", "-rdc=true", "-gencode", "arch=compute_89,code=sm_89", "-gencode",
                    "arch=compute_90,code=sm_90", str(src), "-o", str(folder / "rdc.o")], check=True, capture_output=True)
    subprocess.run([*run, "-dlink", "-gencode", "arch=compute_90,code=sm_90", str(folder / "rdc.o"), "-o",
                    str(folder / "dlink.o")], check=True, capture_output=True)
    subprocess.run(["gcc", "-shared", str(folder / "rdc.o"), str(folder / "dlink.o"), "-o", str(folder / "rdc.so")],
                   check=True, capture_output=True)
    out["rdc.so"] = folder / "rdc.so"
    return out


@needs_nvcc
@pytest.mark.parametrize("name", list(VARIANTS))
def test_device_code_lists_what_nvcc_was_asked_to_embed(kernels, name):
    code = device_code(kernels[name])
    assert code is not None
    assert set(code.names()) == set(VARIANTS[name][1])


@needs_nvcc
def test_every_compilation_unit_of_a_library_is_read_compressed_or_not(kernels):
    code = device_code(kernels["units.so"])
    assert code.sass == (75, 80, 90)
    assert code.ptx == (80,)
    assert code.describe() == "sm_75, sm_80, sm_90; PTX compute_80"


@needs_nvcc
def test_a_device_linked_library_is_judged_by_what_the_runtime_loads(kernels):
    sections = [name for name, _, _ in read_elf(kernels["rdc.so"]).fatbin_sections]
    assert sorted(sections) == [".nv_fatbin", "__nv_relfatbin"]
    assert device_code(kernels["rdc.so"]).names() == ("sm_90",)  # not the sm_89 input of the device link


@needs_nvcc
@pytest.mark.skipif(cuobjdump() is None, reason="needs cuobjdump (nvidia-cuda-cuobjdump wheel or a CUDA toolkit)")
@pytest.mark.parametrize("name", [*VARIANTS, "units.so", "rdc.so"])
def test_images_agree_with_cuobjdump(kernels, name):
    elf, ptx = cuobjdump_images(kernels[name])
    code = device_code(kernels[name])
    # cuobjdump names sm_100f's cubin "sm_100" and PTX for compute_80 "sm_80.ptx".
    assert {n.rstrip("f") for n in code.names() if n.startswith("sm_")} == elf
    assert {n.replace("compute_", "sm_") for n in code.names() if n.startswith("compute_")} == ptx


@needs_nvcc
def test_padding_between_containers_is_skipped(kernels):
    info = read_elf(kernels["units.so"])
    (_, offset, size), = [s for s in info.fatbin_sections if s[0] == ".nv_fatbin"]
    data = kernels["units.so"].read_bytes()[offset:offset + size]
    first_size = 16 + int.from_bytes(data[8:16], "little")
    padded = data[:first_size] + b"\0" * 24 + data[first_size:]
    assert parse_fatbin(padded) == parse_fatbin(data)
    assert len(parse_fatbin(data)) == 4


def test_a_library_without_device_code_has_none(tmp_path):
    (tmp_path / "plain.c").write_text("int f(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", str(tmp_path / "plain.c"), "-o", str(tmp_path / "libplain.so")],
                   check=True)
    assert device_code(tmp_path / "libplain.so") is None
    (tmp_path / "empty.so").write_bytes(b"")
    assert device_code(tmp_path / "empty.so") is None
    assert device_code(tmp_path / "absent.so") is None


@pytest.mark.parametrize("entry, sm, runs", [
    (FatbinEntry("sass", 80), "8.9", True),  # same major, lower minor: binary compatible
    (FatbinEntry("sass", 86), "8.0", False),  # a higher minor never runs on a lower one
    (FatbinEntry("sass", 90), "8.9", False),  # another major: no
    (FatbinEntry("sass", 80), "9.0", False),  # SASS does not run on a newer major
    (FatbinEntry("sass", 90, "a"), "9.0", True),
    (FatbinEntry("sass", 100, "a"), "10.3", False),  # arch-specific: exactly that sm
    (FatbinEntry("sass", 100, "f"), "10.3", True),  # family-specific: the family
    (FatbinEntry("ptx", 80, version=(9, 0)), "9.0", True),  # PTX: the driver JITs it for a newer sm
    (FatbinEntry("ptx", 90, version=(9, 0)), "8.9", False),  # but never for an older one
    (FatbinEntry("ptx", 90, "a", (9, 0)), "10.0", False),
    (FatbinEntry("ltoir", 80), "8.0", False),  # LTO-IR is not loadable by the driver
])
def test_runs_on_follows_cuda_binary_compatibility(entry, sm, runs):
    assert entry.runs_on(sm) is runs


def test_ptx_needs_a_driver_that_knows_its_isa():
    ptx = FatbinEntry("ptx", 80, version=(9, 0))  # PTX ISA 9.0 came with CUDA 13
    assert ptx.runs_on("8.9", driver_cuda="13.0")
    assert not ptx.runs_on("8.9", driver_cuda="12.8")


def test_runner_prefers_sass_and_describe_names_the_images():
    code = DeviceCode.of((FatbinEntry("sass", 80), FatbinEntry("sass", 90), FatbinEntry("ptx", 90, version=(8, 4))))
    assert code.runner("9.0").name == "sm_90"
    assert code.runner("10.0").name == "compute_90"
    assert code.runner("7.5") is None and not code.runs_on("sm_75")
    assert code.describe() == "sm_80, sm_90; PTX compute_90"
    assert [sm_number(x) for x in ("8.9", "sm_89", "89", 89, "sm_100a", "12.0")] == [89, 89, 89, 89, 100, 120]


@pytest.mark.parametrize("isa, driver, runs", [
    ((8, 8), "12.4", False),  # CUDA 12.9's PTX on a CUDA 12.4 driver: CUDA_ERROR_UNSUPPORTED_PTX_VERSION
    ((8, 8), "12.9", True),
    ((8, 4), "12.4", True),
    ((8, 5), "12.6", True),  # CUDA 12.6 kept ISA 8.5
    ((8, 6), "12.6", False),  # ISA 8.6 came with CUDA 12.7
    ((9, 1), "13.0", False),
    ((9, 1), "13.1", True),
    ((9, 2), "13.1", False),  # newer than any ISA listed: a driver the table lists knows at most 9.1
    ((9, 2), "13.2", True),  # a driver newer than the table: judged by the major (ISA 9.x came with CUDA 13)
    ((10, 0), "13.2", False),
    ((6, 4), "12.0", True),  # older than CUDA 11's: every driver of a CUDA 11+ stack knows it
    ((8, 8), None, True),  # the driver is unknown: judged by the arch only
])
def test_ptx_needs_a_driver_as_new_as_the_cuda_release_of_its_isa(isa, driver, runs):
    assert FatbinEntry("ptx", 80, version=isa).runs_on("9.0", driver_cuda=driver) is runs


def test_a_ptx_gap_names_the_cuda_release_its_isa_came_with():
    (gap,) = kernel_gaps({"lib/libptx.so": DeviceCode.of((FatbinEntry("ptx", 80, version=(8, 8)),))}, ["9.0"], "12.4")
    assert ("its PTX (ISA 8.8, from CUDA 12.9) needs a CUDA 12.9 driver, this one supports CUDA 12.4 "
            "(PTX ISA up to 8.4: a driver JITs no newer PTX than its own CUDA release's)") in gap.sentence()
    (gap,) = kernel_gaps({"lib/libptx.so": DeviceCode.of((FatbinEntry("ptx", 80, version=(9, 2)),))}, ["9.0"], "13.1")
    assert "its PTX (ISA 9.2, newer than CUDA 13.1's 9.1) needs a driver newer than CUDA 13.1" in gap.sentence()


SM80, SM90, SM100 = (DeviceCode.of((FatbinEntry("sass", a),)) for a in (80, 90, 100))


@pytest.mark.parametrize("objects, gap, variant_of", [
    # sgl_kernel's layout: sm100/common_ops.so beside the common_ops.so the package loads elsewhere
    ({"pkg/common_ops.so": SM90, "pkg/sm100/common_ops.so": SM100}, "pkg/sm100/common_ops.so", "pkg/common_ops.so"),
    ({"pkg/sm80/ops.so": SM80, "pkg/sm90/ops.so": SM90}, "pkg/sm80/ops.so", "pkg/sm90/ops.so"),
    ({"pkg/cu12/lib/ops.so": SM80, "pkg/cu13/lib/ops.so": SM90}, "pkg/cu12/lib/ops.so", "pkg/cu13/lib/ops.so"),
    ({"pkg/ops_sm80.so": SM80, "pkg/ops_sm90.so": SM90}, "pkg/ops_sm80.so", "pkg/ops_sm90.so"),
    # an unrelated module that shares the file name is no alternative: nothing makes the package pick it
    ({"pkg/_C.abi3.so": SM80, "pkg/contrib/_C.abi3.so": SM90}, "pkg/_C.abi3.so", None),
    ({"pkg/a/ops.so": SM80, "pkg/b/ops.so": SM90}, "pkg/a/ops.so", None),
])
def test_an_architecture_variant_is_a_build_the_package_chooses_between(objects, gap, variant_of):
    (found,) = kernel_gaps(objects, ["9.0"])
    assert (found.path, found.variant_of) == (gap, variant_of)


def _fatbin_entry(kind: int, arch: int, version: tuple[int, int] = (1, 8), header_size: int = 64) -> bytes:
    """One entry as nvcc writes it: a 64-byte header (kind 1 PTX, 2 SASS, its header size field, payload size,
    version, arch), then an 8-byte payload."""
    header = struct.pack("<HHIQIIHHIIIQ", kind, 0x101, header_size, 8, 0, 0, version[1], version[0], arch, 0, 0, 0)
    return header.ljust(64, b"\0") + b"\xff" * 8


def _fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def _so_with_fatbin(folder: Path, name: str, section: bytes) -> Path:
    """A gcc-built library whose .nv_fatbin section holds ``section`` (no nvcc needed)."""
    (folder / "plain.c").write_text("int f(void) { return 1; }\n")
    blob, so = folder / f"{name}.fatbin", folder / name
    blob.write_bytes(section)
    subprocess.run(["gcc", "-shared", "-fPIC", str(folder / "plain.c"), "-o", str(so)], check=True)
    subprocess.run(["objcopy", "--add-section", f".nv_fatbin={blob}", str(so)], check=True)
    return so


def test_a_fatbin_section_that_cannot_be_read_says_what_is_wrong(tmp_path):
    good = _fatbin(_fatbin_entry(2, 80), _fatbin_entry(1, 80, (9, 0)))
    code = device_code(_so_with_fatbin(tmp_path, "good.so", good + b"\0" * 8 + good + b"\0" * 8))
    assert code.names() == ("sm_80", "compute_80") and code.damage == ()  # zero padding is no damage
    code = device_code(_so_with_fatbin(tmp_path, "magic.so", b"\0" * 4 + good[4:]))
    assert code.entries == ()
    assert code.damage == (".nv_fatbin: no fatbin container at byte 0 (magic 0x00000000, not 0xba55ed50)",)
    assert "LTO-IR" not in code.describe() and "damaged" in code.describe()
    code = device_code(_so_with_fatbin(tmp_path, "entry.so", _fatbin(_fatbin_entry(2, 80, header_size=0))))
    assert code.damage == (".nv_fatbin: the entry at byte 16 of the container at byte 0 has header size 0",)
    code = device_code(_so_with_fatbin(tmp_path, "zeros.so", bytes(64)))
    assert code.damage == (".nv_fatbin: no fatbin container in its 64 bytes",)
    # One unreadable container among readable ones: its kernels are still missing.
    code = device_code(_so_with_fatbin(tmp_path, "second.so", good + b"\0" * 4 + good[4:]))
    assert code.names() == ("sm_80", "compute_80")
    assert code.damage == (f".nv_fatbin: no fatbin container at byte {len(good)} (magic 0x00000000, not 0xba55ed50)",)
