"""materialize: an archive (any part of it) checked against its sidecar and unpacked into a private folder,
hostile members refused with nothing written outside it; `wh install ARCHIVE` end to end."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import tempfile
import types
from contextlib import ExitStack
from pathlib import Path

import pytest

from carry_fixtures import TarMember, sha256_file, staged_wheelhouse, write_tar
from faults import wh_command

from wheelhouse.carry import ArchiveError, UnsafeArchive, materialize
from wheelhouse.carry.pack import pack_wheelhouse, parse_size


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """TMPDIR for this test alone, so a test can see that nothing was left in it."""
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


@pytest.fixture
def packed(tmp_path, pyindex):
    """The staged wheelhouse packed in parts of 20K: (house, base archive path, parts)."""
    house = staged_wheelhouse(tmp_path, pyindex)
    res = pack_wheelhouse(house, tmp_path / "carry" / "wh.tar", part_size=parse_size("20K"))
    return house, res.archive, [p for p, _, _ in res.parts]


def wh(*args, env=None):
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300, env=env)


def _env(tmpdir: Path) -> dict:
    import os

    return {**os.environ, "TMPDIR": str(tmpdir)}


# --- hostile archives -----------------------------------------------------------------------------

def _hostile(tmp_path: Path) -> dict[str, list[TarMember]]:
    outside = tmp_path / "outside"
    ok = TarMember("wheelhouse/wh.json", b"{}")
    return {
        "dot-dot": [ok, TarMember("wheelhouse/../../outside/escape.txt", b"x")],
        "absolute": [ok, TarMember(f"{outside}/abs.txt", b"x")],
        "symlink escape": [ok, TarMember("wheelhouse/wheels", type=tarfile.SYMTYPE, linkname=str(outside)),
                           TarMember("wheelhouse/wheels/through.txt", b"x")],
        "relative symlink escape": [ok, TarMember("wheelhouse/up", type=tarfile.SYMTYPE, linkname="../../outside")],
        "hard link": [ok, TarMember("wheelhouse/passwd", type=tarfile.LNKTYPE, linkname="/etc/passwd")],
        "device": [ok, TarMember("wheelhouse/null", type=tarfile.CHRTYPE)],
        "fifo": [ok, TarMember("wheelhouse/pipe", type=tarfile.FIFOTYPE)],
        "duplicate": [ok, TarMember("wheelhouse/wh.json", b'{"second": true}')],
        "file below a file": [ok, TarMember("wheelhouse/wh.json/inner", b"x")],
        "not under wheelhouse/": [TarMember("elsewhere/wh.json", b"{}")],
    }


@pytest.mark.parametrize("case", list(_hostile(Path("/x"))))
def test_a_hostile_member_is_refused_and_nothing_is_written_outside(tmp_path, private_tmp, case):
    archive = write_tar(tmp_path / "evil.tar", _hostile(tmp_path)[case])  # its sidecar is right: still refused
    with ExitStack() as held:
        with pytest.raises(UnsafeArchive):
            materialize([str(archive)], held)
    assert not (tmp_path / "outside").exists()
    assert list(private_tmp.iterdir()) == []  # the private folder went with the refusal
    r = wh("verify", archive, env=_env(private_tmp))
    assert r.returncode == 1 and r.stdout.count("problem: archive member") == 1, r.stdout + r.stderr


def test_a_member_with_fewer_bytes_than_it_declares_is_refused(tmp_path, private_tmp):
    archive = write_tar(tmp_path / "short.tar", [TarMember("wheelhouse/wh.json", b"{}"),
                                                 TarMember("wheelhouse/big.bin", b"y" * 5000)])
    data = archive.read_bytes()
    cut = data.index(b"y" * 100) + 1000  # the member's bytes stop early
    archive.write_bytes(data[:cut])
    Path(f"{archive}.sha256").write_text(f"{sha256_file(archive)}  {archive.name}\n")
    with ExitStack() as held, pytest.raises(ArchiveError):
        materialize([str(archive)], held)
    assert list(private_tmp.iterdir()) == []


def test_a_member_with_more_bytes_than_it_declares_is_refused(tmp_path, private_tmp):
    """Bytes slipped in after a member's declared size: tarfile takes the next block for the archive's end
    and would stop there quietly (the members after it lost); wh refuses instead."""
    archive = write_tar(tmp_path / "long.tar", [TarMember("wheelhouse/wh.json", b"{}"),
                                                TarMember("wheelhouse/wheels/a.whl", b"z" * 512),
                                                TarMember("wheelhouse/pylock.toml", b"x")])
    data = archive.read_bytes()
    cut = data.index(b"z" * 512) + 512
    archive.write_bytes(data[:cut] + b"extra bytes the header did not declare".ljust(512, b"!") + data[cut:])
    Path(f"{archive}.sha256").write_text(f"{sha256_file(archive)}  {archive.name}\n")
    with ExitStack() as held, pytest.raises(UnsafeArchive, match="more bytes than its header declares"):
        materialize([str(archive)], held)
    assert list(private_tmp.iterdir()) == []


def test_an_oversized_extended_header_is_refused_before_it_is_read(tmp_path, private_tmp):
    archive = tmp_path / "pax.tar"
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        ti = tarfile.TarInfo("wheelhouse/wh.json")
        ti.pax_headers = {"comment": "x" * (2 << 20)}  # tarfile would hold all of it in memory
        tar.addfile(ti, io.BytesIO(b""))
    Path(f"{archive}.sha256").write_text(f"{sha256_file(archive)}  {archive.name}\n")
    with ExitStack() as held, pytest.raises(UnsafeArchive, match="extended header of"):
        materialize([str(archive)], held)
    assert list(private_tmp.iterdir()) == []


def test_an_archive_without_its_sidecar_is_not_trusted(tmp_path, private_tmp):
    archive = write_tar(tmp_path / "a.tar", [TarMember("wheelhouse/wh.json", b"{}")])
    Path(f"{archive}.sha256").unlink()
    with ExitStack() as held, pytest.raises(ArchiveError, match="a.tar.sha256 is missing"):
        materialize([str(archive)], held)


# --- parts and sidecars -------------------------------------------------------------------------

def test_any_part_or_the_sidecar_names_the_archive_and_the_folder_goes_with_held(packed, private_tmp):
    house, base, parts = packed
    for source in (base, parts[0], parts[-1], Path(f"{base}.sha256")):
        with ExitStack() as held:
            (folder,) = materialize([str(source)], held)
            assert (folder / "wh.json").read_bytes() == (house / "wh.json").read_bytes()
            assert private_tmp in folder.parents
            assert oct((folder.parent.stat().st_mode) & 0o777) == "0o700"  # no one else writes there
        assert list(private_tmp.iterdir()) == []
    with ExitStack() as held:  # a folder is itself
        assert materialize([str(house)], held) == [house]


def _swap(a: Path, b: Path) -> None:
    tmp = a.with_name("swap")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_wrong_sidecar_missing_part_and_parts_out_of_order_are_named(packed, private_tmp):
    _, base, parts = packed
    side = Path(f"{base}.sha256")
    good = side.read_text()
    side.write_text(good.replace(good.splitlines()[-1][:8], "00000000"))  # the whole's line edited
    r = wh("verify", parts[0], env=_env(private_tmp))
    assert r.returncode == 1 and "problem: wh.tar: sha256" in r.stdout and "is not the sidecar's" in r.stdout, r.stdout
    side.write_text(good)
    _swap(parts[0], parts[1])
    r = wh("verify", base, env=_env(private_tmp))
    assert r.returncode == 1, r.stdout
    assert "problem: wh.tar.part-0001 holds part 2 of" in r.stdout and "out of order" in r.stdout, r.stdout
    assert "problem: wh.tar.part-0002 holds part 1 of" in r.stdout
    _swap(parts[0], parts[1])
    parts[1].unlink()
    r = wh("verify", base, "--json", env=_env(private_tmp))
    assert r.returncode == 1
    assert json.loads(r.stdout)["problems"] == [f"{parts[1]} is missing (the sidecar lists {len(parts)} parts)"]
    assert list(private_tmp.iterdir()) == []


def test_install_from_parts_end_to_end(packed, tmp_path, private_tmp):
    _, _, parts = packed
    venv = tmp_path / "venv"
    r = wh("install", parts[0], "--venv", venv, "--json", env=_env(private_tmp))
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert {d["name"] for d in report["installed"]} == {"app", "lib"}
    assert any("applied" in p for p in report["patches"]), report["patches"]
    out = subprocess.run([venv / "bin" / "python", "-c", "import app, lib; print(app.V, lib.W)"],
                         capture_output=True, text=True)
    assert out.stdout.split() == ["2", "2"], out.stderr  # the patch payload travelled with the archive
    assert list(private_tmp.iterdir()) == []  # the unpacked copy is gone


def test_install_from_an_archive_names_the_archive_never_its_unpack_folder(packed, tmp_path, private_tmp):
    # issue 32 (10): "wheelhouse: /tmp/wh-unpacked-.../wheelhouse" named a folder gone once the command returned
    _, _, parts = packed
    for extra in ((), ("--dry-run",)):
        r = wh("install", parts[0], "--venv", tmp_path / "venv", "--json", *extra, env=_env(private_tmp))
        assert r.returncode == 0, r.stderr
        assert "wh-unpacked-" not in r.stdout + r.stderr
        assert json.loads(r.stdout)["wheelhouses"] == [str(Path(parts[0]).absolute())]  # as the user named it


def test_install_refuses_a_tampered_archive_and_leaves_nothing(packed, tmp_path, private_tmp):
    _, base, parts = packed
    _flip(parts[1])
    venv = tmp_path / "venv"
    r = wh("install", base, "--venv", venv, env=_env(private_tmp))
    assert r.returncode == 1, r.stderr
    assert "wh.tar.part-0002: sha256" in r.stderr and "hint:" in r.stderr
    assert not venv.exists() and list(private_tmp.iterdir()) == []


def test_oci_refs_go_to_the_oci_module_only_when_asked(tmp_path, private_tmp, monkeypatch, pyindex):
    house = staged_wheelhouse(tmp_path, pyindex)
    calls = []

    def pull(ref, out, reporter=None):
        import shutil

        calls.append((ref, out))
        shutil.copytree(house, out)
        return out

    monkeypatch.setitem(sys.modules, "wheelhouse.carry.oci", types.SimpleNamespace(pull=pull))
    with ExitStack() as held:
        (folder,) = materialize(["oci://127.0.0.1:5000/stacks/demo:1"], held)
        assert calls == [("oci://127.0.0.1:5000/stacks/demo:1", folder)] and (folder / "wh.json").is_file()
        assert private_tmp in folder.parents
    assert list(private_tmp.iterdir()) == []
    probe = "import sys, wheelhouse.carry, wheelhouse.carry.verify; print('wheelhouse.carry.oci' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "False"
