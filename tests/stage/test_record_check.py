"""A wheel's RECORD is checked against its files where it enters a wheelhouse (wheelhouse.lock.records).

The lock pins a wheel's bytes, not that its RECORD tells the truth about them: `wh stage` refuses a
wheel whose RECORD lies (one line naming the wheel and the file, nothing written), and records the
wheels it checked in wh.json (``record_checked``) so that `wh install` may copy their RECORD rows.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from faults import wh_command
from index_fixtures import pyindex  # noqa: F401  (fixture)
from wheelmaker import make_wheel

from wheelhouse.lock.records import RecordChecks, RecordMismatch, check_record

RECORD = "liar-1.0.dist-info/RECORD"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def honest(folder: Path) -> Path:
    return make_wheel(folder, "liar", "1.0", modules={"liar/__init__.py": "X = 1\n"},
                      files={"liar/blob.bin": os.urandom(300_000)})


def rewritten(wheel: Path, folder: Path, change, **zip_kw) -> Path:
    """``wheel`` rewritten by hand with zipfile: ``change(items)`` edits {archive name: bytes} in place."""
    with zipfile.ZipFile(wheel) as zf:
        items = {n: zf.read(n) for n in zf.namelist()}
    change(items)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, **zip_kw) as zf:
        for n, d in items.items():
            zf.writestr(n, d)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / wheel.name
    out.write_bytes(buf.getvalue())
    return out


def _row(items: dict, path: str, digest: str | None = None, size: str | None = None) -> None:
    rows = []
    for line in items[RECORD].decode().splitlines():
        name, d, s = line.split(",")
        if name == path:
            d, s = (f"sha256={digest}" if digest else d), (size or s)
        rows.append(f"{name},{d},{s}")
    items[RECORD] = ("\n".join(rows) + "\n").encode()


def lying_hash(items):
    _row(items, "liar/__init__.py", digest=_b64(b"X = 2\n"))


CASES = {
    "a false sha256": (lying_hash, "liar/__init__.py does not match its RECORD sha256"),
    "a false size": (lambda i: _row(i, "liar/blob.bin", size="299999"), "liar/blob.bin is 300000 bytes, RECORD says 299999"),
    "a member RECORD does not list": (lambda i: i.__setitem__("liar/extra.py", b"Y = 1\n"),
                                      "liar/extra.py is not listed in RECORD"),
    "a row without its member": (lambda i: i.pop("liar/blob.bin"), "RECORD lists liar/blob.bin, which the wheel does not hold"),
    "a row without a hash": (lambda i: _row(i, "liar/__init__.py", digest=None) or i.__setitem__(
        RECORD, i[RECORD].replace(b"liar/__init__.py,sha256=", b"liar/__init__.py,md5=")),
        "liar/__init__.py has no sha256 and size in RECORD"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_wheel_whose_record_lies_is_refused_naming_the_file(tmp_path, case):
    change, said = CASES[case]
    bad = rewritten(honest(tmp_path / "w"), tmp_path / "bad", change)
    with pytest.raises(RecordMismatch) as err:
        check_record(bad)
    assert said in err.value.message and bad.name in err.value.message and err.value.hint
    assert err.value.code == "record-mismatch"


def test_an_honest_wheel_passes_with_its_signature_files_unlisted_and_through_zipfile_too(tmp_path):
    w = honest(tmp_path / "w")
    check_record(w)
    # The wheel spec leaves RECORD's own signatures out of RECORD.
    check_record(rewritten(w, tmp_path / "signed", lambda i: i.__setitem__("liar-1.0.dist-info/RECORD.jws", b"{}")))
    # zip64 records: the shared directory reader leaves the archive to zipfile, the answer is the same.
    zip64 = tmp_path / "zip64" / w.name
    zip64.parent.mkdir()
    with zipfile.ZipFile(w) as src, zipfile.ZipFile(zip64, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            with dst.open(zipfile.ZipInfo(info.filename, info.date_time), "w", force_zip64=True) as out:
                out.write(src.read(info))
    check_record(zip64)
    with zipfile.ZipFile(zip64) as src, zipfile.ZipFile(tmp_path / "zip64" / "x.whl", "w") as dst:
        for info in src.infolist():
            with dst.open(zipfile.ZipInfo(info.filename, info.date_time), "w", force_zip64=True) as out:
                data = src.read(info)
                out.write(data.replace(b"X = 1", b"X = 2") if info.filename == "liar/__init__.py" else data)
    (tmp_path / "zip64" / "x.whl").replace(zip64)
    with pytest.raises(RecordMismatch, match="liar/__init__.py does not match its RECORD sha256"):
        check_record(zip64)


def test_a_big_wheel_is_checked_in_several_tasks_and_every_wheel_is_waited_for(tmp_path, monkeypatch):
    from wheelhouse.lock import records

    monkeypatch.setattr(records, "_TASK", 64 << 10)  # the 300 kB member alone is a task; the rest another
    good = honest(tmp_path / "w")
    bad = rewritten(good, tmp_path / "bad", lying_hash)
    checks = RecordChecks(jobs=2)
    try:
        checks.submit(good)
        checks.wait()
        checks.submit(bad)
        with pytest.raises(RecordMismatch, match="does not match its RECORD sha256"):
            checks.wait()
    finally:
        checks.close()


def _stage(tmp_path, links, out: Path, *reqs: str, fault: str | None = None):
    """``links``: a find-links folder, or an index (IndexServer: each file's sha256 published)."""
    source = ["--find-links", links] if isinstance(links, Path) else ["--index-url", links.url]
    env = {**os.environ, **({"WH_FAULT": fault} if fault else {})}
    return subprocess.run(wh_command(["stage", *(reqs or ["liar==1.0"]), *source, "-o", out,
                                      "--no-bootstrap", "--cache-dir", tmp_path / "cache", "--python-version", "3.12",
                                      "--platform", "manylinux_2_35_x86_64"]),
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)


def test_wh_stage_refuses_a_lying_wheel_and_writes_nothing(tmp_path):
    bad = rewritten(honest(tmp_path / "w"), tmp_path / "links", lying_hash)
    out = tmp_path / "house"
    r = _stage(tmp_path, bad.parent, out)
    assert r.returncode == 1, r.stderr
    errors = [line for line in r.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and bad.name in errors[0] and "liar/__init__.py does not match its RECORD sha256" in errors[0]
    assert "hint:" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if ".wh-" in p.name]



def test_a_lying_wheel_checked_while_another_downloads_fails_the_stage_and_leaves_nothing(tmp_path, pyindex):
    bad = rewritten(honest(tmp_path / "w"), tmp_path / "pub", lying_hash)
    slow = make_wheel(tmp_path / "pub", "slow", "1.0", files={"slow/blob.bin": os.urandom(600_000)})
    idx = pyindex(tmp_path / "pub")
    idx.rates[slow.name] = 400_000  # ~1.5 s: the liar lands and is checked while this one still arrives
    out = tmp_path / "house"
    r = _stage(tmp_path, idx, out, "liar==1.0", "slow==1.0")
    assert r.returncode == 1, r.stderr
    errors = [line for line in r.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and bad.name in errors[0] and "does not match its RECORD sha256" in errors[0]
    # No wheel under its final name, no half-built wheelhouse beside -o; the downloads stay in the cache.
    assert not out.exists() and not [p for p in tmp_path.iterdir() if ".wh-" in p.name]
    assert not [p for p in tmp_path.rglob("*.whl") if p.parent.name in ("wheels", "house")]


def test_wh_stage_records_every_wheel_it_checked(tmp_path):
    good = honest(tmp_path / "links")
    out = tmp_path / "house"
    r = _stage(tmp_path, good.parent, out)
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "wh.json").read_text())
    assert meta["record_checked"] == [hashlib.sha256(good.read_bytes()).hexdigest()]



def test_a_restage_does_not_check_again_what_the_previous_wheelhouse_checked(tmp_path, pyindex):
    good = honest(tmp_path / "pub")
    idx = pyindex(good.parent)
    out = tmp_path / "house"
    assert _stage(tmp_path, idx, out).returncode == 0
    sha = hashlib.sha256(good.read_bytes()).hexdigest()
    # A check begun now would kill the run: the same wheel (the sha256 the index publishes, verified as it was
    # placed) was checked by the stage that wrote the previous wheelhouse, and wh.json lists it as checked.
    r = _stage(tmp_path, idx, out, fault="records.check:kill")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "wh.json").read_text())["record_checked"] == [sha]
    # A wheel the previous wheelhouse did not hold is checked (the fault point is reached); the kill leaves
    # the previous wheelhouse as it was.
    idx.add(make_wheel(tmp_path / "more", "other", "1.0", modules={"other/__init__.py": "Y = 1\n"}))
    r = _stage(tmp_path, idx, out, "liar==1.0", "other==1.0", fault="records.check:kill")
    assert r.returncode == -9
    assert json.loads((out / "wh.json").read_text())["record_checked"] == [sha]
    # Into another folder nothing is taken as checked; nor from a find-links folder that publishes no sha256.
    assert _stage(tmp_path, idx, tmp_path / "elsewhere", fault="records.check:kill").returncode == -9
    assert _stage(tmp_path, good.parent, out, fault="records.check:kill").returncode == -9
    # Nor what another version of wh recorded (it may have checked by other rules).
    meta = json.loads((out / "wh.json").read_text())
    meta["tool"]["version"] = "0.0.1"
    (out / "wh.json").write_text(json.dumps(meta))
    assert _stage(tmp_path, idx, out, fault="records.check:kill").returncode == -9


def test_a_restage_checks_a_wheel_republished_under_the_same_name(tmp_path, pyindex):
    good = honest(tmp_path / "pub")
    out = tmp_path / "house"
    assert _stage(tmp_path, pyindex(good.parent), out).returncode == 0
    before = (out / "wh.json").read_text()
    # The same file name, other bytes (its sha256 published), a RECORD that lies: the previous wheelhouse's
    # record_checked names the old bytes' sha256, not these. Checked, refused, nothing written.
    bad = rewritten(good, tmp_path / "republished", lying_hash)
    r = _stage(tmp_path, pyindex(bad.parent), out)
    assert r.returncode == 1, r.stderr
    assert bad.name in r.stderr and "liar/__init__.py does not match its RECORD sha256" in r.stderr
    assert (out / "wh.json").read_text() == before
    assert (out / "wheels" / good.name).read_bytes() == good.read_bytes()
