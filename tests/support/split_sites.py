"""A venv whose ``sysconfig`` reports ``lib64`` as platlib (as on Fedora, RHEL, SUSE), through a ``sitecustomize``
that sets ``sys.platlibdir`` and adds that folder to ``sys.path``, as such a distribution's own build does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"
_SITECUSTOMIZE = """\
import os, site, sys
sys.platlibdir = "lib64"
site.addsitedir(os.path.join(sys.prefix, "lib64", "python%d.%d" % sys.version_info[:2], "site-packages"))
"""


def split_venv(tmp_path: Path, lib64_to: str | Path | None = "lib") -> Path:
    """``tmp_path/venv``; ``lib64`` a link to ``lib64_to``, or (None) a folder of its own."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (venv / "lib" / PY / "site-packages" / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    lib64 = venv / "lib64"
    if lib64.is_symlink():
        lib64.unlink()
    if lib64_to is None:
        (lib64 / PY / "site-packages").mkdir(parents=True)
    else:
        lib64.symlink_to(lib64_to)
    return venv
