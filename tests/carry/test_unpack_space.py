"""The free-space check before an archive is unpacked names amounts a person can read, however small."""

from __future__ import annotations

import shutil
import tempfile
from collections import namedtuple

from click.testing import CliRunner
from nvidia_fixtures import make_wheelhouse
from wheelmaker import make_wheel

from wheelhouse.cli import cli

_Usage = namedtuple("_Usage", "total used free")


def test_a_small_tmpdir_is_named_in_kib_or_bytes_not_0_mib(tmp_path, monkeypatch):
    house = make_wheelhouse(tmp_path / "house", [make_wheel(tmp_path / "w", "pkg", "1.0", modules={"pkg/__init__.py": ""})])
    archive = tmp_path / "house.tar"
    r = CliRunner().invoke(cli, ["pack", str(house), "-o", str(archive)])
    assert r.exit_code == 0, r.output
    need = archive.stat().st_size
    assert need < 1 << 20  # the case that read "needs 0 MiB"
    real = shutil.disk_usage
    for free in (512, 3 * 1024):
        monkeypatch.setattr(shutil, "disk_usage", lambda p, free=free: _Usage(1 << 30, 0, free)
                            if str(p).startswith(str(tmp_path / "tmp")) else real(p))
        (tmp_path / "tmp").mkdir(exist_ok=True)
        monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # (gettempdir() caches its answer)
        r = CliRunner().invoke(cli, ["verify", str(archive)])
        assert r.exit_code != 0, r.output
        assert "0 MiB" not in r.output, r.output
        shown = "512 bytes" if free == 512 else "3.0 KiB"
        assert f"has {shown} free" in r.output and f"needs {need / 1024:.1f} KiB" in r.output, r.output
