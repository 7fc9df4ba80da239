"""The fast install paths (issue 14) are as safe as the slow ones.

- every inflater (zlib-ng, ISA-L, the standard zlib) installs the same bytes; WH_INFLATE forces one;
- into a new venv the wheels' sha256 is checked while they are unpacked: a wheel whose hash is wrong
  is found after its files were written and the whole transaction is rolled back;
- an environment that holds distributions (or pip) still gets every byte hashed before the first write;
- a lock-verified wheel whose RECORD its stage checked has its members checked by CRC-32 alone; any
  other wheel by its RECORD sha256 (and the CRC-32 too where the lock pins the wheel).
"""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from faults import run_with_fault
from nvidia_fixtures import make_wheelhouse, tree_listing
from wheelmaker import make_wheel

from wheelhouse.errors import HashMismatch, UsageError
from wheelhouse.install import InstallOptions, install_wheelhouses
from wheelhouse.install.transaction import journal_path
from wheelhouse.install.wheel import RecordMismatch, UnpackError, default_jobs, install_wheels
from wheelhouse import inflate

PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def wh(*args):
    return subprocess.run([sys.executable, "-m", "wheelhouse", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def site(venv: Path) -> Path:
    return venv / "lib" / PY / "site-packages"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def big_wheel(folder: Path, name: str = "big", version: str = "1.0") -> Path:
    """Several deflated members, one of them large enough for many inflate calls (bounded output)."""
    text = "".join(f"line {i}: {'abc' * (i % 40)}\n" for i in range(200_000))
    return make_wheel(folder, name, version, modules={f"{name}/__init__.py": "X = 1\n",
                                                      f"{name}/big.py": f"DATA = {text[:5000]!r}\n"},
                      files={f"{name}/data.txt": text, f"{name}/blob.bin": bytes(range(256)) * 40_000})


def touch_local_header_time(wheel: Path, member: str) -> None:
    """Change bytes no installer reads (the member's local-header mod time): same size, same
    listing, same members, another sha256."""
    with zipfile.ZipFile(wheel) as zf:
        off = zf.getinfo(member).header_offset
    data = bytearray(wheel.read_bytes())
    assert data[off:off + 4] == b"PK\x03\x04"
    data[off + 10] ^= 0x01  # last-mod-file-time, low byte
    wheel.write_bytes(bytes(data))


def venv_without_pip(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", path], check=True)
    return path


# ---- the inflaters ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", list(inflate.BACKENDS))
def test_every_inflater_installs_the_same_bytes(tmp_path, backend, monkeypatch):
    if backend not in inflate.available():
        pytest.skip(f"{inflate.BACKENDS[backend]} is not importable here (pip install 'wh[fast]')")
    w = big_wheel(tmp_path / "w")
    monkeypatch.setenv("WH_INFLATE", backend)
    scheme = {k: str(tmp_path / "env" / k) for k in ("purelib", "platlib", "scripts", "data", "headers")}
    scheme["platlib"] = scheme["purelib"]
    install_wheels([w], scheme, sys.executable, expected={w: sha256(w)}, jobs=3)
    with zipfile.ZipFile(w) as zf:
        for info in zf.infolist():
            if "dist-info" not in info.filename:
                assert (Path(scheme["purelib"]) / info.filename).read_bytes() == zf.read(info), info.filename


def test_the_fastest_importable_inflater_is_chosen_and_zlib_stays_plain(monkeypatch):
    monkeypatch.delenv("WH_INFLATE", raising=False)
    assert inflate.choose().name == inflate.available()[0]
    plain = inflate.choose("zlib")
    assert plain.module.__name__ == "zlib" and plain.crc_module.__name__ == "zlib"
    data = b"the same CRC-32 from every module" * 1000
    for name in inflate.available():
        assert inflate.choose(name).crc32(data) == plain.crc32(data)


def test_wh_inflate_refuses_a_name_it_cannot_use(monkeypatch):
    monkeypatch.setenv("WH_INFLATE", "gzip9")
    with pytest.raises(UsageError, match="WH_INFLATE=gzip9: not one of"):
        inflate.choose()
    # A named backend that is not importable is an error, never a silent fallback to another one.
    monkeypatch.setitem(inflate.BACKENDS, "ghost", "no_such_module_for_wh_tests")
    monkeypatch.setenv("WH_INFLATE", "ghost")
    with pytest.raises(UsageError, match="not importable here"):
        inflate.choose()


def test_a_damaged_deflate_stream_is_a_clear_error_not_a_zlib_traceback(tmp_path, scheme):
    w = big_wheel(tmp_path / "w")
    with zipfile.ZipFile(w) as zf:
        info = zf.getinfo("big/data.txt")
        start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data = bytearray(w.read_bytes())
    for i in range(start + 5, start + 64):
        data[i] = 0xFF  # an invalid block type / distance somewhere in there
    w.write_bytes(bytes(data))
    before = tree_listing(Path(scheme["purelib"]).parent)
    with pytest.raises(UnpackError):  # the CLI's one red line, exit 1
        install_wheels([w], scheme, sys.executable)
    assert tree_listing(Path(scheme["purelib"]).parent) == before


# ---- the sha256 folded into unpacking -----------------------------------------------------------


def test_a_wrong_wheel_found_after_unpacking_rolls_the_whole_batch_back(tmp_path, scheme):
    w = tmp_path / "w"
    good = make_wheel(w, "good", "1.0", modules={"good.py": "G = 1\n"})
    bad = big_wheel(w)
    expected = {good: sha256(good), bad: sha256(bad)}
    touch_local_header_time(bad, "big/data.txt")  # extraction succeeds; only the wheel's sha256 differs
    env = Path(scheme["purelib"]).parent
    before = tree_listing(env)
    written: list[str] = []
    with pytest.raises(HashMismatch) as exc:
        install_wheels([good, bad], scheme, sys.executable, expected=expected, on_written=written.append)
    assert [Path(p[0]).name for p in exc.value.bad] == [bad.name]
    assert "nothing was installed" in str(exc.value)
    # It really was unpacked before the hash said no: both wheels' modules had been written.
    assert any(p.endswith("big/__init__.py") for p in written) and any(p.endswith("good.py") for p in written)
    assert tree_listing(env) == before
    assert not journal_path(scheme["platlib"]).exists()


def test_every_wrong_wheel_is_named(tmp_path, scheme):
    w = tmp_path / "w"
    wheels = [make_wheel(w, f"p{i}", "1.0", modules={f"p{i}.py": f"N = {i}\n"}) for i in range(6)]
    expected = {x: sha256(x) for x in wheels}
    for x in (wheels[1], wheels[4]):
        touch_local_header_time(x, f"{x.name.split('-')[0]}.py")
    with pytest.raises(HashMismatch) as exc:
        install_wheels(wheels, scheme, sys.executable, expected=expected, jobs=2)
    assert sorted(Path(p[0]).name for p in exc.value.bad) == sorted([wheels[1].name, wheels[4].name])


def test_tampered_wheel_leaves_a_new_or_empty_venv_unchanged(tmp_path):
    w = tmp_path / "w"
    house = make_wheelhouse(tmp_path / "house", [make_wheel(w, "aaa", "1.0", modules={"aaa.py": "A = 1\n"}),
                                                  big_wheel(w)])
    touch_local_header_time(house / "wheels" / "big-1.0-py3-none-any.whl", "big/blob.bin")
    r = wh("install", house, "--venv", tmp_path / "new")
    assert r.returncode == 1, r.stderr
    assert "big-1.0-py3-none-any.whl" in r.stderr and "nothing was installed" in r.stderr
    assert not (tmp_path / "new").exists()
    venv = venv_without_pip(tmp_path / "empty")
    before = tree_listing(venv)
    with pytest.raises(HashMismatch):
        install_wheelhouses([house], InstallOptions(venv=venv, links=False))
    assert tree_listing(venv) == before


def test_a_killed_unpack_of_a_wrong_wheel_is_rolled_back_by_the_next_run(tmp_path):
    w = tmp_path / "w"
    house = make_wheelhouse(tmp_path / "house", [big_wheel(w)])
    touch_local_header_time(house / "wheels" / "big-1.0-py3-none-any.whl", "big/data.txt")
    venv = venv_without_pip(tmp_path / "venv")
    before = tree_listing(venv)
    # Empty venv: the hash is checked while unpacking, so the run gets as far as its journal.
    killed = run_with_fault(["install", house, "--venv", venv, "--no-links"], "install.file.2")
    assert killed.returncode == -9, killed.stderr
    assert journal_path(site(venv)).exists()
    again = wh("install", house, "--venv", venv, "--no-links")
    assert again.returncode == 1 and "nothing was installed" in again.stderr
    assert tree_listing(venv) == before


@pytest.mark.parametrize("case", ["environment with a distribution", "installer pip"])
def test_every_byte_is_hashed_before_the_first_write_where_it_must_be(tmp_path, case):
    w = tmp_path / "w"
    venv = venv_without_pip(tmp_path / "venv")
    args = []
    if case == "installer pip":
        args = ["--installer", "pip"]
    else:
        first = make_wheelhouse(tmp_path / "first", [make_wheel(w, "aaa", "1.0", modules={"aaa.py": "A = 1\n"})])
        assert wh("install", first, "--venv", venv, "--no-links").returncode == 0
    house = make_wheelhouse(tmp_path / "house", [big_wheel(w)])
    touch_local_header_time(house / "wheels" / "big-1.0-py3-none-any.whl", "big/data.txt")
    before = tree_listing(venv)
    # Killed at its journal if it got that far: exit 1 (the hash) proves it stopped before writing.
    r = run_with_fault(["install", house, "--venv", venv, "--no-links", *args], "install.journal-written")
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "nothing was installed" in r.stderr
    assert tree_listing(venv) == before


# ---- what each member is checked against -----------------------------------------------------------


def lying_record_wheel(folder: Path) -> Path:
    """A wheel whose RECORD gives lie.py a wrong sha256 (the right size): the wheel lies about itself."""
    w = make_wheel(folder, "lie", "1.0", modules={"lie.py": "TRUTH = 1\n"})
    buf = io.BytesIO()
    wrong = base64.urlsafe_b64encode(hashlib.sha256(b"something else").digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(w) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("/RECORD"):
                rows = [r.split(",") for r in data.decode().splitlines()]
                data = "".join(",".join([r[0], f"sha256={wrong}", r[2]] if r[0] == "lie.py" else r) + "\n"
                               for r in rows).encode()
            dst.writestr(info, data)
    w.write_bytes(buf.getvalue())
    return w


def test_a_lying_record_is_refused_unless_its_stage_checked_the_record(tmp_path, scheme):
    """The lock's sha256 pins the wheel's bytes, not the truth of its RECORD: a lock-pinned wheel has its
    members hashed against RECORD (refused when one lies) unless its wheelhouse records that the stage
    checked its RECORD (wheelhouse.lock.records); only then are its RECORD rows copied unchecked."""
    w = lying_record_wheel(tmp_path / "w")
    with pytest.raises(RecordMismatch, match="lie.py does not match its RECORD hash"):
        install_wheels([w], scheme, sys.executable)
    with pytest.raises(RecordMismatch, match="lie.py does not match its RECORD hash"):
        install_wheels([w], scheme, sys.executable, expected={w: sha256(w)})
    assert not (Path(scheme["purelib"]) / "lie.py").exists()
    # What the fast path takes on trust (a stage would have refused this wheel): its members by CRC alone.
    done = install_wheels([w], scheme, sys.executable, expected={w: sha256(w)}, record_checked=[w])
    assert (Path(scheme["purelib"]) / "lie.py").read_text() == "TRUTH = 1\n"
    assert [d.members_hashed for d in done] == [False]


def test_a_member_that_differs_from_its_crc_is_refused_even_when_the_wheel_hash_matches(tmp_path, scheme):
    """What the CRC buys: bytes that are not the ones the central directory (covered by the sha256)
    describes -- a re-read that differs, an inflater fault -- never pass."""
    w = make_wheel(tmp_path / "w", "crc", "1.0", modules={"crc.py": "X = 1\n"})
    buf = io.BytesIO()
    with zipfile.ZipFile(w) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            body = src.read(info.filename)
            info.compress_type = zipfile.ZIP_STORED
            dst.writestr(info, body)
    data = bytearray(buf.getvalue())
    at = data.index(b"X = 1\n")
    data[at + 4] = ord("2")  # stored bytes now say X = 2; the CRC still says X = 1
    w.write_bytes(bytes(data))
    before = tree_listing(Path(scheme["purelib"]).parent)
    with pytest.raises(RecordMismatch, match="crc.py does not match its CRC-32"):
        install_wheels([w], scheme, sys.executable, expected={w: sha256(w)})  # the "lock" hash of these bytes
    assert tree_listing(Path(scheme["purelib"]).parent) == before


def test_default_jobs_follow_the_usable_cores(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert default_jobs() == 3
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(128)), raising=False)
    assert default_jobs() == 32
