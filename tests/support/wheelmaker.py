"""Write real, valid wheels for tests: METADATA, WHEEL, RECORD with sha256, optional extra files."""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from pathlib import Path

__all__ = ["make_wheel", "wheel_filename", "sha256_file"]


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def wheel_filename(name: str, version: str, tags: str = "py3-none-any", build: str | None = None) -> str:
    dist = name.replace("-", "_").replace(".", "_")
    parts = [dist, version] + ([build] if build else []) + [tags]
    return "-".join(parts) + ".whl"


def make_wheel(
    directory: str | Path,
    name: str,
    version: str,
    *,
    requires: list[str] | tuple[str, ...] = (),
    tags: str = "py3-none-any",
    requires_python: str | None = None,
    extras: dict[str, list[str]] | None = None,
    files: dict[str, bytes | str] | None = None,
    modules: dict[str, str] | None = None,
    entry_points: dict[str, dict[str, str]] | None = None,
    filename: str | None = None,
    pad_bytes: int = 0,
) -> Path:
    """Write ``name-version-tags.whl`` into ``directory`` and return its path.

    ``modules`` maps import paths (``pkg/__init__.py``) to source; ``files`` maps
    any archive path to bytes (data files, .so files); ``pad_bytes`` adds an
    incompressible blob so tests can count bytes served over HTTP.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_").replace(".", "_")
    info = f"{dist}-{version}.dist-info"
    meta = [ "Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if requires_python:
        meta.append(f"Requires-Python: {requires_python}")
    for req in requires:
        meta.append(f"Requires-Dist: {req}")
    for extra, reqs in (extras or {}).items():
        meta.append(f"Provides-Extra: {extra}")
        for req in reqs:
            marker = f'extra == "{extra}"'
            if ";" in req:
                base, m = req.split(";", 1)
                meta.append(f"Requires-Dist: {base.strip()}; ({m.strip()}) and {marker}")
            else:
                meta.append(f"Requires-Dist: {req}; {marker}")
    purelib = tags.split("-")[-1] == "any"
    wheel_meta = ["Wheel-Version: 1.0", "Generator: wheelmaker", f"Root-Is-Purelib: {'true' if purelib else 'false'}"]
    for interp in tags.split("-")[0].split("."):
        for abi in tags.split("-")[1].split("."):
            for plat in tags.split("-")[2].split("."):
                wheel_meta.append(f"Tag: {interp}-{abi}-{plat}")
    contents: dict[str, bytes] = {}
    for path, src in (modules or {}).items():
        contents[path] = src.encode() if isinstance(src, str) else src
    for path, data in (files or {}).items():
        contents[path] = data.encode() if isinstance(data, str) else data
    if pad_bytes:
        import os

        contents[f"{dist}_pad/blob.bin"] = os.urandom(pad_bytes)
    contents[f"{info}/METADATA"] = ("\n".join(meta) + "\n").encode()
    contents[f"{info}/WHEEL"] = ("\n".join(wheel_meta) + "\n").encode()
    if entry_points:
        lines = []
        for group, eps in entry_points.items():
            lines.append(f"[{group}]")
            lines += [f"{k} = {v}" for k, v in eps.items()]
        contents[f"{info}/entry_points.txt"] = ("\n".join(lines) + "\n").encode()
    record_lines = [f"{p},sha256={_b64(hashlib.sha256(d).digest())},{len(d)}" for p, d in contents.items()]
    record_lines.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = ("\n".join(record_lines) + "\n").encode()
    out = directory / (filename or wheel_filename(name, version, tags))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path, data in contents.items():
            zf.writestr(path, data)
    out.write_bytes(buf.getvalue())
    return out


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_app_and_lib(folder: Path) -> Path:
    """The stage tests' small index: app 1.0 requires lib>=1; lib 1.0 for any Python, lib 2.0 only for cp312 on
    manylinux_2_17 x86_64 (what a cp312/manylinux_2_35 target resolves to). Returns ``folder``."""
    make_wheel(folder, "app", "1.0", requires=["lib>=1"])
    make_wheel(folder, "lib", "1.0")
    make_wheel(folder, "lib", "2.0", tags="cp312-cp312-manylinux_2_17_x86_64")
    return folder
