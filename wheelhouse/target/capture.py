#!/usr/bin/env python3
"""Capture this interpreter's target profile as JSON (stdlib only).

Run it ON the machine that will receive a wheelhouse, before wh is installed
there: ``python capture_target.py [-o FILE]``. wh ships a copy in every
wheelhouse. It may run where packaging is absent, so on Linux it computes the tag
list itself, by packaging.tags' rules (the tests compare the two on this host and for
a grid of targets); elsewhere (macOS, Windows) it asks the target's own packaging when
there is one. Its Linux platform expansion is also what ``wh stage --platform``
uses, and ``wheelhouse.target.gpu`` reads GPUs through its ``query_nvidia_smi``.

It also lists the distributions the interpreter imports (``distributions``): what a
delta stage treats as already on the box. Any CPython 3.7+ runs it, so where
``importlib.metadata`` is missing (3.7) it reads the ``.dist-info``/``.egg-info``
folders itself.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import site
import subprocess
import sys
import sysconfig

__all__ = [
    "SCHEMA",
    "capture",
    "compatible_tags",
    "provided_distributions",
    "expand_platform",
    "marker_environment",
    "query_nvidia_smi",
    "split_libc_platform",
]

SCHEMA = "wh-target/1"

# PEP 600: the legacy manylinux names are aliases of these glibc versions.
_LEGACY_MANYLINUX = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}
# The oldest glibc a manylinux wheel may require, per architecture (PEP 599/600).
_OLDEST_GLIBC = {"x86_64": 5, "i686": 5}
_DEFAULT_OLDEST_GLIBC = 17

_LIBC_PLATFORM = re.compile(r"^(manylinux|musllinux)_(\d+)_(\d+)_(.+)$")
_LEGACY = re.compile(r"^(manylinux1|manylinux2010|manylinux2014)_(.+)$")
_LEGACY_VERSION = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def split_libc_platform(tag: str) -> tuple[str, int, int, str] | None:
    """``manylinux_2_35_x86_64`` -> ``("glibc", 2, 35, "x86_64")``; legacy aliases by their glibc
    (``manylinux2014_aarch64`` is glibc 2.17); ``musllinux_1_2_x86_64`` -> ``("musl", 1, 2, ...)``;
    None for any other tag."""
    legacy = _LEGACY.match(tag)
    if legacy:
        return ("glibc", *_LEGACY_VERSION[legacy.group(1)], legacy.group(2))
    found = _LIBC_PLATFORM.match(tag)
    if found:
        libc = "glibc" if found.group(1) == "manylinux" else "musl"
        return libc, int(found.group(2)), int(found.group(3)), found.group(4)
    return None


def expand_platform(tag: str) -> list[str]:
    """Every platform tag an interpreter on ``tag``'s libc accepts, best first.

    ``manylinux_2_35_x86_64`` means glibc 2.35: it accepts every older
    manylinux tag and the legacy aliases. ``linux_x86_64`` comes first, as
    packaging >= 26.3 orders it (pypa/packaging#160: a locally built wheel is
    the most specific). ``musllinux_1_2_aarch64`` likewise for musl.
    """
    split = split_libc_platform(tag)
    if split is None:
        return [tag]
    libc, major, minor, arch = split
    out = [f"linux_{arch}"]
    if libc == "musl":
        return out + [f"musllinux_{major}_{m}_{arch}" for m in range(minor, -1, -1)]
    for m in range(minor, _OLDEST_GLIBC.get(arch, _DEFAULT_OLDEST_GLIBC) - 1, -1):
        out.append(f"manylinux_{major}_{m}_{arch}")
        alias = _LEGACY_MANYLINUX.get((major, m))
        if alias:
            out.append(f"{alias}_{arch}")
    return out


def _py_range(major: int, minor: int):
    yield f"py{major}{minor}"
    yield f"py{major}"
    for m in range(minor - 1, -1, -1):
        yield f"py{major}{m}"


def _threaded(abis: list[str]) -> bool:
    """The first version-specific ABI (or abi3t) decides: a ``t`` in its flags is free-threaded."""
    for abi in abis:
        if abi == "abi3t":
            return True
        found = re.match(r"^cp\d+(.*)$", abi)
        if found:
            return "t" in found.group(1)
    return False


def compatible_tags(
    implementation: str, version: tuple[int, int], abis: list[str], platforms: list[str]
) -> list[str]:
    """The ordered tag list an interpreter accepts: packaging.tags.sys_tags's rules, stdlib only.

    CPython: its ABIs, then the stable ABI (``abi3``; ``abi3t`` for a free-threaded build, PEP 803)
    back to 3.2, then ``none``; other implementations: their ABIs and ``none``. Then ``py*``
    tags for each platform, and the pure-Python ``any`` tags.
    """
    major, minor = version
    interp = f"{implementation}{major}{minor}"
    out: list[str] = []
    if implementation == "cp":
        threaded = _threaded(abis)
        stable = "abi3t" if threaded else "abi3"
        explicit = [a for a in abis if a not in ("abi3", "abi3t", "none")]
        out += [f"{interp}-{abi}-{p}" for abi in explicit for p in platforms]
        old_enough = (major, minor) >= (3, 2)
        if old_enough:
            out += [f"{interp}-{stable}-{p}" for p in platforms]
        out += [f"{interp}-none-{p}" for p in platforms]
        if old_enough:
            out += [f"cp{major}{m}-{stable}-{p}" for m in range(minor - 1, 1, -1) for p in platforms]
        pure_interp = interp
    else:
        out += [f"{interp}-{abi}-{p}" for abi in [*abis, *(["none"] if "none" not in abis else [])] for p in platforms]
        pure_interp = f"{implementation}{major}"  # packaging: pp3-none-any
    out += [f"{py}-none-{p}" for py in _py_range(major, minor) for p in platforms]
    out.append(f"{pure_interp}-none-any")
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


def _abis() -> list[str]:
    """This interpreter's ABIs, best first, as packaging.tags derives them (``cp313t``, ``cp37m``)."""
    if sys.implementation.name == "cpython":
        soabi = sysconfig.get_config_var("SOABI") or ""
        found = re.match(r"cpython-(\d+)([a-z]*)", soabi)
        if not found:  # no SOABI (some embedded builds): the version is all we know
            return [f"cp{sys.version_info[0]}{sys.version_info[1]}"]
        version, flags = found.groups()
        abis = [f"cp{version}{flags}"]
        if "d" in flags and sys.version_info >= (3, 8):  # a debug build also loads release extensions
            abis.append(f"cp{version}{flags.replace('d', '')}")
        return abis
    # packaging's _generic_abi: the ABI is the second part of EXT_SUFFIX (.pypy310-pp73-x86_64-linux-gnu.so).
    suffix = (sysconfig.get_config_var("EXT_SUFFIX") or "").split(".")
    soabi = suffix[1] if len(suffix) > 2 else ""
    if soabi.startswith("pypy"):
        soabi = "-".join(soabi.split("-")[:2])
    elif soabi.startswith("cp"):
        soabi = soabi.split("-")[0]
    return [re.sub(r"[-.]", "_", soabi)] if soabi else []


def _impl_short() -> str:
    return {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name)


def _linux_archs() -> list[str]:
    """packaging's rule: the interpreter's own architecture (a 32-bit build on a 64-bit kernel is i686/armv8l)."""
    arch = sysconfig.get_platform().split("-", 1)[-1].replace("-", "_").replace(".", "_")
    if sys.maxsize <= 2**32:
        arch = {"x86_64": "i686", "aarch64": "armv8l"}.get(arch, arch)
    return ["armv8l", "armv7l"] if arch == "armv8l" else [arch]


def _platform_tags(libc: dict | None) -> list[str]:
    if not sys.platform.startswith("linux"):
        return [sysconfig.get_platform().replace("-", "_").replace(".", "_")]
    archs = _linux_archs()
    if libc and libc["name"] in ("glibc", "musl"):
        major, minor = libc["version"].split(".")[:2]
        kind = "manylinux" if libc["name"] == "glibc" else "musllinux"
        expanded = [expand_platform(f"{kind}_{major}_{int(minor)}_{arch}") for arch in archs]
    else:
        expanded = [[f"linux_{arch}"] for arch in archs]
    # packaging lists every linux_ARCH first, then the libc tags arch by arch.
    return [tags[0] for tags in expanded] + [t for tags in expanded for t in tags[1:]]


def _tags_from_packaging() -> list[str] | None:
    """Outside Linux (macOS versions, Windows), the target's own packaging when it has one."""
    try:
        from packaging import tags
        return [str(t) for t in tags.sys_tags()]
    except Exception:  # noqa: BLE001 - absent or broken: use our own
        return None


_GPU_QUERY = "index,name,compute_cap,memory.total,memory.used,driver_version"


def _mib(value: str) -> int | None:
    found = re.match(r"\d+", value)
    return int(found.group()) if found else None  # "[N/A]" on some cards


_NO_DEVICES = 6  # nvidia-smi's exit status for "No devices were found"


def query_nvidia_smi(smi: str | None = None, timeout: float = 30) -> dict:
    """GPU facts from nvidia-smi: ``{"gpus": [...], "driver_version", "cuda_version", "error"}``.

    The one nvidia-smi query of wh (``wheelhouse.target.gpu`` reads it into values). No
    nvidia-smi is no GPU, never an exception; a failing one says so in ``error``.
    """
    facts = {"gpus": [], "driver_version": None, "cuda_version": None, "error": None}
    smi = smi or shutil.which("nvidia-smi")
    if not smi:
        return facts
    try:
        proc = subprocess.run([smi, f"--query-gpu={_GPU_QUERY}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=timeout)
        header = subprocess.run([smi], capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        facts["error"] = f"nvidia-smi did not run ({exc})"
        return facts
    if proc.returncode == _NO_DEVICES:
        return facts  # "No devices were found": a driver without a card, not a broken one
    if proc.returncode != 0:
        # its own words: "Failed to initialize NVML: Driver/library version mismatch" (exit 18, after a driver
        # upgrade without a reboot) is a broken GPU box, not a CPU one
        said = "; ".join(ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip())
        facts["error"] = (f"nvidia-smi failed (exit {proc.returncode}): {said[:400]}" if said
                          else "nvidia-smi failed (no driver loaded?)")
        return facts
    for i, line in enumerate(proc.stdout.strip().splitlines()):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 6:
            continue
        facts["gpus"].append({
            "index": int(parts[0]) if parts[0].isdigit() else i,
            "name": parts[1],
            "compute_capability": parts[2] or None,
            "memory_total_mib": _mib(parts[3]),
            "memory_used_mib": _mib(parts[4]),
        })
        facts["driver_version"] = parts[5] or facts["driver_version"]
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", header or "")
    facts["cuda_version"] = cuda.group(1) if cuda else None
    return facts


_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)  # PEP 508 names


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _venv_root(path: str) -> str | None:
    """The venv a site folder belongs to (an ancestor holding ``pyvenv.cfg``, PEP 405), or None."""
    here = path
    for _ in range(4):  # lib/pythonX.Y/site-packages; Lib/site-packages on Windows
        here = os.path.dirname(here)
        if os.path.isfile(os.path.join(here, "pyvenv.cfg")):
            return here
    return None


def _where(entry: str) -> str:
    """"venv": the running venv's own folder; "parent": another venv's site folder this interpreter sees (a
    ``.pth`` from ``wh install`` for a venv of a venv); "system": the base interpreter's (and anything else)."""
    real = os.path.realpath(entry)
    prefix = os.path.realpath(sys.prefix)
    in_venv = prefix != os.path.realpath(getattr(sys, "base_prefix", sys.prefix))
    if in_venv and _under(real, prefix):
        return "venv"
    root = _venv_root(real)
    return "parent" if root is not None and not _under(prefix, root) else "system"


def _search_path() -> list[str]:
    """``sys.path`` in order, without the script's folder or the cwd that Python puts first (a wheelhouse
    holding capture_target.py is no part of the image) and without duplicates."""
    entries = [p for p in sys.path if p]
    isolated = sys.flags.isolated or getattr(sys.flags, "safe_path", False)
    sites = set(site.getsitepackages() if hasattr(site, "getsitepackages") else ())
    if sys.path and not isolated and sys.path[0] not in sites:
        entries = [p for p in sys.path[1:] if p]
    out = []
    for p in entries:
        p = os.path.abspath(p)
        if p not in out:
            out.append(p)
    return out


def _read_headers(path: str) -> tuple[str | None, str | None]:
    from email.parser import HeaderParser
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            msg = HeaderParser().parse(fh)
    except OSError:
        return None, None
    return msg.get("Name"), msg.get("Version")


def _scan_folder(entry: str) -> list[tuple[str | None, str | None]]:
    """(Name, Version) of each ``*.dist-info``/``*.egg-info`` in one sys.path folder (Python 3.7: no
    importlib.metadata), by folder name so the order does not depend on the file system."""
    try:
        names = sorted(os.listdir(entry))
    except OSError:
        return []
    found = []
    for n in names:
        full = os.path.join(entry, n)
        if n.startswith("~"):
            continue
        if n.endswith(".dist-info") and os.path.isdir(full):
            found.append(_read_headers(os.path.join(full, "METADATA")))
        elif n.endswith(".egg-info"):
            found.append(_read_headers(os.path.join(full, "PKG-INFO") if os.path.isdir(full) else full))
    return found


def _metadata_folder(entry: str, importlib_metadata) -> list[tuple[str | None, str | None]]:
    """(Name, Version) of each distribution importlib.metadata finds in one sys.path entry, in its order
    (what ``importlib.metadata.version(name)`` answers in this interpreter)."""
    found = []
    for dist in importlib_metadata.distributions(path=[entry]):
        folder = getattr(dist, "_path", None)
        if folder is not None and os.path.basename(str(folder)).startswith("~"):
            continue  # pip's stash of a copy it is replacing, not an installed one
        try:
            meta = dist.metadata
            found.append((meta.get("Name"), meta.get("Version")))
        except Exception:  # noqa: BLE001 - unreadable metadata: not a distribution anyone imports
            continue
    return found


def provided_distributions(use_importlib: bool = True) -> list[dict]:
    """Every distribution this interpreter imports: ``{"name", "version", "where", "path"}`` in its
    ``sys.path`` order; the first copy of a name wins (a shadowed copy is provided by nobody). Copies
    without a valid Name or a Version are skipped, and so are folders that cannot be read (what is not
    listed is staged: the safe side)."""
    importlib_metadata = None
    if use_importlib and sys.version_info >= (3, 8):  # Python 3.7 has no importlib.metadata: the scan instead
        import importlib.metadata as importlib_metadata
    out, seen = [], set()
    for entry in _search_path():
        try:
            rows = _metadata_folder(entry, importlib_metadata) if importlib_metadata else _scan_folder(entry)
        except Exception:  # noqa: BLE001 - an unreadable folder: its copies are not listed, so they get staged
            continue
        where = None
        for name, version in rows:
            name, version = str(name or "").strip(), str(version or "").strip()
            if not _NAME.match(name) or not version or "\n" in version:
                continue  # a copy an installer was killed writing, or no distribution name at all
            key = _canonical(name)
            if key in seen:
                continue
            seen.add(key)
            where = where or _where(entry)
            out.append({"name": key, "version": version, "where": where, "path": entry})
    return out


def capture(include_gpus: bool = True, include_distributions: bool = True) -> dict:
    """The target profile of the running interpreter."""
    libc = _libc()
    abis = _abis()
    impl = _impl_short()
    version = sys.version_info[:2]
    platforms = _platform_tags(libc)
    own = sys.platform.startswith("linux")  # our rules are complete there (tests compare them with packaging)
    tags = (None if own else _tags_from_packaging()) or compatible_tags(impl, version, abis, platforms)
    profile = {
        "schema": SCHEMA,
        "source": "captured",
        "implementation": impl,
        "python_version": f"{version[0]}.{version[1]}",
        "abi": abis[0] if abis else impl,
        "platforms": platforms,
        "machine": platform.machine(),
        "libc": libc,
        "marker_environment": marker_environment(),
        "compatible_tags": tags,
    }
    gpus = query_nvidia_smi() if include_gpus else {}
    profile.update({key: gpus.get(key) for key in ("driver_version", "cuda_version")}, gpus=gpus.get("gpus", []))
    if include_distributions:
        profile["distributions"] = provided_distributions()
    return profile


def _main(argv: list[str]) -> int:
    out, gpus, dists = None, True, True
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-o", "--output") and args:
            out = args.pop(0)
        elif arg == "--no-gpus":
            gpus = False
        elif arg == "--no-distributions":
            dists = False
        else:
            sys.stderr.write("usage: python capture_target.py [-o FILE] [--no-gpus] [--no-distributions]\n")
            return 2
    text = json.dumps(capture(include_gpus=gpus, include_distributions=dists), indent=2) + "\n"
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
