"""`wh pack`: same wheelhouse, same bytes; parts that reassemble; only what wh owns; nothing half-written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from carry_fixtures import sha256_file, sha256sum_available, staged_wheelhouse
from faults import run_with_fault, wh_command

from wheelhouse.carry.pack import MTIME, PackError, pack_wheelhouse, parse_size
from wheelhouse.errors import HashMismatch, UsageError
from wheelhouse.progress import RecordingReporter


def wh(*args, cwd=None):
    return subprocess.run(wh_command(args), capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture
def house(tmp_path, pyindex):
    return staged_wheelhouse(tmp_path, pyindex)


def _outputs(folder: Path, base: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(base) or p.name.startswith(f".{base}"))


def test_packing_twice_and_from_a_copy_gives_the_same_bytes(house, tmp_path):
    out = tmp_path / "out"
    r = wh("pack", house, "-o", out / "a.tar", "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["sha256"] == sha256_file(out / "a.tar") and result["parts"] == []
    # A copy at another path, with other mtimes and modes, packs to the same bytes.
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(house, copy)
    os.utime(copy / "pylock.toml", (1, 1))
    os.chmod(copy / "wh.json", 0o600)
    assert wh("pack", copy, "-o", out / "b.tar").returncode == 0
    assert (out / "a.tar").read_bytes() == (out / "b.tar").read_bytes()
    assert wh("pack", house, "-o", out / "a.tar").returncode == 0  # again, over the first
    assert sha256_file(out / "a.tar") == result["sha256"]
    # The sidecar is sha256sum's format.
    assert (out / "a.tar.sha256").read_text() == f"{result['sha256']}  a.tar\n"
    if sha256sum_available():
        assert subprocess.run(["sha256sum", "-c", "a.tar.sha256"], cwd=out, capture_output=True).returncode == 0


def test_members_are_sorted_fixed_and_only_what_the_wheelhouse_owns(house, tmp_path):
    (house / "logs").mkdir()
    (house / "logs" / "mine.txt").write_text("user's")
    (house / "wheels" / ".lib.whl.tmp").write_text("a temp file of a killed run")
    pack_wheelhouse(house, tmp_path / "a.tar")
    with tarfile.open(tmp_path / "a.tar") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) and names[0] == "wheelhouse"
    rel = {n.split("/", 1)[1] for n in names if "/" in n}
    assert {"wh.json", "pylock.toml", "capture_target.py", "manifest.toml", "simple/index.html",
            "patches/fix/fix.toml", "patches/fix/app_init.py", "bootstrap/pylock.toml", "bootstrap/BOOTSTRAP.txt"} <= rel
    assert any(r.startswith("wheels/lib-2.0-") for r in rel)
    assert not {"NOTES.md", "logs/mine.txt", "wheels/.lib.whl.tmp"} & rel and not any(r.startswith("logs") for r in rel)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(MTIME, 0, 0, "", "")}
    assert {m.mode for m in members if m.isfile()} == {0o644} and {m.mode for m in members if m.isdir()} == {0o755}
    assert all(m.isfile() or m.isdir() for m in members)
    # Any tar unpacks it into ./wheelhouse/, and that folder verifies.
    if shutil.which("tar"):
        (tmp_path / "x").mkdir()
        subprocess.run(["tar", "-xf", str(tmp_path / "a.tar")], cwd=tmp_path / "x", check=True)
        assert wh("verify", tmp_path / "x" / "wheelhouse").returncode == 0


def test_parts_reassemble_to_the_whole_and_the_sidecar_lists_each(house, tmp_path):
    pack_wheelhouse(house, tmp_path / "whole.tar")
    rep = RecordingReporter()
    res = pack_wheelhouse(house, tmp_path / "split.tar", part_size=parse_size("20K"), reporter=rep)
    parts = sorted(tmp_path.glob("split.tar.part-*"))
    assert len(parts) >= 3 and [p for p, _, _ in res.parts] == parts and not (tmp_path / "split.tar").exists()
    assert all(p.stat().st_size == 20 * 1024 for p in parts[:-1]) and parts[-1].stat().st_size <= 20 * 1024
    assert b"".join(p.read_bytes() for p in parts) == (tmp_path / "whole.tar").read_bytes()
    lines = (tmp_path / "split.tar.sha256").read_text().splitlines()
    assert lines == [f"{sha256_file(p)}  {p.name}" for p in parts] + [f"{sha256_file(tmp_path / 'whole.tar')}  split.tar"]
    assert res.sha256 == sha256_file(tmp_path / "whole.tar")
    if sha256sum_available():
        ok = subprocess.run(["sha256sum", "-c", "--ignore-missing", "split.tar.sha256"], cwd=tmp_path, capture_output=True)
        assert ok.returncode == 0, ok.stdout
    starts = [e for e in rep.events if e[0] == "start"]
    assert starts and starts[0][2] > 60_000 and any(e[0] == "advance" for e in rep.events)  # progress in bytes


def test_repacking_with_fewer_parts_or_unsplit_removes_the_previous_outputs(house, tmp_path):
    out = tmp_path / "wh.tar"
    pack_wheelhouse(house, out, part_size=parse_size("8K"))
    many = len(list(tmp_path.glob("wh.tar.part-*")))
    pack_wheelhouse(house, out, part_size=parse_size("40K"))
    assert 1 < len(list(tmp_path.glob("wh.tar.part-*"))) < many
    pack_wheelhouse(house, out)
    assert _outputs(tmp_path, "wh.tar") == ["wh.tar", "wh.tar.sha256"]


@pytest.mark.parametrize("point", ["carry.pack.part-written", "carry.pack.before-rename", "carry.pack.before-sidecar"])
def test_a_full_disk_during_pack_leaves_no_archive(house, tmp_path, point):
    out = tmp_path / "out"
    out.mkdir()
    r = run_with_fault(["pack", house, "-o", out / "wh.tar", "--part-size", "20K"], point, "enospc")
    assert r.returncode == 1, r.stderr
    assert "No space left on device" in r.stderr and "nothing was left behind" in r.stderr
    assert list(out.iterdir()) == []  # no archive, no part, no sidecar, no temp file


def test_a_full_disk_keeps_no_stale_sidecar_beside_new_bytes(house, tmp_path):
    pack_wheelhouse(house, tmp_path / "wh.tar")
    (house / "wheels" / "extra.txt").write_text("changes the archive")
    r = run_with_fault(["pack", house, "-o", tmp_path / "wh.tar"], "carry.pack.before-sidecar", "enospc")
    assert r.returncode == 1
    assert not (tmp_path / "wh.tar.sha256").exists() and not (tmp_path / "wh.tar").exists()


def test_a_damaged_wheelhouse_is_not_packed(house, tmp_path):
    lib = next((house / "wheels").glob("lib-2.0-*.whl"))
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))
    with pytest.raises(HashMismatch, match="nothing was packed"):
        pack_wheelhouse(house, tmp_path / "wh.tar")
    assert list(tmp_path.glob("wh.tar*")) == [] and list(tmp_path.glob(".wh.tar*")) == []
    (house / "capture_target.py").unlink()
    r = wh("pack", house, "-o", tmp_path / "wh.tar")
    assert r.returncode == 1 and "capture_target.py is missing" in r.stderr and "wh verify" in r.stderr, r.stderr


def test_bad_input_is_refused_before_any_work(house, tmp_path):
    assert wh("pack", house, "-o", tmp_path / "x.tar", "--part-size", "lots").returncode == 2
    assert wh("pack", house, "-o", tmp_path / "x.tar", "--part-size", "10").returncode == 2
    assert wh("pack", tmp_path / "nowhere", "-o", tmp_path / "x.tar").returncode == 2
    with pytest.raises(UsageError, match="inside what the wheelhouse owns"):
        pack_wheelhouse(house, house / "wheels" / "x.tar")
    assert not list(tmp_path.glob("x.tar*"))
    assert parse_size("2G") == 2 << 30 and parse_size("700M") == 700 << 20 and parse_size("64KiB") == 64 << 10


def test_a_symlink_out_of_the_wheelhouse_is_refused(house, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the box")
    (house / "patches" / "fix" / "leak.txt").symlink_to(secret)  # not owned (patches lists files): left out
    pack_wheelhouse(house, tmp_path / "ok.tar")
    with tarfile.open(tmp_path / "ok.tar") as tar:
        assert not [n for n in tar.getnames() if "leak" in n]
    (house / "wheels" / "leak.whl").symlink_to(secret)  # wheels/ is wh's whole: refused
    with pytest.raises(PackError, match="outside the wheelhouse"):
        pack_wheelhouse(house, tmp_path / "wh.tar")
    assert not (tmp_path / "wh.tar").exists()


def test_long_names_take_pax_headers_and_still_pack_the_same_bytes(tmp_path):
    from nvidia_fixtures import make_wheelhouse
    from wheelmaker import make_wheel

    name = "a_distribution_with_a_rather_long_name_" + "x" * 60
    wheel = make_wheel(tmp_path / "w", name, "1.0.0.post12345", tags="cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64")
    assert len(f"wheelhouse/wheels/{wheel.name}") > 100  # past ustar's name field
    from wheelhouse.target import target_from_flags  # the wheel's own target: verify checks each wheel fits
    one = make_wheelhouse(tmp_path / "one", [wheel], target=target_from_flags("3.12", ["manylinux_2_17_x86_64"]).to_json())
    two = tmp_path / "two"
    shutil.copytree(one, two)
    os.utime(two / "wheels" / wheel.name, (5, 5))
    pack_wheelhouse(one, tmp_path / "1.tar")
    pack_wheelhouse(two, tmp_path / "2.tar")
    assert (tmp_path / "1.tar").read_bytes() == (tmp_path / "2.tar").read_bytes()
    with tarfile.open(tmp_path / "1.tar") as tar:
        assert f"wheelhouse/wheels/{wheel.name}" in tar.getnames()
