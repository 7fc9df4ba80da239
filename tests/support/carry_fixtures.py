"""A small real wheelhouse to pack, verify and carry: staged by `stage()` from a loopback index.

    house = staged_wheelhouse(tmp_path, pyindex)

holds app 1.0 (-> lib>=2) and lib 2.0 (padded so it spans parts), a patch of app with its payload
(staged from a manifest's [[patch]]), and a bootstrap/ with a stand-in for wh's own wheel and its one
dependency, recorded in wh.json as `wh stage` records one. Staged for this interpreter, so
`wh install` takes it.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import tarfile
from pathlib import Path

from wheelmaker import make_wheel

from wheelhouse.lock import LockedFile, read_wh_json, write_wh_json
from wheelhouse.lock.writer import with_owned
from wheelhouse.manifest import load_manifest
from wheelhouse.stage import StageFlags, merge_inputs, stage
from wheelhouse.stage.bootstrap import bootstrap_command, write_bootstrap
from wheelhouse.lock.writer import environment_marker, requires_python_for
from wheelhouse.target import host_target

__all__ = ["staged_wheelhouse", "ORIGINAL", "PAYLOAD", "sha256_text", "sha256_file", "write_tar", "TarMember",
           "sha256sum_available"]

ORIGINAL = "import lib\nV = 1\n"
PAYLOAD = "import lib\nV = 2  # patched\n"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _bootstrap(house: Path) -> None:
    """bootstrap/: a stand-in `wh` wheel needing `tinyclick`, and tinyclick; wh.json's bootstrap record."""
    folder = house / "bootstrap"
    folder.mkdir()
    own = make_wheel(folder, "wh", "0.0.1", requires=["tinyclick>=1", 'tomli; python_version < "3.0"'],
                     modules={"whstub/__init__.py": ""})
    dep = make_wheel(folder, "tinyclick", "1.2", modules={"tinyclick/__init__.py": ""})
    target = host_target()
    files = [LockedFile(name=n, version=v, filename=p.name, path=p.name, sha256=sha256_file(p), size=p.stat().st_size)
             for n, v, p in (("wh", "0.0.1", own), ("tinyclick", "1.2", dep))]
    write_bootstrap(folder, files, requires_python=requires_python_for(target), environments=[environment_marker(target)])
    meta = read_wh_json(house)
    meta["bootstrap"] = {"command": bootstrap_command(), "wh_wheel": own.name, "origin": "checkout", "count": 2}
    write_wh_json(house, with_owned(meta, ["bootstrap"]))


def staged_wheelhouse(tmp_path: Path, pyindex, name: str = "house") -> Path:
    """Stage the small stack (module docstring) into ``tmp_path/name`` and return it."""
    pub = tmp_path / "pub"
    make_wheel(pub, "app", "1.0", requires=["lib>=2"], modules={"app/__init__.py": ORIGINAL})
    make_wheel(pub, "lib", "1.0", modules={"lib/__init__.py": "W = 1\n"})
    make_wheel(pub, "lib", "2.0", modules={"lib/__init__.py": "W = 2\n"}, pad_bytes=60_000)
    src = tmp_path / "stack-src"
    src.mkdir(exist_ok=True)
    (src / "app_init.py").write_text(PAYLOAD)
    (src / "fix.toml").write_text(
        '[patch]\nname = "app-v2"\ndistribution = "app"\nfile = "app/__init__.py"\n'
        f'before-sha256 = ["{sha256_text(ORIGINAL)}"]\npayload = "app_init.py"\npayload-sha256 = "{sha256_text(PAYLOAD)}"\n')
    (src / "stack.toml").write_text('[stack]\nname = "carry-demo"\nrequirements = ["app"]\n[[patch]]\nspec = "fix.toml"\n')
    idx = pyindex(pub)
    house = tmp_path / name
    flags = StageFlags(index_url=idx.url, target=host_target())
    stage(merge_inputs(load_manifest(src / "stack.toml"), flags, house, cache_dir=tmp_path / "cache", bootstrap=False))
    _bootstrap(house)
    (house / "NOTES.md").write_text("the user's own notes: not wh's to carry\n")
    return house


class TarMember:
    """One member of a hand-made (hostile) tar: a name, bytes or a link target, a type."""

    def __init__(self, name: str, data: bytes = b"", type: bytes = tarfile.REGTYPE, linkname: str = "",
                 size: int | None = None):
        self.name, self.data, self.type, self.linkname, self.size = name, data, type, linkname, size


def write_tar(path: Path, members: list[TarMember]) -> Path:
    """A tar of ``members`` exactly as given (no name cleaning), and its sidecar with the right sha256."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            ti = tarfile.TarInfo(m.name)
            ti.type, ti.linkname = m.type, m.linkname
            ti.size = len(m.data) if m.type == tarfile.REGTYPE else 0
            if m.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                ti.devmajor, ti.devminor = 1, 3
            tar.addfile(ti, io.BytesIO(m.data) if m.type == tarfile.REGTYPE else None)
    Path(f"{path}.sha256").write_text(f"{sha256_file(path)}  {path.name}\n")
    return path


def sha256sum_available() -> bool:
    return shutil.which("sha256sum") is not None and subprocess.run(["sha256sum", "--version"],
                                                                      capture_output=True).returncode == 0
