#!/usr/bin/env python3
"""Capture this interpreter's target profile as JSON (stdlib only).

Run it ON the machine that will receive a wheelhouse, before wh is installed
there: ``python capture_target.py [-o FILE]``. wh ships a copy in every
wheelhouse. The tag logic here is also what ``wh stage --platform ...`` uses to
compute the tags of an interpreter it cannot run, so one implementation serves
both paths.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig

__all__ = [
    "SCHEMA",
    "capture",
    "compatible_tags",
    "expand_platform",
    "marker_environment",
]

SCHEMA = "wh-target/1"

# PEP 600: the legacy manylinux names are aliases of these glibc versions.
_LEGACY_MANYLINUX = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}
# The oldest glibc a manylinux wheel may require, per architecture (PEP 599/600).
_OLDEST_GLIBC = {"x86_64": 5, "i686": 5}
_DEFAULT_OLDEST_GLIBC = 17

_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(.+)$")
_MUSLLINUX = re.compile(r"^musllinux_(\d+)_(\d+)_(.+)$")
_LEGACY = re.compile(r"^(manylinux1|manylinux2010|manylinux2014)_(.+)$")
_LEGACY_VERSION = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def expand_platform(tag: str) -> list[str]:
    """Every platform tag an interpreter on ``tag``'s libc accepts, best first.

    ``manylinux_2_35_x86_64`` means glibc 2.35: it accepts every older
    manylinux tag and the legacy aliases. ``linux_x86_64`` comes first, as
    packaging >= 26.3 orders it (pypa/packaging#160: a locally built wheel is
    the most specific). ``musllinux_1_2_aarch64`` likewise for musl.
    """
    legacy = _LEGACY.match(tag)
    if legacy:
        major, minor = _LEGACY_VERSION[legacy.group(1)]
        tag = f"manylinux_{major}_{minor}_{legacy.group(2)}"
    many = _MANYLINUX.match(tag)
    if many:
        major, minor, arch = int(many.group(1)), int(many.group(2)), many.group(3)
        oldest = _OLDEST_GLIBC.get(arch, _DEFAULT_OLDEST_GLIBC)
        out = [f"linux_{arch}"]
        for m in range(minor, oldest - 1, -1):
            out.append(f"manylinux_{major}_{m}_{arch}")
            alias = _LEGACY_MANYLINUX.get((major, m))
            if alias:
                out.append(f"{alias}_{arch}")
        return out
    musl = _MUSLLINUX.match(tag)
    if musl:
        major, minor, arch = int(musl.group(1)), int(musl.group(2)), musl.group(3)
        return [f"linux_{arch}"] + [f"musllinux_{major}_{m}_{arch}" for m in range(minor, -1, -1)]
    return [tag]


def _py_range(major: int, minor: int):
    yield f"py{major}{minor}"
    yield f"py{major}"
    for m in range(minor - 1, -1, -1):
        yield f"py{major}{m}"


def compatible_tags(
    implementation: str, version: tuple[int, int], abis: list[str], platforms: list[str]
) -> list[str]:
    """The ordered tag list an interpreter accepts (mirrors packaging.tags.sys_tags)."""
    major, minor = version
    interp = f"{implementation}{major}{minor}"
    out: list[str] = []
    explicit = [a for a in abis if a not in ("abi3", "none")]
    for abi in explicit:
        out += [f"{interp}-{abi}-{p}" for p in platforms]
    if implementation == "cp":
        # abi3 does not apply to free-threaded or pre-3.2 builds.
        use_abi3 = (major, minor) >= (3, 2) and not any(a.endswith("t") for a in explicit)
        if use_abi3:
            out += [f"{interp}-abi3-{p}" for p in platforms]
        out += [f"{interp}-none-{p}" for p in platforms]
        if use_abi3:
            for m in range(minor - 1, 1, -1):
                out += [f"cp{major}{m}-abi3-{p}" for p in platforms]
    else:
        out += [f"{interp}-none-{p}" for p in platforms]
    for py in _py_range(major, minor):
        out += [f"{py}-none-{p}" for p in platforms]
    out.append(f"{interp}-none-any")
    out += [f"{py}-none-any" for py in _py_range(major, minor)]
    seen: set[str] = set()
    return [t for t in out if not (t in seen or seen.add(t))]


def marker_environment() -> dict[str, str]:
    """PEP 508's full marker environment of this interpreter."""
    impl = sys.implementation
    iv = impl.version
    impl_version = f"{iv.major}.{iv.minor}.{iv.micro}"
    if iv.releaselevel != "final":
        impl_version += iv.releaselevel[0] + str(iv.serial)
    return {
        "implementation_name": impl.name,
        "implementation_version": impl_version,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_python_implementation": platform.python_implementation(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }


def _libc() -> dict | None:
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        value = ""
    if value.startswith("glibc "):
        return {"name": "glibc", "version": value.split()[1]}
    name, version = platform.libc_ver()
    if name:
        return {"name": name, "version": version}
    if sys.platform.startswith("linux"):
        musl = _musl_version()
        if musl:
            return {"name": "musl", "version": musl}
    return None


def _musl_version() -> str | None:
    for path in ("/lib", "/usr/lib"):
        try:
            names = os.listdir(path)
        except OSError:
            continue
        for name in names:
            if name.startswith("ld-musl-"):
                try:
                    out = subprocess.run(
                        [os.path.join(path, name)], capture_output=True, text=True, timeout=5
                    ).stderr
                except (OSError, subprocess.SubprocessError):
                    return None
                found = re.search(r"Version (\d+)\.(\d+)", out)
                return f"{found.group(1)}.{found.group(2)}" if found else None
    return None


def _abi() -> str:
    impl = sys.implementation.name
    if impl == "cpython":
        soabi = sysconfig.get_config_var("SOABI") or ""
        found = re.match(r"cpython-(\d+)(t?)", soabi)
        if found:
            return f"cp{found.group(1)}{found.group(2)}"
        return f"cp{sys.version_info[0]}{sys.version_info[1]}"
    return (sysconfig.get_config_var("SOABI") or impl).replace("-", "_").replace(".", "_")


def _impl_short() -> str:
    return {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name)


def _platform_tags(libc: dict | None) -> list[str]:
    machine = platform.machine()
    if sys.platform.startswith("linux"):
        if libc and libc["name"] == "glibc":
            major, minor = libc["version"].split(".")[:2]
            return expand_platform(f"manylinux_{major}_{int(minor)}_{machine}")
        if libc and libc["name"] == "musl":
            major, minor = libc["version"].split(".")[:2]
            return expand_platform(f"musllinux_{major}_{minor}_{machine}")
        return [f"linux_{machine}"]
    return [sysconfig.get_platform().replace("-", "_").replace(".", "_")]


def _tags_from_packaging() -> list[str] | None:
    for mod in ("packaging.tags", "pip._vendor.packaging.tags"):
        try:
            tags = __import__(mod, fromlist=["sys_tags"])
            return [str(t) for t in tags.sys_tags()]
        except Exception:  # noqa: BLE001 - any failure means: use our own
            continue
    return None


def _gpus() -> dict:
    """GPU facts from nvidia-smi, when it is there; never an error."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"gpus": [], "driver_version": None, "cuda_version": None}
    query = "index,name,compute_cap,memory.total,memory.used,driver_version"
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30,
        ).stdout
        header = subprocess.run([smi], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {"gpus": [], "driver_version": None, "cuda_version": None}
    gpus, driver = [], None
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 6:
            continue
        gpus.append({
            "index": int(parts[0]) if parts[0].isdigit() else parts[0],
            "name": parts[1],
            "compute_capability": parts[2],
            "memory_total_mib": int(float(parts[3])) if parts[3].replace(".", "").isdigit() else None,
            "memory_used_mib": int(float(parts[4])) if parts[4].replace(".", "").isdigit() else None,
        })
        driver = parts[5]
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", header)
    return {"gpus": gpus, "driver_version": driver, "cuda_version": cuda.group(1) if cuda else None}


def capture(include_gpus: bool = True) -> dict:
    """The target profile of the running interpreter."""
    libc = _libc()
    abi = _abi()
    impl = _impl_short()
    version = sys.version_info[:2]
    platforms = _platform_tags(libc)
    tags = _tags_from_packaging() or compatible_tags(impl, version, [abi], platforms)
    profile = {
        "schema": SCHEMA,
        "source": "captured",
        "implementation": impl,
        "python_version": f"{version[0]}.{version[1]}",
        "abi": abi,
        "platforms": platforms,
        "machine": platform.machine(),
        "libc": libc,
        "marker_environment": marker_environment(),
        "compatible_tags": tags,
    }
    profile.update(_gpus() if include_gpus else {"gpus": [], "driver_version": None, "cuda_version": None})
    return profile


def _main(argv: list[str]) -> int:
    out = None
    if len(argv) == 2 and argv[0] in ("-o", "--output"):
        out = argv[1]
    elif argv:
        sys.stderr.write("usage: python capture_target.py [-o FILE]\n")
        return 2
    text = json.dumps(capture(), indent=2) + "\n"
    if out is None:
        sys.stdout.write(text)
        return 0
    tmp = f"{out}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, out)
    sys.stderr.write(f"wrote {out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
